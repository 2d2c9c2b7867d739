// Command standin is the tests' stand-in for the demo's forwarding services:
// it follows the same environment contract (SERVICE_NAME, LISTEN, CALLS, WORK,
// ADMIN with POST /fault) with none of their features beyond what the mesh
// tests need. GET /?bytes=N answers N more bytes; the query goes downstream.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	name := os.Getenv("SERVICE_NAME")
	var calls []string
	if c := os.Getenv("CALLS"); c != "" {
		calls = strings.Split(c, ",")
	}
	var cpu, sleep time.Duration
	for _, kv := range strings.Split(os.Getenv("WORK"), ",") {
		k, v, _ := strings.Cut(kv, "=")
		d, _ := time.ParseDuration(v)
		switch k {
		case "cpu":
			cpu = d
		case "sleep":
			sleep = d
		}
	}
	var mu sync.Mutex
	var slow time.Duration
	if a := os.Getenv("ADMIN"); a != "" {
		adm := http.NewServeMux()
		adm.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
			var f struct {
				Name   string
				On     bool
				Amount string
			}
			if err := json.NewDecoder(r.Body).Decode(&f); err != nil || f.Name != "slow" {
				http.Error(w, "only slow", http.StatusBadRequest)
				return
			}
			d, _ := time.ParseDuration(f.Amount)
			mu.Lock()
			slow = 0
			if f.On {
				slow = d
			}
			mu.Unlock()
		})
		go func() { log.Fatal(http.ListenAndServe(a, adm)) }()
	}
	client := &http.Client{Timeout: 60 * time.Second}
	h := func(w http.ResponseWriter, r *http.Request) {
		burn(cpu)
		time.Sleep(sleep)
		mu.Lock()
		s := slow
		mu.Unlock()
		time.Sleep(s)
		var parts []string
		for _, c := range calls {
			u := c
			if r.URL.RawQuery != "" {
				u += "?" + r.URL.RawQuery
			}
			resp, err := client.Get(u)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			first, _, _ := strings.Cut(string(b), "\n")
			parts = append(parts, first)
		}
		w.Header().Set("X-Standin", name)
		fmt.Fprintf(w, "%s(%s)\n", name, strings.Join(parts, ","))
		if n, _ := strconv.Atoi(r.URL.Query().Get("bytes")); n > 0 {
			w.Write([]byte(strings.Repeat("x", n)))
		}
	}
	log.Fatal(http.ListenAndServe(os.Getenv("LISTEN"), http.HandlerFunc(h)))
}

// burn uses d of this thread's CPU time (not wall time, so that a CPU
// quota slows it down).
func burn(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	for threadCPU()-start < d {
		for i := 0; i < 10000; i++ {
			_ = i * i
		}
	}
}

func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
