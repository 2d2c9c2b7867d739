package main

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// spin burns d of CPU time on the calling goroutine: time its thread spends
// on a CPU, read from the thread's CPU clock, not wall time. A CPU quota, a
// busy neighbour or other requests of the same process then stretch the
// request as they stretch real CPU-bound code (the wall time grows, the CPU
// time per request stays d), instead of leaving the spin to burn fewer
// cycles in the same wall time. Must match Svc.java and svc.py.
//
// The goroutine is locked to its thread for the spin, so the thread's clock
// counts only this request's work: the Go scheduler cannot run another
// goroutine on the thread meanwhile. A thread preempted (by the kernel or by
// Go's scheduler) stops its clock until it runs again.
func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, ok := threadCPU()
	if !ok {
		spinWall(d)
		return
	}
	end := start + d
	x := uint64(1)
	for {
		// About 2 µs of work between reads of the clock, a system call of
		// a few hundred ns: the spin overshoots d by at most that.
		for i := 0; i < 2000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if now, _ := threadCPU(); now >= end {
			break
		}
	}
	runtime.KeepAlive(x)
}

// threadCPU is the calling thread's CPU time; false where the system has no
// such clock.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// spinWall burns CPU for d of wall time, for systems without a thread CPU
// clock.
func spinWall(d time.Duration) {
	end := time.Now().Add(d)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	runtime.KeepAlive(x)
}
