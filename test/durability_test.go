package test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store/sqlite"
)

const spansPerTrace = 20

// flood sends one trace per request from several clients until stop closes,
// and returns the trace ids the server acknowledged (200).
func flood(t *testing.T, addr string, clients int, stop <-chan struct{}) (acked []pcommon.TraceID, refused, failed int64) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var next atomic.Uint64
	var nRefused, nFailed atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := tid(next.Add(1))
				specs := make([]spanSpec, spansPerTrace)
				for i := range specs {
					specs[i] = spanSpec{service: "durable", name: fmt.Sprintf("op-%d", i), duration: time.Millisecond}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				code, _, err := postOTLP(ctx, addr, makeTrace(id, time.Now(), specs...))
				cancel()
				switch {
				case err == nil && code == 200:
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				case err == nil && (code == 429 || code == 503):
					nRefused.Add(1)
					if code == 503 {
						time.Sleep(10 * time.Millisecond)
					}
				default:
					// Connection refused or reset once the server is gone.
					nFailed.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return acked, nRefused.Load(), nFailed.Load()
}

// countStored opens the data directory directly and checks every acknowledged
// trace is complete.
func countStored(t *testing.T, dir string, acked []pcommon.TraceID) (missing int) {
	t.Helper()
	st, err := sqlite.Open(sqlite.Config{Dir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range acked {
		spans, err := st.GetTrace(context.Background(), model.TraceID(id))
		if err != nil || len(spans) != spansPerTrace {
			missing++
		}
	}
	return missing
}

func TestDurabilityUnderSignals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sig      syscall.Signal
		wantExit int
	}{
		{"SIGTERM drains and flushes", syscall.SIGTERM, 0},
		{"SIGKILL loses nothing acknowledged", syscall.SIGKILL, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			srv := startServer(t, dir)
			stop := make(chan struct{})
			type result struct {
				acked           []pcommon.TraceID
				refused, failed int64
			}
			res := make(chan result, 1)
			go func() {
				a, r, f := flood(t, srv.http, 8, stop)
				res <- result{a, r, f}
			}()
			time.Sleep(1500 * time.Millisecond)
			err := srv.signal(tc.sig) // clients keep sending while the server stops
			time.Sleep(200 * time.Millisecond)
			close(stop)
			r := <-res
			var ee *exec.ExitError
			code := 0
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != tc.wantExit {
				t.Fatalf("exit code %d, want %d (err %v)", code, tc.wantExit, err)
			}
			if len(r.acked) < 50 {
				t.Fatalf("only %d requests acknowledged; the test did not load the server", len(r.acked))
			}
			missing := countStored(t, dir, r.acked)
			t.Logf("%s: acknowledged %d traces (%d spans), refused %d, failed %d, missing after restart %d",
				tc.sig, len(r.acked), len(r.acked)*spansPerTrace, r.refused, r.failed, missing)
			if missing != 0 {
				t.Fatalf("%d acknowledged traces are missing or incomplete", missing)
			}
			// The server starts again on the same data and serves the traces.
			srv2 := startServer(t, dir)
			var tr jaegerResponse
			if code := srv2.getJSON(t, "/api/traces/"+model.TraceID(r.acked[len(r.acked)-1]).String(), &tr); code != 200 || len(tr.Data[0].Spans) != spansPerTrace {
				t.Fatalf("after restart: status %d", code)
			}
		})
	}
}

func TestBackpressureAnswers429(t *testing.T) {
	dir := t.TempDir()
	// A one-span queue: any request arriving while another waits is refused.
	srv := startServer(t, dir, "--pipeline.queue-spans", "1")
	var mu sync.Mutex
	var acked []pcommon.TraceID
	var n429, bad int
	var retryAfter string
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				id := tid(uint64(c*1000 + i + 1))
				code, ra, err := postOTLP(context.Background(), srv.http, makeTrace(id, time.Now(),
					spanSpec{service: "bp", name: "op", duration: time.Millisecond}))
				mu.Lock()
				switch {
				case err == nil && code == 200:
					acked = append(acked, id)
				case err == nil && code == 429:
					n429++
					retryAfter = ra
				default:
					bad++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("acknowledged %d, refused with 429 %d", len(acked), n429)
	if n429 == 0 || retryAfter != "1" {
		t.Fatalf("429s = %d (Retry-After %q); want some with Retry-After: 1", n429, retryAfter)
	}
	if bad != 0 || len(acked) == 0 {
		t.Fatalf("acked %d, unexpected answers %d", len(acked), bad)
	}
	if err := srv.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(sqlite.Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range acked {
		if _, err := st.GetTrace(context.Background(), model.TraceID(id)); err != nil {
			t.Fatalf("acknowledged trace %x: %v", id, err)
		}
	}
}
