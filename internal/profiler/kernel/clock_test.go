package kernel

import "testing"

func TestClockPairs(t *testing.T) {
	var c clockPairs
	if _, ok := c.mono(0, 100); ok || c.unpaired != 1 {
		t.Fatalf("mono before any pair: ok=%v unpaired=%d, want false 1", ok, c.unpaired)
	}
	// CPU 0: offsets 1000 + delays 800, 300, 2000 → the smallest wins.
	c.pair(0, 1_000_000+1800, 1_000_000)
	c.pair(0, 2_000_000+1300, 2_000_000)
	c.pair(0, 3_000_000+3000, 3_000_000)
	if got, ok := c.mono(0, 5_000_000); !ok || got != 5_001_300 {
		t.Fatalf("mono(cpu 0) = %d %v, want 5001300 true", got, ok)
	}
	// A CPU without pairs borrows the latest pair of any CPU.
	if got, ok := c.mono(1, 10); !ok || got != 10+3000 {
		t.Fatalf("mono(cpu 1) = %d %v, want 3010 true", got, ok)
	}
	// The minimum is over the latest clockWindow pairs only: after a drift
	// to offset 5000, the old 1300 leaves the window.
	for i := range clockWindow {
		c.pair(0, int64(i)*10+5000, int64(i)*10)
	}
	if got, _ := c.mono(0, 0); got != 5000 {
		t.Fatalf("after drift: mono(cpu 0, 0) = %d, want 5000", got)
	}
	c.pair(0, 4900, 0)
	if got, _ := c.mono(0, 0); got != 4900 {
		t.Fatalf("mono(cpu 0, 0) = %d, want 4900", got)
	}
}
