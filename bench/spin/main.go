// Command spin is a CPU-bound target (benchmarks and the end-to-end profiling
// tests): it runs a known hot function, main.hotLoop,
// for a fixed time and prints its throughput (loops per second), so profiler
// overhead shows as lost throughput.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

//go:noinline
func hotLoop(n int) uint64 {
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func main() {
	d := flag.Duration("duration", 20*time.Second, "how long to run")
	wait := flag.String("wait", "", "wait until this file exists before measuring (lets a profiler attach first)")
	flag.Parse()
	if *wait != "" {
		for {
			if _, err := os.Stat(*wait); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var sink uint64
	loops := 0
	start := time.Now()
	for time.Since(start) < *d {
		sink += hotLoop(1 << 16)
		loops++
	}
	fmt.Printf("loops_per_s=%.1f sink=%d\n", float64(loops)/time.Since(start).Seconds(), sink&1)
}
