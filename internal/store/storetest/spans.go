package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

func testRoundTrip(t *testing.T, st SpanStore) {
	ctx := context.Background()
	full := &model.Span{
		TraceID:       model.TraceID{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00},
		SpanID:        model.SpanID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		ParentSpanID:  model.SpanID{0x80, 0, 0, 0, 0, 0, 0, 1},
		Service:       "checkout",
		Name:          "POST /cart/{id}",
		Kind:          model.KindClient,
		Start:         base + 123456789,
		Duration:      987654321,
		StatusCode:    model.StatusError,
		StatusMessage: "upstream reset — 503",
		Scope:         "rootline/supervisor",
		Attributes: []model.KeyValue{
			model.String("http.method", "POST"),
			model.String("unicode", "日本語 ✓"),
			model.String("empty", ""),
			model.Bool("cache.hit", false),
			model.Bool(model.AttrAnomaly, true),
			model.Int("http.status_code", 503),
			model.Int("negative", math.MinInt64),
			model.Int("big", math.MaxInt64),
			model.Float("ratio", -0.125),
			model.Float("huge", 1e300),
			model.Float("zero", 0),
			{Key: "raw", Value: model.Value{Type: model.TypeBytes, Str: "\x00\xff\x10binary"}},
			{Key: "array", Value: model.Value{Type: model.TypeString, Str: `["a","b"]`}},
		},
		Resource: []model.KeyValue{
			model.String(model.AttrServiceName, "checkout"),
			model.String(model.AttrHostName, "node-7"),
			model.Int(model.AttrProcessPID, 4242),
		},
		Events: []model.Event{
			{Time: base + 123456789 + 10, Name: "retry", Attributes: []model.KeyValue{model.Int("attempt", 2)}},
			{Time: base + 100, Name: "clock skew: before span start"},
		},
		Links: []model.Link{
			{TraceID: traceID(7), SpanID: spanID(9), Attributes: []model.KeyValue{model.String("link.kind", "batch")}},
			{TraceID: traceID(8), SpanID: spanID(10)},
		},
	}
	// Every kind, and a span with nothing optional.
	spans := []*model.Span{full}
	for k := model.KindUnspecified; k <= model.KindConsumer; k++ {
		s := &model.Span{
			TraceID:  full.TraceID,
			SpanID:   spanID(100 + int(k)),
			Service:  "checkout",
			Name:     "kind " + k.String(),
			Kind:     k,
			Start:    base + int64(k)*ms,
			Duration: ms,
		}
		spans = append(spans, s)
	}
	write(t, st, spans...)

	got, err := st.GetTrace(ctx, full.TraceID)
	if err != nil {
		t.Fatalf("GetTrace: %v", err)
	}
	if err := equalSpans(spans, got); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Start < got[i-1].Start {
			t.Fatalf("GetTrace not ordered by start: %d after %d", got[i].Start, got[i-1].Start)
		}
	}
	// The caller owns what it got: changing it must not change the store.
	got[0].Attributes = append(got[0].Attributes[:0], model.String("mutated", "yes"))
	got[0].Resource = nil
	again, err := st.GetTrace(ctx, full.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if err := equalSpans(spans, again); err != nil {
		t.Fatalf("after mutating a returned span: %v", err)
	}
	if err := st.WriteSpans(ctx, nil); err != nil {
		t.Fatalf("WriteSpans(nil): %v", err)
	}
}

func testGetTraceNotFound(t *testing.T, st SpanStore) {
	write(t, st, span(1, 1, 0, "a", "op", base, ms))
	_, err := st.GetTrace(context.Background(), traceID(2))
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrace of a missing trace: %v, want ErrNotFound", err)
	}
}

// testRewriteSpan: receivers retry, so writing a span again must not
// duplicate it; the last write wins.
func testRewriteSpan(t *testing.T, st SpanStore) {
	a := span(1, 1, 0, "a", "op", base, ms)
	b := span(1, 2, 1, "a", "child", base+ms, ms)
	write(t, st, a, b)
	b2 := *b
	b2.Attributes = []model.KeyValue{model.String("version", "2")}
	write(t, st, a, &b2)
	got, err := st.GetTrace(context.Background(), traceID(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := equalSpans([]*model.Span{a, &b2}, got); err != nil {
		t.Fatal(err)
	}
}

func testServicesAndOperations(t *testing.T, st SpanStore) {
	ctx := context.Background()
	write(t, st,
		span(1, 1, 0, "web", "GET /", base, ms),
		span(1, 2, 1, "web", "GET /", base, ms, kind(model.KindClient)),
		span(1, 3, 2, "db", "SELECT", base, ms),
		span(2, 4, 0, "web", "POST /", base, ms),
		span(2, 5, 4, "auth", "check", base, ms),
		span(3, 6, 0, "web", "GET /", base+sec, ms), // seen before
	)
	svcs, err := st.GetServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"auth", "db", "web"}; !slices.Equal(svcs, want) {
		t.Errorf("GetServices = %q, want %q", svcs, want)
	}
	for _, tc := range []struct {
		service string
		want    []store.Operation
	}{
		{"web", []store.Operation{
			{Name: "GET /", Kind: model.KindServer},
			{Name: "GET /", Kind: model.KindClient},
			{Name: "POST /", Kind: model.KindServer},
		}},
		{"db", []store.Operation{{Name: "SELECT", Kind: model.KindServer}}},
		{"unknown", nil},
	} {
		t.Run(tc.service, func(t *testing.T) {
			ops, err := st.GetOperations(ctx, tc.service)
			if err != nil {
				t.Fatal(err)
			}
			// Sorted by name; the order of kinds within a name is free.
			if !slices.IsSortedFunc(ops, func(a, b store.Operation) int { return cmp.Compare(a.Name, b.Name) }) {
				t.Errorf("GetOperations(%q) not sorted by name: %v", tc.service, ops)
			}
			sortOps(ops)
			sortOps(tc.want)
			if !slices.Equal(ops, tc.want) {
				t.Errorf("GetOperations(%q) = %v, want %v", tc.service, ops, tc.want)
			}
		})
	}
}

func sortOps(ops []store.Operation) {
	slices.SortFunc(ops, func(a, b store.Operation) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
	})
}

// searchFixture is five traces over frontend and backend, one second apart.
//
//	t1 @+1s frontend GET /a 100ms → backend query 30ms {db=users}
//	t2 @+2s frontend GET /b 500ms → backend query 400ms anomalous
//	t3 @+3s frontend GET /a 50ms status ERROR
//	t4 @+4s backend query 20ms {error=true}, resource host.name=h2
//	t5 @+5s frontend GET /a 10ms {http.status_code=200, peer=x}
//	        → backend query 5ms {peer=y}
func searchFixture() []*model.Span {
	return []*model.Span{
		span(1, 11, 0, "frontend", "GET /a", base+1*sec, 100*ms),
		span(1, 12, 11, "backend", "query", base+1*sec+10*ms, 30*ms, kind(model.KindServer),
			withAttrs(model.String("db", "users"))),
		span(2, 21, 0, "frontend", "GET /b", base+2*sec, 500*ms),
		span(2, 22, 21, "backend", "query", base+2*sec+50*ms, 400*ms, anomalous),
		span(3, 31, 0, "frontend", "GET /a", base+3*sec, 50*ms, statusError),
		span(4, 41, 0, "backend", "query", base+4*sec, 20*ms,
			withAttrs(model.String("error", "true")), withResource(model.String(model.AttrHostName, "h2"))),
		span(5, 51, 0, "frontend", "GET /a", base+5*sec, 10*ms,
			withAttrs(model.Int("http.status_code", 200), model.String("peer", "x"))),
		span(5, 52, 51, "backend", "query", base+5*sec+1*ms, 5*ms, withAttrs(model.String("peer", "y"))),
	}
}

func testFindTraces(t *testing.T, st SpanStore) {
	ctx := context.Background()
	fixture := searchFixture()
	write(t, st, fixture...)
	byTrace := map[model.TraceID][]*model.Span{}
	for _, s := range fixture {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}

	for _, tc := range []struct {
		name string
		q    store.TraceQuery
		want []int // trace numbers, in order
	}{
		{"all", store.TraceQuery{}, []int{5, 4, 3, 2, 1}},
		{"service", store.TraceQuery{Service: "frontend"}, []int{5, 3, 2, 1}},
		{"service ranks by its own spans", store.TraceQuery{Service: "backend"}, []int{5, 4, 2, 1}},
		{"unknown service", store.TraceQuery{Service: "nope"}, nil},
		{"operation", store.TraceQuery{Service: "frontend", Operation: "GET /a"}, []int{5, 3, 1}},
		{"operation of another service", store.TraceQuery{Service: "backend", Operation: "GET /a"}, nil},
		{"unknown operation", store.TraceQuery{Service: "frontend", Operation: "nope"}, nil},
		{"time range inclusive", store.TraceQuery{Service: "frontend", StartMin: base + 2*sec, StartMax: base + 3*sec}, []int{3, 2}},
		{"start min", store.TraceQuery{StartMin: base + 4*sec}, []int{5, 4}},
		{"start max", store.TraceQuery{StartMax: base + 2*sec}, []int{2, 1}},
		{"duration min", store.TraceQuery{Service: "frontend", DurationMin: 100 * ms}, []int{2, 1}},
		{"duration max", store.TraceQuery{Service: "frontend", DurationMax: 50 * ms}, []int{5, 3}},
		{"duration range on one span", store.TraceQuery{DurationMin: 20 * ms, DurationMax: 30 * ms}, []int{4, 1}},
		{"duration with operation", store.TraceQuery{Service: "backend", Operation: "query", DurationMin: 25 * ms}, []int{2, 1}},
		{"tag on span", store.TraceQuery{Tags: map[string]string{"db": "users"}}, []int{1}},
		{"tag on resource", store.TraceQuery{Tags: map[string]string{model.AttrHostName: "h2"}}, []int{4}},
		{"tag int as text", store.TraceQuery{Tags: map[string]string{"http.status_code": "200"}}, []int{5}},
		{"tag bool as text", store.TraceQuery{Tags: map[string]string{model.AttrAnomaly: "true"}}, []int{2}},
		{"tag value mismatch", store.TraceQuery{Tags: map[string]string{"db": "orders"}}, nil},
		{"tags on one span", store.TraceQuery{Tags: map[string]string{"http.status_code": "200", "peer": "x"}}, []int{5}},
		{"tags on different spans do not match", store.TraceQuery{Tags: map[string]string{"http.status_code": "200", "peer": "y"}}, nil},
		{"tag and service on one span", store.TraceQuery{Service: "frontend", Tags: map[string]string{"peer": "y"}}, nil},
		{"anomalous only", store.TraceQuery{AnomalousOnly: true}, []int{2}},
		{"anomalous only, on the matching span", store.TraceQuery{Service: "backend", AnomalousOnly: true}, []int{2}},
		{"anomalous only, other service's span", store.TraceQuery{Service: "frontend", AnomalousOnly: true}, nil},
		{"error only", store.TraceQuery{ErrorOnly: true}, []int{4, 3, 2}},
		{"error only with service", store.TraceQuery{Service: "frontend", ErrorOnly: true}, []int{3}},
		{"limit", store.TraceQuery{Service: "frontend", Limit: 2}, []int{5, 3}},
		{"limit counts traces not spans", store.TraceQuery{Limit: 3}, []int{5, 4, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := st.FindTraceIDs(ctx, tc.q)
			if err != nil {
				t.Fatalf("FindTraceIDs: %v", err)
			}
			var want []model.TraceID
			for _, n := range tc.want {
				want = append(want, traceID(n))
			}
			if !slices.Equal(ids, want) {
				t.Errorf("FindTraceIDs = %v, want %v", ids, want)
			}
			traces, err := st.FindTraces(ctx, tc.q)
			if err != nil {
				t.Fatalf("FindTraces: %v", err)
			}
			if len(traces) != len(want) {
				t.Fatalf("FindTraces returned %d traces, want %d", len(traces), len(want))
			}
			for i, tr := range traces {
				if len(tr) == 0 || tr[0].TraceID != want[i] {
					t.Fatalf("FindTraces[%d] is not trace %v", i, want[i])
				}
				if err := equalSpans(byTrace[want[i]], tr); err != nil {
					t.Errorf("FindTraces[%d] (%v) incomplete: %v", i, want[i], err)
				}
			}
		})
	}

	t.Run("default limit is 20", func(t *testing.T) {
		var spans []*model.Span
		for i := range 30 {
			spans = append(spans, span(100+i, 1000+i, 0, "many", "op", base+int64(i)*ms, ms))
		}
		write(t, st, spans...)
		ids, err := st.FindTraceIDs(ctx, store.TraceQuery{Service: "many"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 20 || ids[0] != traceID(129) || ids[19] != traceID(110) {
			t.Errorf("got %d ids from %v to %v, want the 20 newest", len(ids), ids[0], ids[len(ids)-1])
		}
	})
}

func testAnomalies(t *testing.T, st SpanStore) {
	ctx := context.Background()
	spans := []*model.Span{
		span(1, 1, 0, "a", "op", base+1*sec, ms, anomalous),
		span(1, 2, 1, "b", "op", base+2*sec, ms),
		span(2, 3, 0, "b", "op", base+3*sec, ms, anomalous),
		span(3, 4, 0, "a", "op", base+4*sec, ms, anomalous),
		span(3, 5, 4, "a", "op", base+5*sec, ms, statusError), // error, not anomalous
		// rootline.anomaly must be a true bool.
		span(4, 6, 0, "a", "op", base+6*sec, ms, withAttrs(model.String(model.AttrAnomaly, "true"))),
		span(4, 7, 6, "a", "op", base+7*sec, ms, withAttrs(model.Bool(model.AttrAnomaly, false))),
	}
	write(t, st, spans...)
	for _, tc := range []struct {
		name string
		q    store.AnomalyQuery
		want []*model.Span
	}{
		{"all, newest first", store.AnomalyQuery{}, []*model.Span{spans[3], spans[2], spans[0]}},
		{"service", store.AnomalyQuery{Service: "a"}, []*model.Span{spans[3], spans[0]}},
		{"unknown service", store.AnomalyQuery{Service: "zzz"}, nil},
		{"since inclusive", store.AnomalyQuery{Since: base + 3*sec}, []*model.Span{spans[3], spans[2]}},
		{"service and since", store.AnomalyQuery{Service: "a", Since: base + 2*sec}, []*model.Span{spans[3]}},
		{"limit", store.AnomalyQuery{Limit: 1}, []*model.Span{spans[3]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.Anomalies(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d spans, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].SpanID != tc.want[i].SpanID {
					t.Errorf("[%d] = span %v, want %v", i, got[i].SpanID, tc.want[i].SpanID)
				}
			}
			if err := equalSpans(tc.want, got); err != nil {
				t.Error(err)
			}
		})
	}
}

// testInFlightSuperseded: a provisional copy of a span whose request was
// still open (model.AttrInFlight), written again when the request ended, is
// read once, final — in GetTrace and in Anomalies, which drops it when the
// final copy is not anomalous.
func testInFlightSuperseded(t *testing.T, st SpanStore) {
	ctx := context.Background()
	inFlight := withAttrs(model.Bool(model.AttrInFlight, true), model.Bool(model.AttrAnomaly, true))
	slowP := span(1, 1, 0, "a", "op", base+1*sec, 2*sec, inFlight)
	fastP := span(2, 2, 0, "a", "op", base+2*sec, sec, inFlight)
	write(t, st, slowP, fastP)
	if got, err := st.Anomalies(ctx, store.AnomalyQuery{}); err != nil || len(got) != 2 {
		t.Fatalf("Anomalies before the requests ended: %d spans (%v), want the 2 provisional ones", len(got), err)
	}
	slowF := span(1, 1, 0, "a", "op", base+1*sec, 9*sec, anomalous)
	fastF := span(2, 2, 0, "a", "op", base+2*sec, 3*ms)
	write(t, st, slowF, fastF)
	got, err := st.Anomalies(ctx, store.AnomalyQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if err := equalSpans([]*model.Span{slowF}, got); err != nil {
		t.Fatalf("Anomalies after the requests ended: %v", err)
	}
	for _, want := range []*model.Span{slowF, fastF} {
		tr, err := st.GetTrace(ctx, want.TraceID)
		if err != nil {
			t.Fatal(err)
		}
		if err := equalSpans([]*model.Span{want}, tr); err != nil {
			t.Errorf("GetTrace %v: %v", want.TraceID, err)
		}
	}
}

func testDependencies(t *testing.T, st SpanStore) {
	ctx := context.Background()
	write(t, st,
		// trace 1: web → api → db, and an in-process child (web → web).
		span(1, 1, 0, "web", "GET", base+1*sec, 100*ms),
		span(1, 2, 1, "web", "render", base+1*sec+ms, 10*ms),
		span(1, 3, 1, "api", "call", base+1*sec+2*ms, 50*ms),
		span(1, 4, 3, "db", "query", base+1*sec+3*ms, 20*ms, anomalous),
		// trace 2: web → api twice, one anomalous.
		span(2, 5, 0, "web", "GET", base+2*sec, 100*ms),
		span(2, 6, 5, "api", "call", base+2*sec+ms, 10*ms),
		span(2, 7, 5, "api", "call", base+2*sec+2*ms, 10*ms, anomalous),
		// trace 3, late: web → api; a child whose parent is missing.
		span(3, 8, 0, "web", "GET", base+10*sec, 100*ms),
		span(3, 9, 8, "api", "call", base+10*sec+ms, 10*ms),
		span(3, 10, 99, "db", "orphan", base+10*sec+ms, 10*ms),
	)
	for _, tc := range []struct {
		name       string
		start, end int64
		want       []store.DependencyLink
	}{
		{"all", base, base + 60*sec, []store.DependencyLink{
			{Parent: "api", Child: "db", CallCount: 1, Anomalies: 1},
			{Parent: "web", Child: "api", CallCount: 4, Anomalies: 1},
		}},
		{"window by child start", base + 2*sec, base + 2*sec + 2*ms, []store.DependencyLink{
			{Parent: "web", Child: "api", CallCount: 2, Anomalies: 1},
		}},
		{"empty window", base + 20*sec, base + 30*sec, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.Dependencies(ctx, tc.start, tc.end)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(got, func(a, b store.DependencyLink) int {
				return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Child, b.Child))
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("Dependencies = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// testConcurrent writes from several goroutines while others read; a batch
// must be visible entirely or not at all. Meant to run under -race.
func testConcurrent(t *testing.T, st SpanStore) {
	ctx := context.Background()
	const writers, batches, spansPerBatch, readers = 4, 25, 8, 4
	var (
		mu    sync.Mutex
		acked []int
		wg    sync.WaitGroup
		done  = make(chan struct{})
		errc  = make(chan error, writers+readers)
	)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				n := 1 + w*batches + b
				var spans []*model.Span
				for i := range spansPerBatch {
					spans = append(spans, span(n, n*100+i, 0, fmt.Sprintf("svc-%d", w), fmt.Sprintf("op-%d", i%3),
						base+int64(n)*ms+int64(i), ms, withAttrs(model.Int("i", int64(i)))))
				}
				if err := st.WriteSpans(ctx, spans); err != nil {
					errc <- fmt.Errorf("WriteSpans: %w", err)
					return
				}
				mu.Lock()
				acked = append(acked, n)
				mu.Unlock()
			}
		})
	}
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				n := 1 + (i*7+r)%(writers*batches)
				spans, err := st.GetTrace(ctx, traceID(n))
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					errc <- fmt.Errorf("GetTrace: %w", err)
					return
				}
				if err == nil && len(spans) != spansPerBatch {
					errc <- fmt.Errorf("trace %d visible with %d of %d spans: batch not atomic", n, len(spans), spansPerBatch)
					return
				}
				if _, err := st.FindTraces(ctx, store.TraceQuery{Service: fmt.Sprintf("svc-%d", r%writers), Limit: 5}); err != nil {
					errc <- fmt.Errorf("FindTraces: %w", err)
					return
				}
				if _, err := st.GetServices(ctx); err != nil {
					errc <- fmt.Errorf("GetServices: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	rg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for _, n := range acked {
		spans, err := st.GetTrace(ctx, traceID(n))
		if err != nil || len(spans) != spansPerBatch {
			t.Fatalf("acknowledged trace %d: %d spans, %v", n, len(spans), err)
		}
	}
	if len(acked) != writers*batches {
		t.Errorf("%d batches acknowledged, want %d", len(acked), writers*batches)
	}
}

func testClosed(t *testing.T, st SpanStore) {
	ctx := context.Background()
	write(t, st, span(1, 1, 0, "svc", "op", base, ms))
	c, ok := st.(io.Closer)
	if !ok {
		t.Skip("the store has no Close")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := st.WriteSpans(ctx, []*model.Span{span(2, 2, 0, "svc", "op", base, ms)}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("WriteSpans after Close: %v, want ErrClosed", err)
	}
	if _, err := st.GetTrace(ctx, traceID(1)); !errors.Is(err, store.ErrClosed) {
		t.Errorf("GetTrace after Close: %v, want ErrClosed", err)
	}
	if _, err := st.FindTraceIDs(ctx, store.TraceQuery{}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("FindTraceIDs after Close: %v, want ErrClosed", err)
	}
}
