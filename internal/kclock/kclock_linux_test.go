package kclock

import "testing"

func init() {
	clocks = append(clocks, struct {
		name  string
		clock Clock
	}{"boottime", Boottime})
}

// Monotonic and boot time differ by the time the machine was suspended:
// never negative.
func TestBoottimeCountsSuspend(t *testing.T) {
	m := Monotonic.Now()
	if b := Boottime.Now(); b < m {
		t.Errorf("CLOCK_BOOTTIME %d < CLOCK_MONOTONIC %d read before it", b, m)
	}
}
