package kclock

import (
	"testing"
	"time"
)

// A reading of a clock plus its offset is the wall-clock time of the
// reading, and two measurements of the offset agree (the wall clock is not
// stepped during a test). The bounds are generous: a preempted test thread
// may sit between two reads for a scheduler tick or more.
func TestOffset(t *testing.T) {
	for _, tc := range clocks {
		t.Run(tc.name, func(t *testing.T) {
			off := tc.clock.Offset()
			before := time.Now()
			got := ToTime(tc.clock.Now(), off)
			after := time.Now()
			const slack = 50 * time.Millisecond
			if got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
				t.Errorf("clock + offset = %v, want within [%v, %v]", got, before, after)
			}
			if d := time.Duration(tc.clock.Offset() - off).Abs(); d > slack {
				t.Errorf("offset moved by %v between two measurements", d)
			}
			if tc.clock.Now() <= 0 || off <= 0 {
				t.Errorf("reading %d, offset %d: the clocks count from boot, the wall clock from 1970", tc.clock.Now(), off)
			}
		})
	}
}

// clocks are the clocks this platform has.
var clocks = []struct {
	name  string
	clock Clock
}{{"monotonic", Monotonic}}
