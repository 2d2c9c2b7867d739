// Command cpgo is cpsvc's lock contract in Go (test/critpath_test.go): GET
// /work?do=lock&hold=<ms> takes one process-wide sync.Mutex and spins <ms>
// holding it, and answers lock_wait_ns, the time it waited in Lock;
// do=chan&ms=<ms> hands <ms> of spinning to a worker goroutine over a
// channel and waits for its answer on another (chan_wait_ns; cpu_ns: the
// CPU time the worker's thread spent, the worker locked to it); any other
// query answers at once. A goroutine that waits for a sync.Mutex parks
// in the Go runtime: its thread runs other goroutines or idles, and the
// kernel never sees the wait.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

var (
	big  sync.Mutex
	sink uint64
)

// job is work for the worker goroutine: spin for d, then answer on done.
type job struct {
	d    time.Duration
	done chan time.Duration
}

var jobs = make(chan job)

// worker spins for each job's time and answers the CPU time its thread
// spent meanwhile.
func worker() {
	runtime.LockOSThread()
	var local uint64
	for j := range jobs {
		c, t := threadCPU(), time.Now()
		for time.Since(t) < j.d {
			for i := range 1000 {
				local += uint64(i)
			}
		}
		j.done <- threadCPU() - c
	}
	sink += local
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1, &ru) // RUSAGE_THREAD
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	addr := os.Getenv("LISTEN")
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpgo:", err)
		os.Exit(1)
	}
	fmt.Printf("listening %d\n", ln.Addr().(*net.TCPAddr).Port)
	go worker()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		if r.URL.Query().Get("do") == "lock" {
			hold, _ := strconv.Atoi(r.URL.Query().Get("hold"))
			t := time.Now()
			big.Lock()
			waited := time.Since(t)
			for end := time.Now().Add(time.Duration(hold) * time.Millisecond); time.Now().Before(end); {
				for i := range 1000 {
					sink += uint64(i)
				}
			}
			big.Unlock()
			fmt.Fprintf(w, "lock_wait_ns=%d\n", waited.Nanoseconds())
		}
		if r.URL.Query().Get("do") == "chan" {
			n, _ := strconv.Atoi(r.URL.Query().Get("ms"))
			j := job{d: time.Duration(n) * time.Millisecond, done: make(chan time.Duration)}
			t := time.Now()
			jobs <- j
			spun := <-j.done
			fmt.Fprintf(w, "chan_wait_ns=%d\ncpu_ns=%d\n", time.Since(t).Nanoseconds(), spun.Nanoseconds())
		}
		fmt.Fprintf(w, "wall_ns=%d\n", time.Since(t0).Nanoseconds())
	})
	_ = http.Serve(ln, h)
}
