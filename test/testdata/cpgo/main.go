// Command cpgo is cpsvc's lock contract in Go (test/critpath_test.go): GET
// /work?do=lock&hold=<ms> takes one process-wide sync.Mutex and spins <ms>
// holding it, and answers lock_wait_ns, the time it waited in Lock; any
// other query answers at once. A goroutine that waits for a sync.Mutex parks
// in the Go runtime: its thread runs other goroutines or idles, and the
// kernel never sees the wait.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

var (
	big  sync.Mutex
	sink uint64
)

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
		fmt.Fprintf(w, "wall_ns=%d\n", time.Since(t0).Nanoseconds())
	})
	_ = http.Serve(ln, h)
}
