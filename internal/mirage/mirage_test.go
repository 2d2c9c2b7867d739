package mirage

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
)

const ms = time.Millisecond

// call builds a call with waits, times in milliseconds after zero.
func call(peer string, start, end int, net, remote time.Duration) Call {
	return Call{Peer: peer, Start: int64(start) * int64(ms), End: int64(end) * int64(ms), Net: net, Remote: remote, Known: true}
}

// The dissertation's running example (Figures 4.1 and 4.2): API gateway →
// frontend → backend; the backend spends 10 ms of its 20 ms waiting for the
// CPU, the frontend's link to it costs 5 ms. The maximum propagates the
// backend's 10 ms up to the API, and each hop delegates down to the backend,
// which acts on its CPU.
func TestRunningExample(t *testing.T) {
	backend := Hop{Service: "backend", Duration: 20 * ms, Local: 10 * ms, LocalKnown: true}
	cfg := Config{}
	if got := cfg.Aggregate(&backend); got != 10*ms {
		t.Fatalf("backend reports %v, want 10ms", got)
	}
	frontend := Hop{Service: "frontend", Duration: 40 * ms, Local: 2 * ms, LocalKnown: true,
		Calls: []Call{call("backend", 5, 30, 5*ms, cfg.Aggregate(&backend))}}
	if got := cfg.Aggregate(&frontend); got != 10*ms {
		t.Fatalf("frontend reports %v, want the backend's 10ms", got)
	}
	api := Hop{Service: "api", Duration: 50 * ms, Local: 1 * ms, LocalKnown: true,
		Calls: []Call{call("frontend", 3, 46, 3*ms, cfg.Aggregate(&frontend))}}
	for _, tc := range []struct {
		hop        *Hop
		cause      Cause
		peer       string
		wait, self time.Duration
	}{
		{&backend, CauseLocal, "", 10 * ms, 20 * ms},
		{&frontend, CauseRemote, "backend", 10 * ms, 15 * ms},
		{&api, CauseRemote, "frontend", 10 * ms, 7 * ms},
	} {
		t.Run(tc.hop.Service, func(t *testing.T) {
			d := cfg.Decide(tc.hop)
			if d.Cause != tc.cause || d.Peer != tc.peer || d.Wait != tc.wait || d.Self != tc.self {
				t.Fatalf("decision %s %q %v self %v, want %s %q %v self %v (%s)", d.Cause, d.Peer, d.Wait, d.Self, tc.cause, tc.peer, tc.wait, tc.self, d.Reason)
			}
		})
	}
}

// Figure 4.4: the root calls B and then C, one after the other; B's 10 ms
// comes from the link B→D, C's 5 ms from E's CPU. The root's own waits
// (local 2 ms, each link 1 ms) are not in the figure: chosen small. Max
// delegates to B only, Sum to B and C (and names the small waits above the
// floor too), Min to the smallest wait above the floor.
func TestFigure44Policies(t *testing.T) {
	root := Hop{Service: "A", Duration: 85 * ms, Local: 2 * ms, LocalKnown: true, Calls: []Call{
		call("B", 2, 40, 1*ms, 10*ms),
		call("C", 42, 80, 1*ms, 5*ms),
	}}
	b := Hop{Service: "B", Duration: 36 * ms, Local: 0, LocalKnown: true, Calls: []Call{call("D", 1, 35, 10*ms, 0)}}
	c := Hop{Service: "C", Duration: 36 * ms, Local: 0, LocalKnown: true, Calls: []Call{call("E", 1, 35, 0, 5*ms)}}
	e := Hop{Service: "E", Duration: 30 * ms, Local: 5 * ms, LocalKnown: true}

	for _, tc := range []struct {
		name    string
		cfg     Config
		hop     *Hop
		cause   Cause
		peer    string
		agg     time.Duration
		targets []Candidate
	}{
		{"max/root", Config{}, &root, CauseRemote, "B", 10 * ms, []Candidate{{CauseRemote, "B", 10 * ms}}},
		{"sum/root", Config{Policy: Sum}, &root, CauseRemote, "B", 2*ms + 11*ms + 6*ms, []Candidate{
			{CauseRemote, "B", 10 * ms}, {CauseRemote, "C", 5 * ms}, {CauseLocal, "", 2 * ms},
			{CauseNetwork, "B", 1 * ms}, {CauseNetwork, "C", 1 * ms}}},
		{"min/root", Config{Policy: Min, MinWait: 3 * ms}, &root, CauseRemote, "C", 5 * ms, []Candidate{{CauseRemote, "C", 5 * ms}}},
		{"max/B", Config{}, &b, CauseNetwork, "D", 10 * ms, []Candidate{{CauseNetwork, "D", 10 * ms}}},
		{"max/C", Config{}, &c, CauseRemote, "E", 5 * ms, []Candidate{{CauseRemote, "E", 5 * ms}}},
		{"max/E", Config{}, &e, CauseLocal, "", 5 * ms, []Candidate{{CauseLocal, "", 5 * ms}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.cfg.Decide(tc.hop)
			if d.Cause != tc.cause || d.Peer != tc.peer {
				t.Errorf("decision %s %q, want %s %q (%s)", d.Cause, d.Peer, tc.cause, tc.peer, d.Reason)
			}
			if !reflect.DeepEqual(d.Targets, tc.targets) {
				t.Errorf("targets %v, want %v", d.Targets, tc.targets)
			}
			if got := tc.cfg.Aggregate(tc.hop); got != tc.agg {
				t.Errorf("aggregate %v, want %v", got, tc.agg)
			}
		})
	}
}

// Parallel calls overlap: under Sum only the longest branch of a stage is
// on the request's path.
func TestSumParallelVsSequential(t *testing.T) {
	for _, tc := range []struct {
		name   string
		calls  []Call
		stages [][]int
		agg    time.Duration
		self   time.Duration
	}{
		{"sequential", []Call{call("B", 0, 10, 1*ms, 4*ms), call("C", 10, 20, 2*ms, 6*ms)}, [][]int{{0}, {1}}, 1*ms + 5*ms + 8*ms, 10 * ms},
		{"parallel", []Call{call("B", 0, 10, 1*ms, 4*ms), call("C", 2, 12, 2*ms, 6*ms)}, [][]int{{0, 1}}, 1*ms + 8*ms, 18 * ms},
		{"fan-out then call", []Call{call("C", 5, 15, 2*ms, 6*ms), call("B", 0, 10, 1*ms, 4*ms), call("D", 20, 25, 3*ms, 0)}, [][]int{{1, 0}, {2}}, 1*ms + 8*ms + 3*ms, 10 * ms},
		{"same peer twice in sequence", []Call{call("B", 0, 5, 1*ms, 2*ms), call("B", 6, 11, 1*ms, 2*ms)}, [][]int{{0}, {1}}, 1*ms + 3*ms + 3*ms, 20 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Hop{Service: "A", Duration: 30 * ms, Local: 1 * ms, LocalKnown: true, Calls: tc.calls}
			if got := Stages(h.Calls); !reflect.DeepEqual(got, tc.stages) {
				t.Errorf("stages %v, want %v", got, tc.stages)
			}
			if got := (Config{Policy: Sum}).Aggregate(&h); got != tc.agg {
				t.Errorf("sum %v, want %v", got, tc.agg)
			}
			if got := h.Self(); got != tc.self {
				t.Errorf("self %v, want %v", got, tc.self)
			}
		})
	}
	// Sum combines repeated calls to one peer across stages; Max keeps the
	// largest.
	h := Hop{Duration: 30 * ms, Calls: []Call{call("B", 0, 5, 1*ms, 2*ms), call("B", 6, 11, 1*ms, 3*ms)}}
	if got := h.Candidates(Sum); got[2] != (Candidate{CauseRemote, "B", 5 * ms}) {
		t.Errorf("sum candidates %v, want remote B 5ms", got)
	}
	if got := h.Candidates(Max); got[2] != (Candidate{CauseRemote, "B", 3 * ms}) {
		t.Errorf("max candidates %v, want remote B 3ms", got)
	}
}

func TestDecideThresholds(t *testing.T) {
	h := Hop{Service: "A", Duration: 40 * ms, Local: 3 * ms, LocalKnown: true, Calls: []Call{call("B", 0, 30, 3*ms, 3*ms)}}
	for _, tc := range []struct {
		name  string
		cfg   Config
		cause Cause
	}{
		{"ties stay local", Config{}, CauseLocal},
		{"below the floor", Config{MinWait: 4 * ms}, CauseNone},
		{"below 80% of the SLA", Config{SLA: 51 * ms}, CauseNone},
		{"at 80% of the SLA", Config{SLA: 50 * ms}, CauseLocal},
		{"custom SLA fraction", Config{SLA: 50 * ms, SLAFraction: 0.9}, CauseNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.cfg.Decide(&h); d.Cause != tc.cause {
				t.Fatalf("cause %s, want %s (%s)", d.Cause, tc.cause, d.Reason)
			}
		})
	}
	h.Calls[0].Net = 3*ms + 1
	if d := (Config{}).Decide(&h); d.Cause != CauseNetwork || d.Peer != "B" {
		t.Fatalf("network wait above local and remote: %s %q", d.Cause, d.Peer)
	}
}

func TestParsePolicy(t *testing.T) {
	for s, want := range map[string]Policy{"": Max, "max": Max, "sum": Sum, "min": Min} {
		if p, err := ParsePolicy(s); err != nil || p != want || (s != "" && p.String() != s) {
			t.Errorf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("avg"); !errors.Is(err, ErrPolicy) {
		t.Errorf("ParsePolicy(avg) error %v, want ErrPolicy", err)
	}
}

// span builds a span; ids are single bytes.
func span(trace, id, parent byte, service string, kind model.SpanKind, start, dur int, attrs ...model.KeyValue) model.Span {
	s := model.Span{Service: service, Kind: kind, Start: int64(start) * int64(ms), Duration: int64(dur) * int64(ms), Attributes: attrs}
	s.TraceID[15], s.SpanID[7] = trace, id
	if parent != 0 {
		s.ParentSpanID[7] = parent
	}
	return s
}

// waits are the attributes `rootline run` sets.
func waits(local, net, remote float64) []model.KeyValue {
	return []model.KeyValue{
		model.Float(model.AttrWaitLocalMs, local), model.Float(model.AttrWaitNetMs, net), model.Float(model.AttrWaitRemoteMs, remote),
	}
}

// Hops reads the waits `rootline run` put on spans, and derives them from
// the callee's span for a service instrumented in code (no wait attributes,
// local wait unknown); CLIENT spans under an INTERNAL span belong to the hop.
func TestHopsFromSpans(t *testing.T) {
	spans := []model.Span{
		// gateway (SDK, no waits) → [internal] → CLIENT → mid (rootline run) → CLIENT → leaf (rootline run)
		span(1, 1, 0, "gateway", model.KindServer, 0, 100),
		span(1, 2, 1, "gateway", model.KindInternal, 1, 98),
		span(1, 3, 2, "gateway", model.KindClient, 2, 90, model.String(model.AttrServerAddress, "mid:8080")),
		span(1, 4, 3, "mid", model.KindServer, 6, 80, waits(1, 7, 30)...),
		span(1, 5, 4, "mid", model.KindClient, 10, 70, append(waits(0, 7, 30)[1:], model.String(model.AttrServerAddress, "leaf:8080"))...),
		span(1, 6, 5, "leaf", model.KindServer, 13, 63, waits(30, 0, 0)...),
	}
	hops := Hops(ptrs(spans))
	if len(hops) != 3 {
		t.Fatalf("%d hops, want 3", len(hops))
	}
	byName := map[string]Hop{}
	for _, h := range hops {
		byName[h.Service] = h
	}
	gw := byName["gateway"]
	if gw.LocalKnown || len(gw.Calls) != 1 {
		t.Fatalf("gateway hop %+v: want one call and no local wait", gw)
	}
	// net = 90 − 80 (the client's time beyond mid's); remote = what mid
	// reported: max(1, 7, 30).
	if c := gw.Calls[0]; !c.Known || c.Net != 10*ms || c.Remote != 30*ms || c.Peer != "mid:8080" {
		t.Fatalf("gateway call %+v, want net 10ms remote 30ms to mid:8080", c)
	}
	d := Config{}.Decide(&gw)
	if d.Cause != CauseRemote || d.Peer != "mid:8080" || d.LocalKnown {
		t.Fatalf("gateway decision %+v", d)
	}
	if d := (Config{}).Decide(ptr(byName["mid"])); d.Cause != CauseRemote || d.Peer != "leaf:8080" {
		t.Fatalf("mid decision %+v", d)
	}
	if d := (Config{}).Decide(ptr(byName["leaf"])); d.Cause != CauseLocal || d.Wait != 30*ms {
		t.Fatalf("leaf decision %+v", d)
	}

	// A parent loop (malformed input) ends.
	loop := []model.Span{
		span(2, 1, 2, "a", model.KindServer, 0, 10),
		span(2, 2, 1, "a", model.KindClient, 0, 10),
	}
	if hops := Hops(append(ptrs(loop), nil)); len(hops) != 1 || len(hops[0].Calls) != 1 {
		t.Fatalf("loop hops %+v", hops)
	}
}

func ptr(h Hop) *Hop { return &h }

// A service not under `rootline run` gets its local wait from its kernel
// critical path: with 40 ms of run-queue and throttled time the gateway of
// TestHopsFromSpans acts on its own CPU instead of delegating.
func TestHopsWithLocalSource(t *testing.T) {
	spans := ptrs([]model.Span{
		span(1, 1, 0, "gateway", model.KindServer, 0, 100),
		span(1, 3, 1, "gateway", model.KindClient, 2, 50, model.String(model.AttrServerAddress, "mid:8080")),
		span(1, 4, 3, "mid", model.KindServer, 6, 40, waits(1, 0, 30)...),
	})
	path := &critpath.SpanPath{Waits: map[string]float64{critpath.Runqueue: 25, critpath.Throttled: 15, critpath.Running: 40}}
	if got := path.LocalWait(); got != 40*ms {
		t.Fatalf("LocalWait = %v, want 40ms", got)
	}
	local := func(s *model.Span) (time.Duration, bool) {
		if s.Service == "gateway" {
			return path.LocalWait(), true
		}
		return 0, false
	}
	var gw Hop
	for _, h := range HopsWith(spans, local) {
		if h.Service == "gateway" {
			gw = h
		}
	}
	if d := (Config{}).Decide(&gw); d.Cause != CauseLocal || d.Wait != 40*ms || !d.LocalKnown {
		t.Fatalf("gateway with a critical path: %+v", d)
	}
	for _, h := range Hops(spans) {
		if d := (Config{}).Decide(&h); h.Service == "gateway" && (d.Cause != CauseRemote || d.LocalKnown) {
			t.Fatalf("gateway without one: %+v", d)
		}
	}
}

func ptrs(spans []model.Span) []*model.Span {
	out := make([]*model.Span, len(spans))
	for i := range spans {
		out[i] = &spans[i]
	}
	return out
}

func TestHopOf(t *testing.T) {
	srv := span(1, 1, 0, "s", model.KindServer, 0, 10, waits(2, 0, 0)...)
	cl := span(1, 2, 1, "s", model.KindClient, 1, 5, waits(0, 1, 3)[1:]...)
	internal := span(1, 3, 1, "s", model.KindInternal, 1, 5)
	h, err := HopOf(&srv, []*model.Span{&cl, &internal})
	if err != nil || h.Local != 2*ms || !h.LocalKnown || len(h.Calls) != 1 || h.Calls[0].Remote != 3*ms || h.Calls[0].Peer != "unknown" {
		t.Fatalf("HopOf = %+v, %v", h, err)
	}
	if _, err := HopOf(&cl, nil); !errors.Is(err, ErrNotServer) {
		t.Fatalf("HopOf(CLIENT) error %v, want ErrNotServer", err)
	}
}
