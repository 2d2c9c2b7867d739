package run

import (
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// provisionalRecorder records what InFlight ships now.
type provisionalRecorder struct {
	spans   []*model.Span
	flushes int
}

func (p *provisionalRecorder) EmitNow(s *model.Span) { p.spans = append(p.spans, s) }
func (p *provisionalRecorder) Flush()                { p.flushes++ }

// TestInFlight: a request open past After and past 3× its operation's
// median is reported with its open calls, at growing ages, at most
// MaxReports times; a request whose operation has no baseline, or that is
// not slow yet, is not; its end forgets it.
func TestInFlight(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var ended []*model.Span
	out := &provisionalRecorder{}
	f := NewInFlight(InFlightConfig{Service: "svc", Host: "h"}, sinkFunc(func(s *model.Span) { ended = append(ended, s) }), out)
	rs := resource{service: "svc", host: "h"}
	n := byte(0)
	newReq := func(method, target string, start time.Time) *request {
		n++
		r := &request{span: httpstream.SpanID{1, n}, start: start, method: method, target: target, host: "svc:80", pid: 42,
			threads: []threadDelay{{tid: 43}}}
		r.ctx.TraceID = httpstream.TraceID{9, n}
		r.ctx.SpanID = httpstream.SpanID{7, n}
		return r
	}
	// A baseline of 10 ms for GET /slow: 20 ended requests.
	for i := range 20 {
		r := newReq("GET", "/slow?i=1", t0.Add(time.Duration(i)*time.Millisecond))
		f.StartServer(r)
		r.end = r.start.Add(10 * time.Millisecond)
		f.Emit(rs.serverSpan(r))
	}
	if f.Open() != 0 || len(ended) != 20 {
		t.Fatalf("after 20 ended requests: %d open, %d passed on; want 0, 20", f.Open(), len(ended))
	}
	start := t0.Add(time.Second)
	hung := newReq("GET", "/slow", start)
	f.StartServer(hung)
	cl0 := &call{traceID: hung.ctx.TraceID, parentS: hung.span, span: httpstream.SpanID{2, 1}, start: start.Add(time.Millisecond),
		method: "GET", target: "/db", host: "db:80", tid: 43}
	f.StartCall(cl0, 42)
	other := &call{traceID: httpstream.TraceID{8}, parentS: httpstream.SpanID{3}, span: httpstream.SpanID{2, 2}, start: start, method: "GET", host: "x"}
	f.StartCall(other, 42)                      // under another request: not shipped with this one
	f.StartServer(newReq("GET", "/new", start)) // an operation with no baseline here
	quick := newReq("GET", "/slow", start.Add(1500*time.Millisecond))
	f.StartServer(quick) // open, but not past After at the sweeps below

	sweepAt := func(d time.Duration) []*model.Span {
		out.spans = nil
		f.sweep(start.Add(d))
		return out.spans
	}
	if got := sweepAt(900 * time.Millisecond); len(got) != 0 {
		t.Fatalf("before After: %d spans shipped", len(got))
	}
	got := sweepAt(2 * time.Second)
	if len(got) != 2 {
		t.Fatalf("at 2 s: %d spans, want the hung request and its call: %+v", len(got), got)
	}
	srv, cl := got[0], got[1]
	final := rs.serverSpan(&request{span: hung.span, ctx: hung.ctx, start: hung.start, end: hung.start, method: "GET", target: "/slow"})
	if srv.SpanID != model.SpanID(hung.span) || srv.TraceID != model.TraceID(hung.ctx.TraceID) || srv.Name != final.Name ||
		srv.Kind != model.KindServer || srv.Duration != int64(2*time.Second) || !srv.InFlight() || srv.StatusCode != model.StatusUnset {
		t.Errorf("provisional SERVER span %+v", srv)
	}
	for _, k := range []string{model.AttrWaitLocalMs, model.AttrWaitNetMs, model.AttrWaitRemoteMs, "http.response.status_code"} {
		if _, ok := srv.Attr(k); ok {
			t.Errorf("provisional SERVER span carries %s", k)
		}
	}
	if v, _ := srv.Attr(model.AttrThreadIDs); v.Str != "43" {
		t.Errorf("its threads %q, want 43", v.Str)
	}
	if cl.SpanID != model.SpanID(cl0.span) || cl.ParentSpanID != model.SpanID(hung.span) || cl.Kind != model.KindClient ||
		cl.Duration != int64(2*time.Second-time.Millisecond) || !cl.InFlight() || cl.StatusCode != model.StatusUnset || cl.StatusMessage != "" {
		t.Errorf("provisional CLIENT span %+v", cl)
	}
	if out.flushes == 0 {
		t.Error("the sweep did not flush")
	}
	quick.end = start.Add(2500 * time.Millisecond)
	f.Emit(rs.serverSpan(quick))
	// Next reports at 4× the age: 8 s, then 32 s, then 128 s; no more.
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{3 * time.Second, 0}, {8 * time.Second, 2}, {9 * time.Second, 0}, {32 * time.Second, 2}, {128 * time.Second, 2}, {9 * time.Minute, 0}} {
		if got := sweepAt(tc.at); len(got) != tc.want {
			t.Errorf("at %v: %d spans, want %d", tc.at, len(got), tc.want)
		}
	}
	if f.Reported.Load() != 8 {
		t.Errorf("Reported = %d, want 8", f.Reported.Load())
	}
	// The end forgets it; MaxAge forgets what never ended.
	hung.end = start.Add(10 * time.Minute)
	f.Emit(rs.serverSpan(hung))
	if got := f.Open(); got != 3 {
		t.Errorf("%d open after the hung request ended, want 3 (its call, another call, /new)", got)
	}
	sweepAt(11 * time.Minute)
	if got := f.Open(); got != 0 {
		t.Errorf("%d open past MaxAge, want 0", got)
	}
}

// TestInFlightBounds: MaxOpen starts are tracked, the rest counted;
// a sweep ships at most MaxPerSweep spans, the oldest requests first.
func TestInFlightBounds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	out := &provisionalRecorder{}
	f := NewInFlight(InFlightConfig{Service: "svc", MaxOpen: 5, MaxPerSweep: 2}, nil, out)
	rs := resource{service: "svc"}
	for i := range 20 {
		r := &request{span: httpstream.SpanID{1, byte(i)}, start: t0, end: t0.Add(time.Millisecond), method: "GET", target: "/"}
		f.Emit(rs.serverSpan(r))
	}
	for i := range 7 {
		f.StartServer(&request{span: httpstream.SpanID{2, byte(i)}, start: t0.Add(time.Duration(i) * time.Second), method: "GET", target: "/"})
	}
	if f.Open() != 5 || f.Ignored.Load() != 2 {
		t.Fatalf("open %d, ignored %d; want 5, 2", f.Open(), f.Ignored.Load())
	}
	f.sweep(t0.Add(time.Minute))
	if len(out.spans) != 2 || out.spans[0].SpanID != (model.SpanID{2, 0}) || out.spans[1].SpanID != (model.SpanID{2, 1}) {
		t.Fatalf("shipped %d spans %+v, want the two oldest", len(out.spans), out.spans)
	}
}

type sinkFunc func(*model.Span)

func (f sinkFunc) Emit(s *model.Span) { f(s) }
