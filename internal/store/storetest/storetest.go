// Package storetest is the conformance suite of the storage contracts in
// package store. Every backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openMyStore(t) })
//	}
//
// Each subtest opens a fresh, empty store and closes it when done. Backends
// that lack a feature list it in Suite.Lacks and the subtests needing it are
// skipped with the reason, as Jaeger's storage integration tests do.
//
// Beyond the doc comments of package store, the suite pins these semantics:
//   - TraceQuery filters, AnomalousOnly and ErrorOnly included, all apply to
//     one span of the trace (the matching span), and traces rank by the
//     start of their newest matching span.
//   - A span written again (a retried batch) is not duplicated: the last
//     write wins.
//   - GetOperations sorts by name; the order of kinds under a name is free.
//   - Methods called after Close return an error wrapping store.ErrClosed;
//     Close may be called twice.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Lacks lists the features a backend does not implement.
type Lacks struct {
	Artifacts    bool // ArtifactStore
	Dependencies bool // SpanReader.Dependencies
	Purge        bool // age-based retention
	SizeCap      bool // RetentionPolicy.MaxBytes
}

// Suite configures a conformance run.
type Suite struct {
	// Open returns a fresh, empty store. The suite closes it at the end of
	// the subtest (Close may therefore be called twice if Open also
	// registers a cleanup that closes it; stores must tolerate that).
	Open func(t *testing.T) store.Store
	// CleanUp, if set, runs after each subtest, after the store is closed
	// (e.g. to drop a shared keyspace).
	CleanUp func(t *testing.T)
	// Lacks skips the subtests of features the backend does not have.
	Lacks Lacks
}

// Run runs the full suite against stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	Suite{Open: open}.Run(t)
}

// Run runs the suite.
func (s Suite) Run(t *testing.T) {
	for _, tc := range []struct {
		name string
		skip bool
		test func(t *testing.T, st store.Store)
	}{
		{"RoundTrip", false, testRoundTrip},
		{"GetTraceNotFound", false, testGetTraceNotFound},
		{"RewriteSpan", false, testRewriteSpan},
		{"ServicesAndOperations", false, testServicesAndOperations},
		{"FindTraces", false, testFindTraces},
		{"Anomalies", false, testAnomalies},
		{"Dependencies", s.Lacks.Dependencies, testDependencies},
		{"Artifacts", s.Lacks.Artifacts, testArtifacts},
		{"PurgeByAge", s.Lacks.Purge, testPurgeByAge},
		{"PurgeArtifacts", s.Lacks.Purge || s.Lacks.Artifacts, testPurgeArtifacts},
		{"PurgeSizeCap", s.Lacks.SizeCap, testPurgeSizeCap},
		{"Concurrent", false, testConcurrent},
		{"Closed", false, testClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("backend lacks this feature (Suite.Lacks)")
			}
			if s.CleanUp != nil {
				t.Cleanup(func() { s.CleanUp(t) })
			}
			st := s.Open(t)
			t.Cleanup(func() {
				if err := st.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
					t.Errorf("Close: %v", err)
				}
			})
			tc.test(t, st)
		})
	}
}

// base is the suite's reference time; spans are placed relative to it.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

// traceID makes a distinct trace id per n, with the high bit set for odd n
// to catch sign mistakes in backends that store ids as integers.
func traceID(n int) model.TraceID {
	var id model.TraceID
	id[0] = 0x0a
	if n%2 == 1 {
		id[0] = 0xfa
	}
	id[14], id[15] = byte(n>>8), byte(n)
	return id
}

func spanID(n int) model.SpanID {
	var id model.SpanID
	id[0] = 0x01
	if n%2 == 1 {
		id[0] = 0x81
	}
	id[6], id[7] = byte(n>>8), byte(n)
	return id
}

// span builds a minimal span; options tweak it.
func span(trace, id, parent int, service, name string, start, dur int64, opts ...func(*model.Span)) *model.Span {
	s := &model.Span{
		TraceID:  traceID(trace),
		SpanID:   spanID(id),
		Service:  service,
		Name:     name,
		Kind:     model.KindServer,
		Start:    start,
		Duration: dur,
		Resource: []model.KeyValue{model.String(model.AttrServiceName, service)},
	}
	if parent != 0 {
		s.ParentSpanID = spanID(parent)
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withAttrs(kvs ...model.KeyValue) func(*model.Span) {
	return func(s *model.Span) { s.Attributes = append(s.Attributes, kvs...) }
}

func withResource(kvs ...model.KeyValue) func(*model.Span) {
	return func(s *model.Span) { s.Resource = append(s.Resource, kvs...) }
}

func anomalous(s *model.Span) {
	s.Attributes = append(s.Attributes, model.Bool(model.AttrAnomaly, true), model.Bool(model.AttrError, true))
}

func statusError(s *model.Span) { s.StatusCode = model.StatusError }

func kind(k model.SpanKind) func(*model.Span) { return func(s *model.Span) { s.Kind = k } }

func write(t *testing.T, st store.Store, spans ...*model.Span) {
	t.Helper()
	if err := st.WriteSpans(context.Background(), spans); err != nil {
		t.Fatalf("WriteSpans: %v", err)
	}
}

// normalize returns a deep copy of spans with empty slices as nil, sorted as
// GetTrace returns them (start, then span id).
func normalize(spans []*model.Span) []*model.Span {
	out := make([]*model.Span, len(spans))
	for i, s := range spans {
		c := *s
		c.Attributes = kvs(s.Attributes)
		c.Resource = kvs(s.Resource)
		c.Events = nil
		for _, e := range s.Events {
			e.Attributes = kvs(e.Attributes)
			c.Events = append(c.Events, e)
		}
		c.Links = nil
		for _, l := range s.Links {
			l.Attributes = kvs(l.Attributes)
			c.Links = append(c.Links, l)
		}
		out[i] = &c
	}
	slices.SortStableFunc(out, func(a, b *model.Span) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), bytes.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return out
}

func kvs(in []model.KeyValue) []model.KeyValue {
	if len(in) == 0 {
		return nil
	}
	return slices.Clone(in)
}

// equalSpans compares two span lists exactly (modulo nil vs empty slices and
// order) and describes the first difference.
func equalSpans(want, got []*model.Span) error {
	w, g := normalize(want), normalize(got)
	if len(w) != len(g) {
		return fmt.Errorf("got %d spans, want %d", len(g), len(w))
	}
	for i := range w {
		if !reflect.DeepEqual(w[i], g[i]) {
			return fmt.Errorf("span %d differs:\n got %+v\nwant %+v", i, *g[i], *w[i])
		}
	}
	return nil
}

func testRoundTrip(t *testing.T, st store.Store) {
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

func testGetTraceNotFound(t *testing.T, st store.Store) {
	write(t, st, span(1, 1, 0, "a", "op", base, ms))
	_, err := st.GetTrace(context.Background(), traceID(2))
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrace of a missing trace: %v, want ErrNotFound", err)
	}
}

// testRewriteSpan: receivers retry, so writing a span again must not
// duplicate it; the last write wins.
func testRewriteSpan(t *testing.T, st store.Store) {
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

func testServicesAndOperations(t *testing.T, st store.Store) {
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

func testFindTraces(t *testing.T, st store.Store) {
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

func testAnomalies(t *testing.T, st store.Store) {
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

func testDependencies(t *testing.T, st store.Store) {
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

func putArtifact(t *testing.T, st store.Store, meta store.Artifact, content []byte) store.Artifact {
	t.Helper()
	a, err := st.PutArtifact(context.Background(), meta, bytes.NewReader(content))
	if err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	return a
}

func readArtifact(t *testing.T, st store.Store, id string) []byte {
	t.Helper()
	_, rc, err := st.OpenArtifact(context.Background(), id)
	if err != nil {
		t.Fatalf("OpenArtifact(%s): %v", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
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

func testArtifacts(t *testing.T, st store.Store) {
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

func traceExists(t *testing.T, st store.Store, n int) bool {
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

func testPurgeByAge(t *testing.T, st store.Store) {
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

func testPurgeArtifacts(t *testing.T, st store.Store) {
	ctx := context.Background()
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
func testPurgeSizeCap(t *testing.T, st store.Store) {
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

// testConcurrent writes from several goroutines while others read; a batch
// must be visible entirely or not at all. Meant to run under -race.
func testConcurrent(t *testing.T, st store.Store) {
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

func testClosed(t *testing.T, st store.Store) {
	ctx := context.Background()
	write(t, st, span(1, 1, 0, "svc", "op", base, ms))
	if err := st.Close(); err != nil {
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
