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

// sure reports whether the window's shift by at least factor (its median
// or its 90th percentile at least factor × the baseline's) holds with
// confidence conf, from the window's requests win (n of them): the share of
// them above the bar (factor × the baseline's quantile q) is more than a
// window whose q-quantile lay at the bar would hold by chance, its count
// beyond what Binomial(n, 1−q) reaches with probability 1−conf. A
// window's 90th percentile of 40–75 requests (5 s at 8–15/s) is about its
// 4th–8th slowest request: a few slow ones more than usual move it by 25 %
// when nothing changed. conf 0: the quantiles alone decide.
func (s shift) sure(win *hist, factor, conf float64) bool {
	if conf <= 0 {
		return true
	}
	for _, q := range []struct{ p, base float64 }{{0.5, s.baseP50}, {0.9, s.baseP90}} {
		if q.base <= 0 {
			continue
		}
		k := int(math.Floor(win.above(factor * q.base)))
		if k > 0 && binomTail(s.n, k, 1-q.p) <= 1-conf {
			return true
		}
	}
	return false
}

// above returns how many of h's requests took more than ns: the bins above
// its bin, and the part of its bin above it (spread geometrically within
// the bin, as quantile interpolates).
func (h *hist) above(ns float64) float64 {
	b := binOf(int64(ns))
	if ns <= float64(histMin) {
		b = -1
	}
	var n float64
	for i := b + 1; i < histBins; i++ {
		n += float64(h[i])
	}
	if b >= 0 && h[b] > 0 {
		f := math.Log2(ns/binLow(b)) * histPerOctave // share of the bin below ns
		n += float64(h[b]) * (1 - min(max(f, 0), 1))
	}
	return n
}

// binomTail returns P(X ≥ k) for X ~ Binomial(n, p), 0 < p < 1.
func binomTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if k > n {
		return 0
	}
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	lp, lq := math.Log(p), math.Log1p(-p)
	var sum float64
	for i := k; i <= n; i++ {
		t := math.Exp(lg(n) - lg(i) - lg(n-i) + float64(i)*lp + float64(n-i)*lq)
		sum += t
		if float64(i) > float64(n)*p && t < sum*1e-12 {
			break
		}
	}
	return min(sum, 1)
}

// compare measures win (the window's summed counts, n requests) against b.
func compare(win *hist, n int, b *baseline) shift {
	w := func(i int) float64 { return float64(win[i]) }
	return shift{n: n, baseN: int(b.n), p50: quantile(w, float64(n), 0.5), p90: quantile(w, float64(n), 0.9),
		baseP50: b.quantile(0.5), baseP90: b.quantile(0.9)}
}
