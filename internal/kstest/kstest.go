// Package kstest is the two-sample Kolmogorov–Smirnov test, two-sided, with
// the p-value scipy.stats.ks_2samp(method="auto") gives: exact when both
// samples have at most 10,000 values (the lattice-path recursion of Hodges,
// "The Significance Probability of the Smirnov Two-Sample Test", in the form
// of Viehmann, "Numerically more stable computation of the p-values for the
// two-sample Kolmogorov-Smirnov test", which computes the p-value directly;
// the equal-size case by its closed form), otherwise the one-sample
// Kolmogorov distribution at en = round(n1·n2/(n1+n2)) as Simard and
// L'Ecuyer, "Computing the Two-Sided Kolmogorov-Smirnov Distribution",
// evaluate it (kolmogorov.go). The limiting Kolmogorov distribution is not
// used: it is off by 1–3 % at en of a few thousand and far more for small en.
//
// gonum's stat.KolmogorovSmirnov gives the statistic only.
package kstest

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxExactN is the largest sample size for which the p-value is exact.
const MaxExactN = 10000

// ErrEmpty is returned for an empty sample.
var ErrEmpty = errors.New("kstest: empty sample")

// Method says how a p-value was computed.
type Method string

// Methods of Result.
const (
	Exact      Method = "exact"
	Asymptotic Method = "asymp"
)

// Result of a two-sample test.
type Result struct {
	// D is max |F1 − F2| of the right-continuous empirical CDFs (in exact
	// mode rounded to the lattice h/lcm(n1, n2), as scipy does).
	D float64 `json:"d"`
	// P is the two-sided p-value: small means the samples come from
	// different distributions.
	P      float64 `json:"p"`
	Method Method  `json:"method"`
	N1     uint64  `json:"n1"`
	N2     uint64  `json:"n2"`
}

// TwoSample tests whether x and y come from the same continuous
// distribution. Neither slice is modified. NaNs are rejected.
func TwoSample(x, y []float64) (Result, error) {
	if len(x) == 0 || len(y) == 0 {
		return Result{}, ErrEmpty
	}
	for _, s := range [][]float64{x, y} {
		for _, v := range s {
			if math.IsNaN(v) {
				return Result{}, errors.New("kstest: NaN in a sample")
			}
		}
	}
	a, b := slices.Clone(x), slices.Clone(y)
	slices.Sort(a)
	slices.Sort(b)
	return fromD(statistic(a, b), uint64(len(a)), uint64(len(b))), nil
}

// statistic is max |F1 − F2| over every value of both sorted samples, with
// right-continuous ECDFs (numpy.searchsorted side="right").
func statistic(a, b []float64) float64 {
	n1, n2 := float64(len(a)), float64(len(b))
	var d float64
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var v float64
		switch {
		case j >= len(b) || (i < len(a) && a[i] <= b[j]):
			v = a[i]
		default:
			v = b[j]
		}
		for i < len(a) && a[i] <= v {
			i++
		}
		for j < len(b) && b[j] <= v {
			j++
		}
		d = max(d, math.Abs(float64(i)/n1-float64(j)/n2))
	}
	return d
}

// Binned tests two samples given as counts in the same bins (for example
// two log2 histograms of one metric): the same as TwoSample on samples
// holding each bin's value count times, without expanding them. Bins must be
// in increasing order of value.
func Binned(c1, c2 []uint64) (Result, error) {
	if len(c1) != len(c2) {
		return Result{}, fmt.Errorf("kstest: %d bins against %d", len(c1), len(c2))
	}
	var n1, n2 uint64
	for i := range c1 {
		n1 += c1[i]
		n2 += c2[i]
	}
	if n1 == 0 || n2 == 0 {
		return Result{}, ErrEmpty
	}
	var d float64
	var s1, s2 uint64
	for i := range c1 {
		s1 += c1[i]
		s2 += c2[i]
		d = max(d, math.Abs(float64(s1)/float64(n1)-float64(s2)/float64(n2)))
	}
	return fromD(d, n1, n2), nil
}

// fromD computes the p-value of statistic d for sizes n1, n2 as ks_2samp
// does in its "auto" mode.
func fromD(d float64, n1, n2 uint64) Result {
	r := Result{D: d, N1: n1, N2: n2}
	if max(n1, n2) <= MaxExactN {
		if dd, p, ok := exact(n1, n2, d); ok {
			r.D, r.P, r.Method = dd, p, Exact
			return r
		}
		// The recursion left [0, 1] (it does not here for n ≤ 10,000, but
		// scipy falls back the same way).
	}
	m, n := float64(max(n1, n2)), float64(min(n1, n2))
	en := math.RoundToEven(m * n / (m + n))
	r.P = clip(KolmogorovSF(int(en), r.D))
	r.Method = Asymptotic
	return r
}

func clip(p float64) float64 { return min(max(p, 0), 1) }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// exact returns the lattice-rounded statistic and P(D ≥ d) under the null.
func exact(n1, n2 uint64, d float64) (float64, float64, bool) {
	g := gcd(n1, n2)
	lcm := (n1 / g) * n2
	h := uint64(math.RoundToEven(d * float64(lcm)))
	d = float64(h) / float64(lcm)
	if h == 0 {
		return d, 1, true
	}
	var p float64
	if n1 == n2 {
		p = outsideSquare(n1, h)
	} else {
		p = outsideBand(n1, n2, g, h)
	}
	if !(p >= 0 && p <= 1) {
		return d, p, false
	}
	return d, p, true
}

// outsideSquare is P(D_{n,n} ≥ h/n) = 2 Σ_{k≥1} (−1)^{k+1} C(2n, n−kh)/C(2n, n),
// each ratio a product of h simple factors, evaluated from the innermost
// term outwards (a Horner scheme) to avoid cancelling large alternating terms.
func outsideSquare(n, h uint64) float64 {
	var p float64
	for k := int64(n / h); k >= 0; k-- {
		a := 1.0
		kh := uint64(k) * h
		for j := range h {
			a = float64(n-kh-j) * a / float64(n+kh+j+1)
		}
		p = a * (1 - p)
	}
	return 2 * p
}

// outsideBand is the share of monotone lattice paths from (0, 0) to (m, n)
// that touch or leave the band |x/m − y/n| < h/lcm(m, n): the p-value. One
// column of path probabilities is kept, over the sliding window of rows
// inside the band; cells outside count as 1 (every path through them is
// outside), and a cell's value is the x/(x+y), y/(x+y) mix of its
// neighbours, so no binomial coefficient is ever formed.
func outsideBand(m, n, g, h uint64) float64 {
	if m < n {
		m, n = n, m
	}
	mg, ng := m/g, n/g
	hf := float64(h)
	lo, hi := uint64(0), min(uint64(math.Ceil(hf/float64(mg))), n+1)
	width := hi - lo
	col := make([]float64, min(2*hi+2, n+1))
	for i := range col {
		col[i] = 1
	}
	for i := lo; i < hi; i++ {
		col[i] = 0
	}
	for i := uint64(1); i <= m; i++ {
		lastLo, lastWidth := lo, width
		lo = uint64(max(int64(math.Floor((float64(ng*i)-hf)/float64(mg)))+1, 0))
		lo = min(lo, n)
		hi = min(uint64(math.Ceil((float64(ng*i)+hf)/float64(mg))), n+1)
		if hi <= lo {
			return 1
		}
		v := 1.0
		if lo == 0 {
			v = 0
		}
		for jj := range hi - lo {
			j := jj + lo
			v = (col[jj+lo-lastLo]*float64(i) + v*float64(j)) / float64(i+j)
			col[jj] = v
		}
		width = hi - lo
		if lastWidth > width {
			for k := hi - lo; k < hi-lo+lastWidth-width; k++ {
				col[k] = 1
			}
		}
	}
	return col[hi-lo-1]
}
