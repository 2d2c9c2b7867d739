package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// ageFixture: traces that ended 2h before now, normal / anomalous / error,
// and a normal one that ended 10 minutes ago.
func ageFixture(now int64) []*model.Span {
	old := now - 2*int64(time.Hour)
	return []*model.Span{
		span(1, 1, 0, "svc", "op", old-sec, sec),                   // normal, old
		span(1, 2, 1, "svc", "op", old-sec, 500*ms),                //
		span(2, 3, 0, "svc", "op", old-sec, sec),                   // anomalous, old
		span(2, 4, 3, "svc", "op", old-sec, 500*ms, anomalous),     //
		span(3, 5, 0, "svc", "op", old-sec, sec, statusError),      // error, old
		span(4, 6, 0, "svc", "op", now-10*int64(time.Minute), sec), // normal, fresh
	}
}

func traceExists(t *testing.T, st store.SpanReader, n int) bool {
	t.Helper()
	_, err := st.GetTrace(context.Background(), traceID(n))
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("GetTrace: %v", err)
	}
	return true
}

func testPurgeByAge(t *testing.T, st RetentionStore) {
	ctx := context.Background()
	now := base + 24*int64(time.Hour)
	write(t, st, ageFixture(now)...)
	hour := int64(time.Hour)

	steps := []struct {
		name   string
		policy store.RetentionPolicy
		alive  []int // traces left
		traces int64
		spans  int64
	}{
		{"disabled rules keep everything", store.RetentionPolicy{Now: now + 100*hour}, []int{1, 2, 3, 4}, 0, 0},
		{"normal trace older than Normal goes, important ones stay",
			store.RetentionPolicy{Now: now, Normal: hour, Anomalous: 3 * hour}, []int{2, 3, 4}, 1, 2},
		{"idempotent", store.RetentionPolicy{Now: now, Normal: hour, Anomalous: 3 * hour}, []int{2, 3, 4}, 0, 0},
		{"important traces go after the anomalous period",
			store.RetentionPolicy{Now: now + 2*hour, Normal: 4 * hour, Anomalous: 3 * hour}, []int{4}, 2, 3},
		{"Anomalous 0 keeps important traces, Normal still applies",
			store.RetentionPolicy{Now: now + 2*hour, Normal: hour}, nil, 1, 1},
	}
	for _, step := range steps {
		stats, err := st.Purge(ctx, step.policy)
		if err != nil {
			t.Fatalf("%s: Purge: %v", step.name, err)
		}
		if stats.Traces != step.traces || stats.Spans != step.spans {
			t.Errorf("%s: purged %d traces / %d spans, want %d / %d", step.name, stats.Traces, stats.Spans, step.traces, step.spans)
		}
		for n := 1; n <= 4; n++ {
			if got, want := traceExists(t, st, n), slices.Contains(step.alive, n); got != want {
				t.Errorf("%s: trace %d exists=%v, want %v", step.name, n, got, want)
			}
		}
	}
	// Search must not find purged traces.
	ids, err := st.FindTraceIDs(ctx, store.TraceQuery{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 0 {
		t.Errorf("FindTraceIDs after purging everything = %v", ids)
	}
}

func testPurgeArtifacts(t *testing.T, rs RetentionStore) {
	ctx := context.Background()
	st := withArtifacts(t, rs)
	now := base + 24*int64(time.Hour)
	write(t, st, ageFixture(now)...)
	ref := func(trace, span int) store.SpanRef {
		return store.SpanRef{TraceID: traceID(trace), SpanID: spanID(span)}
	}
	contentA := []byte("only on the old normal trace")
	contentB := []byte("on the old normal and the anomalous trace")
	contentC := []byte("same content in two artifacts")
	created := now - 3*int64(time.Hour)
	a := putArtifact(t, st, store.Artifact{Kind: "cpu", Created: created, Spans: []store.SpanRef{ref(1, 1), ref(1, 2)}}, contentA)
	b := putArtifact(t, st, store.Artifact{Kind: "cpu", Created: created, Spans: []store.SpanRef{ref(1, 1), ref(2, 4)}}, contentB)
	c := putArtifact(t, st, store.Artifact{Kind: "cpu", Created: created, Spans: []store.SpanRef{ref(1, 2)}}, contentC)
	d := putArtifact(t, st, store.Artifact{Kind: "cpu", Created: created, Spans: []store.SpanRef{ref(4, 6)}}, contentC)

	stats, err := st.Purge(ctx, store.RetentionPolicy{Now: now, Normal: int64(time.Hour), Anomalous: 4 * int64(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Traces != 1 || stats.Artifacts != 2 || stats.Bytes != int64(len(contentA)) {
		t.Errorf("stats %+v, want 1 trace, 2 artifacts (a, c), %d bytes (a's blob; c's is shared with d)", stats, len(contentA))
	}
	for _, id := range []string{a.ID, c.ID} {
		if _, err := st.GetArtifact(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unreferenced artifact %s: GetArtifact = %v, want ErrNotFound", id, err)
		}
		if _, _, err := st.OpenArtifact(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unreferenced artifact %s: OpenArtifact = %v, want ErrNotFound", id, err)
		}
	}
	if got := readArtifact(t, st, b.ID); !bytes.Equal(got, contentB) {
		t.Error("artifact still linked to the anomalous trace lost its content")
	}
	if got := readArtifact(t, st, d.ID); !bytes.Equal(got, contentC) {
		t.Error("blob shared with a deleted artifact was deleted")
	}
	gotB, err := st.GetArtifact(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if refs := sortRefs(gotB.Spans); !slices.Equal(refs, []store.SpanRef{ref(2, 4)}) {
		t.Errorf("surviving artifact links = %v, want only the remaining trace's span", refs)
	}
	arts, err := st.TraceArtifacts(ctx, traceID(1))
	if err != nil || len(arts) != 0 {
		t.Errorf("TraceArtifacts(purged trace) = %v, %v; want none", arts, err)
	}
}

// testPurgeSizeCap lowers the cap step by step and checks that traces go in
// the promised order: normal ones oldest first, then important ones oldest
// first, even though the important traces are the oldest of all.
func testPurgeSizeCap(t *testing.T, st RetentionStore) {
	ctx := context.Background()
	const normals, importants, spansPerTrace = 6, 2, 60
	payload := strings.Repeat("x", 4096)
	var order []int // deletion order
	for i := range importants {
		n := 100 + i
		write(t, st, span(n, n*1000, 0, "svc", "op", base+int64(i)*sec, ms, anomalous))
	}
	for i := range normals {
		n := 200 + i
		var spans []*model.Span
		for j := range spansPerTrace {
			spans = append(spans, span(n, n*1000+j, 0, "svc", "op", base+int64(10+i)*sec+int64(j)*ms, ms,
				withAttrs(model.String("payload", payload))))
		}
		write(t, st, spans...)
		order = append(order, n)
	}
	for i := range importants {
		order = append(order, 100+i)
	}

	sawPartial, last := false, 0
	for limit := int64(1 << 32); limit > 1024; limit = limit * 3 / 4 {
		if _, err := st.Purge(ctx, store.RetentionPolicy{Now: base + 100*sec, MaxBytes: limit}); err != nil {
			t.Fatalf("Purge(MaxBytes=%d): %v", limit, err)
		}
		var alive []bool
		for _, n := range order {
			alive = append(alive, traceExists(t, st, n))
		}
		// What is left must be a suffix of the deletion order.
		first := slices.Index(alive, true)
		if first < 0 {
			first = len(alive)
		}
		if slices.Contains(alive[first:], false) {
			t.Fatalf("MaxBytes=%d: traces left %v (order %v): not the newest normal and the important ones", limit, alive, order)
		}
		if first > 0 && first < len(order) {
			sawPartial = true
		}
		if first != last {
			t.Logf("MaxBytes=%d: the %d oldest by deletion order are gone", limit, first)
			last = first
		}
	}
	if !sawPartial {
		t.Error("the size cap never removed only part of the traces")
	}
	if traceExists(t, st, order[len(order)-1]) {
		t.Error("a 1 KiB cap left traces behind")
	}
}

// testClockSkew: spans stamped by a wrong clock are aged from their receive
// time once flagged (store.FlagClockSkew, which the server applies before
// every write). A backend that aged them by their own end would keep a span
// stamped 2250 forever and delete one stamped 1970 or 2023 in the purge
// right after it was acknowledged.
func testClockSkew(t *testing.T, st RetentionStore) {
	ctx := context.Background()
	received := base
	date := func(y int) int64 { return time.Date(y, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano() }
	spans := []*model.Span{
		span(1, 1, 0, "svc", "op", date(2250), ms),
		span(2, 2, 0, "svc", "op", 0, ms), // 1970
		span(3, 3, 0, "svc", "op", date(2023), ms),
		span(4, 4, 0, "svc", "op", received-sec, ms), // on time
	}
	write(t, st, store.FlagClockSkew(spans, received, store.DefaultMaxClockSkew)...)
	day := int64(24 * time.Hour)
	policy := store.RetentionPolicy{Normal: day, Anomalous: 7 * day}

	// Right after acknowledgement nothing goes.
	policy.Now = received + sec
	if _, err := st.Purge(ctx, policy); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 4; n++ {
		if !traceExists(t, st, n) {
			t.Errorf("trace %d was deleted by the purge right after it was acknowledged", n)
		}
	}
	// The flag is stored and read back.
	got, err := st.GetTrace(ctx, traceID(2))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got[0].Attr(store.AttrClockSkewMs); !ok || v.Int >= 0 {
		t.Errorf("the 1970 span reads back with %s = %v (present %v), want a large negative value", store.AttrClockSkewMs, v, ok)
	}
	// A day and an hour after receipt everything has gone, 2250 included.
	policy.Now = received + day + int64(time.Hour)
	stats, err := st.Purge(ctx, policy)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 4; n++ {
		if traceExists(t, st, n) {
			t.Errorf("trace %d survived the purge a day after its receipt", n)
		}
	}
	if stats.Traces != 4 {
		t.Errorf("purged %d traces, want 4", stats.Traces)
	}
}

// testUnusedNames: services and operations whose spans were all purged are
// no longer listed; a service that comes back is listed and searchable again.
func testUnusedNames(t *testing.T, st RetentionStore) {
	ctx := context.Background()
	now := base + 24*int64(time.Hour)
	old := now - 2*int64(time.Hour)
	write(t, st,
		span(1, 1, 0, "forged-1", "a", old, ms),
		span(1, 2, 1, "forged-2", "b", old, ms),
		span(2, 3, 0, "kept", "old-op", old, ms),
		span(3, 4, 0, "kept", "live-op", now-sec, ms),
	)
	stats, err := st.Purge(ctx, store.RetentionPolicy{Now: now, Normal: int64(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Services != 2 || stats.Operations != 3 {
		t.Errorf("purged %d services and %d operations, want 2 and 3", stats.Services, stats.Operations)
	}
	svcs, err := st.GetServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svcs, []string{"kept"}) {
		t.Errorf("GetServices = %v, want [kept]", svcs)
	}
	for svc, want := range map[string][]string{"kept": {"live-op"}, "forged-1": nil} {
		ops, err := st.GetOperations(ctx, svc)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range ops {
			names = append(names, o.Name)
		}
		if !slices.Equal(names, want) {
			t.Errorf("GetOperations(%s) = %v, want %v", svc, names, want)
		}
	}
	// The names come back with new spans, and old spans of other services
	// still read with their own names.
	write(t, st, span(4, 5, 0, "forged-1", "a", now, ms), span(4, 6, 5, "kept", "old-op", now, ms))
	got, err := st.GetTrace(ctx, traceID(4))
	if err != nil {
		t.Fatal(err)
	}
	names := map[model.SpanID]string{}
	for _, sp := range got {
		names[sp.SpanID] = sp.Service + "/" + sp.Name
	}
	if len(got) != 2 || names[spanID(5)] != "forged-1/a" || names[spanID(6)] != "kept/old-op" {
		t.Errorf("trace written after the purge reads back as %v", names)
	}
	if live, err := st.GetTrace(ctx, traceID(3)); err != nil || live[0].Service != "kept" || live[0].Name != "live-op" {
		t.Errorf("surviving trace reads back as %+v, %v", live, err)
	}
	ids, err := st.FindTraceIDs(ctx, store.TraceQuery{Service: "forged-1"})
	if err != nil || len(ids) != 1 || ids[0] != traceID(4) {
		t.Errorf("FindTraceIDs(forged-1) = %v, %v; want the new trace", ids, err)
	}
	if svcs, _ := st.GetServices(ctx); !slices.Equal(svcs, []string{"forged-1", "kept"}) {
		t.Errorf("GetServices = %v, want [forged-1 kept]", svcs)
	}
	// A later purge forgets the names of the spans it deletes too.
	stats, err = st.Purge(ctx, store.RetentionPolicy{Now: now + 10*int64(time.Hour), Normal: int64(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Services != 2 || stats.Operations != 3 {
		t.Errorf("second purge: %d services and %d operations, want 2 and 3", stats.Services, stats.Operations)
	}
	if svcs, err := st.GetServices(ctx); err != nil || len(svcs) != 0 {
		t.Errorf("GetServices after purging every span = %v, %v", svcs, err)
	}
}

// testOrphanBlobs: a blob stored without its artifact row (the process was
// killed between the two) is deleted by a purge once older than
// store.OrphanBlobGrace, and not before; blobs that rows name stay.
func testOrphanBlobs(t *testing.T, rs RetentionStore, blobs store.BlobStore) {
	ctx := context.Background()
	st := withArtifacts(t, rs)
	named := []byte("content an artifact names")
	a := putArtifact(t, st, store.Artifact{Kind: "cpu"}, named)
	orphan := []byte("content whose artifact row was never committed")
	digest, size, err := blobs.Put(ctx, bytes.NewReader(orphan))
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now().UnixNano()
	stats, err := st.Purge(ctx, store.RetentionPolicy{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Stat(ctx, digest); err != nil || stats.OrphanBlobs != 0 {
		t.Fatalf("a fresh orphan blob (maybe an upload in flight) was deleted: Stat %v, stats %+v", err, stats)
	}
	stats, err = st.Purge(ctx, store.RetentionPolicy{Now: now + int64(store.OrphanBlobGrace) + int64(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Stat(ctx, digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("orphan blob past the grace period: Stat = %v, want ErrNotFound", err)
	}
	if stats.OrphanBlobs != 1 || stats.Bytes != size {
		t.Errorf("stats %+v, want 1 orphan blob of %d bytes", stats, size)
	}
	if got := readArtifact(t, st, a.ID); !bytes.Equal(got, named) {
		t.Error("the sweep took a blob an artifact names")
	}
}
