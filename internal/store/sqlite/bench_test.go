package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// genTrace makes one trace of spansPerTrace spans: a root in the first
// service and a chain of calls into the others, ~10 attributes each, ~1% of
// traces with an anomalous span. It is the load shape of the benchmarks.
type gen struct {
	rng      *rand.Rand
	services []string
	ops      [][]string
	next     uint64
}

func newGen(seed uint64, services, opsPerService int) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := range services {
		g.services = append(g.services, fmt.Sprintf("service-%02d", i))
		var ops []string
		for j := range opsPerService {
			ops = append(ops, fmt.Sprintf("GET /api/v1/resource-%02d/{id}", j))
		}
		g.ops = append(g.ops, ops)
	}
	return g
}

func (g *gen) trace(start int64, spansPerTrace int) []*model.Span {
	g.next++
	var tid model.TraceID
	tid[0], tid[1] = byte(g.rng.Uint32()), byte(g.rng.Uint32())
	for i := 8; i < 16; i++ {
		tid[i] = byte(g.next >> (8 * (15 - i)))
	}
	anomalousAt := -1
	if g.rng.IntN(100) == 0 {
		anomalousAt = g.rng.IntN(spansPerTrace)
	}
	spans := make([]*model.Span, spansPerTrace)
	var parent model.SpanID
	for i := range spans {
		svc := (g.rng.IntN(len(g.services)) + i) % len(g.services)
		if i == 0 {
			svc = int(g.next % uint64(len(g.services)))
		}
		var sid model.SpanID
		u := g.rng.Uint64()
		for j := range sid {
			sid[j] = byte(u >> (8 * j))
		}
		dur := int64(g.rng.IntN(200_000_000)) + 100_000
		s := &model.Span{
			TraceID: tid, SpanID: sid, ParentSpanID: parent,
			Service: g.services[svc], Name: g.ops[svc][g.rng.IntN(len(g.ops[svc]))],
			Kind: model.KindServer, Start: start + int64(i)*1000, Duration: dur,
			StatusCode: model.StatusOK, Scope: "rootline/supervisor",
			Attributes: []model.KeyValue{
				model.String("http.method", "GET"),
				model.String("http.route", "/api/v1/resource/{id}"),
				model.Int("http.status_code", 200),
				model.String("net.peer.name", "10.0.0."+fmt.Sprint(g.rng.IntN(255))),
				model.Int("net.peer.port", int64(30000+g.rng.IntN(30000))),
				model.Float("rootline.wait.local_ms", g.rng.Float64()),
				model.Float("rootline.wait.net_ms", g.rng.Float64()),
				model.Float("rootline.wait.remote_ms", g.rng.Float64()),
				model.String("user_agent.original", "Mozilla/5.0 (X11; Linux x86_64)"),
				model.Int("request.size", int64(g.rng.IntN(10000))),
			},
			Resource: []model.KeyValue{
				model.String(model.AttrServiceName, g.services[svc]),
				model.String(model.AttrHostName, "node-1"),
				model.Int(model.AttrProcessPID, int64(1000+svc)),
			},
		}
		if i == anomalousAt {
			s.Attributes = append(s.Attributes, model.Bool(model.AttrAnomaly, true), model.Bool(model.AttrError, true))
		}
		spans[i] = s
		parent = sid
	}
	return spans
}

// BenchmarkWriteSpans measures ingest: batches of 1000 spans of ~10
// attributes (100 traces of 10 spans) into a store that grows as it goes,
// with the default Synchronous=FULL (one fsync per batch).
func BenchmarkWriteSpans(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run(sync, func(b *testing.B) {
			s, err := Open(Config{Dir: b.TempDir(), Synchronous: sync}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			g := newGen(1, 20, 10)
			const batch = 1000
			start := time.Now().UnixNano()
			// Pre-generate so the benchmark times the store, not the generator.
			batches := make([][]*model.Span, 64)
			for i := range batches {
				for range batch / 10 {
					batches[i] = append(batches[i], g.trace(start, 10)...)
					start += int64(time.Millisecond)
				}
			}
			ctx := context.Background()
			i := 0
			cpu0, io0 := cpuTime(), writtenBytes()
			b.ResetTimer()
			for b.Loop() {
				// Each reuse of a batch gets fresh trace ids and moves on in
				// time, as real ingest does.
				bt := batches[i%len(batches)]
				if i >= len(batches) {
					for _, s := range bt {
						s.TraceID[2], s.TraceID[3] = byte(i>>8), byte(i)
						s.Start += int64(len(batches)) * batch / 10 * int64(time.Millisecond)
					}
				}
				if err := s.WriteSpans(ctx, bt); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "spans/s")
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*batch), "cpu-µs/span")
			if io1 := writtenBytes(); io1 > 0 {
				b.ReportMetric(float64(io1-io0)/float64(b.N*batch), "written-bytes/span")
			}
			if fi, err := os.Stat(s.dbPath + "-wal"); err == nil {
				b.ReportMetric(float64(fi.Size())/(1<<20), "wal-MiB")
			}
			if fi, err := os.Stat(s.dbPath); err == nil {
				b.ReportMetric(float64(fi.Size())/float64(b.N*batch), "db-bytes/span")
			}
		})
	}
}

// BenchmarkWriteSpansTrickle measures ingest as a small mesh produces it:
// a batch of 25 spans (5 traces of 5) every 50 ms — twenty sidecars or
// `rootline run`s that each flush once a second. It reports the CPU per span
// of the whole process (the writer and the background checkpoints), which
// at this rate is mostly per-commit work, and the bytes written per span.
//
//	go test -run '^$' -bench WriteSpansTrickle -benchtime 200x ./internal/store/sqlite/
func BenchmarkWriteSpansTrickle(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	g := newGen(1, 20, 10)
	start := time.Now().UnixNano()
	ctx := context.Background()
	write := func(traces, spansPerTrace int) int {
		var bt []*model.Span
		for range traces {
			bt = append(bt, g.trace(start, spansPerTrace)...)
			start += int64(time.Millisecond)
		}
		if err := s.WriteSpans(ctx, bt); err != nil {
			b.Fatal(err)
		}
		return len(bt)
	}
	// A store that is not empty: its indexes have some depth.
	for range 200 {
		write(50, 10)
	}
	time.Sleep(time.Second) // its checkpoints done
	cpu0, io0 := cpuTime(), writtenBytes()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		n += write(5, 5)
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-µs/span")
	if io1 := writtenBytes(); io1 > 0 {
		b.ReportMetric(float64(io1-io0)/float64(n), "written-bytes/span")
	}
}

// BenchmarkPurge measures age-based deletion: every op writes 100k spans
// (10k traces) and purges them all.
func BenchmarkPurge(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir(), Synchronous: "NORMAL"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	g := newGen(3, 20, 10)
	start := time.Now().UnixNano()
	var purged int64
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		for range 100 {
			var batch []*model.Span
			for range 100 {
				batch = append(batch, g.trace(start, 10)...)
				start += int64(time.Millisecond)
			}
			if err := s.WriteSpans(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		st, err := s.Purge(ctx, store.RetentionPolicy{Now: start + int64(time.Hour), Normal: 1, Anomalous: 1})
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(t0)
		purged += st.Spans
	}
	b.ReportMetric(float64(purged)/took.Seconds(), "spans/s")
}

// cpuTime is the user+system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writtenBytes is what this process passed to write(2) and friends so far
// (Linux /proc/self/io wchar; 0 elsewhere): the WAL, checkpoint and blob
// writes, a steadier measure of write amplification than time.
func writtenBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// The 1M-span fixture is built once per test binary run, on first use, and
// removed by TestMain.
var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
	fixtureEnd  int64 // newest span start
)

const (
	fixtureSpans    = 1_000_000
	fixtureServices = 20
	fixtureWindow   = 24 * time.Hour
)

func buildFixture(b *testing.B) string {
	fixtureOnce.Do(func() {
		fixtureDir, fixtureErr = os.MkdirTemp("", "rootline-bench-1m-")
		if fixtureErr != nil {
			return
		}
		began := time.Now()
		s, err := Open(Config{Dir: fixtureDir, Synchronous: "NORMAL"}, nil)
		if err != nil {
			fixtureErr = err
			return
		}
		g := newGen(42, fixtureServices, 10)
		const perTrace = 10
		traces := fixtureSpans / perTrace
		fixtureEnd = time.Now().UnixNano()
		first := fixtureEnd - int64(fixtureWindow)
		step := int64(fixtureWindow) / int64(traces)
		var batch []*model.Span
		for i := range traces {
			batch = append(batch, g.trace(first+int64(i)*step, perTrace)...)
			if len(batch) >= 1000 {
				if fixtureErr = s.WriteSpans(context.Background(), batch); fixtureErr != nil {
					return
				}
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			fixtureErr = s.WriteSpans(context.Background(), batch)
		}
		fixtureErr = s.Close()
		fmt.Fprintf(os.Stderr, "built %d-span fixture in %v\n", fixtureSpans, time.Since(began).Round(time.Millisecond))
	})
	if fixtureErr != nil {
		b.Fatal(fixtureErr)
	}
	return fixtureDir
}

func cleanupFixture() {
	if fixtureDir != "" {
		os.RemoveAll(fixtureDir)
	}
}

// BenchmarkQuery1M measures the read paths over a store of one million spans
// (100k traces of 10 spans, 20 services, one day). Building the fixture takes
// a while; it happens only when this benchmark is selected.
func BenchmarkQuery1M(b *testing.B) {
	dir := buildFixture(b)
	s, err := Open(Config{Dir: dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	hour := int64(time.Hour)

	// Known trace ids to fetch: the newest ones.
	ids, err := s.FindTraceIDs(ctx, store.TraceQuery{Limit: 1000})
	if err != nil || len(ids) == 0 {
		b.Fatalf("no traces: %v", err)
	}

	// The first look for services and operations without spans after Open
	// (purgenames.go): one scan of span_index, on the read pool. Later
	// purges look only at the operations of the spans they deleted.
	b.Run("PurgeUnusedNames/first", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.purgeUnusedNames(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetTrace", func(b *testing.B) {
		i := 0
		for b.Loop() {
			spans, err := s.GetTrace(ctx, ids[i%len(ids)])
			if err != nil || len(spans) == 0 {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("FindTraces/service+lastHour+limit20", func(b *testing.B) {
		for b.Loop() {
			tr, err := s.FindTraces(ctx, store.TraceQuery{Service: "service-03", StartMin: fixtureEnd - hour, StartMax: fixtureEnd, Limit: 20})
			if err != nil || len(tr) != 20 {
				b.Fatalf("%d traces, %v", len(tr), err)
			}
		}
	})
	b.Run("FindTraces/service+operation+minDuration", func(b *testing.B) {
		for b.Loop() {
			tr, err := s.FindTraces(ctx, store.TraceQuery{
				Service: "service-03", Operation: "GET /api/v1/resource-04/{id}",
				DurationMin: 150 * int64(time.Millisecond), StartMin: fixtureEnd - 6*hour, Limit: 20})
			if err != nil || len(tr) != 20 {
				b.Fatalf("%d traces, %v", len(tr), err)
			}
		}
	})
	b.Run("FindTraces/lastHour+limit20(no service)", func(b *testing.B) {
		for b.Loop() {
			tr, err := s.FindTraces(ctx, store.TraceQuery{StartMin: fixtureEnd - hour, StartMax: fixtureEnd, Limit: 20})
			if err != nil || len(tr) != 20 {
				b.Fatalf("%d traces, %v", len(tr), err)
			}
		}
	})
	b.Run("FindTraces/service+tag", func(b *testing.B) {
		for b.Loop() {
			tr, err := s.FindTraces(ctx, store.TraceQuery{
				Service: "service-03", Tags: map[string]string{"net.peer.name": "10.0.0.7"}, Limit: 20})
			if err != nil || len(tr) != 20 {
				b.Fatalf("%d traces, %v", len(tr), err)
			}
		}
	})
	b.Run("FindTraces/anomalousOnly", func(b *testing.B) {
		for b.Loop() {
			tr, err := s.FindTraces(ctx, store.TraceQuery{AnomalousOnly: true, Limit: 20})
			if err != nil || len(tr) != 20 {
				b.Fatalf("%d traces, %v", len(tr), err)
			}
		}
	})
	b.Run("Anomalies", func(b *testing.B) {
		for b.Loop() {
			sp, err := s.Anomalies(ctx, store.AnomalyQuery{Limit: 100})
			if err != nil || len(sp) != 100 {
				b.Fatalf("%d spans, %v", len(sp), err)
			}
		}
	})
	b.Run("Anomalies/service", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Anomalies(ctx, store.AnomalyQuery{Service: "service-03", Since: fixtureEnd - 6*hour}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Dependencies/lastHour", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Dependencies(ctx, fixtureEnd-hour, fixtureEnd); err != nil {
				b.Fatal(err)
			}
		}
	})
}
