package main

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// spin burns d of CPU time on the calling goroutine: time spent on a CPU,
// read from the thread's CPU clock, not wall time. A CPU quota, a busy
// neighbour or other requests of the same process then stretch the request
// as they stretch real CPU-bound code (the wall time grows, the CPU time per
// request stays d), instead of leaving the spin to burn fewer cycles in the
// same wall time. Must match Svc.java and svc.py.
//
// The clock is the thread's, and Go may run another goroutine on the thread
// or move this one to another thread. So the work is done in short chunks
// (about 2 µs) and each chunk counts the clock's step across it: while the
// kernel keeps the thread off the CPU the clock stands still and the chunk
// counts only its own work; a step that is negative or far longer than a
// chunk (another goroutine ran on the thread meanwhile, or this one moved
// to a thread with another clock) counts as the previous chunk's cost. The
// goroutine is not locked to its thread: a locked goroutine that Go's
// scheduler preempts parks its thread in a futex until it may run again,
// which the kernel (and Rootline's kernel recorder) would see as the
// service waiting on a lock rather than as CPU work queued in Go's scheduler.
func spin(d time.Duration) {
	if d <= 0 {
		return
	}
	prev, ok := threadCPU()
	if !ok {
		spinWall(d)
		return
	}
	// A chunk's step above this is not the chunk's own work: a chunk takes
	// a few µs, Go's scheduler preempts a goroutine after 10 ms.
	const maxStep = 50 * time.Microsecond
	var used time.Duration
	last := time.Microsecond // cost counted for a chunk whose step is not its own
	x := uint64(1)
	for used < d {
		for i := 0; i < 2000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now, _ := threadCPU()
		step := now - prev
		prev = now
		if step <= 0 || step > maxStep {
			step = last
		} else {
			last = step
		}
		used += step
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
