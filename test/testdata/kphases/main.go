// Command kphases is the workload of the CriticalMetrics end-to-end test: a
// process whose kernel activity has known shapes over time, so that the
// clusters found in its recorded kernel metrics can be checked against what
// it did.
//
// It waits for a line on stdin (the test moves it into its cgroup first),
// then for -duration:
//
//   - app mode: TCP over loopback to itself in 64 KiB writes at a rate that
//     ramps up over the run (the bytes sent and received follow one ramp);
//     CPU burned in 300 ms bursts every -period (a square wave); fresh memory
//     touched page by page only in the middle fifth of the run (one burst of
//     page faults).
//   - sidecar mode: 100-byte requests and replies over loopback every
//     millisecond with almost no CPU per request.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "app", "app or sidecar")
	d := flag.Duration("duration", 30*time.Second, "how long to run")
	period := flag.Duration("period", 2*time.Second, "period of the app's CPU bursts")
	flag.Parse()
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// Echo everything back.
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _, _ = io.Copy(io.Discard, c) }()

	start := time.Now()
	switch *mode {
	case "app":
		go burn(start, *d, *period)
		go faults(start, *d)
		chunk := make([]byte, 64<<10)
		for time.Since(start) < *d {
			// From 2 to 40 writes a second over the run.
			frac := float64(time.Since(start)) / float64(*d)
			if _, err := c.Write(chunk); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			time.Sleep(time.Duration(float64(time.Second) / (2 + 38*frac)))
		}
	case "sidecar":
		msg := make([]byte, 100)
		for time.Since(start) < *d {
			if _, err := c.Write(msg); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			time.Sleep(time.Millisecond)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", *mode)
		os.Exit(2)
	}
}

//go:noinline
func spin(n int) uint64 {
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

var sink uint64

// burn runs the CPU 300 ms at the start of every period.
func burn(start time.Time, d, period time.Duration) {
	for time.Since(start) < d {
		t0 := time.Now()
		for time.Since(t0) < 300*time.Millisecond {
			sink += spin(1 << 14)
		}
		time.Sleep(period - time.Since(t0)%period)
	}
}

// faults maps and touches 32 MiB of fresh anonymous memory, again and again,
// only from 40 % to 60 % of the run.
func faults(start time.Time, d time.Duration) {
	time.Sleep(d * 2 / 5)
	for time.Since(start) < d*3/5 {
		b, err := syscall.Mmap(-1, 0, 32<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
		if err != nil {
			return
		}
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		_ = syscall.Munmap(b)
		time.Sleep(20 * time.Millisecond)
	}
}
