package loadgen

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHistogramPrecision(t *testing.T) {
	var h Histogram
	const n = 100000
	for i := 1; i <= n; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != n || h.Max() != n*time.Microsecond || h.Min() != time.Microsecond {
		t.Fatalf("count %d max %v min %v", h.Count(), h.Max(), h.Min())
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
		exact := q * n * float64(time.Microsecond)
		got := float64(h.Quantile(q))
		if rel := math.Abs(got-exact) / exact; rel > 0.01 {
			t.Errorf("Quantile(%v) = %v, exact %v: off by %.2f%%", q, time.Duration(got), time.Duration(exact), rel*100)
		}
	}
	// Every bucket's upper edge maps back into the bucket, and buckets are contiguous.
	for i := 0; i < numBuckets-1; i++ {
		if bucketOf(bucketHigh(i)) != i || bucketOf(bucketHigh(i)+1) != i+1 {
			t.Fatalf("bucket %d: high %d maps to %d, high+1 to %d", i, bucketHigh(i), bucketOf(bucketHigh(i)), bucketOf(bucketHigh(i)+1))
		}
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram must report zeros")
	}
	var m Histogram
	m.Record(5 * time.Second)
	m.Merge(&h)
	if m.Count() != n+1 || m.Max() != 5*time.Second || m.Min() != time.Microsecond {
		t.Errorf("merge: count %d max %v min %v", m.Count(), m.Max(), m.Min())
	}
}

func TestRunCounts(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	var progress []Progress
	var mu sync.Mutex
	res, err := Run(context.Background(), Config{
		URL:    srv.URL,
		Phases: []Phase{{Rate: 100, Duration: 700 * time.Millisecond}, {Rate: 200, Duration: 600 * time.Millisecond}},
		Progress: func(p Progress) {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 {
		t.Fatalf("%d phase results", len(res.Phases))
	}
	for i, want := range []int64{70, 120} {
		r := res.Phases[i]
		if r.Scheduled != want || r.Sent != want || r.OK != want || r.Errors != 0 || r.Latency.Count() != want {
			t.Errorf("phase %d: %s (scheduled %d, recorded %d), want %d ok", i, r, r.Scheduled, r.Latency.Count(), want)
		}
	}
	if res.Total.OK != 190 || hits.Load() != 190 || res.Total.Latency.Count() != 190 {
		t.Errorf("total %s, server saw %d", res.Total, hits.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 {
		t.Error("no progress callback in 1.3 s")
	}
}

// A 300 ms stall of the server must show in the high percentiles: requests due
// during the stall are measured from their intended send time.
func TestRunStallShowsInPercentiles(t *testing.T) {
	var gate atomic.Pointer[chan struct{}] // requests wait until it is closed
	open := make(chan struct{})
	close(open)
	gate.Store(&open)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-*gate.Load()
	}))
	defer srv.Close()
	go func() {
		time.Sleep(400 * time.Millisecond)
		stalled := make(chan struct{})
		gate.Store(&stalled)
		time.Sleep(300 * time.Millisecond)
		close(stalled)
	}()
	res, err := Run(context.Background(), Config{
		URL:    srv.URL,
		Phases: []Phase{{Rate: 200, Duration: 1200 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Total
	t.Log(r)
	if r.OK != 240 || r.Errors != 0 {
		t.Errorf("%s: want 240 ok", r)
	}
	// ~60 of 240 requests (25 %) were due during the stall, with latencies
	// spread over 0-300 ms: the top 5 % are above ~240 ms.
	if r.P99() < 200*time.Millisecond || r.P95() < 150*time.Millisecond || r.Max() < 250*time.Millisecond {
		t.Errorf("stall hidden: %s", r)
	}
	if r.P50() > 150*time.Millisecond {
		t.Errorf("median should not see the stall: %s", r)
	}
}

func TestRunErrorsTimeoutsOverflow(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			http.Error(w, "no", http.StatusInternalServerError)
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()

	res, err := Run(context.Background(), Config{URL: srv.URL + "/fail", Phases: []Phase{{Rate: 100, Duration: 200 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Total; r.Errors != 20 || r.OK != 0 || r.Timeouts != 0 || r.ErrorRate() != 1 {
		t.Errorf("5xx: %s", r)
	}

	// 2 in flight at most, each held until its 150 ms timeout: the rest overflow.
	res, err = Run(context.Background(), Config{URL: srv.URL + "/slow", MaxInFlight: 2, Timeout: 150 * time.Millisecond,
		Phases: []Phase{{Rate: 100, Duration: 300 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Total
	t.Log(r)
	if r.Scheduled != 30 || r.Timeouts < 2 || r.Overflow < 10 || r.Errors != r.Timeouts+r.Overflow || r.OK != 0 {
		t.Errorf("timeouts/overflow: %s", r)
	}
	if r.Latency.Count() != r.Timeouts || r.Latency.Quantile(0.5) < 150*time.Millisecond {
		t.Errorf("timed-out requests must be recorded at ≥ the timeout: %d recorded, p50 %v", r.Latency.Count(), r.P50())
	}
}

func TestRunCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Config{URL: srv.URL, Phases: []Phase{{Rate: 50, Duration: time.Minute}, {Rate: 50, Duration: time.Minute}}})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	if len(res.Phases) != 1 || res.Total.OK == 0 || res.Total.Errors != 0 {
		t.Errorf("partial result: %d phases, %s", len(res.Phases), res.Total)
	}
}

func TestRunBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{URL: "http://x", Phases: []Phase{{Rate: 0, Duration: time.Second}}}); err == nil {
		t.Error("rate 0 accepted")
	}
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("empty URL accepted")
	}
}
