package diagnosis

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
)

// TestDiagnose: a shop's cart slows down in several ways; the verdict names
// cart and the cause its critical paths (or its spans) show, and says what
// is missing when there is no kernel evidence.
func TestDiagnose(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cartMs and dbMs are the incident's cart exclusive time and
		// database call (baseline: 6 and 3 ms).
		cartMs, dbMs float64
		// path gives cart's slow SERVER spans a path (nil: no snapshot).
		path        func(s *model.Span) *critpath.SpanPath
		wantService string
		wantCause   string
		wantMissing string
		wantRunner  string
		// wantEvidence: an evidence line says so.
		wantEvidence string
	}{
		{name: "lock", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseLock, wantRunner: CauseCPU,
			path: func(s *model.Span) *critpath.SpanPath {
				// 8 ms of its own work, 62 ms blocked on a futex whose
				// holder ran, then the database call.
				return segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0, critpath.Network, "", 3.0)
			}},
		{name: "lock behind a convoy", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseLock, wantRunner: CauseCPU,
			path: func(s *model.Span) *critpath.SpanPath {
				// The holder works and, in the convoy, waits for a CPU
				// behind the waiters, its process's threads: still the lock.
				p := segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 30.0,
					critpath.Runqueue, critpath.Lock, 32.0, critpath.Network, "", 3.0)
				p.Segments[2].OwnQueueMs = 32
				return p
			}},
		{name: "lock holder behind other programs", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseCPUContention, wantRunner: CauseLock,
			wantEvidence: "the CPU ran: sh (pid 900, another process)",
			path: func(s *model.Span) *critpath.SpanPath {
				// The holder waits for a CPU that other programs hold
				// (a noisy neighbour), 8 ms of it behind its own
				// process's threads: the contention's, but those 8 ms.
				p := segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 12.0,
					critpath.Runqueue, critpath.Lock, 50.0, critpath.Network, "", 3.0)
				p.Segments[2].OwnQueueMs = 8
				p.Segments[2].HeldBy = []critpath.HolderJSON{{PID: 900, Comm: "sh", Ms: 40}, {PID: 100, Comm: "cart", Ms: 8, Target: true}}
				return p
			}},
		{name: "lock holder throttled", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseCPUThrottle, wantRunner: CauseLock,
			path: func(s *model.Span) *critpath.SpanPath {
				// Blocked on a futex whose holder spent most of that time
				// held off by the cgroup's quota: the quota's doing.
				return segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 20.0,
					critpath.Throttled, critpath.Lock, 42.0, critpath.Network, "", 3.0)
			}},
		{name: "lock holder in a GC pause", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseGC,
			path: func(s *model.Span) *critpath.SpanPath {
				return segmentsPath(s, critpath.Running, "", 8.0, critpath.GC, critpath.Lock, 50.0,
					critpath.Running, critpath.Lock, 12.0, critpath.Network, "", 3.0)
			}},
		{name: "future completed by a thread in disk I/O", cartMs: 70, dbMs: 3, wantService: "cart", wantCause: CauseDisk,
			path: func(s *model.Span) *critpath.SpanPath {
				return segmentsPath(s, critpath.Running, "", 8.0, critpath.Disk, critpath.Lock, 55.0,
					critpath.Sleep, critpath.Lock, 7.0, critpath.Network, "", 3.0)
			}},
		{name: "cpu quota", cartMs: 45, dbMs: 3, wantService: "cart", wantCause: CauseCPUThrottle, wantRunner: CauseCPU,
			path: func(s *model.Span) *critpath.SpanPath {
				return segmentsPath(s, critpath.Running, "", 10.0, critpath.Throttled, "", 35.0, critpath.Network, "", 3.0)
			}},
		{name: "cpu", cartMs: 50, dbMs: 3, wantService: "cart", wantCause: CauseCPU,
			path: func(s *model.Span) *critpath.SpanPath {
				return segmentsPath(s, critpath.Running, "", 49.0, critpath.Runqueue, "", 1.0, critpath.Network, "", 3.0)
			}},
		{name: "mostly unseen", cartMs: 50, dbMs: 3, wantService: "cart", wantCause: CauseUnknown, wantMissing: "user-space waits",
			path: func(s *model.Span) *critpath.SpanPath {
				return segmentsPath(s, critpath.Running, "", 5.0, critpath.Unknown, "", 45.0, critpath.Network, "", 3.0)
			}},
		{name: "database without spans", cartMs: 6, dbMs: 60, wantService: "cart", wantCause: CauseDownstream},
		{name: "no kernel evidence", cartMs: 50, dbMs: 3, wantService: "cart", wantCause: CauseUnknown, wantMissing: "kernel critical paths"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t)
			// A minute of normal traffic, then the fault, every 200 ms.
			byTrace, _, end := shopIncident(t, st, tc.cartMs, tc.dbMs, true)
			onset := t0.Add(60 * time.Second)
			d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(),
				Now: func() time.Time { return time.Unix(0, end).Add(time.Second) }}
			if tc.path != nil {
				d.Paths = &fakePaths{spans: byTrace, path: func(s *model.Span) *critpath.SpanPath {
					if s.Service == "cart" && s.Kind == model.KindServer && s.IsAnomalous() {
						return tc.path(s)
					}
					return nil
				}}
			} else {
				d.Paths = &fakePaths{spans: byTrace, path: func(*model.Span) *critpath.SpanPath { return nil }}
			}
			inc := &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: end}
			v, err := d.Diagnose(ctx, inc)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("verdict: %s %s %.2f runner-up %+v\nevidence: %s\nmissing: %s", v.Service, v.Cause, v.Confidence, v.RunnerUp,
				strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
			if v.Service != tc.wantService || v.Cause != tc.wantCause {
				t.Fatalf("verdict %s/%s, want %s/%s", v.Service, v.Cause, tc.wantService, tc.wantCause)
			}
			if v.SlowTraces != 30 || v.BaseTraces != 60 {
				t.Errorf("compared %d slow and %d baseline traces, want 30 and 60", v.SlowTraces, v.BaseTraces)
			}
			if v.ExampleTraceID == "" {
				t.Error("no example trace")
			}
			if tc.wantMissing != "" && !strings.Contains(strings.Join(v.Missing, "\n"), tc.wantMissing) {
				t.Errorf("missing %q does not say %q", v.Missing, tc.wantMissing)
			}
			if tc.wantEvidence != "" && !strings.Contains(strings.Join(v.Evidence, "\n"), tc.wantEvidence) {
				t.Errorf("evidence %q does not say %q", v.Evidence, tc.wantEvidence)
			}
			if tc.wantRunner != "" && (v.RunnerUp == nil || v.RunnerUp.Cause != tc.wantRunner) {
				t.Errorf("runner-up %+v, want cause %s", v.RunnerUp, tc.wantRunner)
			}
			if tc.path != nil && tc.wantCause != CauseDownstream {
				if v.PathSpans != 20 {
					t.Errorf("%d spans with a path read, want MaxPaths = 20", v.PathSpans)
				}
				if (v.Confidence <= 0) != (tc.wantCause == CauseUnknown) || v.Confidence > 1 {
					t.Errorf("confidence %v out of (0, 1]", v.Confidence)
				}
			}
		})
	}
}

// TestPathCauses: a path's time by cause counts a wait behind a holder held
// off by a resource as that resource, as the verdict does.
func TestPathCauses(t *testing.T) {
	s := &model.Span{Start: 0, Duration: 100e6}
	p := segmentsPath(s, critpath.Running, "", 10.0, critpath.Throttled, critpath.Lock, 50.0,
		critpath.Running, critpath.Lock, 20.0, critpath.Runqueue, critpath.Lock, 10.0, critpath.Sleep, "", 10.0)
	// The holder's wait for a CPU: 4 ms behind its own process's threads
	// (the lock's), 6 behind other programs (contention).
	p.Segments[3].OwnQueueMs = 4
	got := PathCauses(p)
	want := map[string]float64{CauseCPU: 10, CauseCPUThrottle: 50, CauseLock: 24, CauseCPUContention: 6, CauseUnknown: 10}
	for c, ms := range want {
		if got[c] != ms {
			t.Errorf("%s: %v ms, want %v (all: %v)", c, got[c], ms, got)
		}
	}
	// Without segments, from the path's waits.
	p.Segments = nil
	p.Waits = map[string]float64{critpath.Lock: 80, critpath.Running: 20}
	if got := PathCauses(p); got[CauseLock] != 80 || got[CauseCPU] != 20 {
		t.Errorf("from waits: %v", got)
	}
}

// TestOwnQueue: run-queue time behind the process's own threads counts as
// its own CPU demand (cpu), the rest as contention, in proportion where
// only part of a segment is in the span's exclusive time.
func TestOwnQueue(t *testing.T) {
	p := &critpath.SpanPath{Segments: []critpath.SegmentJSON{
		{Start: 0, End: 20e6, Ms: 20, State: critpath.Running},
		{Start: 20e6, End: 60e6, Ms: 40, State: critpath.Runqueue, OwnQueueMs: 30},
		{Start: 60e6, End: 100e6, Ms: 40, State: critpath.Runqueue, OwnQueueMs: 10},
	}}
	w := newWaitTally()
	// The span's exclusive time leaves out 80-100 (a child's).
	w.add(p, []interval{{0, 80e6}})
	want := map[string]float64{critpath.Running: 20, OwnQueue: 30 + 5, critpath.Runqueue: 10 + 15}
	for k, ms := range want {
		if math.Abs(w.by[k]-ms) > 1e-9 {
			t.Errorf("%s: %v ms, want %v (all: %v)", k, w.by[k], ms, w.by)
		}
	}
	shares, _ := causesOf(w.by, 0)
	if shares[0].cause != CauseCPU || math.Abs(shares[0].ms-55) > 1e-9 || shares[1].cause != CauseCPUContention {
		t.Errorf("causes %+v, want cpu 55 ms first, then cpu-contention", shares)
	}
}

// TestObserverQueue: run-queue time while the CPU ran Rootline's own
// processes is what observing cost: runqueue-rootline, no cause; the rest
// behind other programs stays contention; in proportion where only part
// of a segment is in the span's exclusive time, and never more than the
// segment's time not behind its own threads. A lock holder's wait behind
// Rootline is not contention either.
func TestObserverQueue(t *testing.T) {
	held := func(obs, other float64) []critpath.HolderJSON {
		return []critpath.HolderJSON{{PID: 9, Comm: "rootline", Ms: obs, Observer: true}, {PID: 8, Comm: "envoy", Ms: other}}
	}
	p := &critpath.SpanPath{Segments: []critpath.SegmentJSON{
		{Start: 0, End: 20e6, Ms: 20, State: critpath.Running},
		{Start: 20e6, End: 60e6, Ms: 40, State: critpath.Runqueue, OwnQueueMs: 10, HeldBy: held(20, 10)},
		// Half of it in the exclusive time: 10 of its 20 ms behind Rootline.
		{Start: 60e6, End: 100e6, Ms: 40, State: critpath.Runqueue, HeldBy: held(20, 20)},
		// A holder's list longer than the wait not behind its own: capped.
		{Start: 100e6, End: 110e6, Ms: 10, State: critpath.Runqueue, OwnQueueMs: 6, HeldBy: held(8, 0)},
		// A lock holder waiting for a CPU behind Rootline.
		{Start: 110e6, End: 120e6, Ms: 10, State: critpath.Runqueue, Wait: critpath.Lock, HeldBy: held(4, 6)},
	}}
	w := newWaitTally()
	w.add(p, []interval{{0, 80e6}, {100e6, 120e6}})
	want := map[string]float64{critpath.Running: 20, OwnQueue: 10 + 6, ObserverQueue: 20 + 10 + 4 + 4, critpath.Runqueue: 10 + 10 + 6}
	for k, ms := range want {
		if math.Abs(w.by[k]-ms) > 1e-9 {
			t.Errorf("%s: %v ms, want %v (all: %v)", k, w.by[k], ms, w.by)
		}
	}
	if StateCause(ObserverQueue) != CauseUnknown {
		t.Errorf("runqueue-rootline points to %s, want unknown", StateCause(ObserverQueue))
	}
	if got := w.describeHeld(); !strings.Contains(got, "rootline (pid 9, Rootline's own, not counted as a cause)") {
		t.Errorf("held: %q", got)
	}
}

// The answer's wait in a span's own socket (a CLIENT child's
// rootline.wait.response_socket_ms) is the span's own time: its path's
// states there say why it read late.
func TestSplitSpanResponseWait(t *testing.T) {
	sp := &model.Span{SpanID: model.SpanID{1}, Service: "f", Kind: model.KindServer, Start: 0, Duration: 100}
	call := &model.Span{SpanID: model.SpanID{2}, ParentSpanID: sp.SpanID, Service: "f", Kind: model.KindClient, Start: 20, Duration: 60,
		Attributes: []model.KeyValue{model.Float(model.AttrWaitResponseSocketMs, 30e-6)}} // 30 ns
	got := splitSpan(sp, map[model.SpanID][]*model.Span{sp.SpanID: {call}}, nil)
	want := []interval{{0, 20}, {50, 100}}
	if !slices.Equal(got.own, want) || !slices.Equal(got.untraced, []interval{{20, 50}}) {
		t.Errorf("own %v untraced %v, want own %v (the answer waited 50-80 in f's socket) and untraced [{20 50}]", got.own, got.untraced, want)
	}
}

// A call to a dependency that sends spans for other calls, with none under
// it, did not reach it (a link that held or dropped it): not the time of an
// unseen dependency. A dependency that never sends spans stays untraced.
func TestUntracedGrowthReached(t *testing.T) {
	id := byte(0)
	tr := func(start, dur int64, addr string, reached bool) []*model.Span {
		id++
		root := &model.Span{TraceID: model.TraceID{id}, SpanID: model.SpanID{id, 1}, Service: "f", Kind: model.KindServer, Start: start, Duration: dur + 2}
		call := &model.Span{TraceID: root.TraceID, SpanID: model.SpanID{id, 2}, ParentSpanID: root.SpanID, Service: "f", Kind: model.KindClient,
			Start: start + 1, Duration: dur, Attributes: []model.KeyValue{model.String(model.AttrServerAddress, addr)}}
		spans := []*model.Span{root, call}
		if reached {
			spans = append(spans, &model.Span{TraceID: root.TraceID, SpanID: model.SpanID{id, 3}, ParentSpanID: call.SpanID, Service: "j",
				Kind: model.KindServer, Start: start + 1, Duration: dur})
		}
		return spans
	}
	slow := func(s []*model.Span) []*model.Span {
		s[0].Attributes = append(s[0].Attributes, model.Bool(model.AttrAnomaly, true))
		return s
	}
	const onset = 1000
	// j sends spans (before the onset); after it, f's calls to j have none
	// and take 500 ns longer.
	traces := [][]*model.Span{tr(0, 10, "j:80", true), tr(10, 10, "j:80", true), slow(tr(onset, 510, "j:80", false)), slow(tr(onset+1, 510, "j:80", false))}
	if g := untracedGrowth(traces, onset, "f"); g != 0 {
		t.Errorf("calls to j (which sends spans) grew %.6f ms as untraced; want 0: the link did not deliver them", g)
	}
	// x never sends spans: its growth is the dependency's.
	traces = [][]*model.Span{tr(0, 10, "x:80", false), tr(10, 10, "x:80", false), slow(tr(onset, 510, "x:80", false)), slow(tr(onset+1, 510, "x:80", false))}
	if g := untracedGrowth(traces, onset, "f"); g != 500e-6 {
		t.Errorf("calls to x (no spans ever) grew %.6f ms as untraced; want 0.0005", g)
	}
}

// TestDiagnoseOthersPathsDoNotCrowd: when a capture of another process
// covers the newest slow traces (their paths are the frontend's only) and
// the culprit's capture the older ones, the verdict reads the culprit's
// paths: traces without them do not count towards MaxPaths.
func TestDiagnoseOthersPathsDoNotCrowd(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	byTrace, slowCart, end := shopIncident(t, st, 50, 3, true)
	cartCaptured := map[model.TraceID]bool{}
	for _, s := range slowCart[:8] { // the oldest 8 slow requests
		cartCaptured[s.TraceID] = true
	}
	onset := t0.Add(60 * time.Second)
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(),
		Now: func() time.Time { return time.Unix(0, end).Add(time.Second) }}
	d.Paths = &fakePaths{spans: byTrace, path: func(s *model.Span) *critpath.SpanPath {
		switch {
		case s.Start < onset.UnixNano() || s.Kind != model.KindServer:
			return nil
		case s.Service == "cart" && cartCaptured[s.TraceID]:
			return segmentsPath(s, critpath.Running, "", 49.0, critpath.Runqueue, "", 1.0, critpath.Network, "", 3.0)
		case s.Service == "frontend" && !cartCaptured[s.TraceID]:
			return segmentsPath(s, critpath.Running, "", 2.0)
		}
		return nil
	}}
	inc := &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: end}
	v, err := d.Diagnose(ctx, inc)
	if err != nil {
		t.Fatal(err)
	}
	if v.Service != "cart" || v.Cause != CauseCPU || v.PathSpans != 8 {
		t.Fatalf("verdict %s/%s from %d paths, want cart/cpu from the 8 of cart's captured spans\nevidence: %s\nmissing: %s",
			v.Service, v.Cause, v.PathSpans, strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
	}
}
