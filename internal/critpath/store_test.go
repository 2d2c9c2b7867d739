package critpath

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/kernel"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// spanOf is the span `rootline run` would have written for r.
func spanOf(r Request) *model.Span {
	return &model.Span{TraceID: r.TraceID, SpanID: r.SpanID, ParentSpanID: r.Parent, Service: r.Service, Name: r.Operation,
		Kind: model.KindServer, Start: r.Start, Duration: r.End - r.Start,
		Attributes: []model.KeyValue{model.String(AttrThreadIntervals, ThreadIntervals(r.Start, r.Threads))},
		Resource:   []model.KeyValue{model.String(model.AttrServiceName, r.Service), model.Int(model.AttrProcessPID, int64(r.PID))}}
}

// TestAnalyzerOnStore runs the store-backed analysis on the real SQLite
// store: spans of the mutex-contention case and its snapshot, linked to the
// two waiting spans as a capture links them; the snapshot as recorders write
// it (version 3) and as they wrote it before (version 2, gzipped JSON).
func TestAnalyzerOnStore(t *testing.T) {
	for _, f := range []struct {
		name, mediaType, file string
		enc                   func(*kernel.Snapshot, io.Writer) error
	}{
		{"v3", MediaType, "kernel-app-100" + kernel.FileExt, (*kernel.Snapshot).Encode},
		{"v2", MediaTypeJSON, "kernel-app-100.json.gz", (*kernel.Snapshot).EncodeJSON},
	} {
		t.Run(f.name, func(t *testing.T) {
			testAnalyzerOnStore(t, f.mediaType, f.file, f.enc)
		})
	}
}

func testAnalyzerOnStore(t *testing.T, mediaType, fileName string, enc func(*kernel.Snapshot, io.Writer) error) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	data, err := os.ReadFile("testdata/mutex-contention.json")
	if err != nil {
		t.Fatal(err)
	}
	var c timelineCase
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	// The snapshot as the recorder writes it, at a realistic time.
	const base = 1_700_000_000_000_000_000
	for i := range c.Requests {
		c.Requests[i].Start, c.Requests[i].End = c.Requests[i].Start+base/1e6, c.Requests[i].End+base/1e6
		for k := range c.Requests[i].Threads {
			c.Requests[i].Threads[k][1] += base / 1e6
			c.Requests[i].Threads[k][2] += base / 1e6
		}
	}
	c.Window[0], c.Window[1] = c.Window[0]+base/1e6, c.Window[1]+base/1e6
	for _, iv := range c.Intervals {
		iv[3], iv[4] = num(iv[3])+base/1e6, num(iv[4])+base/1e6
	}
	for _, w := range c.Wakeups {
		w[0] = num(w[0]) + base/1e6
	}
	in := c.input(t)
	var spans []*model.Span
	for _, r := range in.Requests {
		spans = append(spans, spanOf(r))
	}
	if err := st.WriteSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(t, &c)
	a, b, holder := spans[1], spans[2], spans[0]
	var buf bytes.Buffer
	if err := enc(snap, &buf); err != nil {
		t.Fatal(err)
	}
	k, err := st.PutArtifact(ctx, store.Artifact{Kind: KernelKind, MediaType: mediaType, FileName: fileName,
		PID: 100, Start: snap.Start, End: snap.End, CaptureID: "cap1",
		Spans: []store.SpanRef{{TraceID: a.TraceID, SpanID: a.SpanID}, {TraceID: b.TraceID, SpanID: b.SpanID}}}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	an := &Analyzer{Spans: st, Artifacts: st}

	// Computed on demand: a waited 50 ms for the holder's request.
	got, err := an.Trace(ctx, a.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spans) != 1 || got.Spans[0].SpanID != a.SpanID.String() || got.Spans[0].Snapshot != k.ID {
		t.Fatalf("paths %+v", got.Spans)
	}
	p := got.Spans[0]
	if len(p.BlockedBy) != 1 || p.BlockedBy[0].SpanID != holder.SpanID.String() || p.BlockedBy[0].Ms != 50 || p.BlockedBy[0].Wait != Lock ||
		p.Waits[Lock] != 50 || p.States[Running] != 64 {
		t.Fatalf("path of a: blockedBy %+v states %v waits %v", p.BlockedBy, p.States, p.Waits)
	}

	// Stored at capture time, then served from the artifact; each trace
	// read once though it is both linked and in the process's window.
	counted := &traceReads{SpanReader: st, n: map[model.TraceID]int{}}
	stored, err := (&Analyzer{Spans: counted, Artifacts: st, BaselinePaths: -1}).Capture(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range counted.n {
		if n != 1 {
			t.Errorf("trace %s read %d times computing the capture's paths, want once", id, n)
		}
	}
	if len(counted.n) != len(spans) {
		t.Errorf("%d traces read, want the %d of the snapshot's process", len(counted.n), len(spans))
	}
	if len(stored.Paths) != 2 {
		t.Fatalf("stored %d paths, want a's and b's: %+v", len(stored.Paths), stored.Notes)
	}
	arts, err := st.TraceArtifacts(ctx, b.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, x := range arts {
		kinds[x.Kind]++
		if x.Kind == ArtifactKind && x.FileName != "kernel-app-100.critical-path.json.gz" {
			t.Errorf("stored paths named %q", x.FileName)
		}
	}
	if kinds[ArtifactKind] != 1 || kinds[KernelKind] != 1 {
		t.Fatalf("artifacts of b's trace: %v", kinds)
	}
	again, err := an.Trace(ctx, a.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Spans, got.Spans) {
		t.Fatalf("stored path differs from the computed one:\n%+v\n%+v", again.Spans, got.Spans)
	}
	// Computed together, a's and b's paths share the holder's work.
	if len(again.Shared) == 0 || len(again.Shared[0].Spans) != 2 || again.Shared[0].SpanID != holder.SpanID.String() {
		t.Fatalf("shared %+v", again.Shared)
	}
	gb, err := an.Trace(ctx, b.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if len(gb.Spans) != 1 || len(gb.Spans[0].BlockedBy) != 2 {
		t.Fatalf("b: %+v", gb.Spans)
	}

	if _, err := an.Trace(ctx, holder.TraceID); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("the holder's trace (no snapshot linked): %v", err)
	}
	if _, err := an.Trace(ctx, model.TraceID{9}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown trace: %v", err)
	}
}

// snapshotOf is a case's snapshot (times scaled).
func snapshotOf(t *testing.T, c *timelineCase) *kernel.Snapshot {
	t.Helper()
	s, _ := c.snapshot()
	return s
}

// traceReads counts the times each trace's spans are read.
type traceReads struct {
	store.SpanReader
	n map[model.TraceID]int
}

func (r *traceReads) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	r.n[id]++
	return r.SpanReader.GetTrace(ctx, id)
}

func (r *traceReads) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	found, err := r.SpanReader.FindTraces(ctx, q)
	for _, tr := range found {
		r.n[tr[0].TraceID]++
	}
	return found, err
}

// TestWindowMatchesSearch: the traces of each process found in one read of
// the window are those the store's search by process.pid finds, in its
// order, with the limit, on the real store: requests through three
// processes, the pid as a resource or a span attribute, spans before and
// after the window.
func TestWindowMatchesSearch(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const base = int64(1_700_000_000_000_000_000)
	var spans []*model.Span
	for i := range 60 {
		var tid model.TraceID
		tid[15], tid[14] = byte(i), 7
		start := base + int64(i)*int64(100e6)
		for k, svc := range []string{"front", "cart", "db"} {
			s := &model.Span{TraceID: tid, SpanID: model.SpanID{byte(i), byte(k + 1)}, Service: svc, Name: "op", Kind: model.KindServer,
				Start: start + int64(k)*int64(1e6), Duration: int64(5e6)}
			pid := model.Int(model.AttrProcessPID, int64(100+k))
			if k == 2 && i%2 == 0 {
				s.Attributes = []model.KeyValue{pid} // on the span, not its resource
			} else {
				s.Resource = []model.KeyValue{model.String(model.AttrServiceName, svc), pid}
			}
			if k == 1 && i%3 == 0 {
				continue // cart not on every request
			}
			spans = append(spans, s)
		}
	}
	if err := st.WriteSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	from, to := base+int64(10)*int64(100e6), base+int64(50)*int64(100e6)+int64(1e6)
	pids := []uint32{100, 101, 102, 999}
	for _, limit := range []int{1000, 7} {
		a := &Analyzer{Spans: st, Artifacts: st}
		w, err := a.window(ctx, from, from, to, pids, limit)
		if err != nil {
			t.Fatal(err)
		}
		if limit == 7 {
			if w.complete {
				t.Fatal("more traces in the window than the limit, yet complete")
			}
			continue
		}
		if !w.complete {
			t.Fatal("window not complete")
		}
		for _, pid := range pids {
			for _, lim := range []int{1000, 5} {
				want, err := st.FindTraceIDs(ctx, store.TraceQuery{Tags: map[string]string{model.AttrProcessPID: strconv.FormatUint(uint64(pid), 10)},
					StartMin: from, StartMax: to, Limit: lim})
				if err != nil {
					t.Fatal(err)
				}
				var got []model.TraceID
				for _, tr := range w.byPID[pid] {
					got = append(got, tr[0].TraceID)
				}
				got = got[:min(len(got), lim)]
				if !slices.Equal(got, want) {
					t.Errorf("pid %d, limit %d: window found %v, the search %v", pid, lim, got, want)
				}
				if pid != 999 && len(want) == 0 {
					t.Errorf("pid %d: no trace", pid)
				}
			}
		}
	}
}

// TestWindowLookback: before the snapshot's start, the window reads only
// the traces whose spans lasted long enough to reach into it: a request of
// the process that started 30 s before and is still running is found, one
// that started 2 s before (within the 5 s read whole) too, and one that
// started 30 s before and took 50 ms is not read at all.
func TestWindowLookback(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const snapStart = int64(1_700_000_000_000_000_000)
	span := func(n byte, startBefore, dur int64) *model.Span {
		return &model.Span{TraceID: model.TraceID{15: n}, SpanID: model.SpanID{n}, Service: "cart", Name: "op", Kind: model.KindServer,
			Start: snapStart - startBefore, Duration: dur,
			Resource: []model.KeyValue{model.String(model.AttrServiceName, "cart"), model.Int(model.AttrProcessPID, 100)}}
	}
	long := span(1, 30e9, 40e9)    // still running in the snapshot
	short := span(2, 30e9, 50e6)   // long over before it
	recent := span(3, 2e9, 50e6)   // within the recent lookback: read
	inside := span(4, -1e9, 100e6) // in the snapshot
	if err := st.WriteSpans(ctx, []*model.Span{long, short, recent, inside}); err != nil {
		t.Fatal(err)
	}
	a := &Analyzer{Spans: st, Artifacts: st}
	w, err := a.window(ctx, snapStart-spanLookback, snapStart-recentLookback, snapStart+10e9, []uint32{100}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, tr := range w.byPID[100] {
		got = append(got, tr[0].TraceID[15])
	}
	slices.Sort(got)
	if !w.complete || !slices.Equal(got, []byte{1, 3, 4}) || len(w.all) != 3 {
		t.Fatalf("the window read %d traces and found %v for the process (complete %v), want 3 read and [1 3 4]", len(w.all), got, w.complete)
	}
}
