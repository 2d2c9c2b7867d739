package diagnosis

import (
	"context"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// countingStore is the real store, counting every read a verdict makes
// through the store's interfaces.
type countingStore struct {
	*sqlite.Store
	reads, contents atomic.Int64
}

func (c *countingStore) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	c.reads.Add(1)
	return c.Store.GetTrace(ctx, id)
}

func (c *countingStore) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	c.reads.Add(1)
	return c.Store.FindTraces(ctx, q)
}

func (c *countingStore) FindTraceIDs(ctx context.Context, q store.TraceQuery) ([]model.TraceID, error) {
	c.reads.Add(1)
	return c.Store.FindTraceIDs(ctx, q)
}

func (c *countingStore) Anomalies(ctx context.Context, q store.AnomalyQuery) ([]*model.Span, error) {
	c.reads.Add(1)
	return c.Store.Anomalies(ctx, q)
}

func (c *countingStore) GetArtifact(ctx context.Context, id string) (store.Artifact, error) {
	c.reads.Add(1)
	return c.Store.GetArtifact(ctx, id)
}

func (c *countingStore) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	c.reads.Add(1)
	c.contents.Add(1)
	return c.Store.OpenArtifact(ctx, id)
}

func (c *countingStore) TraceArtifacts(ctx context.Context, id model.TraceID) ([]store.Artifact, error) {
	c.reads.Add(1)
	return c.Store.TraceArtifacts(ctx, id)
}

func (c *countingStore) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	c.reads.Add(1)
	return c.Store.SpanArtifacts(ctx, id)
}

// TestVerdictOnEvidence: an open incident's verdict is computed when it
// opens, and again only when evidence came for it (a flagged span of its
// requests, stored artifacts) or it grew old: a turn with nothing new reads
// nothing from the store. A verdict computed again over the same evidence
// is the same, and reads no stored critical path a second time.
func TestVerdictOnEvidence(t *testing.T) {
	ctx := context.Background()
	cs := &countingStore{Store: openStore(t)}
	onset := t0.Add(60 * time.Second)
	var batch, slow []*model.Span
	for i := range 60 {
		batch = append(batch, shopTrace(i, t0.Add(time.Duration(i)*time.Second), 2, 6, 3, false)...)
	}
	var captured []*model.Span // cart's SERVER spans of five slow requests
	for i := range 30 {
		tr := shopTrace(100+i, onset.Add(time.Duration(i)*200*time.Millisecond), 2, 70, 3, true)
		slow = append(slow, tr...)
		if i%6 == 0 {
			captured = append(captured, tr[2])
		}
	}
	if err := cs.WriteSpans(ctx, append(batch, slow...)); err != nil {
		t.Fatal(err)
	}
	// A capture of five slow requests: its kernel snapshot and the critical
	// paths the server stored from it, both linked to the spans.
	var refs []store.SpanRef
	for _, s := range captured {
		refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
	}
	k, err := cs.PutArtifact(ctx, store.Artifact{Kind: critpath.KernelKind, MediaType: critpath.MediaType, Service: "cart", CaptureID: "c1", Spans: refs},
		strings.NewReader("not read: its paths are stored"))
	if err != nil {
		t.Fatal(err)
	}
	doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: k.ID}
	for _, s := range captured {
		doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0, critpath.Network, "", 3.0))
	}
	buf := gzipJSON(t, doc)
	if _, err := cs.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
		CaptureID: "c1", Spans: refs}, buf); err != nil {
		t.Fatal(err)
	}

	now := onset.Add(10 * time.Second)
	clock := func() time.Time { return now }
	cfg := DefaultConfig()
	cache := critpath.NewStoredCache(critpath.DefaultStoredCacheBytes)
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: cs, Artifacts: cs}, Config: cfg, Now: clock, Cache: cache,
		Paths: StoredPaths{Artifacts: cs, Analyzer: &critpath.Analyzer{Spans: cs, Artifacts: cs, Cache: cache}}}
	tr, err := NewTracker(cfg, cs, d, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.now = clock
	tr.OnCommitted(slow)
	if opened := tr.step(now); len(opened) != 1 {
		t.Fatalf("%d incidents opened, want 1", len(opened))
	}
	// turn is one turn of Run's verdict loop at the clock: it returns the
	// verdicts computed and the store reads they made.
	turn := func() (int, int64) {
		r0 := cs.reads.Load()
		due := tr.due(now)
		for _, x := range due {
			tr.verdict(ctx, x, now)
		}
		return len(due), cs.reads.Load() - r0
	}
	verdictOf := func() *Verdict {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, x := range tr.open {
			return x.inc.Verdict
		}
		return nil
	}

	if n, reads := turn(); n != 1 || reads == 0 {
		t.Fatalf("opened: %d verdicts from %d store reads, want 1 that reads", n, reads)
	}
	first := verdictOf()
	if first == nil || first.Service != "cart" || first.Cause != CauseLock || first.PathSpans != len(captured) {
		t.Fatalf("verdict %+v, want cart/lock from %d stored paths", first, len(captured))
	}

	// Nothing new: no verdict, no read, turn after turn.
	for range 5 {
		now = now.Add(cfg.VerdictEvery)
		if n, reads := turn(); n != 0 || reads != 0 {
			t.Fatalf("no new evidence: %d verdicts from %d store reads, want none", n, reads)
		}
	}

	// The same evidence computed again: the same verdict, and the stored
	// critical paths come from the cache.
	c0 := cs.contents.Load()
	again, err := d.Diagnose(ctx, &tr.open["frontend GET /checkout"].inc)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.contents.Load() - c0; got != 0 {
		t.Errorf("a verdict computed again read %d artifacts' content, want 0 (cached)", got)
	}
	again.Updated = first.Updated
	if !reflect.DeepEqual(again, first) {
		t.Errorf("verdict computed again differs:\n%+v\nfirst:\n%+v", again, first)
	}

	// A flagged span of one of the incident's requests is new evidence,
	// read once.
	late := shopTrace(200, now.Add(-time.Second), 2, 70, 3, true)
	if err := cs.WriteSpans(ctx, late); err != nil {
		t.Fatal(err)
	}
	tr.OnCommitted(late[2:3]) // cart's span before its root
	tr.OnCommitted(late[:2])
	if n, reads := turn(); n != 1 || reads == 0 {
		t.Fatalf("a flagged span came: %d verdicts from %d reads, want 1", n, reads)
	}
	now = now.Add(cfg.VerdictEvery)
	if n, _ := turn(); n != 0 {
		t.Fatalf("%d verdicts after the evidence was read, want 0", n)
	}

	// A span that is not flagged, or a flagged one of another entry
	// point's request, is none.
	other := shopTrace(300, now, 2, 6, 3, true)
	other[0].Name = "GET /other"
	tr.OnCommitted(append(shopTrace(301, now, 2, 6, 3, false), other...))
	now = now.Add(cfg.VerdictEvery)
	if n, _ := turn(); n != 0 {
		t.Fatalf("%d verdicts after spans of no concern, want 0", n)
	}

	// Stored artifacts are, not before VerdictEvery since the last verdict.
	tr.Evidence()
	if n, _ := turn(); n != 1 {
		t.Fatalf("artifacts were stored: %d verdicts, want 1", n)
	}
	tr.Evidence()
	if n, _ := turn(); n != 0 {
		t.Fatalf("%d verdicts within VerdictEvery of the last, want 0", n)
	}
	now = now.Add(cfg.VerdictEvery)
	if n, _ := turn(); n != 1 {
		t.Fatalf("artifacts were stored: %d verdicts, want 1", n)
	}

	// So is age.
	now = now.Add(maxVerdictAge)
	if n, _ := turn(); n != 1 {
		t.Fatalf("a verdict %s old: %d verdicts, want 1", maxVerdictAge, n)
	}
}
