package diagnosis

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// kernelSeries writes what the agents push for n containers, one point a
// second over [from, to): the run-queue histogram with the agent's 25
// bounds, retransmissions, drops and throttled time, and the node's steal
// and busy time.
func kernelSeries(t testing.TB, st store.MetricWriter, n int, from, to time.Time) {
	t.Helper()
	bounds := make([]float64, 25)
	for i := range bounds {
		bounds[i] = float64(uint64(2)<<i) / 1e9
	}
	var pts []store.MetricPoint
	flush := func() {
		if err := st.WriteMetrics(context.Background(), pts); err != nil {
			t.Fatal(err)
		}
		pts = pts[:0]
	}
	for at, i := from, 0; at.Before(to); at, i = at.Add(time.Second), i+1 {
		ts := at.UnixNano()
		for c := range n {
			svc := fmt.Sprint("svc", c)
			labels := map[string]string{"container": "/rootline-demo/" + svc, "host.name": "vm"}
			buckets := make([]uint64, 26)
			buckets[20] = uint64(100 * i)
			pts = append(pts,
				store.MetricPoint{Name: metricRunq, Service: svc, Kind: store.MetricHistogram, Unit: "s", Labels: labels, StartTime: from.UnixNano(), Time: ts,
					Count: uint64(100 * i), Sum: float64(i) / 10, Bounds: bounds, Buckets: buckets},
				store.MetricPoint{Name: metricRetransmits, Service: svc, Kind: store.MetricSum, Labels: labels, Time: ts, Value: float64(i / 7)},
				store.MetricPoint{Name: metricDrops, Service: svc, Kind: store.MetricSum, Labels: map[string]string{"container": "/rootline-demo/" + svc, "reason": "TCP_FLAGS"}, Time: ts, Value: float64(i / 11)},
				store.MetricPoint{Name: metricThrottled, Service: svc, Kind: store.MetricSum, Unit: "s", Labels: labels, Time: ts, Value: float64(i) / 100})
		}
		node := map[string]string{"host.name": "vm", "container": "node"}
		pts = append(pts, store.MetricPoint{Name: metricSteal, Kind: store.MetricSum, Unit: "s", Labels: node, Time: ts, Value: float64(i) / 50},
			store.MetricPoint{Name: metricBusy, Kind: store.MetricSum, Unit: "s", Labels: node, Time: ts, Value: float64(i)})
		if len(pts) > 4000 {
			flush()
		}
	}
	flush()
}

// readAll is what a verdict reads of the kernel's and the node's counters
// when the calls into a service grew: the node's steal, the links of its
// peers and their callers, and the culprit's throttling.
func readAll(ctx context.Context, mr store.MetricReader, from, onset, to time.Time) (map[string]*linkEvidence, nodeRunq, throttleEvidence, []stealEvidence, error) {
	steal, err := readSteal(ctx, mr, from, onset, to)
	if err != nil {
		return nil, nodeRunq{}, throttleEvidence{}, nil, err
	}
	links, node, err := readLinks(ctx, mr, []string{"svc1", "svc2", "svc3"}, from, onset, to)
	if err != nil {
		return nil, nodeRunq{}, throttleEvidence{}, nil, err
	}
	thr, err := readThrottle(ctx, mr, "svc2", from, onset, to)
	return links, node, thr, steal, err
}

func TestIncrementalMetricsReadsAsTheStore(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	onset := t0.Add(2 * time.Minute)
	from := t0
	kernelSeries(t, st, 4, from, onset.Add(90*time.Second))
	var vs VerdictState
	// Verdicts 10 s apart, then one whose window ends earlier (the
	// incident closed at its last anomaly): each reads what the store
	// would answer from scratch.
	for _, to := range []time.Time{onset.Add(5 * time.Second), onset.Add(15 * time.Second), onset.Add(25 * time.Second), onset.Add(80 * time.Second), onset.Add(40 * time.Second)} {
		wl, wn, wt, ws, err := readAll(ctx, st, from, onset, to)
		if err != nil {
			t.Fatal(err)
		}
		gl, gn, gt, gs, err := readAll(ctx, incrementalMetrics{mr: st, st: &vs, now: to.UnixNano()}, from, onset, to)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gl, wl) || gn != wn || !reflect.DeepEqual(gt, wt) || !reflect.DeepEqual(gs, ws) {
			t.Fatalf("to onset+%v: incremental %+v %+v %+v %+v, the store %+v %+v %+v %+v", to.Sub(onset), gl["svc2"], gn, gt, gs, wl["svc2"], wn, wt, ws)
		}
		if wn.during.count == 0 || wt.during <= 0 || wl["svc2"].retransBefore == 0 {
			t.Fatalf("to onset+%v: nothing read: %+v %+v %+v", to.Sub(onset), wn, wt, wl["svc2"])
		}
	}
	// Only the series of the same window are kept: a window that starts
	// elsewhere is read from scratch.
	if got := vs.metrics[metricRunq]; got == nil || got.from != from.UnixNano() || got.to != onset.Add(80*time.Second).UnixNano() || len(got.series) != 4 {
		t.Fatalf("kept run-queue reads: %+v", got)
	}
	if _, _, _, _, err := readAll(ctx, incrementalMetrics{mr: st, st: &vs, now: onset.Add(10 * time.Second).UnixNano()}, from.Add(time.Second), onset, onset.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := vs.metrics[metricRunq]; got.from != from.Add(time.Second).UnixNano() {
		t.Fatalf("kept run-queue reads of another window: %+v", got)
	}
	// Past metricKeepLimit points a metric is not kept, and reads as the
	// store all the same.
	defer func(n int) { metricKeepLimit = n }(metricKeepLimit)
	metricKeepLimit = 100
	to := onset.Add(20 * time.Second)
	wl, wn, wt, ws, err := readAll(ctx, st, from, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		gl, gn, gt, gs, err := readAll(ctx, incrementalMetrics{mr: st, st: &vs, now: to.UnixNano()}, from, onset, to)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gl, wl) || gn != wn || !reflect.DeepEqual(gt, wt) || !reflect.DeepEqual(gs, ws) {
			t.Fatalf("past the keep limit: incremental %+v %+v, the store %+v %+v", gn, gt, wn, wt)
		}
	}
	for name, c := range vs.metrics {
		if c.points() > metricKeepLimit {
			t.Fatalf("%s kept with %d points, past the limit", name, c.points())
		}
	}
	if vs.metrics[metricRunq] != nil {
		t.Fatal("the run-queue series kept past the limit")
	}
}

// TestIncrementalMetricsLatePoints: points that land after a read, within
// metricReRead of its end, are read by the next verdict.
func TestIncrementalMetricsLatePoints(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	onset := t0.Add(2 * time.Minute)
	read := onset.Add(20 * time.Second)
	// Stored by the first read: up to 10 s before its end.
	kernelSeries(t, st, 3, t0, read.Add(-10*time.Second))
	vs := &VerdictState{}
	if _, _, _, _, err := readAll(ctx, incrementalMetrics{mr: st, st: vs, now: read.UnixNano()}, t0, onset, read); err != nil {
		t.Fatal(err)
	}
	// Then the last 10 s land, and 10 s more (a new push's counters).
	kernelSeries(t, st, 3, read.Add(-10*time.Second), read.Add(10*time.Second))
	to := read.Add(10 * time.Second)
	wl, wn, wt, ws, err := readAll(ctx, st, t0, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	gl, gn, gt, gs, err := readAll(ctx, incrementalMetrics{mr: st, st: vs, now: to.UnixNano()}, t0, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gl, wl) || gn != wn || !reflect.DeepEqual(gt, wt) || !reflect.DeepEqual(gs, ws) {
		t.Fatalf("incremental %+v %+v %+v, the store %+v %+v %+v", gn, gt, gs, wn, wt, ws)
	}
}

func TestIncrementalMetricsLimit(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	kernelSeries(t, st, 2, t0, t0.Add(time.Minute))
	_, err := incrementalMetrics{mr: st}.FindMetrics(ctx, store.MetricQuery{Name: metricRunq, From: t0.UnixNano(), To: t0.Add(time.Hour).UnixNano(), Limit: 100})
	if err == nil {
		t.Fatal("a read cut at its limit gave no error")
	}
}

// BenchmarkVerdictKernelMetrics: the kernel's and the node's counters one
// verdict reads (readAll) for an incident open 4 minutes, as the agents
// push them for 20 containers, 6 minutes of points: read from the store
// with the histograms' buckets ("store", every verdict as before), without
// them ("omit-buckets"), and through the incident's state as well, each
// verdict 10 s after the last and every sixth the first of an incident
// ("incremental").
func BenchmarkVerdictKernelMetrics(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	from := t0
	onset := from.Add(DefaultConfig().Lookback)
	kernelSeries(b, st, 20, from, onset.Add(5*time.Minute))
	for _, bc := range []struct {
		name   string
		direct bool
		state  bool
	}{{"store", true, false}, {"omit-buckets", false, false}, {"incremental", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var vs *VerdictState
			if bc.state {
				vs = &VerdictState{}
			}
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e6, "cpu-ms/op") }()
			for i := range b.N {
				// The incident 4 minutes old, a verdict 10 s after the
				// last, cycling through a minute.
				to := onset.Add(4*time.Minute + time.Duration(i%6)*10*time.Second)
				if i%6 == 0 && vs != nil {
					*vs = VerdictState{} // a new incident's first verdict
				}
				var mr store.MetricReader = incrementalMetrics{mr: st, st: vs, now: to.UnixNano()}
				if bc.direct {
					mr = st
				}
				if _, node, _, _, err := readAll(ctx, mr, from, onset, to); err != nil || node.during.count == 0 {
					b.Fatal(err, node)
				}
			}
		})
	}
}
