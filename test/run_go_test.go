package test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunGoAssociation measures how often `rootline run` gives a Go net/http
// service's outbound request the wrong inbound request's context under
// concurrent load (net/http writes client requests from a writeLoop
// goroutine; see internal/run's package doc). The leaf, outside the
// supervisor, checks the trace id it receives against the one the client
// sent for that request id.
func TestRunGoAssociation(t *testing.T) {
	requireTracing(t)
	bin := buildTestdata(t, "gomid")
	forEachMode(t, func(t *testing.T) { goAssociation(t, bin) })
}

func goAssociation(t *testing.T, bin string) {
	for _, tc := range []struct {
		name        string
		env         []string
		concurrency int
		maxRate     float64
	}{
		{"cpu-work", []string{"SPIN_US=300"}, 16, 0.01},
		{"sleep-then-call", []string{"SLEEP_US=2000"}, 16, 0.01},
		{"no-work", nil, 32, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wrong, missing, total atomic.Int64
			leaf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				total.Add(1)
				id := r.URL.Query().Get("id")
				tp := r.Header.Get("traceparent")
				switch {
				case tp == "":
					missing.Add(1)
				case !strings.HasPrefix(tp, "00-"+traceFor(id)+"-"):
					wrong.Add(1)
				}
			}))
			defer leaf.Close()
			env := append([]string{"LISTEN=127.0.0.1:0", "CALL=" + leaf.URL}, tc.env...)
			_, port := startTraced(t, env, true, []string{"--server", ""}, bin)
			const perWorker = 40
			var wg sync.WaitGroup
			var failed atomic.Int64
			client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: tc.concurrency}}
			for w := range tc.concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range perWorker {
						id := fmt.Sprintf("%d-%d", w, k)
						req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/x?id=%s", port, id), nil)
						req.Header.Set("traceparent", "00-"+traceFor(id)+"-00f067aa0ba902b7-01")
						resp, err := client.Do(req)
						if err != nil || resp.StatusCode != 200 {
							failed.Add(1)
							if err == nil {
								resp.Body.Close()
							}
							continue
						}
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			n := total.Load()
			rate := float64(wrong.Load()+missing.Load()) / float64(max(n, 1))
			t.Logf("%s: %d requests at concurrency %d: %d with another request's context, %d without one: mis-association %.2f%%",
				tc.name, n, tc.concurrency, wrong.Load(), missing.Load(), 100*rate)
			if failed.Load() > 0 || n != int64(tc.concurrency*perWorker) {
				t.Fatalf("%d requests failed, leaf saw %d of %d", failed.Load(), n, tc.concurrency*perWorker)
			}
			if rate > tc.maxRate {
				t.Errorf("mis-association %.2f%% above %.0f%%", 100*rate, 100*tc.maxRate)
			}
		})
	}
}

// traceFor derives a trace id (32 hex digits) from a request id.
func traceFor(id string) string {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	return fmt.Sprintf("%016x%016x", h, h^0x9e3779b97f4a7c15)
}

// buildTestdata builds test/testdata/<name> into a temporary directory.
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	bin := t.TempDir() + "/" + name
	if out, err := execCommand("go", "build", "-o", bin, "./testdata/"+name).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}
