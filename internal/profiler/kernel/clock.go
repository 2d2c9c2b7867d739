package kernel

// clockPairs maps the CPUs' run-queue clocks (sched_clock_cpu) onto
// CLOCK_MONOTONIC. The recorder times context switches with the run queue's
// clock (FlagRQClock: a few loads instead of a ~80 ns clock helper) and
// emits, per CPU and every ~20 ms of that clock, an EvClock pair: the
// monotonic clock read just after the run-queue clock it pairs with. The
// run-queue clock was last updated up to a few microseconds before it was
// read, so each pair overstates the offset by that delay; the smallest
// offset of a CPU's last clockWindow pairs is the closest to the true one
// (and follows drift: while sched_clock is stable, the offset is constant).
// Not safe for concurrent use: the reader goroutine owns it.
type clockPairs struct {
	cpus map[uint16]*cpuPairs
	last int64 // offset of the latest pair of any CPU
	any  bool
	// unpaired counts switches seen on a CPU before any pair of any CPU
	// (their time cannot be mapped; they are dropped).
	unpaired uint64
}

// clockWindow is how many of a CPU's latest pairs its offset is the
// minimum of (~160 ms of that CPU's switches).
const clockWindow = 8

type cpuPairs struct {
	offs [clockWindow]int64
	n    int // pairs seen (the ring holds the latest min(n, clockWindow))
	min  int64
}

// pair records an EvClock pair of cpu: mono (bpf_ktime_get_ns) read just
// after rq (the run queue's clock).
func (c *clockPairs) pair(cpu uint16, mono, rq int64) {
	if c.cpus == nil {
		c.cpus = map[uint16]*cpuPairs{}
	}
	p := c.cpus[cpu]
	if p == nil {
		p = &cpuPairs{}
		c.cpus[cpu] = p
	}
	off := mono - rq
	p.offs[p.n%clockWindow] = off
	p.n++
	p.min = off
	for _, o := range p.offs[:min(p.n, clockWindow)] {
		p.min = min(p.min, o)
	}
	c.last, c.any = off, true
}

// mono maps a run-queue clock reading of cpu to CLOCK_MONOTONIC; ok is
// false when no pair was seen yet (the recorder emits a CPU's first pair
// before its first switch, so only a lost pair leads here; then another
// CPU's offset is used — they are equal while sched_clock is stable).
func (c *clockPairs) mono(cpu uint16, rq int64) (int64, bool) {
	if p := c.cpus[cpu]; p != nil {
		return rq + p.min, true
	}
	if c.any {
		return rq + c.last, true
	}
	c.unpaired++
	return 0, false
}
