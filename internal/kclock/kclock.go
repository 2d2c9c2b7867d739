// Package kclock turns readings of the kernel's clocks into Unix time. BPF
// programs, perf events and tracepoints stamp events with CLOCK_MONOTONIC
// (bpf_ktime_get_ns), which counts from boot; spans, profiles and artifacts
// are in Unix nanoseconds. Readers convert with MonotonicUnix, which adds
// the offset between the two in force when the reading was taken (wall.go:
// the wall clock can be stepped while they run).
package kclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock is a kernel clock, by its clock id.
type Clock int32

// Monotonic is CLOCK_MONOTONIC: bpf_ktime_get_ns and the timestamps of perf
// events and tracepoints. It does not count time the machine was suspended.
const Monotonic Clock = unix.CLOCK_MONOTONIC

// Now reads the clock, in nanoseconds.
func (c Clock) Now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(int32(c), &ts)
	return ts.Nano()
}

// Offset measures Unix ns − the clock's ns: added to a reading of the clock
// it gives Unix time. The wall-clock read is bracketed by two reads of the
// clock, and of five tries the tightest bracket is kept, so the offset is off
// by at most half of it (well under a microsecond unless every try was
// preempted). It changes when the wall clock is stepped.
func (c Clock) Offset() int64 {
	var c1, rt, c2 unix.Timespec
	best := int64(-1)
	var off int64
	for range 5 {
		_ = unix.ClockGettime(int32(c), &c1)
		_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
		_ = unix.ClockGettime(int32(c), &c2)
		if d := c2.Nano() - c1.Nano(); best < 0 || d < best {
			best = d
			off = rt.Nano() - (c1.Nano()+c2.Nano())/2
		}
	}
	return off
}

// ToTime converts a reading of a clock to wall time, given the clock's
// Offset.
func ToTime(ns, offset int64) time.Time { return time.Unix(0, ns+offset) }
