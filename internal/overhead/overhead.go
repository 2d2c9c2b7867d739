// Package overhead is what the overhead benchmarks (bench/runoverhead,
// bench/meshoverhead) share: the latency of one measured load phase, medians
// over the rounds of a benchmark, and the CPU time of processes.
package overhead

import (
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
