package storetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/rootline/rootline/internal/store"
)

var metricLabels = map[string]string{"container": "/app", "host.name": "n1"}

func histPoint(ts int64, count uint64) store.MetricPoint {
	return store.MetricPoint{Name: "rootline_kernel_runq_latency_seconds", Service: "checkout", Unit: "s", Kind: store.MetricHistogram,
		Labels: metricLabels, StartTime: 100, Time: ts, Count: count, Sum: 0.5, Bounds: []float64{0.001, 0.002}, Buckets: []uint64{1, count - 2, 1}}
}

// metricFixture writes 3 series with 5 points at times 1000-3000.
func metricFixture(t *testing.T, st store.MetricWriter) {
	t.Helper()
	ctx := context.Background()
	points := []store.MetricPoint{
		histPoint(1000, 5), histPoint(2000, 9),
		{Name: "rootline_kernel_tcp_retransmits_total", Service: "checkout", Unit: "1", Kind: store.MetricSum, Labels: metricLabels, Time: 1500, Value: 3},
		{Name: "rootline_kernel_tcp_retransmits_total", Service: "db", Unit: "1", Kind: store.MetricSum, Time: 1500, Value: 1},
	}
	if err := st.WriteMetrics(ctx, points); err != nil {
		t.Fatal(err)
	}
	// The same series again: one series, more points.
	if err := st.WriteMetrics(ctx, []store.MetricPoint{histPoint(3000, 12)}); err != nil {
		t.Fatal(err)
	}
}

func testMetrics(t *testing.T, st MetricStore) {
	ctx := context.Background()
	metricFixture(t, st)
	got, err := st.FindMetrics(ctx, store.MetricQuery{Name: "rootline_kernel_runq_latency_seconds"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Points) != 3 || got[0].Kind != store.MetricHistogram || got[0].Unit != "s" ||
		!reflect.DeepEqual(got[0].Labels, metricLabels) || got[0].Service != "checkout" {
		t.Fatalf("histogram series = %+v", got)
	}
	p := got[0].Points[1]
	if p.Time != 2000 || p.StartTime != 100 || p.Count != 9 || p.Sum != 0.5 || !reflect.DeepEqual(p.Bounds, []float64{0.001, 0.002}) ||
		!reflect.DeepEqual(p.Buckets, []uint64{1, 7, 1}) {
		t.Errorf("point = %+v", p)
	}
	// Without buckets: the same values, counts and sums; a backend may
	// still return the buckets.
	lean, err := st.FindMetrics(ctx, store.MetricQuery{Name: "rootline_kernel_runq_latency_seconds", OmitBuckets: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(lean) != 1 || len(lean[0].Points) != 3 {
		t.Fatalf("histogram series without buckets = %+v", lean)
	}
	if p := lean[0].Points[1]; p.Time != 2000 || p.StartTime != 100 || p.Count != 9 || p.Sum != 0.5 {
		t.Errorf("point without buckets = %+v", p)
	}
	for _, tc := range []struct {
		name   string
		q      store.MetricQuery
		series int
		points int
	}{
		{"all", store.MetricQuery{}, 3, 5},
		{"by service", store.MetricQuery{Service: "db"}, 1, 1},
		{"window", store.MetricQuery{From: 1500, To: 2000}, 3, 3},
		{"limit", store.MetricQuery{Limit: 2}, 1, 2},
		{"nothing", store.MetricQuery{Name: "nope"}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.FindMetrics(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range got {
				n += len(s.Points)
			}
			if len(got) != tc.series || n != tc.points {
				t.Errorf("%d series, %d points; want %d, %d", len(got), n, tc.series, tc.points)
			}
		})
	}
	bad := histPoint(4000, 5)
	bad.Buckets = []uint64{1}
	if err := st.WriteMetrics(ctx, []store.MetricPoint{bad}); err == nil {
		t.Error("mismatched buckets accepted")
	}
}

// testPurgeMetrics: points older than Now-Normal go, and series left empty.
func testPurgeMetrics(t *testing.T, rs RetentionStore) {
	ctx := context.Background()
	st := withMetrics(t, rs)
	metricFixture(t, st)
	if _, err := st.Purge(ctx, store.RetentionPolicy{Now: 2600, Normal: 1000}); err != nil {
		t.Fatal(err)
	}
	got, err := st.FindMetrics(ctx, store.MetricQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Points) != 2 || got[0].Points[0].Time != 2000 {
		t.Errorf("after purge: %+v", got)
	}
}
