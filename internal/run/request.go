package run

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// Sink receives finished spans. Emit MUST NOT block: it is called on the
// supervisor's tracing thread while a traced thread waits.
type Sink interface {
	Emit(s *model.Span)
}

// request is one inbound request the service is servicing (a SERVER span).
type request struct {
	ctx     httpstream.Context // as received; ctx.SpanID is the caller's span
	span    httpstream.SpanID  // this hop's SERVER span
	start   time.Time
	end     time.Time
	method  string
	target  string
	host    string
	peer    string
	pid     int
	status  int
	final   bool // the final (non-1xx) response's header block was written
	done    bool
	inCall  int // client calls in flight
	threads []threadDelay
	goProc  bool // the process is a Go program (goroutines, not threads, carry requests)
	// HTTP/2: the stream, and for gRPC the status from the trailers (-1:
	// none); reset: either side reset the stream; served: a grpc-go
	// handler goroutine took it (grpcgo_linux.go).
	served     bool
	h2         bool
	stream     uint32
	grpc       bool
	grpcStatus int
	reset      bool

	maxNet, maxRemote, local time.Duration
	// sock: how long the request waited in the socket's receive queue
	// before the service read it (the span starts at its arrival; the
	// in-kernel datapath only). It is part of local.
	sock time.Duration
}

// AttrWaitSocketMs is the SERVER span attribute that says how long the
// request's first byte waited in the service's socket before the service
// read it, in ms (part of rootline.wait.local_ms; the span starts at the
// byte's arrival, so start + this is when the service read it).
const AttrWaitSocketMs = model.AttrWaitSocketMs

// threadDelay remembers a thread's run-queue delay counter when it first
// worked on the request, and when it first and last did (zero when not
// known: the datapath reports threads without times).
type threadDelay struct {
	tid         int
	delay       time.Duration
	ok          bool
	first, last time.Time
}

// call is one outbound request the service made (a CLIENT span).
type call struct {
	parent  *request // nil: made outside any request (a root span)
	traceID httpstream.TraceID
	parentS httpstream.SpanID // the span this call is a child of (zero: root)
	span    httpstream.SpanID
	own     bool // the application propagated its own context: no span
	start   time.Time
	method  string
	target  string
	host    string
	tid     int
	status  int
	timing  httpstream.Timing
	timed   bool
	// respSock is how long the response's first byte waited in the socket
	// before the caller read it (the in-kernel datapath; 0: not measured).
	respSock time.Duration
	// HTTP/2, as for request.
	h2         bool
	stream     uint32
	grpc       bool
	grpcStatus int
	reset      bool
}

// context returns the context children of r propagate: r's trace with r's
// SERVER span as the parent.
func (r *request) context() httpstream.Context {
	c := r.ctx
	c.SpanID = r.span
	return c
}

// waits are the waits r reports upstream in its timing fields.
func (r *request) waits() []httpstream.Wait {
	return []httpstream.Wait{
		{Kind: httpstream.WaitLocal, Duration: r.local},
		{Kind: httpstream.WaitNet, Duration: r.maxNet},
		{Kind: httpstream.WaitRemote, Duration: r.maxRemote},
	}
}

// finishCall folds a finished call's waits into its parent (Mirage §4.2):
// the network wait is what the client saw beyond the downstream's own time,
// the remote wait the largest wait the downstream reported.
func (c *call) waits(end time.Time) (net, remote time.Duration, ok bool) {
	if !c.timed || !c.timing.HasServerTime {
		return 0, 0, false
	}
	net = max(0, end.Sub(c.start)-c.timing.ServerTime-c.respSock)
	for _, w := range c.timing.Waits {
		remote = max(remote, w.Duration)
	}
	return net, remote, true
}

// resource is what every span of a traced process carries. Its methods are
// for one goroutine.
type resource struct {
	service  string
	instance string
	host     string

	// The last process's attributes: spans share them (read-only).
	lastPID   int
	lastAttrs []model.KeyValue
}

func (rs *resource) attrs(pid int) []model.KeyValue {
	if rs.lastAttrs != nil && rs.lastPID == pid {
		return rs.lastAttrs
	}
	kv := []model.KeyValue{
		model.String(model.AttrServiceName, rs.service),
		model.Int(model.AttrProcessPID, int64(pid)),
		model.String("telemetry.sdk.name", "rootline-run"),
	}
	if rs.host != "" {
		kv = append(kv, model.String(model.AttrHostName, rs.host))
	}
	inst := rs.instance
	if inst == "" && rs.host != "" {
		inst = rs.host + ":" + strconv.Itoa(pid)
	}
	if inst != "" {
		kv = append(kv, model.String(model.AttrServiceInstanceID, inst))
	}
	rs.lastPID, rs.lastAttrs = pid, kv
	return kv
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// path returns a request-target without its query, for span names.
func path(target string) string {
	if i := bytes.IndexAny([]byte(target), "?#"); i >= 0 {
		return target[:i]
	}
	return target
}

func statusOf(code int) model.StatusCode {
	if code >= 500 || code == 0 {
		return model.StatusError
	}
	return model.StatusUnset
}

// serverSpan builds the SERVER span of a finished request.
func (rs *resource) serverSpan(r *request) *model.Span {
	s := &model.Span{
		TraceID:      model.TraceID(r.ctx.TraceID),
		SpanID:       model.SpanID(r.span),
		ParentSpanID: model.SpanID(r.ctx.SpanID),
		Service:      rs.service,
		Name:         r.method + " " + path(r.target),
		Kind:         model.KindServer,
		Start:        r.start.UnixNano(),
		Duration:     int64(r.end.Sub(r.start)),
		StatusCode:   statusOf(r.status),
		Resource:     rs.attrs(r.pid),
		Scope:        "rootline-run",
	}
	if r.status == 0 {
		s.StatusMessage = "no response before the connection closed"
	}
	tids := make([]byte, 0, 8*len(r.threads))
	for i, t := range r.threads {
		if i > 0 {
			tids = append(tids, ',')
		}
		tids = strconv.AppendInt(tids, int64(t.tid), 10)
	}
	s.Attributes = []model.KeyValue{
		model.String("http.request.method", r.method),
		model.String("url.path", path(r.target)),
		model.String("server.address", r.host),
		model.String("network.peer.address", r.peer),
		model.Float(model.AttrWaitLocalMs, ms(r.local)),
		model.Float(model.AttrWaitNetMs, ms(r.maxNet)),
		model.Float(model.AttrWaitRemoteMs, ms(r.maxRemote)),
		model.String(model.AttrThreadIDs, string(tids)),
	}
	if r.status != 0 {
		s.Attributes = append(s.Attributes, model.Int("http.response.status_code", int64(r.status)))
	}
	if r.sock > 0 {
		s.Attributes = append(s.Attributes, model.Float(AttrWaitSocketMs, ms(r.sock)))
	}
	if len(r.threads) > 0 {
		s.Attributes = append(s.Attributes, model.Int(model.AttrThreadID, int64(r.threads[0].tid)))
	}
	if r.ctx.RequestID != "" {
		s.Attributes = append(s.Attributes, model.String("http.request.header.x-request-id", r.ctx.RequestID))
	}
	if iv := threadIntervals(r); iv != "" {
		s.Attributes = append(s.Attributes, model.String(model.AttrThreadIntervals, iv))
	}
	if r.goProc {
		s.Attributes = append(s.Attributes, model.String("process.runtime.name", "go"))
	}
	if r.h2 {
		s.Attributes = h2Attrs(s, s.Attributes, r.stream, r.target, r.grpc, r.grpcStatus, r.reset, true)
	}
	return s
}

// threadIntervals says when the request was active on each of its threads
// (the kernel analysis's thread ↔ request records for thread pools and
// event loops): from a thread's first call for it to its last, the thread
// that worked on it last until the response ended.
func threadIntervals(r *request) string {
	acts := make([]model.ThreadActivity, 0, len(r.threads))
	last := -1
	for i, t := range r.threads {
		if t.first.IsZero() {
			return ""
		}
		if last < 0 || !t.last.Before(r.threads[last].last) {
			last = i
		}
		acts = append(acts, model.ThreadActivity{TID: uint32(t.tid), Start: t.first.UnixNano(), End: t.last.UnixNano()})
	}
	if last < 0 {
		return ""
	}
	acts[last].End = max(acts[last].End, r.end.UnixNano())
	return model.FormatThreadIntervals(r.start.UnixNano(), acts)
}

// h2Attrs adds what an HTTP/2 stream's span says besides HTTP's attributes
// (the OpenTelemetry RPC conventions for gRPC), and sets a gRPC span's name
// ("package.Service/Method") and status: a CLIENT span is an error for any
// status but OK, a SERVER span for the codes that say the server failed.
func h2Attrs(s *model.Span, kv []model.KeyValue, stream uint32, path string, grpc bool, status int, reset, server bool) []model.KeyValue {
	kv = append(kv,
		model.String("network.protocol.name", "http"),
		model.String("network.protocol.version", "2"),
		model.Int("rootline.http2.stream_id", int64(stream)))
	if reset {
		s.StatusCode, s.StatusMessage = model.StatusError, "stream reset"
	}
	if !grpc {
		return kv
	}
	kv = append(kv, model.String("rpc.system", "grpc"))
	if svc, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/"); ok {
		kv = append(kv, model.String("rpc.service", svc), model.String("rpc.method", method))
		s.Name = svc + "/" + method
	}
	if status < 0 {
		if !reset {
			s.StatusCode, s.StatusMessage = model.StatusError, "no grpc-status before the stream ended"
		}
		return kv
	}
	kv = append(kv, model.Int("rpc.grpc.status_code", int64(status)))
	s.StatusCode, s.StatusMessage = model.StatusUnset, ""
	switch status {
	case 0:
	case 2, 4, 12, 13, 14, 15: // UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS
		s.StatusCode = model.StatusError
	default:
		if !server {
			s.StatusCode = model.StatusError
		}
	}
	return kv
}

// clientSpan builds the CLIENT span of a finished call.
func (rs *resource) clientSpan(c *call, pid int, end time.Time) *model.Span {
	s := &model.Span{
		TraceID:      model.TraceID(c.traceID),
		SpanID:       model.SpanID(c.span),
		ParentSpanID: model.SpanID(c.parentS),
		Service:      rs.service,
		Name:         c.method,
		Kind:         model.KindClient,
		Start:        c.start.UnixNano(),
		Duration:     int64(end.Sub(c.start)),
		StatusCode:   statusOf(c.status),
		Resource:     rs.attrs(pid),
		Scope:        "rootline-run",
	}
	s.Attributes = []model.KeyValue{
		model.String("http.request.method", c.method),
		model.String("url.full", "http://"+c.host+c.target),
		model.String("server.address", c.host),
		model.Int(model.AttrThreadID, int64(c.tid)),
	}
	if c.status != 0 {
		s.Attributes = append(s.Attributes, model.Int("http.response.status_code", int64(c.status)))
	} else {
		s.StatusMessage = "no response before the connection closed"
	}
	if net, remote, ok := c.waits(end); ok {
		s.Attributes = append(s.Attributes,
			model.Float(model.AttrWaitNetMs, ms(net)),
			model.Float(model.AttrWaitRemoteMs, ms(remote)),
			model.Float("rootline.downstream.server_time_ms", ms(c.timing.ServerTime)))
	}
	if c.respSock > 0 {
		s.Attributes = append(s.Attributes, model.Float(model.AttrWaitResponseSocketMs, ms(c.respSock)))
	}
	if c.h2 {
		s.Attributes = append(s.Attributes, model.String("url.path", path(c.target)))
		s.Attributes = h2Attrs(s, s.Attributes, c.stream, c.target, c.grpc, c.grpcStatus, c.reset, false)
	}
	return s
}

// Stats are the tracer's counters; safe to read from any goroutine.
type Stats struct {
	Requests      atomic.Int64 // SERVER spans
	Calls         atomic.Int64 // CLIENT spans
	OwnContext    atomic.Int64 // outbound requests that carried the application's own context
	Unbound       atomic.Int64 // outbound requests made outside any request (root CLIENT spans)
	Opaque        atomic.Int64 // connections passed through as not HTTP/1.x
	Rewrites      atomic.Int64 // writes rewritten to carry added header lines
	Restarts      atomic.Int64 // writes restarted because only added bytes were sent
	Scratch       atomic.Int64 // scratch mappings made in tracees
	Errors        atomic.Int64 // tracee memory or register access failures
	TapReads      atomic.Int64 // reads received from the ReadSource
	TapGaps       atomic.Int64 // connections passed through because the ReadSource lost reads
	TimingInvalid atomic.Int64 // malformed rootline-* headers from downstreams
	Skipped       atomic.Int64 // heads the in-kernel datapath had to leave without their lines
	H2Conns       atomic.Int64 // connections followed as HTTP/2
	H2Upgrades    atomic.Int64 // of which those upgraded from HTTP/1.1 (Upgrade: h2c)
	H2Untraced    atomic.Int64 // HTTP/2 connections the in-kernel datapath passed through untraced
	Guessed       atomic.Int64 // HTTP/2 calls whose request was one of several open ones (see h2Parent)
}
