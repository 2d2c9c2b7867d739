//go:build linux && amd64

package run

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/rootline/rootline/internal/run/h2stream"
	"github.com/rootline/rootline/internal/run/httpstream"
	"github.com/rootline/rootline/internal/run/supervisor"
)

// HTTP/2 (h2c, and gRPC over it) in the supervisor. A connection whose first
// bytes are the HTTP/2 connection preface (prior knowledge: read on an
// accepted socket, written on a connected one) is followed with
// internal/run/h2stream instead of httpstream: each direction's frames and
// HPACK state, requests by stream. Inbound: a HEADERS block that opens a
// stream starts a SERVER span (its context as in HTTP/1.x); the block that
// ends the response (gRPC: the trailers, or a trailers-only response; other
// HTTP/2: the response's first block) gets rootline-server-time and
// rootline-wait; the span ends when the stream's last frame is written or
// either side resets it. Outbound: a HEADERS block that opens a stream is a
// CLIENT span and gets traceparent, tracestate and b3 (unless it carries the
// application's own context); its response's blocks give the status, the
// gRPC status and the downstream's timing fields.

// h2conn is the HTTP/2 state of a connection.
type h2conn struct {
	rd      *h2stream.Parser // what the service reads
	wr      *h2stream.Parser // what it writes (inside conn.out)
	reqs    map[uint32]*request
	calls   map[uint32]*call
	lastIn  uint32 // the highest stream a request opened (inbound)
	lastOut uint32 // the highest stream a call opened (outbound)
	opaque  bool
}

// h2Propagated are the context fields an outbound HTTP/2 request gets:
// W3C's and B3's single header (the x-b3-* and x-request-id lines of
// HTTP/1.x would cost every call's header block their bytes again, since
// they are added without indexing).
var h2Propagated = []string{httpstream.HeaderTraceparent, httpstream.HeaderTracestate, httpstream.HeaderB3}

// isH2Start reports whether the first bytes of a direction are (the start
// of) the HTTP/2 connection preface.
func isH2Start(b []byte) bool {
	n := min(len(b), len(h2stream.Preface))
	return n > 0 && string(b[:n]) == h2stream.Preface[:n]
}

// isH2ServerStart reports whether the first bytes a client reads, before it
// wrote anything, are an HTTP/2 server's connection preface: a SETTINGS
// frame on stream 0 (RFC 9113, section 3.4). An HTTP/2 server need not wait
// for the client's preface (grpc-go's does not), so a client can read it
// first; an HTTP/1.x client never reads before it writes.
func isH2ServerStart(b []byte) bool {
	if len(b) < 9 {
		return false
	}
	n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	return b[3] == 0x4 && b[4] == 0 && n%6 == 0 && b[5]&0x7f == 0 && b[6] == 0 && b[7] == 0 && b[8] == 0
}

// startH2 follows c as HTTP/2 from its first byte on.
func (tr *Tracer) startH2(c *conn) {
	h := &h2conn{rd: h2stream.NewParser(c.inbound), wr: h2stream.NewParser(!c.inbound),
		reqs: map[uint32]*request{}, calls: map[uint32]*call{}}
	c.h2 = h
	c.out = httpstream.NewRewriterFor(h.wr)
	tr.Stats.H2Conns.Add(1)
}

// upgradeSettings returns the client's settings an HTTP/1.x request carries
// when it asks for an upgrade to h2c (zero if it does not, or if they are
// malformed: the server then refuses the upgrade).
func upgradeSettings(m *httpstream.Message) h2stream.Settings {
	if !h2stream.IsH2cUpgrade(m.Headers.Get("upgrade")) {
		return h2stream.Settings{}
	}
	s, _ := h2stream.ParseSettingsHeader(m.Headers.Get("http2-settings"))
	return s
}

// upgradeInbound follows an inbound connection into HTTP/2 once the service
// wrote a 101 to h2c (RFC 7540 §3.2): wr parses what it writes from then on,
// what it reads next starts with the client's preface, and the upgraded
// request is stream 1, half-closed: its SERVER span ends with stream 1's
// response.
func (tr *Tracer) upgradeInbound(p *proc, c *conn, wr *h2stream.Parser) {
	wr.Apply(c.upSettings) // the client's settings, for what the server writes
	h := &h2conn{rd: h2stream.NewParser(true), wr: wr, reqs: map[uint32]*request{}, calls: map[uint32]*call{}}
	c.h2 = h
	tr.Stats.H2Conns.Add(1)
	tr.Stats.H2Upgrades.Add(1)
	if len(c.reqs) == 0 {
		return
	}
	r := c.reqs[0]
	c.reqs = c.reqs[1:]
	r.h2, r.stream, r.grpcStatus = true, 1, -1
	h.reqs[1], h.lastIn = r, 1
	p.h2open = append(p.h2open, r)
}

// upgradeOutbound follows an outbound connection into HTTP/2 once the
// service read a 101 to h2c: what it reads next is the server's HTTP/2, what
// it writes next starts with its preface, and its upgrade request is stream
// 1, whose response ends its CLIENT span. It returns false if what the
// service writes can no longer be followed (it went opaque first).
func (tr *Tracer) upgradeOutbound(p *proc, c *conn) bool {
	wr := c.up.Switch()
	if wr == nil {
		return false
	}
	rd := h2stream.NewParser(false)
	rd.Apply(c.upSettings) // the service's own settings, for what the server writes
	h := &h2conn{rd: rd, wr: wr, reqs: map[uint32]*request{}, calls: map[uint32]*call{}}
	c.h2 = h
	tr.Stats.H2Conns.Add(1)
	tr.Stats.H2Upgrades.Add(1)
	if len(c.calls) > 0 {
		cl := c.calls[0]
		c.calls = c.calls[1:]
		cl.h2, cl.stream, cl.grpcStatus = true, 1, -1
		h.calls[1], h.lastOut = cl, 1
	}
	return true
}

// h2Opaque passes an HTTP/2 connection through untouched from now on. Its
// writes still go through its Rewriter, which sends what it holds of a
// header block first (the application was told those bytes were written).
func (tr *Tracer) h2Opaque(p *proc, c *conn, reason httpstream.Reason) {
	if c.h2.opaque {
		return
	}
	c.h2.opaque = true
	c.h2.rd.SetOpaque(reason)
	c.out.SetOpaque(reason)
	tr.Stats.Opaque.Add(1)
	tr.h2Close(p, c, tr.cfg.Now())
	tr.log.Info("an HTTP/2 connection passes through untraced from now on", "pid", p.pid, "fd", c.fd, "reason", reason)
}

// h2Close ends what an HTTP/2 connection left open.
func (tr *Tracer) h2Close(p *proc, c *conn, now time.Time) {
	h := c.h2
	for id, r := range h.reqs {
		delete(h.reqs, id)
		tr.h2FinishRequest(p, r, now)
	}
	for id, cl := range h.calls {
		delete(h.calls, id)
		tr.finishCall(p, cl, now)
	}
}

// h2Read follows what the service read from an HTTP/2 connection.
func (tr *Tracer) h2Read(t *supervisor.Task, p *proc, c *conn, data []byte, at readAt) {
	h := c.h2
	if h.opaque {
		return
	}
	h.rd.Feed(data)
	for _, ev := range h.rd.Events() {
		switch ev.Kind {
		case h2stream.EvSettings:
			h.wr.Apply(ev.Settings)
		case h2stream.EvOpaque:
			tr.h2Opaque(p, c, ev.Reason)
			return
		case h2stream.EvHeaders:
			switch {
			case ev.Push:
			case c.inbound && ev.Stream > h.lastIn:
				h.lastIn = ev.Stream
				tr.h2Request(t, p, c, ev, at)
			case !c.inbound:
				tr.h2Response(p, c, ev, at.now)
			}
		case h2stream.EvEndStream:
			if !c.inbound {
				tr.h2EndCall(p, c, ev.Stream, at.now)
			}
		case h2stream.EvReset:
			if c.inbound {
				tr.h2EndRequest(p, c, ev.Stream, -1, at.now)
			} else if cl := h.calls[ev.Stream]; cl != nil {
				cl.reset = true
				tr.h2EndCall(p, c, ev.Stream, at.now)
			}
		case h2stream.EvGoAway:
			if !c.inbound {
				// Streams past the last one the server processed never
				// will be: the client may retry them on another connection.
				for id, cl := range h.calls {
					if id > ev.LastStream {
						cl.reset = true
						tr.h2EndCall(p, c, id, at.now)
					}
				}
			}
		}
	}
}

// h2Request starts the SERVER span of a stream the peer opened.
func (tr *Tracer) h2Request(t *supervisor.Task, p *proc, c *conn, ev h2stream.Event, at readAt) {
	hs := h2stream.Headers(ev.Fields)
	r := tr.newRequest(p, c, hs)
	r.method, r.target, r.host = field(ev.Fields, ":method"), field(ev.Fields, ":path"), field(ev.Fields, ":authority")
	r.start, r.stream, r.h2 = at.now, ev.Stream, true
	r.grpc = strings.HasPrefix(field(ev.Fields, "content-type"), "application/grpc")
	r.grpcStatus = -1
	c.h2.reqs[ev.Stream] = r
	p.h2open = append(p.h2open, r)
	if at.delay >= 0 {
		r.threads = append(r.threads, threadDelay{tid: t.Tid, delay: at.delay, ok: true})
	} else {
		tr.touch(r, p.pid, t.Tid)
	}
	tr.bind(t, p, at.g, r)
	if f := tr.cfg.InFlight; f != nil {
		f.StartServer(r)
	}
}

// h2EndRequest ends the SERVER span of stream id (status: the HTTP status
// to record if none was written, -1: the stream was reset).
func (tr *Tracer) h2EndRequest(p *proc, c *conn, id uint32, status int, now time.Time) {
	r := c.h2.reqs[id]
	if r == nil {
		return
	}
	delete(c.h2.reqs, id)
	if status < 0 {
		r.reset = true
	}
	tr.h2FinishRequest(p, r, now)
}

func (tr *Tracer) h2FinishRequest(p *proc, r *request, now time.Time) {
	for i, o := range p.h2open {
		if o == r {
			p.h2open = append(p.h2open[:i], p.h2open[i+1:]...)
			break
		}
	}
	tr.finishRequest(p, r, now)
}

// h2Response takes a header block of a call's response.
func (tr *Tracer) h2Response(p *proc, c *conn, ev h2stream.Event, now time.Time) {
	cl := c.h2.calls[ev.Stream]
	if cl == nil {
		return
	}
	if st, err := strconv.Atoi(field(ev.Fields, ":status")); err == nil {
		if st < 200 {
			return // interim
		}
		cl.status = st
	}
	if gs, err := strconv.Atoi(field(ev.Fields, "grpc-status")); err == nil {
		cl.grpcStatus = gs
	}
	hs := h2stream.Headers(ev.Fields)
	if httpstream.HasTiming(hs) {
		if tm, err := httpstream.ParseTiming(hs); err == nil && tm.HasServerTime {
			cl.timing, cl.timed = tm, true
		} else {
			tr.Stats.TimingInvalid.Add(1)
		}
	}
	if ev.EndStream {
		tr.h2EndCall(p, c, ev.Stream, now)
	}
}

func (tr *Tracer) h2EndCall(p *proc, c *conn, id uint32, now time.Time) {
	cl := c.h2.calls[id]
	if cl == nil {
		return
	}
	delete(c.h2.calls, id)
	tr.finishCall(p, cl, now)
}

// h2Inject is the InjectFunc of a write on an HTTP/2 connection.
func (tr *Tracer) h2Inject(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall, dst []byte, m *httpstream.Message, now time.Time) []byte {
	b, _ := m.Ext.(*h2stream.Block)
	if b == nil {
		return nil
	}
	h := c.h2
	if c.inbound {
		r := h.reqs[b.Stream]
		if r == nil || r.final {
			return nil
		}
		tr.h2Status(r, b.Fields)
		if r.status != 0 && r.status < 200 {
			return nil
		}
		// A gRPC response's timing goes into its trailers (or a
		// trailers-only response), written when the handler is done;
		// another response's into its first block.
		if r.grpc && !b.EndStream || httpstream.HasTiming(m.Headers) {
			return nil
		}
		r.final = true
		tr.touch(r, p.pid, t.Tid)
		r.local = tr.localWait(r)
		return httpstream.AppendTiming(dst, httpstream.Timing{
			ServerTime: now.Sub(r.start), HasServerTime: true, Waits: r.waits()}, tr.cfg.Timing)
	}
	if !m.Request || b.Stream <= h.lastOut {
		return nil // trailers, or a block the Rewriter saw before
	}
	cl := tr.h2Call(t, p, c, sc, b, m.Headers, now)
	if cl.own {
		return nil
	}
	var ctx httpstream.Context
	if r := cl.parent; r != nil {
		ctx = r.context()
	} else {
		ctx.TraceID, ctx.SpanID, ctx.Sampled = cl.traceID, cl.parentS, true
	}
	return keepLines(httpstream.AppendInjectFormats(dst, ctx, cl.span, m.Headers, tr.cfg.propagated()), len(dst), h2Propagated)
}

// h2Status records what a response block says of the request's outcome.
func (tr *Tracer) h2Status(r *request, fields []hpack.HeaderField) {
	if st, err := strconv.Atoi(field(fields, ":status")); err == nil {
		r.status = st
	}
	if gs, err := strconv.Atoi(field(fields, "grpc-status")); err == nil {
		r.grpcStatus = gs
	}
}

// h2Call starts the CLIENT span of a stream the service opens, bound to the
// request it is made for (see h2Parent).
func (tr *Tracer) h2Call(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall, b *h2stream.Block, hs httpstream.Headers, now time.Time) *call {
	h := c.h2
	h.lastOut = b.Stream
	cl := &call{start: now, method: field(b.Fields, ":method"), target: field(b.Fields, ":path"),
		host: field(b.Fields, ":authority"), tid: t.Tid, span: httpstream.NewSpanID(nil),
		stream: b.Stream, h2: true, grpcStatus: -1}
	cl.grpc = strings.HasPrefix(field(b.Fields, "content-type"), "application/grpc")
	h.calls[b.Stream] = cl
	if _, own := httpstream.ExtractContext(hs); own {
		cl.own = true
		tr.Stats.OwnContext.Add(1)
	}
	r := tr.h2Parent(t, p, sc, b.Stream)
	if r != nil {
		r.inCall++
		cl.parent = r
		tr.touch(r, p.pid, t.Tid)
		ctx := r.context()
		cl.traceID, cl.parentS = ctx.TraceID, ctx.SpanID
	} else {
		tr.Stats.Unbound.Add(1)
		ctx := httpstream.NewRootContext(nil)
		cl.traceID = ctx.TraceID
	}
	if f := tr.cfg.InFlight; f != nil && !cl.own {
		f.StartCall(cl, p.pid)
	}
	return cl
}

// h2Parent is the request an outbound HTTP/2 stream is made for. HTTP/2
// runtimes multiplex requests on few threads: the thread that reads a
// request is seldom the one that runs its handler, and the one that writes a
// call's HEADERS is often a third (an event loop, grpc-go's loopy writer).
// In order:
//
//  0. grpc-go: the request whose handler queued this stream's HEADERS for
//     the writing goroutine (grpcgo_linux.go), exact;
//  1. the writing thread's (Go: goroutine's) request, as for HTTP/1.x;
//  2. the process's only open request (exact when one request at a time is
//     served, whatever the threads);
//  3. otherwise a guess, counted in Stats.Guessed: the most recently started
//     open request without a call in flight (Go), else the oldest open
//     HTTP/2 request without one.
func (tr *Tracer) h2Parent(t *supervisor.Task, p *proc, sc *supervisor.Syscall, stream uint32) *request {
	if p.grpc != nil {
		if r := grpcCallOf(p, sc.Regs.R14, stream); r != nil {
			return r
		}
	}
	if r := tr.current(t, p, sc); r != nil && (len(p.h2open) <= 1 || !r.h2) {
		return r
	}
	open := tr.openRequests(p)
	if len(open) == 1 {
		return open[0]
	}
	if len(open) == 0 {
		return nil
	}
	tr.Stats.Guessed.Add(1)
	if p.isGo {
		if r := tr.handedOver(t, p); r != nil {
			return r
		}
	}
	for _, r := range p.h2open {
		if !r.done && r.inCall == 0 {
			return r
		}
	}
	return p.h2open[0]
}

// openRequests returns the process's open requests (HTTP/2 ones, and for Go
// its bound HTTP/1.x ones).
func (tr *Tracer) openRequests(p *proc) []*request {
	var out []*request
	for _, r := range p.h2open {
		if !r.done {
			out = append(out, r)
		}
	}
	for _, r := range p.open {
		if !r.done && !r.h2 {
			out = append(out, r)
		}
	}
	return out
}

// h2Wrote handles the stream events of a write on an HTTP/2 connection:
// responses and calls that end, resets, settings.
func (tr *Tracer) h2Wrote(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall, now time.Time) {
	h := c.h2
	for _, ev := range h.wr.Events() {
		switch ev.Kind {
		case h2stream.EvSettings:
			h.rd.Apply(ev.Settings)
		case h2stream.EvOpaque:
			tr.h2Opaque(p, c, ev.Reason)
			return
		case h2stream.EvHeaders:
			if ev.Push {
				continue
			}
			if c.inbound {
				if r := h.reqs[ev.Stream]; r != nil {
					tr.h2Status(r, ev.Fields)
					if ev.EndStream {
						tr.h2EndRequest(p, c, ev.Stream, 0, now)
					}
				}
			} else if ev.Stream > h.lastOut {
				// A block the Rewriter could not hold (too large): the
				// call is traced, without fields added.
				tr.h2Call(t, p, c, sc, &h2stream.Block{Stream: ev.Stream, Fields: ev.Fields}, h2stream.Headers(ev.Fields), now)
				tr.Stats.Skipped.Add(1)
			}
		case h2stream.EvEndStream:
			if c.inbound {
				tr.h2EndRequest(p, c, ev.Stream, 0, now)
			}
		case h2stream.EvReset:
			if c.inbound {
				tr.h2EndRequest(p, c, ev.Stream, -1, now)
			} else if cl := h.calls[ev.Stream]; cl != nil {
				cl.reset = true
				tr.h2EndCall(p, c, ev.Stream, now)
			}
		}
	}
}

// field returns the value of the first field named name.
func field(fields []hpack.HeaderField, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// keepLines keeps, of the header lines in b[from:], those whose name is in
// names (lines are "Name: value\r\n", as AppendInjectHeaders writes them),
// in place.
func keepLines(b []byte, from int, names []string) []byte {
	out, rest := b[:from], b[from:]
	for len(rest) > 0 {
		line, tail, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			break
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		for _, n := range names {
			if string(bytes.ToLower(name)) == n {
				out = append(out, line...)
				out = append(out, '\n')
				break
			}
		}
		rest = tail
	}
	return out
}
