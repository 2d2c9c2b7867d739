package critmetrics

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/store"
)

// TestTimeline checks the per-interval values against what the synthetic
// series were built from: events, their mean, bytes per second and the
// histogram bucket each interval's events fell in.
func TestTimeline(t *testing.T) {
	const n = 40
	s := &synth{service: "cart", container: "/cart", t0: time.Unix(1_800_000_000, 0), step: time.Second, rng: rand.New(rand.NewPCG(1, 1))}
	s.hist(kmetrics.RunqLatency, n, func(i int) float64 { return float64(10 * i) }, func(i int) float64 { return 1e-4 * float64(1+i%4) })
	s.hist(kmetrics.TCPSendBytes, n, func(i int) float64 { return 5 }, func(i int) float64 { return 1000 })
	s.counter(kmetrics.TLBFlushes, n, func(i int) float64 { return float64(i) })
	side := &synth{service: "cart", container: "/cart.sidecar", t0: s.t0, step: time.Second, rng: s.rng}
	side.counter(kmetrics.TLBFlushes, n, func(i int) float64 { return 1 })
	other := &synth{service: "db", container: "/db", t0: s.t0, step: time.Second, rng: s.rng}
	other.counter(kmetrics.TLBFlushes, n, func(i int) float64 { return 1 })
	series := append(append(s.out, side.out...), other.out...)

	tl, err := BuildTimeline(series, TimelineOptions{Buckets: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// One interval per push: the grid never cuts finer than the data.
	if tl.Intervals != n || tl.StepSeconds != 1 || !tl.From.Equal(s.t0) {
		t.Fatalf("grid: %d intervals of %gs from %s", tl.Intervals, tl.StepSeconds, tl.From)
	}
	var ctrs []string
	for _, c := range tl.Containers {
		ctrs = append(ctrs, c.Service+" "+c.Container)
	}
	if want := []string{"cart /cart", "cart /cart.sidecar", "db /db"}; !reflect.DeepEqual(ctrs, want) {
		t.Fatalf("containers %v, want %v", ctrs, want)
	}
	if !tl.Containers[1].Sidecar || tl.Containers[0].Sidecar {
		t.Errorf("sidecar flags: %+v", tl.Containers[:2])
	}
	got := map[string]TimelineMetric{}
	for _, m := range tl.Containers[0].Metrics {
		got[m.Metric] = m
	}
	runq := got["runq"]
	if runq.Unit != "s" || runq.Signal != SignalMean || len(runq.Values) != n || len(runq.Buckets) != n {
		t.Fatalf("runq: %+v", runq)
	}
	for i := range n {
		// Interval i holds the events of point i+1.
		ev, mean := float64(10*(i+1)), 1e-4*float64(1+(i+1)%4)
		if runq.Events[i] != ev {
			t.Errorf("runq interval %d: %g events, want %g", i, runq.Events[i], ev)
		}
		if v := runq.Values[i]; v == nil || math.Abs(*v-mean) > 1e-12 {
			t.Errorf("runq interval %d: mean %v, want %g", i, v, mean)
		}
		// The synthetic events of a mean m fall in the first bucket whose
		// bound is ≥ m.
		b := 0
		for runq.Bounds[b] < mean {
			b++
		}
		if runq.Buckets[i][b] != ev {
			t.Errorf("runq interval %d: bucket %d (≤ %g) holds %g, want %g", i, b, runq.Bounds[b], runq.Buckets[i][b], ev)
		}
	}
	if v := got["tcp_send_bytes"].Values[3]; got["tcp_send_bytes"].Unit != "By" || v == nil || *v != 5000 {
		t.Errorf("tcp_send_bytes: %v By/s, want 5000", v)
	}
	if tlb := got["tlb_flushes"]; tlb.Unit != "1" || tlb.Bounds != nil || *tlb.Values[9] != 10 {
		t.Errorf("tlb_flushes: %+v", tlb)
	}
	if _, err := json.Marshal(tl); err != nil {
		t.Errorf("encode: %v", err)
	}

	// Coarser buckets sum the intervals; filters keep one service or
	// container.
	tl, err = BuildTimeline(series, TimelineOptions{Buckets: 10, Service: "cart"})
	if err != nil {
		t.Fatal(err)
	}
	if tl.Intervals != 10 || tl.StepSeconds != 4 || len(tl.Containers) != 2 {
		t.Fatalf("10 buckets of cart: %d intervals of %gs, %d containers", tl.Intervals, tl.StepSeconds, len(tl.Containers))
	}
	if ev := tl.Containers[0].Metrics[0].Events[0]; ev != 10+20+30+40 {
		t.Errorf("first 4 s of runq: %g events, want 100", ev)
	}
	tl, err = BuildTimeline(series, TimelineOptions{Container: "/db", From: s.t0.Add(10 * time.Second).UnixNano(), To: s.t0.Add(20 * time.Second).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Containers) != 1 || tl.Containers[0].Service != "db" || tl.Intervals != 10 {
		t.Errorf("/db over 10 s: %+v", tl)
	}
	// A gap stays a gap.
	gap := store.MetricSeries{Name: kmetrics.TLBFlushes.ExportName(), Service: "gap", Kind: store.MetricSum,
		Labels: map[string]string{ContainerLabel: "/gap"}}
	for _, i := range []int{0, 1, 2, 8, 9, 10} {
		gap.Points = append(gap.Points, store.MetricPoint{Time: s.t0.Add(time.Duration(i) * time.Second).UnixNano(), Value: float64(i)})
	}
	tl, err = BuildTimeline([]store.MetricSeries{gap}, TimelineOptions{Buckets: 5})
	if err != nil {
		t.Fatal(err)
	}
	// Intervals of 2 s: [0,2] [2,4] … [8,10]; the series is interpolated
	// over its gap (a missed push, not a stop), so every interval has data.
	if tl.Intervals != 5 || tl.Containers[0].Metrics[0].Values[0] == nil || *tl.Containers[0].Metrics[0].Values[0] != 1 {
		t.Errorf("gap: %+v", tl.Containers[0].Metrics[0])
	}

	for _, tc := range []struct {
		opts TimelineOptions
		want error
	}{
		{TimelineOptions{Service: "nobody"}, ErrNoData},
		{TimelineOptions{From: s.t0.UnixNano(), To: s.t0.Add(500 * time.Millisecond).UnixNano()}, ErrTooShort},
	} {
		if _, err := BuildTimeline(series, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.opts, err, tc.want)
		}
	}
	if _, err := BuildTimeline(series, TimelineOptions{Buckets: MaxTimelineBuckets + 1}); err == nil {
		t.Error("too many buckets accepted")
	}
}

// TestAnalyzeOneService checks that a service's result does not depend on
// which services are asked for.
func TestAnalyzeOneService(t *testing.T) {
	series := append(viperProbeLike("cart", "/cart", 60, 4), viperProbeLike("db", "/db", 80, 5)...)
	all, err := Analyze(series, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	one, err := Analyze(series, Options{Seed: 1, Services: []string{"cart"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Services) != 1 || one.Services[0].Name != "cart" || len(all.Services) != 2 {
		t.Fatalf("services: %d and %d", len(one.Services), len(all.Services))
	}
	a, _ := json.Marshal(all.Services[0])
	o, _ := json.Marshal(one.Services[0])
	if string(a) != string(o) || !reflect.DeepEqual(all.Critical["cart"], one.Critical["cart"]) {
		t.Errorf("cart alone differs:\n%s\n%s", o, a)
	}
	if _, err := Analyze(series, Options{Services: []string{"nobody"}}); !errors.Is(err, ErrNoData) {
		t.Errorf("unknown service: %v", err)
	}
}
