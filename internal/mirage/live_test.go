package mirage

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rootline/rootline/internal/model"
)

// gather returns the registry's samples as "name{k=v,...}" → value (gauges;
// histograms give their sample count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
				out[key+"_sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func TestLiveDecisionMetrics(t *testing.T) {
	l := NewLive(Config{}, 10*time.Second)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	// Requests of "mid": its call to leaf:80 reports a 20 ms remote wait,
	// its own CPU wait is 1 ms, its link 2 ms. The CLIENT span ends (and
	// is emitted) before its SERVER span.
	for i := range 10 {
		srv := span(byte(i+1), 1, 0, "mid", model.KindServer, 0, 40, waits(1, 2, 20)...)
		cl := span(byte(i+1), 2, 1, "mid", model.KindClient, 5, 30, append(waits(0, 2, 20)[1:], model.String(model.AttrServerAddress, "leaf:80"))...)
		l.Emit(&cl)
		l.Emit(&srv)
	}
	got := gather(t, reg)
	for key, want := range map[string]float64{
		`rootline_bottleneck{cause=remote,peer=leaf:80,service=mid}`:  1,
		`rootline_bottleneck{cause=network,peer=leaf:80,service=mid}`: 0,
		`rootline_bottleneck{cause=local,peer=,service=mid}`:          0,
		`rootline_bottleneck_window_requests{service=mid}`:            10,
		`rootline_local_wait_seconds{service=mid}`:                    10,
		`rootline_remote_wait_seconds{peer=leaf:80,service=mid}`:      10,
		`rootline_remote_wait_seconds{peer=leaf:80,service=mid}_sum`:  0.2,
		`rootline_net_wait_seconds{peer=leaf:80,service=mid}_sum`:     0.02,
	} {
		if v, ok := got[key]; !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}

	// The window slides: 10 s later the same service saturates its own CPU
	// and the decision moves to local.
	now = now.Add(11 * time.Second)
	for i := range 5 {
		srv := span(byte(100+i), 1, 0, "mid", model.KindServer, 0, 40, waits(25, 0, 0)...)
		l.Emit(&srv)
	}
	got = gather(t, reg)
	if got[`rootline_bottleneck{cause=local,peer=,service=mid}`] != 1 || got[`rootline_bottleneck_window_requests{service=mid}`] != 5 {
		t.Errorf("after the window slid: %v", got)
	}
	if _, ok := got[`rootline_bottleneck{cause=remote,peer=leaf:80,service=mid}`]; ok {
		t.Errorf("a peer with no call in the window still has a decision gauge: %v", got)
	}
	if s := l.Window().Summary("mid", now); s.Hops != 5 || s.Decision.Cause != CauseLocal || s.Decision.Wait != 25*ms {
		t.Errorf("summary %+v", s)
	}

	// CLIENT spans whose SERVER span never comes are dropped after a while.
	cl := span(200, 2, 1, "mid", model.KindClient, 0, 1)
	l.Emit(&cl)
	now = now.Add(pendingTTL + time.Second)
	srv := span(201, 1, 0, "mid", model.KindServer, 0, 1)
	l.Emit(&srv)
	if l.Orphans.Load() != 1 || len(l.pending) != 0 {
		t.Errorf("orphans %d pending %d, want 1 and 0", l.Orphans.Load(), len(l.pending))
	}
}

// Peers beyond maxPeers share the label "other".
func TestWindowBoundsPeers(t *testing.T) {
	w := NewWindow(Config{}, time.Second)
	now := time.Unix(5, 0)
	for i := range maxPeers + 10 {
		h := Hop{Service: "fan", Duration: 10 * ms, Calls: []Call{call(strings.Repeat("p", i+1), 0, 1, 0, 0)}}
		w.Add(&h, now)
	}
	s := w.Summary("fan", now)
	if n := len(s.Candidates); n != 1+2*(maxPeers+1) {
		t.Fatalf("%d candidates, want %d", n, 1+2*(maxPeers+1))
	}
	if w.Summary("fan", now.Add(2*time.Second)).Hops != 0 {
		t.Fatal("hops outlived the window")
	}
}

func TestAdvise(t *testing.T) {
	local := Decision{Cause: CauseLocal, Wait: 6 * ms, Self: 10 * ms, Duration: 30 * ms}
	for _, tc := range []struct {
		name     string
		d        Decision
		r        Resources
		target   float64
		scaling  Scaling
		from, to float64
		says     string
	}{
		// share 0.6, target 0.1: ×(0.9/0.4) = ×2.25; most of the wait was
		// throttling: the 0.5-core quota becomes 1.125, rounded up to 1.2.
		{"throttled", local, Resources{Replicas: 2, CPUQuota: 0.5, Throttled: 5 * ms}, 0, ScaleVertical, 0.5, 1.2, "raise the quota to 1.2 cores"},
		// The same wait without throttling: 2 replicas × 2.25 → 5.
		{"run queue", local, Resources{Replicas: 2, CPUQuota: 0.5, Throttled: 1 * ms}, 0, ScaleHorizontal, 2, 5, "run 5 replicas instead of 2"},
		{"no quota", local, Resources{Replicas: 1}, 0, ScaleHorizontal, 1, 3, "run 3 replicas instead of 1"},
		{"replicas unknown", local, Resources{}, 0, ScaleHorizontal, 0, 0, "run ×2.25 as many replicas"},
		{"quota unknown", local, Resources{Replicas: 2, Throttled: 5 * ms}, 0, ScaleVertical, 0, 0, "raise the quota ×2.25"},
		// A higher target asks for less: ×(0.6/0.4) = ×1.5 → 3 of 2.
		{"target 0.4", local, Resources{Replicas: 2}, 0.4, ScaleHorizontal, 2, 3, "to 40%"},
		{"capped", Decision{Cause: CauseLocal, Wait: 99 * ms, Self: 100 * ms}, Resources{Replicas: 3}, 0, ScaleHorizontal, 3, 12, "12 replicas instead of 3 (×4.00) as a first step toward a 10% wait (the estimate, ×90.0, is capped at ×4 per step)"},
		{"within target", Decision{Cause: CauseLocal, Wait: 1 * ms, Self: 20 * ms}, Resources{}, 0, ScaleNone, 0, 0, "within the 10% target"},
		{"network", Decision{Cause: CauseNetwork, Peer: "db:5432", Wait: 8 * ms}, Resources{}, 0, ScaleNetwork, 0, 0, "link to db:5432"},
		{"remote", Decision{Cause: CauseRemote, Peer: "leaf", Wait: 8 * ms}, Resources{}, 0, ScaleDelegate, 0, 0, "belongs to leaf"},
		{"none", Decision{Cause: CauseNone, Reason: "no wait reaches 1ms"}, Resources{}, 0, ScaleNone, 0, 0, "no bottleneck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Advise("svc", tc.d, tc.r, tc.target)
			if a.Scaling != tc.scaling || math.Abs(a.From-tc.from) > 1e-9 || math.Abs(a.To-tc.to) > 1e-9 {
				t.Errorf("advice %s %v→%v, want %s %v→%v (%s)", a.Scaling, a.From, a.To, tc.scaling, tc.from, tc.to, a.Explanation)
			}
			if !strings.Contains(a.Explanation, tc.says) || !strings.HasPrefix(a.Explanation, "svc: ") {
				t.Errorf("explanation %q does not say %q", a.Explanation, tc.says)
			}
		})
	}
}

// Under Sum every resource above the floor is chosen: several gauges are 1.
func TestLiveSumPolicy(t *testing.T) {
	l := NewLive(Config{Policy: Sum, MinWait: 2 * ms}, 0)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	// Two sequential calls: B's link costs 4 ms, C reports 6 ms below it;
	// the hop's own CPU wait of 1 ms is below the floor.
	srv := span(1, 1, 0, "A", model.KindServer, 0, 50, waits(1, 0, 0)...)
	b := span(1, 2, 1, "A", model.KindClient, 1, 20, append(waits(0, 4, 0)[1:], model.String(model.AttrServerAddress, "B"))...)
	c := span(1, 3, 1, "A", model.KindClient, 22, 45, append(waits(0, 1, 6)[1:], model.String(model.AttrServerAddress, "C"))...)
	l.Emit(&b)
	l.Emit(&c)
	l.Emit(&srv)
	got := gather(t, reg)
	for key, want := range map[string]float64{
		`rootline_bottleneck{cause=network,peer=B,service=A}`: 1,
		`rootline_bottleneck{cause=remote,peer=C,service=A}`:  1,
		`rootline_bottleneck{cause=local,peer=,service=A}`:    0,
		`rootline_bottleneck{cause=network,peer=C,service=A}`: 0,
		`rootline_bottleneck{cause=remote,peer=B,service=A}`:  0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
}

// BenchmarkLiveEmit is the cost a span adds on the path that emits it (the
// supervisor's tracing thread, the datapath's reader): a SERVER span with two
// CLIENT spans.
func BenchmarkLiveEmit(b *testing.B) {
	l := NewLive(Config{}, 0)
	srv := span(1, 1, 0, "A", model.KindServer, 0, 50, waits(1, 0, 0)...)
	c1 := span(1, 2, 1, "A", model.KindClient, 1, 20, append(waits(0, 4, 0)[1:], model.String(model.AttrServerAddress, "B"))...)
	c2 := span(1, 3, 1, "A", model.KindClient, 22, 45, append(waits(0, 1, 6)[1:], model.String(model.AttrServerAddress, "C"))...)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		srv.TraceID[0], c1.TraceID[0], c2.TraceID[0] = byte(i), byte(i), byte(i)
		l.Emit(&c1)
		l.Emit(&c2)
		l.Emit(&srv)
	}
}

// Spans come from the tracer while Prometheus scrapes (run with -race).
func TestLiveConcurrentScrape(t *testing.T) {
	l := NewLive(Config{}, 0)
	reg := prometheus.NewRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				srv := span(byte(i), 1, 0, "A", model.KindServer, 0, 50, waits(float64(g), 0, 0)...)
				srv.TraceID[0] = byte(g)
				cl := span(byte(i), 2, 1, "A", model.KindClient, 1, 20, append(waits(0, 4, 0)[1:], model.String(model.AttrServerAddress, "B"))...)
				cl.TraceID[0] = byte(g)
				l.Emit(&cl)
				l.Emit(&srv)
			}
		}()
	}
	for range 20 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		<-done
	}
	if got := gather(t, reg)[`rootline_bottleneck_window_requests{service=A}`]; got != 800 {
		t.Fatalf("%v requests in the window, want 800", got)
	}
}
