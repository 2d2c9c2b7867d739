package analysis

import (
	"cmp"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/rootline/rootline/internal/model"
)

// span is what the analysis reads of a model span, with its place in the
// trace's tree.
type span struct {
	id, parent         model.SpanID
	service, kind      string // kind as model.SpanKind.String() names it
	serverAddr         string // model.AttrServerAddress
	start, dur         int64  // ns; dur may be cut (see newTrace)
	anomaly            bool
	waitLocal, waitNet float64 // ms; NaN when absent
	waitSocket         float64 // ms; NaN when absent
	// respSocket: a CLIENT span's response's wait in the caller's socket
	// (ms; 0 when absent).
	respSocket float64
	threads    []int64
	up         *span // parent span in this trace
	children   []*span
}

type trace struct {
	id      model.TraceID
	model   []*model.Span // what the trace was built from
	spans   []*span
	clamped int // server spans cut to their caller's CLIENT span
	// over: its root took longer than the window's SlowAbove.
	over bool
	// top is the root, found once: sorting and ranking ask for it often.
	top *span
}

// newTrace builds the tree of one trace's spans. The model spans are read,
// never modified.
func newTrace(spans []*model.Span) *trace {
	t := &trace{model: spans}
	byID := map[model.SpanID]*span{}
	for _, ms := range spans {
		if ms == nil {
			continue
		}
		t.id = ms.TraceID
		s := &span{id: ms.SpanID, parent: ms.ParentSpanID, service: ms.Service, kind: ms.Kind.String(),
			start: ms.Start, dur: ms.Duration, anomaly: ms.IsAnomalous(), waitLocal: math.NaN(), waitNet: math.NaN(), waitSocket: math.NaN()}
		for _, kv := range ms.Attributes {
			switch kv.Key {
			case model.AttrWaitLocalMs:
				s.waitLocal = number(kv.Value)
			case model.AttrWaitNetMs:
				s.waitNet = number(kv.Value)
			case model.AttrWaitSocketMs:
				s.waitSocket = number(kv.Value)
			case model.AttrWaitResponseSocketMs:
				if v := number(kv.Value); v > 0 && v*1e6 < float64(ms.Duration) {
					s.respSocket = v
				}
			case model.AttrServerAddress:
				if kv.Value.Type == model.TypeString {
					s.serverAddr = kv.Value.Str
				}
			}
		}
		s.threads = SpanThreads(ms)
		t.spans = append(t.spans, s)
		byID[s.id] = s
	}
	for _, s := range t.spans {
		if p := byID[s.parent]; p != nil && p != s {
			p.children = append(p.children, s)
			s.up = p
		}
	}
	// A server span cannot outlast the call that made it: when one does, its
	// end was taken late (seen with supervised Go services), and it is cut to
	// the caller's CLIENT span so the late end is not charged as own time.
	for _, s := range t.spans {
		if s.kind == "server" && s.up != nil && s.up.kind == "client" && s.up.service != s.service {
			if end := s.up.start + s.up.dur; s.start+s.dur > end {
				s.dur = max(end-s.start, 0)
				t.clamped++
			}
		}
	}
	for _, s := range t.spans {
		if (s.parent.IsZero() || byID[s.parent] == nil) && (t.top == nil || s.start < t.top.start) {
			t.top = s
		}
	}
	return t
}

// SpanThreads returns the threads a span says worked on it
// (rootline.thread.ids, thread.id), each once, in the order its attributes
// name them; none when it does not say.
func SpanThreads(ms *model.Span) []int64 {
	var out []int64
	for _, kv := range ms.Attributes {
		switch kv.Key {
		case model.AttrThreadIDs:
			if kv.Value.Type == model.TypeString {
				for _, f := range strings.Split(kv.Value.Str, ",") {
					if n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
			}
		case model.AttrThreadID:
			if n := number(kv.Value); !math.IsNaN(n) && !slices.Contains(out, int64(n)) {
				out = append(out, int64(n))
			}
		}
	}
	return out
}

// number reads a numeric attribute whatever its producer chose to store it
// as; NaN when it is not a number.
func number(v model.Value) float64 {
	if f, ok := v.Number(); ok {
		return f
	}
	return math.NaN()
}

// root is the span with no parent in the trace that started first.
func (t *trace) root() *span { return t.top }

func (t *trace) start() int64 {
	if r := t.root(); r != nil {
		return r.start
	}
	return 0
}

func (t *trace) duration() int64 {
	if r := t.root(); r != nil {
		return r.dur
	}
	return 0
}

func (t *trace) anomalous() bool {
	return t.over || slices.ContainsFunc(t.spans, func(s *span) bool { return s.anomaly })
}

func (t *trace) visits(svc string) bool {
	return slices.ContainsFunc(t.spans, func(s *span) bool { return s.service == svc })
}

// times is one service's time in one trace (or a mean over traces), in ns:
// its own (exclusive) time, the network time of the calls into it, its
// threads' run-queue wait; and, of its SERVER spans, the time their requests
// waited in its sockets before it read them (part of self and local) and the
// time covered by its own calls out (remote).
type times struct{ self, net, local, sock, remote float64 }

// times splits the trace's time among services. A span's exclusive time is
// its duration minus the union of its children's intervals. A CLIENT span's
// time outside the callee (its rootline.wait.net_ms, or its duration not
// covered by the callee's spans) is time spent between two services —
// network and proxies — and is charged to the callee as network time, as is
// a proxy's ingress span's own time (proxiesServer) where the CLIENT span
// did not measure it; every other span's exclusive time is the service's
// own. The time a response waited in the caller's socket before the caller
// read it (rootline.wait.response_socket_ms) is the caller's own: a caller
// held off its CPU reads its answers late, and counted as the link's, that
// made its callee the culprit.
func (t *trace) times(known map[string]bool) map[string]times {
	out := map[string]times{}
	for _, s := range t.spans {
		if s.kind == "client" {
			if s.nestedClient() {
				continue // the outer CLIENT span accounts for it
			}
			callee := s.callee(known)
			c := out[callee]
			resp := s.respSocket * 1e6
			if !math.IsNaN(s.waitNet) {
				c.net += s.waitNet * 1e6 // without resp (rootline run)
			} else {
				c.net += max(float64(s.exclusiveOf(s.across()))-resp, 0)
			}
			out[callee] = c
			if resp > 0 {
				x := out[s.service]
				x.self += resp
				out[s.service] = x
			}
			continue
		}
		if s.proxiesServer() {
			// A proxy in front of the service (its sidecar's ingress
			// span): its own time is on the link into the service, which
			// the caller's CLIENT span already measured when it says its
			// net wait.
			if !s.linkMeasured() {
				c := out[s.service]
				c.net += float64(s.exclusive())
				out[s.service] = c
			}
			continue
		}
		x := out[s.service]
		excl := float64(s.exclusive())
		x.self += excl
		if !math.IsNaN(s.waitLocal) {
			x.local += s.waitLocal * 1e6
		}
		if s.kind == "server" {
			if !math.IsNaN(s.waitSocket) {
				x.sock += min(max(s.waitSocket*1e6, 0), excl)
			}
			var calls []*span
			for _, c := range s.children {
				if c.kind == "client" {
					calls = append(calls, c)
				}
			}
			x.remote += float64(s.dur - s.exclusiveOf(calls))
		}
		out[s.service] = x
	}
	return out
}

// proxiesServer reports whether s is a SERVER span in front of a SERVER
// span of its own service: a sidecar's (or another proxy's) ingress span,
// whose child is the application's own span of the same request. Its
// exclusive time is the proxy's, before it forwards the request and after
// the application answered: time on the link into the service, not the
// service's work. (The application's SERVER span starts when the request's
// first byte reaches its socket, so a wait there is in the child.)
func (s *span) proxiesServer() bool {
	if s.kind != "server" {
		return false
	}
	return slices.ContainsFunc(s.children, func(c *span) bool { return c.kind == "server" && c.service == s.service })
}

// linkMeasured reports whether a CLIENT span above s, through nested CLIENT
// spans of one service (a sidecar's egress span under the application's
// call), says its net wait (rootline.wait.net_ms): the time on the link,
// proxies included, measured end to end by the caller.
func (s *span) linkMeasured() bool {
	for c := s.up; c != nil && c.kind == "client"; c = c.up {
		if !math.IsNaN(c.waitNet) {
			return true
		}
	}
	return false
}

// nestedClient reports whether s is a CLIENT span inside a CLIENT span of the
// same service: a sidecar's egress span under the application's own call.
func (s *span) nestedClient() bool {
	return s.kind == "client" && s.up != nil && s.up.kind == "client" && s.up.service == s.service
}

// across returns the spans a CLIENT span led to, looking through nested
// CLIENT spans of its own service (a sidecar's egress span).
func (s *span) across() []*span {
	var out []*span
	for _, c := range s.children {
		if c.kind == "client" && c.service == s.service {
			out = append(out, c.across()...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// exclusive is the span's duration not covered by its children.
func (s *span) exclusive() int64 { return s.exclusiveOf(s.children) }

// exclusiveOf is the span's duration not covered by the given spans.
func (s *span) exclusiveOf(children []*span) int64 {
	type iv struct{ a, b int64 }
	var ivs []iv
	end := s.start + s.dur
	for _, c := range children {
		a, b := max(c.start, s.start), min(c.start+c.dur, end)
		if b > a {
			ivs = append(ivs, iv{a, b})
		}
	}
	slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.a, y.a) })
	covered, curA, curB := int64(0), int64(0), int64(-1)
	for _, v := range ivs {
		if v.a > curB {
			if curB > curA {
				covered += curB - curA
			}
			curA, curB = v.a, v.b
		} else {
			curB = max(curB, v.b)
		}
	}
	if curB > curA {
		covered += curB - curA
	}
	return max(s.dur-covered, 0)
}

// callee names the service a CLIENT span called: the first span of another
// service it led to, else the host of its (or a nested CLIENT span's)
// server.address when that is a known service, else the caller itself (the
// callee left no span).
func (s *span) callee(known map[string]bool) string {
	for _, c := range s.across() {
		if c.service != s.service {
			return c.service
		}
	}
	for c := s; c != nil; {
		h := c.serverAddr
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		if h != "" && known[h] {
			return h
		}
		var next *span
		for _, cc := range c.children {
			if cc.kind == "client" && cc.service == s.service {
				next = cc
				break
			}
		}
		c = next
	}
	return s.service
}
