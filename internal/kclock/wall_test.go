package kclock

import (
	"testing"
	"time"
)

// TestWallSteps: readings taken before a step of the wall clock keep the
// offset of their time, those after get the new one, whenever they are
// converted; a slew moves the newest offset without a step; Unix times map
// back to the readings they came from.
func TestWallSteps(t *testing.T) {
	now, off := int64(1_000e9), int64(1_700_000_000e9)
	w := newWall(func() int64 { return now }, func() int64 { return off })
	before := now - 5e9
	if got := w.toUnix(before); got != before+off {
		t.Fatalf("before any step: %d, want %d", got, before+off)
	}
	// A pause of 40.6 s: the clock stood still, the wall clock moved on.
	now += int64(refreshEvery)
	w.refresh()
	pauseAt := now
	off += 40_600e6
	now += int64(refreshEvery)
	w.refresh()
	stepFrom := now
	after := now + 1e9
	if got, want := w.toUnix(before), before+off-40_600e6; got != want {
		t.Errorf("a reading before the step, converted after it: %d, want %d (the old offset)", got, want)
	}
	if got := w.toUnix(after); got != after+off {
		t.Errorf("a reading after the step: %d, want %d", got, after+off)
	}
	for _, ns := range []int64{before, after, pauseAt} {
		if got := w.toClock(w.toUnix(ns)); got != ns {
			t.Errorf("round trip of %d: %d", ns, got)
		}
	}
	// A Unix time the step skipped maps to the step's start.
	if got := w.toClock(pauseAt + off - 20e9); got != stepFrom {
		t.Errorf("a skipped Unix time: reading %d, want the step's start %d", got, stepFrom)
	}
	// A slew of 0.2 ms is no step: the newest offset moves.
	off += 200e3
	now += int64(refreshEvery)
	w.refresh()
	if n := len(*w.steps.Load()); n != 2 {
		t.Errorf("%d offsets after a slew, want 2", n)
	}
	if got := w.toUnix(after); got != after+off {
		t.Errorf("after the slew: %d, want %d", got, after+off)
	}
	// Jitter of the measurement (a few hundred ns) leaves the offset as
	// it was.
	now += int64(refreshEvery)
	off += 300
	w.refresh()
	if got := w.toUnix(after); got != after+off-300 {
		t.Errorf("after 300 ns of jitter: %d, want %d (unchanged)", got, after+off-300)
	}
	off -= 300
	// Steps past maxSteps: the oldest are forgotten, and the oldest kept
	// stands for every earlier reading.
	for range maxSteps + 3 {
		off += 2 * stepAbove
		now += int64(refreshEvery)
		w.refresh()
	}
	s := *w.steps.Load()
	if len(s) != maxSteps || w.toUnix(0) != s[0].off {
		t.Errorf("%d steps kept (want %d); reading 0 → %d, want the oldest kept offset %d", len(s), maxSteps, w.toUnix(0), s[0].off)
	}
}

// The process-wide conversion agrees with a fresh measurement of the
// offset on this machine (nothing steps the clock during a test).
func TestMonotonicUnix(t *testing.T) {
	ns := Monotonic.Now()
	got := MonotonicUnix(ns)
	want := ns + Monotonic.Offset()
	if d := time.Duration(got - want).Abs(); d > 50*time.Millisecond {
		t.Errorf("MonotonicUnix off by %v", d)
	}
	if back := UnixMonotonic(got); back != ns {
		t.Errorf("UnixMonotonic(MonotonicUnix(%d)) = %d", ns, back)
	}
}
