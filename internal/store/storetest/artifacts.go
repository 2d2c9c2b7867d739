package storetest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

func putArtifact(t *testing.T, st store.ArtifactStore, meta store.Artifact, content []byte) store.Artifact {
	t.Helper()
	a, err := st.PutArtifact(context.Background(), meta, bytes.NewReader(content))
	if err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	return a
}

func readArtifact(t *testing.T, st store.ArtifactStore, id string) []byte {
	t.Helper()
	_, rc, err := st.OpenArtifact(context.Background(), id)
	return readAll(t, "OpenArtifact("+id+")", rc, err)
}

// readAll reads and closes what an Open returned.
func readAll(t *testing.T, what string, rc io.ReadCloser, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	return b
}

func sortRefs(refs []store.SpanRef) []store.SpanRef {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b store.SpanRef) int {
		return cmp.Or(bytes.Compare(a.TraceID[:], b.TraceID[:]), bytes.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return refs
}

// equalArtifacts compares metadata, with span links as sets.
func equalArtifacts(a, b store.Artifact) bool {
	a.Spans, b.Spans = sortRefs(a.Spans), sortRefs(b.Spans)
	if len(a.Spans) == 0 {
		a.Spans = nil
	}
	if len(b.Spans) == 0 {
		b.Spans = nil
	}
	if len(a.Attributes) == 0 {
		a.Attributes = nil
	}
	if len(b.Attributes) == 0 {
		b.Attributes = nil
	}
	return reflect.DeepEqual(a, b)
}

func testArtifacts(t *testing.T, st ArtifactStore) {
	ctx := context.Background()
	write(t, st, span(1, 1, 0, "svc", "op", base, ms), span(1, 2, 1, "svc", "op", base, ms), span(2, 3, 0, "svc", "op", base, ms))
	content := bytes.Repeat([]byte("JFR\x00profile bytes "), 5000)
	sum := sha256.Sum256(content)
	meta := store.Artifact{
		ID:         "ignored: the store assigns ids",
		Kind:       "jfr",
		MediaType:  "application/octet-stream",
		FileName:   "checkout-4242.jfr",
		Host:       "node-7",
		Service:    "svc",
		PID:        4242,
		Start:      base - 30*sec,
		End:        base + sec,
		Partial:    true,
		CaptureID:  "cap-1",
		Attributes: map[string]string{"overhead_pct": "0.8", "note": "ü"},
		Spans:      []store.SpanRef{{TraceID: traceID(1), SpanID: spanID(1)}},
	}
	before := time.Now().UnixNano()
	a := putArtifact(t, st, meta, content)
	after := time.Now().UnixNano()

	if a.ID == "" || a.ID == meta.ID || strings.ContainsAny(a.ID, "/?#% ") {
		t.Errorf("ID %q: want a fresh URL-safe id", a.ID)
	}
	if a.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("SHA256 %s, want %x", a.SHA256, sum)
	}
	if a.Size != int64(len(content)) {
		t.Errorf("Size %d, want %d", a.Size, len(content))
	}
	if a.Created < before || a.Created > after {
		t.Errorf("Created %d not in [%d, %d]", a.Created, before, after)
	}
	want := meta
	want.ID, want.SHA256, want.Size, want.Created = a.ID, a.SHA256, a.Size, a.Created
	if !equalArtifacts(a, want) {
		t.Errorf("PutArtifact returned\n%+v\nwant\n%+v", a, want)
	}

	got, err := st.GetArtifact(ctx, a.ID)
	if err != nil {
		t.Fatalf("GetArtifact: %v", err)
	}
	if !equalArtifacts(got, a) {
		t.Errorf("GetArtifact =\n%+v\nwant\n%+v", got, a)
	}
	if b := readArtifact(t, st, a.ID); !bytes.Equal(b, content) {
		t.Errorf("content differs (%d bytes, want %d)", len(b), len(content))
	}

	// Links: more spans, one repeated; another trace.
	more := []store.SpanRef{{TraceID: traceID(1), SpanID: spanID(1)}, {TraceID: traceID(1), SpanID: spanID(2)}, {TraceID: traceID(2), SpanID: spanID(3)}}
	if err := st.LinkArtifact(ctx, a.ID, more); err != nil {
		t.Fatalf("LinkArtifact: %v", err)
	}
	got, err = st.GetArtifact(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if refs := sortRefs(got.Spans); !slices.Equal(refs, sortRefs(more)) {
		t.Errorf("links after LinkArtifact = %v, want %v", refs, sortRefs(more))
	}

	// A second artifact with the same content and a minimal one.
	b := putArtifact(t, st, store.Artifact{Kind: "cpu", Spans: []store.SpanRef{{TraceID: traceID(2), SpanID: spanID(3)}}}, content)
	if b.ID == a.ID || b.SHA256 != a.SHA256 {
		t.Errorf("same content: ids %s/%s (want distinct), digests %s/%s (want equal)", a.ID, b.ID, a.SHA256, b.SHA256)
	}
	c := putArtifact(t, st, store.Artifact{Kind: "kernel"}, nil)
	if b := readArtifact(t, st, c.ID); len(b) != 0 {
		t.Errorf("empty artifact reads %d bytes", len(b))
	}

	for _, tc := range []struct {
		trace model.TraceID
		want  []string
	}{
		{traceID(1), []string{a.ID}},
		{traceID(2), []string{a.ID, b.ID}},
		{traceID(3), nil},
	} {
		arts, err := st.TraceArtifacts(ctx, tc.trace)
		if err != nil {
			t.Fatalf("TraceArtifacts: %v", err)
		}
		var ids []string
		for _, x := range arts {
			ids = append(ids, x.ID)
			if x.ID == a.ID && !equalArtifacts(x, got) {
				t.Errorf("TraceArtifacts returned\n%+v\nwant\n%+v", x, got)
			}
		}
		slices.Sort(ids)
		slices.Sort(tc.want)
		if !slices.Equal(ids, tc.want) {
			t.Errorf("TraceArtifacts(%v) = %v, want %v", tc.trace, ids, tc.want)
		}
	}

	if _, err := st.GetArtifact(ctx, "does-not-exist"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetArtifact(missing): %v, want ErrNotFound", err)
	}
	if _, _, err := st.OpenArtifact(ctx, "does-not-exist"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("OpenArtifact(missing): %v, want ErrNotFound", err)
	}
	if err := st.LinkArtifact(ctx, "does-not-exist", more); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LinkArtifact(missing): %v, want ErrNotFound", err)
	}
}
