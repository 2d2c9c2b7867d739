package critpath

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// TestCaptureWindowPaths stores a generated snapshot of ten processes (the
// first the capture's target) with the spans of their requests in the real
// SQLite store, linked to two of the target's spans as a capture links the
// spans that triggered it. Capture must also give the paths of the target's
// other spans that ran inside the window and were slower than their
// operation's median, the slowest first, up to MaxWindowPaths, link its
// stored paths to them (so a trace with no snapshot of its own finds them),
// and leave the linked spans' paths as they are without the extra ones.
func TestCaptureWindowPaths(t *testing.T) {
	ctx := context.Background()
	const start = int64(1_700_000_000_000_000_000)
	snap, reqs := generate(genConfig{seed: 11, procs: 10, threads: 8, dur: 2e9, meanRun: 400_000, meanBlock: 2_000_000,
		meanReq: 20_000_000, meanReqGap: 40_000_000, start: start, foreignWakers: 0.02})
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var spans []*model.Span
	for i := range reqs {
		// One trace per request: each window path is then found only
		// through the stored paths' links.
		binary.BigEndian.PutUint64(reqs[i].TraceID[8:], uint64(i)+1)
		spans = append(spans, spanOf(reqs[i]))
	}
	// A CLIENT span of the target, the slowest of all, inside the window:
	// never a window path (a call's time is its callee's).
	client := spanOf(Request{TraceID: model.TraceID{0xc1}, SpanID: model.SpanID{0xc1}, Service: "svc", Operation: "GET /x", PID: 1000,
		Start: start + 1e8, End: start + 19e8, Threads: []Activity{{TID: 1001, Start: start + 1e8, End: start + 19e8}}})
	client.Kind = model.KindClient
	spans = append(spans, client)
	if err := st.WriteSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}

	// What the selection must pick, computed here from the requests: the
	// target's server spans inside the window, slower than the median of
	// all of the operation's server spans read.
	var durs []int64
	for _, r := range reqs {
		durs = append(durs, r.End-r.Start)
	}
	slices.Sort(durs)
	median := durs[len(durs)/2]
	var linked []store.SpanRef
	var want, normal []Request
	for _, r := range reqs {
		if r.PID != 1000 || r.Start < snap.Start || r.End > snap.End {
			continue
		}
		if len(linked) < 2 {
			linked = append(linked, store.SpanRef{TraceID: r.TraceID, SpanID: r.SpanID})
			continue
		}
		if r.End-r.Start > median {
			want = append(want, r)
		} else {
			normal = append(normal, r)
		}
	}
	if len(linked) < 2 || len(want) < 6 {
		t.Fatalf("the generated snapshot has %d target spans to link and %d slow others; the test needs 2 and 6", len(linked), len(want))
	}
	slices.SortStableFunc(want, func(x, y Request) int { return int((y.End - y.Start) - (x.End - x.Start)) })
	slices.SortStableFunc(normal, func(x, y Request) int { return cmp.Compare(x.Start, y.Start) })

	var buf bytes.Buffer
	if err := snap.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	k, err := st.PutArtifact(ctx, store.Artifact{Kind: KernelKind, MediaType: MediaType, PID: 1000, Start: snap.Start, End: snap.End,
		CaptureID: "cap", Spans: linked}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	only, err := (&Analyzer{Spans: st, Artifacts: st, MaxWindowPaths: -1}).Capture(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(only.Paths) != 2 {
		t.Fatalf("without window paths: %d paths, want the 2 linked spans'", len(only.Paths))
	}
	const limit, baseline = 5, 3
	got, err := (&Analyzer{Spans: st, Artifacts: st, MaxWindowPaths: limit, BaselinePaths: baseline}).Capture(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Paths) != 2+limit+baseline {
		t.Fatalf("%d paths, want the 2 linked, %d window spans' and %d baseline spans'", len(got.Paths), limit, baseline)
	}
	// The baseline: the earliest of the others no slower than the median.
	for i, p := range got.Paths[2+limit:] {
		w := normal[i]
		if p.SpanID != w.SpanID.String() || p.Ms > float64(median)/1e6 {
			t.Errorf("baseline path %d is span %s (%.1f ms), want %s (%.1f ms), the next earliest no slower than the median (%.1f ms)",
				i, p.SpanID, p.Ms, w.SpanID, float64(w.End-w.Start)/1e6, float64(median)/1e6)
		}
	}
	got.Paths = got.Paths[:2+limit]
	if !reflect.DeepEqual(got.Paths[:2], only.Paths) {
		t.Errorf("the linked spans' paths changed with the window paths:\n%+v\n%+v", got.Paths[:2], only.Paths)
	}
	for i, p := range got.Paths[2:] {
		w := want[i]
		if p.SpanID != w.SpanID.String() || p.TraceID != w.TraceID.String() {
			t.Errorf("window path %d is span %s (%.1f ms), want %s (%.1f ms), the next slowest", i, p.SpanID, p.Ms, w.SpanID, float64(w.End-w.Start)/1e6)
		}
	}

	// A window span's trace has no snapshot linked, only the stored paths:
	// the trace's critical path is served from them.
	an := &Analyzer{Spans: st, Artifacts: st}
	res, err := an.Trace(ctx, want[0].TraceID)
	if err != nil {
		t.Fatalf("the slowest window span's trace: %v", err)
	}
	if len(res.Spans) != 1 || res.Spans[0].SpanID != want[0].SpanID.String() || res.Spans[0].Snapshot != k.ID {
		t.Fatalf("the slowest window span's trace: paths %+v", res.Spans)
	}
	if _, err := an.Trace(ctx, want[limit].TraceID); err == nil {
		t.Fatalf("the window span past the bound has a path")
	}
	if _, err := an.Trace(ctx, client.TraceID); err == nil {
		t.Fatalf("the target's CLIENT span has a path")
	}
}

// TestCaptureSkipsSpansBeforeRecords: a linked span whose thread has no
// record while it ran (the thread's first record comes after it, as when
// the recorder evicted the span's time before the capture was taken) gets
// no path, all unknown, but a note saying why; a span of the same thread
// after its first record gets one.
func TestCaptureSkipsSpansBeforeRecords(t *testing.T) {
	ctx := context.Background()
	const start = int64(1_700_000_000_000_000_000)
	snap, _ := generate(genConfig{seed: 5, procs: 2, threads: 8, dur: 2e9, meanRun: 400_000, meanBlock: 2_000_000,
		meanReq: 20_000_000, meanReqGap: 40_000_000, start: start})
	var buf bytes.Buffer
	if err := snap.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	tl, err := DecodeBytes(bytes.Clone(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	// Thread 1004 is first seen inside the window (generate).
	const tid = 1004
	th := tl.threads[tl.byTID[tid]]
	first := th.ivs[0].start
	if first-start < 2e6 {
		t.Fatalf("thread %d is first seen %d ns into the window; the test needs 2 ms", tid, first-start)
	}
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := spanOf(Request{TraceID: model.TraceID{1}, SpanID: model.SpanID{1}, Service: "svc", Operation: "op", PID: 1000,
		Start: start, End: first - 1e6, Threads: []Activity{{TID: tid, Start: start, End: first - 1e6}}})
	after := spanOf(Request{TraceID: model.TraceID{2}, SpanID: model.SpanID{2}, Service: "svc", Operation: "op", PID: 1000,
		Start: first, End: first + 1e6, Threads: []Activity{{TID: tid, Start: first, End: first + 1e6}}})
	if err := st.WriteSpans(ctx, []*model.Span{before, after}); err != nil {
		t.Fatal(err)
	}
	k, err := st.PutArtifact(ctx, store.Artifact{Kind: KernelKind, MediaType: MediaType, PID: 1000, Start: snap.Start, End: snap.End,
		CaptureID: "cap", Spans: []store.SpanRef{{TraceID: before.TraceID, SpanID: before.SpanID}, {TraceID: after.TraceID, SpanID: after.SpanID}}}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&Analyzer{Spans: st, Artifacts: st, MaxWindowPaths: -1}).Capture(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Paths) != 1 || got.Paths[0].SpanID != after.SpanID.String() {
		t.Fatalf("paths %+v, want the later span's only", got.Paths)
	}
	if !slices.ContainsFunc(got.Notes, func(n string) bool {
		return strings.Contains(n, before.SpanID.String()) && strings.Contains(n, "no record of its threads while it ran")
	}) {
		t.Fatalf("no note for the span before the thread's records: %q", got.Notes)
	}
}
