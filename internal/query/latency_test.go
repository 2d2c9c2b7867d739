package query

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
)

func TestServiceLatency(t *testing.T) {
	f := newFakeStore()
	now := time.Now().UnixNano()
	for i := range 20 {
		d := int64(10 * time.Millisecond)
		if i == 19 {
			d = int64(100 * time.Millisecond) // the slowest 5 %
		}
		if i == 18 {
			d = int64(40 * time.Millisecond)
		}
		f.addTrace(&model.Span{TraceID: model.TraceID{byte(i + 1)}, SpanID: model.SpanID{1}, Service: "api", Name: "GET", Start: now - int64(time.Minute), Duration: d})
		f.found = append(f.found, model.TraceID{byte(i + 1)})
	}
	det := func() []anomaly.KeyState {
		return []anomaly.KeyState{
			{Key: "api/GET", Fill: 50, Baseline: int64(10 * time.Millisecond)},
			{Key: "api/POST", Fill: 50, Baseline: int64(20 * time.Millisecond)},
			{Key: "other/GET", Fill: 0, Baseline: 0},
		}
	}
	h := newTestAPI(f, Config{}, det, nil)
	for _, tc := range []struct {
		target string
		status int
		want   []serviceLatencyJSON
	}{
		{"/api/v1/services/latency?service=api", 200, []serviceLatencyJSON{{Service: "api", Spans: 20, P95Ns: int64(40 * time.Millisecond), BaselineNs: int64(10 * time.Millisecond), Ratio: 4}}},
		{"/api/v1/services/latency?service=none", 200, []serviceLatencyJSON{{Service: "none"}}},
		{"/api/v1/services/latency?lookback=x", 400, nil},
	} {
		t.Run(tc.target, func(t *testing.T) {
			rec := do(t, h, tc.target)
			if rec.Code != tc.status {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if tc.want == nil {
				return
			}
			var got []serviceLatencyJSON
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) || got[0] != tc.want[0] {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		v    []int64
		q    float64
		want int64
	}{{nil, 0.95, 0}, {[]int64{5}, 0.95, 5}, {[]int64{3, 1, 2}, 0.5, 2}, {[]int64{1, 2, 3, 4}, 0.5, 2}, {[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.95, 10}} {
		if got := quantile(tc.v, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %v) = %d, want %d", tc.v, tc.q, got, tc.want)
		}
	}
}
