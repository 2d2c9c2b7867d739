package anomaly

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The benchmarks run the default config (W = 500) with the wall clock, as the
// pipeline does, on log-normal durations around 1 ms. Compare runs with
// benchstat.

func BenchmarkMedianObserve(b *testing.B) {
	benchObserve(b, func(c Config) (Detector, error) { return NewMedian(c, nil) })
}

// BenchmarkMedianObserveAt is the pipeline's path: the span's end time is
// the key's LastSeen, so no clock is read per span.
func BenchmarkMedianObserveAt(b *testing.B) {
	benchObserveAt(b, func(c Config) (Detector, error) { return NewMedian(c, nil) })
}

func BenchmarkNaiveObserve(b *testing.B) {
	benchObserve(b, func(c Config) (Detector, error) { return NewNaive(c, nil) })
}

func benchObserve(b *testing.B, newDet func(Config) (Detector, error)) {
	bench(b, newDet, func(det Detector, key string, d int64) { det.Observe(key, d) })
}

func benchObserveAt(b *testing.B, newDet func(Config) (Detector, error)) {
	bench(b, newDet, func(det Detector, key string, d int64) { det.ObserveAt(key, d, d) })
}

func bench(b *testing.B, newDet func(Config) (Detector, error), observe func(Detector, string, int64)) {
	rng := rand.New(rand.NewPCG(1, 2))
	durations := make([]int64, 1<<16) // a power of two, indexed with a mask
	for i := range durations {
		durations[i] = int64(math.Exp(rng.NormFloat64()) * 1e6)
	}
	mask := len(durations) - 1
	for _, keys := range []int{1, 100} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			cfg := DefaultConfig()
			det, err := newDet(cfg)
			if err != nil {
				b.Fatal(err)
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("checkout POST /api/orders/%d", i)
			}
			// Fill every key's window so the loop measures the steady state.
			for i := range keys * cfg.Window {
				det.Observe(names[i%keys], durations[i&mask])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				observe(det, names[i%keys], durations[i&mask])
			}
		})
	}
}
