// Package overhead is what the overhead benchmarks (bench/runoverhead,
// bench/meshoverhead) share: the latency of one measured load phase, medians
// over the rounds of a benchmark, and the CPU time of processes.
package overhead

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/loadgen"
)

// Latency is what one load phase measured.
type Latency struct {
	Mean, P50, P95, P99 time.Duration
	// Errors and Sent count requests.
	Errors, Sent int64
}

// Measured is the Latency of a load phase.
func Measured(pr loadgen.PhaseResult) Latency {
	return Latency{Mean: pr.Latency.Mean(), P50: pr.P50(), P95: pr.P95(), P99: pr.P99(), Errors: pr.Errors, Sent: pr.Sent}
}

// ErrorPercent is the percentage of sent requests that failed, 0 if none
// were sent.
func (l Latency) ErrorPercent() float64 {
	if l.Sent == 0 {
		return 0
	}
	return 100 * float64(l.Errors) / float64(l.Sent)
}

// MedianLatency returns each latency statistic's median over the rounds
// (latency gives a round's Latency), their Errors and Sent summed.
func MedianLatency[R any](rounds []R, latency func(R) Latency) Latency {
	stat := func(f func(Latency) time.Duration) time.Duration {
		return MedianOf(rounds, func(r R) time.Duration { return f(latency(r)) })
	}
	out := Latency{
		Mean: stat(func(l Latency) time.Duration { return l.Mean }),
		P50:  stat(func(l Latency) time.Duration { return l.P50 }),
		P95:  stat(func(l Latency) time.Duration { return l.P95 }),
		P99:  stat(func(l Latency) time.Duration { return l.P99 }),
	}
	for _, r := range rounds {
		l := latency(r)
		out.Errors += l.Errors
		out.Sent += l.Sent
	}
	return out
}

// MedianOf returns the median over the rounds of one statistic of each.
func MedianOf[R any, T ~int64 | ~float64](rounds []R, stat func(R) T) T {
	v := make([]T, len(rounds))
	for i, r := range rounds {
		v[i] = stat(r)
	}
	return Median(v)
}

// Median returns the middle value of v, the mean of the two middle ones when
// their number is even, and 0 when v is empty. It sorts v.
func Median[T ~int64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// ParseRates parses a comma-separated list of request rates (per second).
func ParseRates(s string) ([]float64, error) {
	var rates []float64
	for _, r := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(r, 64)
		if err != nil {
			return nil, err
		}
		rates = append(rates, v)
	}
	return rates, nil
}

// PairedCI returns the mean of paired differences (a mode's statistic minus
// the baseline's in the same round: the pair saw the same state of the
// machine) and the half-width of its 95 % interval from Student's t
// distribution, which a handful of rounds needs in place of the normal
// one. The half-width is NaN for fewer than two differences.
func PairedCI(diffs []float64) (mean, half float64) {
	n := len(diffs)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	for _, d := range diffs {
		mean += d
	}
	mean /= float64(n)
	if n < 2 {
		return mean, math.NaN()
	}
	var sq float64
	for _, d := range diffs {
		sq += (d - mean) * (d - mean)
	}
	sd := math.Sqrt(sq / float64(n-1))
	return mean, tQuantile975(n-1) * sd / math.Sqrt(float64(n))
}

// tQuantile975 is the 97.5th percentile of Student's t distribution with df
// degrees of freedom (two-sided 95 %); past 30 the normal's 1.96 is within
// 4 %.
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.96
}
