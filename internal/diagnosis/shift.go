package diagnosis

import (
	"math"
	"math/bits"
)

// The shift rule: an entry point whose latency distribution moved up as a
// whole — its median or its 90th percentile over the last Window at least
// MinShift above what they were before — for ShiftFor opens an incident even
// when the detector flagged few of its requests. The detector compares each
// span with the median of its operation's *recent* durations, so a sustained
// slowdown of less than its threshold (3×) is learnt within seconds and
// flags only its first requests; the tracker's baseline is the entry's own
// latency before, kept apart from what it judges.
//
// Latencies are counted in log-spaced bins, histPerOctave per doubling from
// histMin: a bin is 9 % wide, and a quantile is interpolated geometrically
// within its bin.
const (
	histPerOctave = 8
	histOctaves   = 24 // 100 µs … ~28 min
	histBins      = histPerOctave * histOctaves
	histMin       = int64(100_000) // ns
	// minShiftRequests and minBaseRequests: the requests the window and
	// the baseline must hold for their quantiles to be compared (a window of
	// a few requests has no 90th percentile worth reading).
	minShiftRequests = 30
	minBaseRequests  = 100
)

// hist counts one second's root-span latencies of an entry point.
type hist [histBins]uint32

// binOf returns the bin of a latency in ns.
func binOf(ns int64) int {
	if ns <= histMin {
		return 0
	}
	r := float64(ns) / float64(histMin)
	// The octave from the integer part of log2 (exact), the bin in it from
	// the mantissa.
	oct := bits.Len64(uint64(r)) - 1
	frac := r / float64(uint64(1)<<oct) // [1, 2)
	b := oct*histPerOctave + int(math.Log2(frac)*histPerOctave)
	return min(b, histBins-1)
}

// binLow returns the lower edge of bin b in ns.
func binLow(b int) float64 {
	return float64(histMin) * math.Exp2(float64(b)/histPerOctave)
}

func (h *hist) add(ns int64) { h[binOf(ns)]++ }

// baseline is an entry point's latency before now: the seconds that left
// the window, weighed down by exp(-age/tau), skipping those the tracker
// judged shifted or that fell in an incident.
type baseline struct {
	w   [histBins]float64
	n   float64
	sec int64 // the last second folded in
}

// fold adds one second's counts, decaying what was there by the seconds
// since the last fold.
func (b *baseline) fold(h *hist, sec int64, tau float64) {
	if b.n > 0 && sec > b.sec {
		d := math.Exp(-float64(sec-b.sec) / tau)
		b.n = 0
		for i := range b.w {
			b.w[i] *= d
			b.n += b.w[i]
		}
	}
	for i, c := range h {
		if c > 0 {
			b.w[i] += float64(c)
			b.n += float64(c)
		}
	}
	b.sec = max(b.sec, sec)
}

// quantile returns the p-quantile (0 < p < 1) of the weights w summing to n,
// in ns, interpolated geometrically within its bin; NaN when n is 0.
func quantile(w func(int) float64, n, p float64) float64 {
	if n <= 0 {
		return math.NaN()
	}
	target := p * n
	acc := 0.0
	for i := range histBins {
		c := w(i)
		if c <= 0 {
			continue
		}
		if acc+c >= target {
			f := (target - acc) / c
			return binLow(i) * math.Exp2(f/histPerOctave)
		}
		acc += c
	}
	return binLow(histBins)
}

func (b *baseline) quantile(p float64) float64 {
	return quantile(func(i int) float64 { return b.w[i] }, b.n, p)
}

// shift compares a window's latencies with a baseline.
type shift struct {
	n, baseN         int
	p50, p90         float64 // the window's, ns
	baseP50, baseP90 float64
}

// ratio is the larger of the window's median and 90th percentile over the
// baseline's.
func (s shift) ratio() float64 {
	if s.baseP50 <= 0 || s.baseP90 <= 0 {
		return 0
	}
	return max(s.p50/s.baseP50, s.p90/s.baseP90)
}

// comparable reports whether both sides hold enough requests.
func (s shift) comparable() bool {
	return s.n >= minShiftRequests && s.baseN >= minBaseRequests
}

// compare measures win (the window's summed counts, n requests) against b.
func compare(win *hist, n int, b *baseline) shift {
	w := func(i int) float64 { return float64(win[i]) }
	return shift{n: n, baseN: int(b.n), p50: quantile(w, float64(n), 0.5), p90: quantile(w, float64(n), 0.9),
		baseP50: b.quantile(0.5), baseP90: b.quantile(0.9)}
}
