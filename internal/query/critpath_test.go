package query

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/kernel"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// TestCriticalPath serves the critical path of a span that waited 40 ms for
// a lock another request's thread held, from a real store.
func TestCriticalPath(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const t0 = int64(1_700_000_000_000_000_000)
	ms := func(n int64) int64 { return t0 + n*1_000_000 }
	span := func(trace, id byte, svc, op string, tid uint32, start, end int64) *model.Span {
		return &model.Span{TraceID: model.TraceID{trace}, SpanID: model.SpanID{id}, Service: svc, Name: op, Kind: model.KindServer,
			Start: start, Duration: end - start,
			Attributes: []model.KeyValue{model.Int(model.AttrThreadID, int64(tid))},
			Resource:   []model.KeyValue{model.String(model.AttrServiceName, svc), model.Int(model.AttrProcessPID, 100)}}
	}
	waiter := span(1, 1, "app", "GET /lock", 101, ms(0), ms(100))
	holder := span(2, 2, "app", "POST /hold", 102, ms(0), ms(100))
	if err := st.WriteSpans(ctx, []*model.Span{waiter, holder}); err != nil {
		t.Fatal(err)
	}
	snap := &kernel.Snapshot{Version: kernel.SnapshotVersion, PID: 100, Start: ms(0), End: ms(100),
		Threads: []kernel.Thread{{TID: 101, PID: 100, Comm: "app", Target: true}, {TID: 102, PID: 100, Comm: "app", Target: true}},
		Wakeups: []kernel.Wakeup{{TS: ms(50), Wakee: 101, Waker: 102, Context: "thread", Causal: true}},
		Intervals: []kernel.Interval{
			{TID: 101, State: "running", Start: ms(0), End: ms(10), CPU: 0, Wakeup: -1},
			{TID: 101, State: "blocked", Reason: "lock", Syscall: "futex", Start: ms(10), End: ms(50), CPU: -1, Wakeup: 0},
			{TID: 101, State: "running", Start: ms(50), End: ms(100), CPU: 0, Wakeup: -1},
			{TID: 102, State: "running", Start: ms(0), End: ms(100), CPU: 1, Wakeup: -1},
		}}
	var buf bytes.Buffer
	if err := snap.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutArtifact(ctx, store.Artifact{Kind: critpath.KernelKind, MediaType: critpath.MediaType, PID: 100,
		Start: snap.Start, End: snap.End, Spans: []store.SpanRef{{TraceID: waiter.TraceID, SpanID: waiter.SpanID}}}, &buf); err != nil {
		t.Fatal(err)
	}
	h := New(Config{}, st, st, nil, nil).Handler()
	rec := do(t, h, "/api/v1/traces/"+waiter.TraceID.String()+"/critical-path")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var res critpath.TraceResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.TraceID != waiter.TraceID.String() || len(res.Spans) != 1 {
		t.Fatalf("result %+v", res)
	}
	p := res.Spans[0]
	if p.SpanID != waiter.SpanID.String() || p.Service != "app" || p.Operation != "GET /lock" || p.Ms != 100 ||
		p.States["running"] != 100 || p.Waits["lock"] != 40 || len(p.States) != len(critpath.States) {
		t.Fatalf("path %+v", p)
	}
	if len(p.BlockedBy) != 1 || p.BlockedBy[0].SpanID != holder.SpanID.String() || p.BlockedBy[0].TraceID != holder.TraceID.String() ||
		p.BlockedBy[0].Service != "app" || p.BlockedBy[0].Operation != "POST /hold" || p.BlockedBy[0].Ms != 40 {
		t.Fatalf("blockedBy %+v", p.BlockedBy)
	}
	if len(p.Segments) != 3 || p.Segments[1].TID != 102 || !p.Segments[1].Blocking || p.Segments[1].Wait != "lock" ||
		len(p.Arrows) != 1 || p.Arrows[0] != (critpath.ArrowJSON{From: 102, To: 101, TS: ms(50)}) {
		t.Fatalf("segments %+v arrows %+v", p.Segments, p.Arrows)
	}

	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/api/v1/traces/zz/critical-path", http.StatusBadRequest},
		{"/api/v1/traces/" + holder.TraceID.String() + "/critical-path", http.StatusNotFound}, // no snapshot linked
		{"/api/v1/traces/" + model.TraceID{7}.String() + "/critical-path", http.StatusNotFound},
	} {
		if rec := do(t, h, tc.path); rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.path, rec.Code, tc.status, rec.Body)
		}
	}
	// With a token it is required, as for the artifacts it comes from.
	ht := New(Config{AuthToken: "s3cret"}, st, st, nil, nil).Handler()
	if rec := do(t, ht, "/api/v1/traces/"+waiter.TraceID.String()+"/critical-path"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", rec.Code)
	}
	if rec := do(t, ht, "/api/v1/traces/"+waiter.TraceID.String()+"/critical-path", "Authorization", "Bearer s3cret"); rec.Code != http.StatusOK {
		t.Fatalf("with the token: %d %s", rec.Code, rec.Body)
	}
}
