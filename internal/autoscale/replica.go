package autoscale

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Work is a fixed amount of CPU work: iterations of a multiply-add. Unlike the
// demo services' cpu work, which spins for an amount of wall time (and so
// uses less CPU per request when the process is throttled or preempted), a
// fixed amount of work costs the same CPU whatever the contention: the
// replica saturates at quota / cost requests per second, as a CPU-bound
// service does.
//
//go:noinline
func Work(n int) uint64 {
	x := uint64(1)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// Calibrate returns the iterations of Work that take about d of CPU on this
// machine. It times the work on the calling thread's CPU clock where there is
// one (a busy machine preempting the thread does not make the work look
// slower), and keeps the fastest of a few tries.
func Calibrate(d time.Duration) int {
	const n = 1 << 20
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(1 << 62)
	for range 5 {
		start := threadCPU()
		Work(n)
		if e := threadCPU() - start; e > 0 && e < best {
			best = e
		}
	}
	if best == time.Duration(1<<62) {
		best = time.Microsecond
	}
	return int(float64(n) * float64(d) / float64(best))
}

// ServeReplica serves the replica on ln until SIGTERM or ctx ends: every
// request except /healthz does iters of Work and answers 200 with the
// replica's name; GET /count answers the number of requests served. At most
// workers requests work at once (a worker pool, as the thread pool of a real
// service); the others wait for a worker, and a request whose client has gone
// (Envoy's timeout) is dropped before its work: a replica behind on its queue
// does not spend its quota on answers nobody reads.
func ServeReplica(ctx context.Context, ln net.Listener, name string, iters, workers int) error {
	var served atomic.Int64
	sem := make(chan struct{}, max(workers, 1))
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/count", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, strconv.FormatInt(served.Load(), 10))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		defer func() { <-sem }()
		if r.Context().Err() != nil {
			return
		}
		x := Work(iters)
		served.Add(1)
		fmt.Fprintf(w, "%s ok %d\n", name, x&0xff)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		// Requests in progress finish: Envoy no longer sends new ones by then.
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
