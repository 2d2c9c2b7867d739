package diagnosis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// TestDiagnoseStoredPathsBeyondSample: the verdict compares only the newest
// MaxTraces traces, none of which has a kernel snapshot; the one capture of
// the incident stored the paths of older requests. The verdict reads them
// from the stored "critical-path" artifact, in the real store, and names
// the cause they show instead of unknown.
func TestDiagnoseStoredPathsBeyondSample(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	var batch []*model.Span
	onset := t0.Add(60 * time.Second)
	for i := range 60 {
		batch = append(batch, shopTrace(i, t0.Add(time.Duration(i)*time.Second), 2, 6, 3, false)...)
	}
	slowSpans, _, captured, end := slowShopTraces(onset)
	batch = append(batch, slowSpans...)
	if err := st.WriteSpans(ctx, batch); err != nil {
		t.Fatal(err)
	}
	doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: "k1"}
	var refs []store.SpanRef
	for _, s := range captured {
		doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0, critpath.Network, "", 3.0))
		refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
	}
	buf := gzipJSON(t, doc)
	if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
		Start: onset.UnixNano(), End: end, CaptureID: "c1", Spans: refs}, buf); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MaxTraces = 10 // the newest 10 slow requests: not the captured ones
	for _, stored := range []bool{false, true} {
		d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: cfg,
			Paths: &fakePaths{path: func(*model.Span) *critpath.SpanPath { return nil }},
			Now:   func() time.Time { return time.Unix(0, end).Add(time.Second) }}
		if !stored {
			// Without the anomalies' artifacts there is nothing to find.
			d.Source = &analysis.StoreSource{Spans: st}
		}
		v, err := d.Diagnose(ctx, &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: end})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stored=%v verdict: %s %s paths %d\nevidence: %s\nmissing: %s", stored, v.Service, v.Cause, v.PathSpans,
			strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
		want, wantPaths := CauseUnknown, 0
		if stored {
			want, wantPaths = CauseLock, 5
		}
		if v.Service != "cart" || v.Cause != want || v.PathSpans != wantPaths {
			t.Fatalf("stored=%v: verdict %s/%s from %d paths, want cart/%s from %d", stored, v.Service, v.Cause, v.PathSpans, want, wantPaths)
		}
		if stored && (v.Waits[critpath.Lock] < 5*60 || !strings.Contains(strings.Join(v.Evidence, "\n"), "5 from the stored paths of captures during the incident")) {
			t.Errorf("waits %v, evidence %q", v.Waits, v.Evidence)
		}
	}
}

// TestDiagnoseBaselineGrowth: cart computes 50 ms per request; the fault
// adds 20 ms of disk waits. The slow spans' paths are mostly running (50 of
// 70 ms): by shares the cause would be cpu. The capture also stored the
// paths of cart's normal spans before the onset (running 50 ms): weighed
// against them, what grew is the disk. Without those paths the verdict
// says it had no baseline and keeps the shares.
func TestDiagnoseBaselineGrowth(t *testing.T) {
	ctx := context.Background()
	onset := t0.Add(60 * time.Second)
	for _, withBase := range []bool{true, false} {
		st := openStore(t)
		var batch []*model.Span
		var normal []*model.Span // cart's SERVER spans before the onset
		for i := range 60 {
			tr := shopTrace(i, t0.Add(time.Duration(i)*time.Second), 2, 50, 3, false)
			batch = append(batch, tr...)
			if i >= 50 {
				normal = append(normal, tr[2])
			}
		}
		slowSpans, slow, captured, end := slowShopTraces(onset)
		batch = append(batch, slowSpans...)
		if err := st.WriteSpans(ctx, batch); err != nil {
			t.Fatal(err)
		}
		doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: "k1"}
		var refs []store.SpanRef
		for _, s := range captured {
			doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 50.0, critpath.Disk, "", 20.0))
			refs = append(refs, store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID})
		}
		if withBase {
			for _, s := range normal {
				doc.Paths = append(doc.Paths, *segmentsPath(s, critpath.Running, "", 50.0))
			}
		}
		if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
			Start: normal[0].Start, End: end, CaptureID: "c1", Spans: refs}, gzipJSON(t, doc)); err != nil {
			t.Fatal(err)
		}
		d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(),
			Paths: &fakePaths{spans: slow, path: func(s *model.Span) *critpath.SpanPath {
				if s.Service != "cart" || s.Kind != model.KindServer {
					return nil
				}
				return segmentsPath(s, critpath.Running, "", 50.0, critpath.Disk, "", 20.0)
			}},
			Now: func() time.Time { return time.Unix(0, end).Add(time.Second) }}
		v, err := d.Diagnose(ctx, &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(), End: end})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("baseline=%v verdict: %s %s paths %d, baseline %d %v\nevidence: %s\nmissing: %s", withBase, v.Service, v.Cause, v.PathSpans,
			v.BaselineSpans, v.BaselineWaits, strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
		want, wantBase := CauseCPU, 0
		if withBase {
			want, wantBase = CauseDisk, len(normal)
		}
		if v.Service != "cart" || v.Cause != want || v.BaselineSpans != wantBase {
			t.Fatalf("baseline=%v: verdict %s/%s with %d baseline spans, want cart/%s with %d", withBase, v.Service, v.Cause, v.BaselineSpans, want, wantBase)
		}
		ev := strings.Join(append(v.Evidence, v.Missing...), "\n")
		if withBase && (v.BaselineWaits[critpath.Running] != 50 || !strings.Contains(ev, "per slow span, more disk +20.0 ms")) ||
			!withBase && !strings.Contains(ev, "a baseline: kernel critical paths of cart's spans before the onset: 0 of the 4 needed") {
			t.Errorf("baseline=%v: baseline waits %v, evidence and missing:\n%s", withBase, v.BaselineWaits, ev)
		}
	}
}

// slowShopTraces are 30 slow requests from onset on, 200 ms apart (cart
// takes 70 ms): their spans, by trace, cart's SERVER spans of the first
// five (a capture's), and when the last ends.
func slowShopTraces(onset time.Time) (spans []*model.Span, byTrace map[model.TraceID][]*model.Span, captured []*model.Span, end int64) {
	byTrace = map[model.TraceID][]*model.Span{}
	for i := range 30 {
		tr := shopTrace(100+i, onset.Add(time.Duration(i)*200*time.Millisecond), 2, 70, 3, true)
		spans = append(spans, tr...)
		byTrace[tr[0].TraceID] = tr
		end = tr[0].End()
		if i < 5 {
			captured = append(captured, tr[2])
		}
	}
	return spans, byTrace, captured, end
}

// TestStoredPathsNeverAnalyse: a trace whose cart span has stored paths and
// whose database span is linked to a second capture's kernel snapshot only
// (its paths not stored yet) gets the stored path, and the snapshot is not
// analysed on the spot — a verdict every two seconds would pay for it each
// time (the body here is not a snapshot: reading it would leave a note).
func TestStoredPathsNeverAnalyse(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	tr := shopTrace(1, t0, 2, 70, 3, true)
	if err := st.WriteSpans(ctx, tr); err != nil {
		t.Fatal(err)
	}
	cart, db := tr[2], tr[len(tr)-1]
	ref := func(s *model.Span) []store.SpanRef { return []store.SpanRef{{TraceID: s.TraceID, SpanID: s.SpanID}} }
	k1, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.KernelKind, MediaType: critpath.MediaType, Service: "cart", CaptureID: "c1", Spans: ref(cart)},
		strings.NewReader("not read: its paths are stored"))
	if err != nil {
		t.Fatal(err)
	}
	doc := critpath.Stored{Version: critpath.StoredVersion, Snapshot: k1.ID,
		Paths: []critpath.SpanPath{*segmentsPath(cart, critpath.Running, "", 8.0, critpath.Running, critpath.Lock, 62.0)}}
	if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.ArtifactKind, MediaType: critpath.ArtifactMediaType, Service: "cart",
		CaptureID: "c1", Spans: ref(cart)}, gzipJSON(t, doc)); err != nil {
		t.Fatal(err)
	}
	k2, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.KernelKind, MediaType: critpath.MediaType, Service: db.Service, CaptureID: "c2", Spans: ref(db)},
		strings.NewReader("not a snapshot"))
	if err != nil {
		t.Fatal(err)
	}
	p := StoredPaths{Artifacts: st, Analyzer: &critpath.Analyzer{Spans: st, Artifacts: st}}
	res, err := p.Trace(ctx, cart.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Spans) != 1 || res.Spans[0].SpanID != cart.SpanID.String() {
		t.Fatalf("paths %+v, want cart's stored one", res.Spans)
	}
	for _, n := range res.Notes {
		if strings.Contains(n, k2.ID) {
			t.Fatalf("the snapshot without stored paths was read: %q", n)
		}
	}
	// A trace linked to a snapshot only has no stored paths yet.
	tr2 := shopTrace(2, t0.Add(time.Second), 2, 70, 3, true)
	if err := st.WriteSpans(ctx, tr2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.KernelKind, MediaType: critpath.MediaType, Service: "cart", CaptureID: "c3",
		Spans: ref(tr2[2])}, strings.NewReader("not a snapshot")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Trace(ctx, tr2[0].TraceID); !errors.Is(err, critpath.ErrNoSnapshot) {
		t.Fatalf("a trace with a snapshot and no stored paths: %v, want ErrNoSnapshot", err)
	}
}
