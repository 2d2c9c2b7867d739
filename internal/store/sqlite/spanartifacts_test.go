package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// TestSpanArtifacts: the artifacts linked to each span of a trace, oldest
// first, in one read, without the links to other traces.
func TestSpanArtifacts(t *testing.T) {
	ctx := context.Background()
	st := openTest(t, t.TempDir())
	defer st.Close()
	tr := model.TraceID{1}
	other := model.TraceID{2}
	s1, s2 := model.SpanID{1}, model.SpanID{2}
	put := func(kind string, created int64, refs ...store.SpanRef) string {
		a, err := st.PutArtifact(ctx, store.Artifact{Kind: kind, MediaType: "x", Created: created, Attributes: map[string]string{"k": kind}, Spans: refs},
			strings.NewReader(kind))
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	kernel := put("kernel", 2, store.SpanRef{TraceID: tr, SpanID: s1}, store.SpanRef{TraceID: tr, SpanID: s2}, store.SpanRef{TraceID: other, SpanID: s1})
	cpu := put("cpu", 1, store.SpanRef{TraceID: tr, SpanID: s1})
	put("jfr", 3, store.SpanRef{TraceID: other, SpanID: s2})
	got, err := st.SpanArtifacts(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[s1]) != 2 || len(got[s2]) != 1 {
		t.Fatalf("got %v", got)
	}
	if got[s1][0].ID != cpu || got[s1][1].ID != kernel || got[s2][0].ID != kernel {
		t.Errorf("span 1: %s, %s; span 2: %s; want cpu then kernel, and kernel", got[s1][0].ID, got[s1][1].ID, got[s2][0].ID)
	}
	if a := got[s1][1]; a.Kind != "kernel" || a.Attributes["k"] != "kernel" || a.Spans != nil || a.SHA256 == "" {
		t.Errorf("artifact %+v", a)
	}
	if none, err := st.SpanArtifacts(ctx, model.TraceID{9}); err != nil || len(none) != 0 {
		t.Errorf("unknown trace: %v, %v", none, err)
	}
	// store.SpanArtifacts over a store without the one-read listing groups
	// TraceArtifacts by span: the same artifacts per span, in the same order.
	for name, a := range map[string]store.ArtifactStore{"one read": st, "grouped": linksOnly{st}} {
		got, err := store.SpanArtifacts(ctx, a, tr)
		if err != nil || len(got) != 2 || len(got[s1]) != 2 || len(got[s2]) != 1 ||
			got[s1][0].ID != cpu || got[s1][1].ID != kernel || got[s2][0].ID != kernel {
			t.Errorf("store.SpanArtifacts (%s): %v, %v", name, got, err)
		}
		if none, err := store.SpanArtifacts(ctx, a, model.TraceID{9}); err != nil || len(none) != 0 {
			t.Errorf("store.SpanArtifacts (%s), unknown trace: %v, %v", name, none, err)
		}
	}
}

// linksOnly hides Store.SpanArtifacts.
type linksOnly struct{ store.ArtifactStore }
