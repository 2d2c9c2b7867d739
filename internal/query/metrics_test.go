package query

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/store"
)

type fakeMetrics struct{ last store.MetricQuery }

func (f *fakeMetrics) FindMetrics(_ context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	f.last = q
	return []store.MetricSeries{
		{Name: "runq", Service: "checkout", Unit: "s", Kind: store.MetricHistogram, Labels: map[string]string{"container": "/app"},
			Points: []store.MetricPoint{{Time: 2000, StartTime: 1000, Count: 4, Sum: 0.25, Bounds: []float64{0.1}, Buckets: []uint64{3, 1}}}},
		{Name: "drops", Service: "checkout", Unit: "1", Kind: store.MetricSum, Labels: map[string]string{},
			Points: []store.MetricPoint{{Time: 2000, Value: 0}}},
	}, nil
}

func TestGetMetrics(t *testing.T) {
	a := New(Config{}, newFakeStore(), nil, nil, nil)
	now := time.Unix(1_700_000_000, 0)
	a.now = func() time.Time { return now }
	if rec := do(t, a.Handler(), "/api/v1/metrics"); rec.Code != 501 {
		t.Errorf("without a metric reader: %d", rec.Code)
	}
	f := &fakeMetrics{}
	a.SetMetricReader(f)
	h := a.Handler()
	for _, tc := range []struct {
		target   string
		code     int
		from, to int64
	}{
		{"/api/v1/metrics?name=runq&service=checkout", 200, now.Add(-time.Hour).UnixNano(), now.UnixNano()},
		{"/api/v1/metrics?from=1000&to=2000", 200, int64(time.Second), 2 * int64(time.Second)},
		{"/api/v1/metrics?from=2023-11-14T22:13:20Z", 200, now.UnixNano(), now.UnixNano()},
		{"/api/v1/metrics?from=yesterday", 400, 0, 0},
		{"/api/v1/metrics?limit=0", 400, 0, 0},
	} {
		rec := do(t, h, tc.target)
		if rec.Code != tc.code {
			t.Errorf("GET %s = %d, want %d: %s", tc.target, rec.Code, tc.code, rec.Body)
			continue
		}
		if tc.code == 200 && (f.last.From != tc.from || f.last.To != tc.to) {
			t.Errorf("GET %s: window %d..%d, want %d..%d", tc.target, f.last.From, f.last.To, tc.from, tc.to)
		}
	}
	rec := do(t, h, "/api/v1/metrics?name=runq&service=checkout")
	if f.last.Name != "runq" || f.last.Service != "checkout" {
		t.Errorf("query = %+v", f.last)
	}
	var body struct {
		Series []struct {
			Name   string            `json:"name"`
			Kind   string            `json:"kind"`
			Labels map[string]string `json:"labels"`
			Points []map[string]any  `json:"points"`
		} `json:"series"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Series) != 2 || body.Series[0].Kind != "histogram" || body.Series[0].Labels["container"] != "/app" {
		t.Fatalf("body = %s", rec.Body)
	}
	p := body.Series[0].Points[0]
	if p["count"] != 4.0 || p["timeUnixNano"] != 2000.0 || len(p["buckets"].([]any)) != 2 || p["value"] != nil {
		t.Errorf("histogram point = %v", p)
	}
	if v, ok := body.Series[1].Points[0]["value"]; !ok || v != 0.0 {
		t.Errorf("a zero sum must be present: %v", body.Series[1].Points[0])
	}
}

// manyMetrics answers n one-point series of containers /c0…/c(n-1).
type manyMetrics struct{ n int }

func (m manyMetrics) FindMetrics(context.Context, store.MetricQuery) ([]store.MetricSeries, error) {
	out := make([]store.MetricSeries, m.n)
	for i := range out {
		out[i] = store.MetricSeries{Name: "x", Kind: store.MetricSum, Labels: map[string]string{"container": fmt.Sprintf("/c%d", i)},
			Points: []store.MetricPoint{{Time: 1, Value: 1}}}
	}
	return out, nil
}

func TestGetMetricsBounds(t *testing.T) {
	a := New(Config{}, newFakeStore(), nil, nil, nil)
	a.SetMetricReader(manyMetrics{n: MaxMetricSeries + 1})
	h := a.Handler()
	if rec := do(t, h, "/api/v1/metrics"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "narrow") {
		t.Errorf("%d series: %d %s, want 400", MaxMetricSeries+1, rec.Code, rec.Body)
	}
	// One container of them is within the bound.
	rec := do(t, h, "/api/v1/metrics?container=%2Fc7")
	var body struct {
		Series []struct {
			Labels map[string]string `json:"labels"`
		} `json:"series"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != 200 || err != nil || len(body.Series) != 1 || body.Series[0].Labels["container"] != "/c7" {
		t.Errorf("container=/c7: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, h, "/api/v1/metrics?from=2000&to=1000"); rec.Code != 400 {
		t.Errorf("from after to: %d", rec.Code)
	}
	if rec := do(t, h, "/api/v1/critical-metrics?step=1ms"); rec.Code != 400 {
		t.Errorf("step 1ms: %d", rec.Code)
	}
}

func TestThinPoints(t *testing.T) {
	pts := make([]store.MetricPoint, 10)
	for i := range pts {
		pts[i].Time = int64(i)
	}
	var got []int64
	for _, p := range thinPoints(pts, 4) {
		got = append(got, p.Time)
	}
	if !slices.Equal(got, []int64{0, 3, 6, 9}) {
		t.Errorf("thin 10 to 4: %v", got)
	}
	if len(thinPoints(pts, 0)) != 10 || len(thinPoints(pts, 20)) != 10 {
		t.Error("thinning when not asked to")
	}
}
