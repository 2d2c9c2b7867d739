package diagnosis

import (
	"context"
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// growingIncident is an incident of the shop in a real SQLite store that
// grows a step at a time as one does while it is open: slow requests through
// cart, and a capture whose critical paths are stored (through the
// ArtifactChanges the diagnoser is told of) and linked to some of them,
// others linked later (LinkArtifact).
type growingIncident struct {
	st      *sqlite.Store
	changes *ArtifactChanges
	inc     *Incident
	onset   time.Time
	next    int // next trace number
	now     time.Time
	prev    []*model.Span // the previous step's cart spans
}

func newGrowingIncident(tb testing.TB, dir string, normal int) *growingIncident {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: dir}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	g := &growingIncident{st: st, changes: NewArtifactChanges(st), onset: t0.Add(10 * time.Minute)}
	var batch []*model.Span
	for i := range normal {
		batch = append(batch, shopTrace(i, g.onset.Add(-2*time.Minute+time.Duration(i)*time.Duration(int64(2*time.Minute)/int64(normal))), 2, 6, 3, false)...)
	}
	if err := st.WriteSpans(ctx, batch); err != nil {
		tb.Fatal(err)
	}
	g.next = normal
	g.inc = &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: g.onset.UnixNano()}
	g.now = g.onset
	return g
}

// step adds n slow requests in the next second, and a capture's stored
// paths of the previous step's requests: linked to half of them when stored,
// to the other half later (LinkArtifact, a span joining a capture late).
// The newest requests have no paths yet, so a verdict sampling only them
// reads the paths linked to the older ones (storedPaths).
func (g *growingIncident) step(tb testing.TB, n int) {
	tb.Helper()
	ctx := context.Background()
	var batch []*model.Span
	var cart []*model.Span
	base := g.now
	for i := range n {
		tr := shopTrace(g.next, base.Add(time.Duration(i)*time.Second/time.Duration(n)), 2, 70, 3, true)
		g.next++
		batch = append(batch, tr...)
		cart = append(cart, tr[2])
	}
	if err := g.st.WriteSpans(ctx, batch); err != nil {
		tb.Fatal(err)
	}
	refs := func(spans []*model.Span) (out []store.SpanRef) {
		for _, s := range spans {
			out = append(out, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
		}
		return out
	}
	if prev := g.prev; len(prev) > 0 {
		doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: fmt.Sprint("k", g.next)}
		for _, s := range prev {
			doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0, critpath.Network, "", 3.0))
		}
		art, err := g.changes.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
			CaptureID: fmt.Sprint("cap", g.next), Spans: refs(prev[:len(prev)/2])}, gzipJSON(tb, doc))
		if err != nil {
			tb.Fatal(err)
		}
		if err := g.changes.LinkArtifact(ctx, art.ID, refs(prev[len(prev)/2:])); err != nil {
			tb.Fatal(err)
		}
	}
	g.prev = cart
	g.now = base.Add(time.Second)
}

func (g *growingIncident) diagnoser(cfg Config, cache *critpath.StoredCache, changes *ArtifactChanges) *Diagnoser {
	return &Diagnoser{Source: &analysis.StoreSource{Spans: g.st, Artifacts: g.st}, Config: cfg, Cache: cache, Changes: changes,
		Paths: StoredPaths{Artifacts: g.st, Analyzer: &critpath.Analyzer{Spans: g.st, Artifacts: g.st, Cache: cache}},
		Now:   func() time.Time { return g.now }}
}

// TestIncrementalVerdictSame: the verdicts of a growing incident computed
// one after another with a VerdictState (the traces before the onset kept,
// the artifacts of unchanged traces kept) are the verdicts computed from
// scratch on the same store at the same time, at every step: before and
// after the traces before the onset are kept (30 s), while artifacts are
// stored and linked to old and new spans.
func TestIncrementalVerdictSame(t *testing.T) {
	ctx := context.Background()
	g := newGrowingIncident(t, t.TempDir(), 600)
	defer g.st.Close()
	// The verdicts sample the 10 newest requests, which have no paths yet:
	// their paths come from the stored paths linked to older anomalies.
	cfg := DefaultConfig()
	cfg.MaxTraces = 10
	scratch := g.diagnoser(cfg, nil, nil)
	counted := &spanArtifactCount{ArtifactStore: g.st}
	inc := g.diagnoser(cfg, nil, g.changes)
	inc.Source = &analysis.StoreSource{Spans: g.st, Artifacts: counted}
	var st VerdictState
	lock := 0
	for step := range 40 {
		g.step(t, 10)
		counted.n = 0
		got, err := inc.DiagnoseWith(ctx, g.inc, &st)
		if err != nil {
			t.Fatal(err)
		}
		reads := counted.n
		want, err := scratch.Diagnose(ctx, g.inc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: the incremental verdict differs from the one computed from scratch:\n%+v\n%+v", step, got, want)
		}
		if got.Cause == CauseLock {
			lock++
		}
		// Each step changes the artifacts of the previous 10 traces (5
		// linked when stored, 5 late) and adds 10 anomalous traces: at
		// most those are listed again once the state holds the rest.
		if step > 0 && reads > 20 {
			t.Errorf("step %d: %d traces' artifacts listed, want at most the 20 that changed or are new (of %d anomalous)", step, reads, 10*(step+1))
		}
		if step == 39 && !st.pre.ok {
			t.Errorf("the traces before the onset were not kept %s after it", g.now.Sub(g.onset))
		}
	}
	if lock < 30 {
		t.Fatalf("%d of 40 verdicts named the lock the stored paths show", lock)
	}
}

// spanArtifactCount counts the per-trace artifact listings.
type spanArtifactCount struct {
	store.ArtifactStore
	n int
}

func (c *spanArtifactCount) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	c.n++
	return store.SpanArtifacts(ctx, c.ArtifactStore, id)
}

// BenchmarkDiagnoseGrowingIncident: the verdicts of an open incident as it
// grows, 15 slow requests a second for 120 s over 2 minutes of normal
// traffic (15 per second), a capture's stored paths each second. Each
// iteration is one step; its verdict is computed from scratch ("scratch",
// as before VerdictState) and with the incident's state ("state") side by
// side, and reported as cpu-ms per verdict of each (metrics
// scratch-ms/verdict and state-ms/verdict, wall time, and the process's
// CPU time, scratch-cpu-ms/verdict and state-cpu-ms/verdict).
func BenchmarkDiagnoseGrowingIncident(b *testing.B) {
	ctx := context.Background()
	g := newGrowingIncident(b, b.TempDir(), 1800)
	defer g.st.Close()
	scratch := g.diagnoser(DefaultConfig(), critpath.NewStoredCache(critpath.DefaultStoredCacheBytes), nil)
	inc := g.diagnoser(DefaultConfig(), critpath.NewStoredCache(critpath.DefaultStoredCacheBytes), g.changes)
	var st VerdictState
	var scratchNs, stateNs, scratchCPU, stateCPU time.Duration
	steps := 0
	for b.Loop() {
		b.StopTimer()
		if steps == 120 {
			// A fresh incident: the store as at its start.
			b.Fatalf("run with -benchtime=120x or fewer")
		}
		g.step(b, 15)
		b.StartTimer()
		t1, c1 := time.Now(), cpuTime()
		if _, err := scratch.Diagnose(ctx, g.inc); err != nil {
			b.Fatal(err)
		}
		t2, c2 := time.Now(), cpuTime()
		if _, err := inc.DiagnoseWith(ctx, g.inc, &st); err != nil {
			b.Fatal(err)
		}
		t3, c3 := time.Now(), cpuTime()
		scratchNs += t2.Sub(t1)
		stateNs += t3.Sub(t2)
		scratchCPU += c2 - c1
		stateCPU += c3 - c2
		steps++
	}
	b.ReportMetric(float64(scratchNs.Milliseconds())/float64(steps), "scratch-ms/verdict")
	b.ReportMetric(float64(stateNs.Milliseconds())/float64(steps), "state-ms/verdict")
	b.ReportMetric(float64(scratchCPU.Milliseconds())/float64(steps), "scratch-cpu-ms/verdict")
	b.ReportMetric(float64(stateCPU.Milliseconds())/float64(steps), "state-cpu-ms/verdict")
}

// cpuTime is the process's CPU time so far (user and system): the
// benchmarks report it beside wall time, which a loaded machine stretches.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
