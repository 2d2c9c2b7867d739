package cpu_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/profiler"
)

// BenchmarkDump60s measures the latency of dumping a 60 s window of a busy
// target sampled at the default 99 Hz (issue target: < 1 s p95). The setup
// records for 61 s before the timer starts.
func BenchmarkDump60s(b *testing.B) {
	if os.Getenv("ROOTLINE_BENCH_LONG") == "" {
		b.Skip("set ROOTLINE_BENCH_LONG=1: this benchmark records for a minute first")
	}
	s := newSamplerHz(b, 99)
	p := startProc(b, buildGo(b))
	tgt := p.target("bench")
	if err := s.Start(b.Context(), tgt); err != nil {
		b.Fatal(err)
	}
	time.Sleep(61 * time.Second)
	var lat []time.Duration
	var samples int
	b.ResetTimer()
	for b.Loop() {
		end := time.Now()
		t0 := time.Now()
		arts, err := s.Dump(b.Context(), tgt, profiler.Window{Start: end.Add(-60 * time.Second), End: end})
		lat = append(lat, time.Since(t0))
		if err != nil || len(arts) != 1 {
			b.Fatalf("dump: %v (%d artifacts)", err, len(arts))
		}
		samples = len(arts[0].Data)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(samples), "artifact-bytes")
}
