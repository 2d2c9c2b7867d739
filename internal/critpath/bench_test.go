package critpath

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// cpuTime is the process's user and system CPU time so far: on a shared,
// noisy machine it says more than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the CPU time per operation since c0.
func reportCPU(b *testing.B, c0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e6, "cpu-ms/op")
}

// The benchmark snapshot: a synthetic one of about ROOTLINE_BENCH_SNAPSHOT_MB
// (default 500) MB of JSON, the size of the recorder's full default buffer.
// generate gives it a real snapshot's structure: 4 processes × 64 threads
// over 10 s, each thread running (mean 400 µs), preempted or throttled, or
// blocking (mean 2 ms) on locks (woken by a thread running at that moment),
// the network, the disk, timers and page faults, with requests of mean 20 ms
// (some handed between threads, some overlapping on one thread, a Go
// process). It is encoded in each format: v2 (gzipped JSON, cached in the
// temporary directory: it takes about a minute), v3 (the binary format,
// zstd) and v3 uncompressed.
type benchData struct {
	snap   *kernel.Snapshot
	v2     []byte
	v3     []byte
	v3raw  []byte
	rawLen int64 // the JSON's size, inflated
	reqs   []Request
	picked []int // the 1,000 requests whose paths are computed
}

var (
	benchOnce sync.Once
	bench     *benchData
	benchErr  error
)

// benchConfig is the generator's configuration for a snapshot of about mb
// MB of JSON.
func benchConfig(mb int) genConfig {
	return genConfig{seed: 1, procs: 4, threads: 64, dur: int64(mb) * 20_000_000, meanRun: 400_000, meanBlock: 2_000_000,
		meanReq: 20_000_000, meanReqGap: 5_000_000, start: 1_700_000_000_000_000_000, foreignWakers: 0.02}
}

func benchSnapshot(b *testing.B) *benchData {
	b.Helper()
	benchOnce.Do(func() {
		mb := 500
		if v, err := strconv.Atoi(os.Getenv("ROOTLINE_BENCH_SNAPSHOT_MB")); err == nil && v > 0 {
			mb = v
		}
		s, reqs := generate(benchConfig(mb))
		bench = &benchData{snap: s, reqs: reqs}
		cache := filepath.Join(os.TempDir(), fmt.Sprintf("rootline-critpath-bench-%dmb.json.gz", mb))
		if data, err := os.ReadFile(cache); err == nil {
			bench.v2 = data
		} else {
			var buf bytes.Buffer
			if benchErr = s.EncodeJSON(&buf); benchErr != nil {
				return
			}
			bench.v2 = buf.Bytes()
			_ = os.WriteFile(cache, bench.v2, 0o644)
		}
		var v3, raw bytes.Buffer
		if benchErr = s.Encode(&v3); benchErr != nil {
			return
		}
		if benchErr = s.EncodeUncompressed(&raw); benchErr != nil {
			return
		}
		bench.v3, bench.v3raw = v3.Bytes(), raw.Bytes()
		zr, err := gzip.NewReader(bytes.NewReader(bench.v2))
		if err != nil {
			benchErr = err
			return
		}
		bench.rawLen, benchErr = io.Copy(io.Discard, zr)
		step := max(1, len(reqs)/1000)
		for i := 0; i < len(reqs) && len(bench.picked) < 1000; i += step {
			bench.picked = append(bench.picked, i)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return bench
}

// formats are the stored artifact in each format, for side-by-side runs.
func (d *benchData) formats() []struct {
	name string
	data []byte
} {
	return []struct {
		name string
		data []byte
	}{{"v2", d.v2}, {"v3", d.v3}, {"v3-uncompressed", d.v3raw}}
}

// BenchmarkDecode reads the snapshot artifact into a Timeline, in each
// format. MB/s is of the JSON's size, the same for all.
func BenchmarkDecode(b *testing.B) {
	d := benchSnapshot(b)
	for _, f := range d.formats() {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(d.rawLen)
			b.ReportAllocs()
			b.ReportMetric(float64(len(f.data))/1e6, "stored-MB")
			c0 := cpuTime()
			for b.Loop() {
				tl, err := DecodeBytes(f.data)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(tl.Intervals()), "intervals")
			}
			reportCPU(b, c0)
		})
	}
}

// BenchmarkPaths1000 computes the critical paths of 1,000 requests over the
// decoded snapshot, the association of all its requests included.
func BenchmarkPaths1000(b *testing.B) {
	d := benchSnapshot(b)
	tl, err := DecodeBytes(d.v3)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		a := New(Input{Timeline: tl, Requests: d.reqs}, Config{})
		segs := 0
		for _, i := range d.picked {
			p := a.Path(i)
			segs += len(p.Segments)
		}
		b.ReportMetric(float64(segs)/float64(len(d.picked)), "segments/path")
	}
	reportCPU(b, c0)
}

// BenchmarkEndToEnd is the whole analysis of a stored snapshot, in each
// format: decode, index, 1,000 paths; it reports the heap in use once the
// timeline is built.
func BenchmarkEndToEnd(b *testing.B) {
	d := benchSnapshot(b)
	for _, f := range d.formats() {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(d.rawLen)
			b.ReportAllocs()
			var heap uint64
			c0 := cpuTime()
			for b.Loop() {
				tl, err := DecodeBytes(f.data)
				if err != nil {
					b.Fatal(err)
				}
				a := New(Input{Timeline: tl, Requests: d.reqs}, Config{})
				for _, i := range d.picked {
					_ = a.Path(i)
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapInuse)
				runtime.KeepAlive(a)
			}
			reportCPU(b, c0)
			b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
		})
	}
}

// BenchmarkInflate only decompresses the artifact: the floor of any decoder
// of the format (gzip for v2, zstd for v3).
func BenchmarkInflate(b *testing.B) {
	d := benchSnapshot(b)
	b.Run("v2", func(b *testing.B) {
		c0 := cpuTime()
		for b.Loop() {
			zr, err := gzip.NewReader(bytes.NewReader(d.v2))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, zr); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, c0)
	})
	b.Run("v3", func(b *testing.B) {
		c0 := cpuTime()
		for b.Loop() {
			zr, err := zstd.NewReader(bytes.NewReader(d.v3), zstd.WithDecoderConcurrency(1))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, zr); err != nil {
				b.Fatal(err)
			}
			zr.Close()
		}
		reportCPU(b, c0)
	})
}

// BenchmarkEncode is the recorder's side: writing the snapshot in each
// format (what the agent pays per dump), with the bytes stored.
func BenchmarkEncode(b *testing.B) {
	d := benchSnapshot(b)
	for _, f := range []struct {
		name string
		enc  func(io.Writer) error
	}{{"v2", d.snap.EncodeJSON}, {"v3", d.snap.Encode}, {"v3-uncompressed", d.snap.EncodeUncompressed}} {
		b.Run(f.name, func(b *testing.B) {
			var n int64
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				var w countWriter
				if err := f.enc(&w); err != nil {
					b.Fatal(err)
				}
				n = w.n
			}
			reportCPU(b, c0)
			b.ReportMetric(float64(n)/1e6, "stored-MB")
		})
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkDecodeReference decodes with the recorder's own decoder
// (encoding/json for v2) and indexes the result: what Decode replaces.
func BenchmarkDecodeReference(b *testing.B) {
	d := benchSnapshot(b)
	b.SetBytes(d.rawLen)
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		s, err := kernel.DecodeSnapshot(d.v2)
		if err != nil {
			b.Fatal(err)
		}
		_ = timelineOf(s)
	}
	reportCPU(b, c0)
}
