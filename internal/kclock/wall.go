package kclock

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The wall clock can be stepped while a reader runs: by NTP or an
// administrator, and when a virtual machine resumes after its host paused
// it (the guest's CLOCK_MONOTONIC stood still; its wall clock is set
// forward at resume). An offset measured once, when a reader starts, then
// puts everything the reader stamps off by the step against the programs
// that read the wall clock — the spans of SDKs and proxies. On this
// project's 2-vCPU test machine a pause of the guest left `rootline run`'s
// spans 40.6 s before their sidecars' for the rest of the run, and slow
// requests counted as before their fault's onset (bench/RESULTS.md).
//
// MonotonicUnix converts with the offset in force when the reading was
// taken: a process-wide refresher measures the offset every refreshEvery
// and keeps the steps it saw, so that a reading converted later (a kernel
// snapshot dumps the last minute's events) gets the offset of its time.
const (
	refreshEvery = 500 * time.Millisecond
	// stepAbove: a change of the offset larger than this between two
	// refreshes is a step, kept from then on; a smaller one (NTP slews
	// the wall clock by at most 500 ppm: 0.25 ms per refresh) moves the
	// newest offset.
	stepAbove = int64(time.Millisecond)
	// noiseBelow: a change smaller than this is the measurement's own
	// jitter (the three clock reads of Offset take ~100 ns on a VM), not
	// a slew; the offset stays, so one Unix time converts the same way on
	// either side of a refresh.
	noiseBelow = int64(2 * time.Microsecond)
	// maxSteps bounds the steps kept (the oldest are forgotten: their
	// readings have left every reader's buffers long before).
	maxSteps = 64
)

// step is an offset in force from a reading of the clock on.
type step struct{ from, off int64 }

// wall converts one clock's readings to Unix time across steps of the wall
// clock.
type wall struct {
	now    func() int64 // the clock's reading
	offset func() int64 // Unix ns − the clock's ns, measured now
	steps  atomic.Pointer[[]step]
	mu     sync.Mutex // serialises refresh
}

func newWall(now, offset func() int64) *wall {
	w := &wall{now: now, offset: offset}
	s := []step{{from: math.MinInt64, off: offset()}}
	w.steps.Store(&s)
	return w
}

// refresh measures the offset again.
func (w *wall) refresh() {
	w.mu.Lock()
	defer w.mu.Unlock()
	off, at := w.offset(), w.now()
	old := *w.steps.Load()
	next := slices.Clone(old)
	last := &next[len(next)-1]
	if d := off - last.off; d > stepAbove || d < -stepAbove {
		next = append(next, step{from: at, off: off})
		if len(next) > maxSteps {
			next = slices.Clone(next[len(next)-maxSteps:])
			next[0].from = math.MinInt64
		}
	} else if d > noiseBelow || d < -noiseBelow {
		last.off = off
	}
	w.steps.Store(&next)
}

// toUnix converts a reading of the clock.
func (w *wall) toUnix(ns int64) int64 {
	s := *w.steps.Load()
	for i := len(s) - 1; i > 0; i-- {
		if ns >= s[i].from {
			return ns + s[i].off
		}
	}
	return ns + s[0].off
}

// toClock converts Unix ns to a reading of the clock: the inverse of
// toUnix. Unix times that fall in a step forward (skipped by the wall
// clock) map to its start; those a step back repeated map to the later.
func (w *wall) toClock(unix int64) int64 {
	s := *w.steps.Load()
	for i := len(s) - 1; i > 0; i-- {
		if ns := unix - s[i].off; ns >= s[i].from {
			return ns
		} else if unix-s[i-1].off >= s[i].from {
			return s[i].from
		}
	}
	return unix - s[0].off
}

var monotonic = sync.OnceValue(func() *wall {
	w := newWall(Monotonic.Now, Monotonic.Offset)
	go refreshLoop(w)
	return w
})

// Refresher names the goroutine that keeps the offsets current, for leak
// checks: it runs for the life of the process once a conversion was made.
const Refresher = "github.com/rootline/rootline/internal/kclock.refreshLoop"

func refreshLoop(w *wall) {
	for {
		time.Sleep(refreshEvery)
		w.refresh()
	}
}

// MonotonicUnix converts a CLOCK_MONOTONIC reading (bpf_ktime_get_ns, a
// perf event's or a tracepoint's timestamp) to Unix ns, with the offset in
// force when it was taken (to within refreshEvery of a step).
func MonotonicUnix(ns int64) int64 { return monotonic().toUnix(ns) }

// UnixMonotonic converts Unix ns to a CLOCK_MONOTONIC reading: the inverse
// of MonotonicUnix.
func UnixMonotonic(unix int64) int64 { return monotonic().toClock(unix) }
