// Package storetest is the conformance suite of the storage contracts in
// package store, one suite per contract, so that a backend runs the parts it
// implements: a span store SpanSuite, ArtifactSuite and RetentionSuite, a
// metric store MetricSuite, a blob store BlobSuite; a backend that is all of
// them (SQLite) runs Suite, which runs every one:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openMyStore(t) })
//	}
//
// Each subtest opens a fresh, empty store and closes it when done (when it
// has a Close). Backends that lack a feature list it in Lacks and the
// subtests needing it are skipped with the reason, as Jaeger's storage
// integration tests do; CleanUp runs after each subtest (to drop a shared
// keyspace or bucket).
//
// Beyond the doc comments of package store, the suites pin these semantics:
//   - TraceQuery filters, AnomalousOnly and ErrorOnly included, all apply to
//     one span of the trace (the matching span), and traces rank by the
//     start of their newest matching span.
//   - A span written again (a retried batch) is not duplicated: the last
//     write wins.
//   - GetOperations sorts by name; the order of kinds under a name is free.
//   - Methods called after Close return an error wrapping store.ErrClosed;
//     Close may be called twice.
//   - Retention ages spans by store.RetentionTime: a span flagged by
//     store.FlagClockSkew lives as long from its receive time as any other.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// SpanStore is what SpanSuite tests.
type SpanStore interface {
	store.SpanWriter
	store.SpanReader
}

// ArtifactStore is what ArtifactSuite tests: artifact metadata and links live
// with the spans they explain.
type ArtifactStore interface {
	store.SpanWriter
	store.ArtifactStore
}

// IncidentStore is what IncidentSuite tests: incidents, purged with
// anomalous traces.
type IncidentStore interface {
	store.IncidentStore
	store.Purger
}

// MetricStore is what MetricSuite tests.
type MetricStore interface {
	store.MetricWriter
	store.MetricReader
}

// RetentionStore is what RetentionSuite tests. Its subtests on artifacts and
// metrics also need store.ArtifactStore and the metric interfaces unless
// Lacks says otherwise.
type RetentionStore interface {
	store.SpanWriter
	store.SpanReader
	store.Purger
}

// Lacks lists the features a backend does not implement.
type Lacks struct {
	Artifacts    bool // ArtifactStore (and purging artifacts)
	Dependencies bool // SpanReader.Dependencies
	Purge        bool // age-based retention
	SizeCap      bool // RetentionPolicy.MaxBytes
	Metrics      bool // MetricWriter and MetricReader (and purging points)
	// OrphanBlobs: the purge does not sweep blobs no artifact names (or
	// RetentionSuite.Blobs is nil).
	OrphanBlobs bool
	// Incidents: the backend is no store.IncidentStore.
	Incidents bool
}

// subtest is one named test of a suite; lacks, when set, names the feature
// it needs that the backend lacks.
type subtest[S any] struct {
	name  string
	lacks bool
	test  func(t *testing.T, st S)
}

// runAll runs tests, each on a fresh store from open.
func runAll[S any](t *testing.T, open func(t *testing.T) S, cleanUp func(t *testing.T), tests []subtest[S]) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lacks {
				t.Skip("backend lacks this feature (Lacks)")
			}
			if cleanUp != nil {
				t.Cleanup(func() { cleanUp(t) })
			}
			st := open(t)
			if c, ok := any(st).(io.Closer); ok {
				t.Cleanup(func() {
					if err := c.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
						t.Errorf("Close: %v", err)
					}
				})
			}
			tc.test(t, st)
		})
	}
}

// SpanSuite runs the span writer and reader tests.
type SpanSuite struct {
	// Open returns a fresh, empty store. The suite closes it at the end of
	// the subtest if it is an io.Closer (Close may therefore be called
	// twice if Open also registers a cleanup that closes it; stores must
	// tolerate that).
	Open    func(t *testing.T) SpanStore
	CleanUp func(t *testing.T)
	Lacks   Lacks
}

// Run runs the suite.
func (s SpanSuite) Run(t *testing.T) {
	runAll(t, s.Open, s.CleanUp, []subtest[SpanStore]{
		{"RoundTrip", false, testRoundTrip},
		{"GetTraceNotFound", false, testGetTraceNotFound},
		{"RewriteSpan", false, testRewriteSpan},
		{"ServicesAndOperations", false, testServicesAndOperations},
		{"FindTraces", false, testFindTraces},
		{"Anomalies", false, testAnomalies},
		{"InFlightSuperseded", false, testInFlightSuperseded},
		{"Dependencies", s.Lacks.Dependencies, testDependencies},
		{"Concurrent", false, testConcurrent},
		{"Closed", false, testClosed},
	})
}

// ArtifactSuite runs the artifact metadata, link and content tests.
type ArtifactSuite struct {
	Open    func(t *testing.T) ArtifactStore
	CleanUp func(t *testing.T)
}

// Run runs the suite.
func (s ArtifactSuite) Run(t *testing.T) {
	runAll(t, s.Open, s.CleanUp, []subtest[ArtifactStore]{
		{"Artifacts", false, testArtifacts},
	})
}

// MetricSuite runs the metric point tests.
type MetricSuite struct {
	Open    func(t *testing.T) MetricStore
	CleanUp func(t *testing.T)
}

// Run runs the suite.
func (s MetricSuite) Run(t *testing.T) {
	runAll(t, s.Open, s.CleanUp, []subtest[MetricStore]{
		{"WriteFind", false, testMetrics},
	})
}

// IncidentSuite runs the incident tests.
type IncidentSuite struct {
	// Open returns a fresh, empty store.
	Open    func(t *testing.T) IncidentStore
	CleanUp func(t *testing.T)
}

// Run runs the suite.
func (s IncidentSuite) Run(t *testing.T) {
	runAll(t, s.Open, s.CleanUp, []subtest[IncidentStore]{
		{"PutGetFind", false, testIncidents},
		{"PurgeClosed", false, testPurgeIncidents},
	})
}

// RetentionSuite runs the purge tests.
type RetentionSuite struct {
	Open func(t *testing.T) RetentionStore
	// Blobs returns the blob store behind st's artifacts, for the orphan
	// blob test to plant a blob without its row (nil: Lacks.OrphanBlobs).
	Blobs   func(st RetentionStore) store.BlobStore
	CleanUp func(t *testing.T)
	Lacks   Lacks
}

// Run runs the suite.
func (s RetentionSuite) Run(t *testing.T) {
	l := s.Lacks
	runAll(t, s.Open, s.CleanUp, []subtest[RetentionStore]{
		{"PurgeByAge", l.Purge, testPurgeByAge},
		{"PurgeArtifacts", l.Purge || l.Artifacts, testPurgeArtifacts},
		{"PurgeSizeCap", l.SizeCap, testPurgeSizeCap},
		{"PurgeMetrics", l.Purge || l.Metrics, testPurgeMetrics},
		{"ClockSkew", l.Purge, testClockSkew},
		{"UnusedNames", l.Purge, testUnusedNames},
		{"OrphanBlobs", l.Purge || l.Artifacts || l.OrphanBlobs || s.Blobs == nil, func(t *testing.T, st RetentionStore) {
			testOrphanBlobs(t, st, s.Blobs(st))
		}},
	})
}

// Suite runs every suite against a backend that implements all of
// store.Store.
type Suite struct {
	// Open returns a fresh, empty store; see SpanSuite.Open.
	Open    func(t *testing.T) store.Store
	Blobs   func(st store.Store) store.BlobStore // see RetentionSuite.Blobs
	CleanUp func(t *testing.T)
	Lacks   Lacks
}

// Run runs the suites, each as a subtest named after it.
func (s Suite) Run(t *testing.T) {
	t.Run("Spans", func(t *testing.T) {
		SpanSuite{Open: func(t *testing.T) SpanStore { return s.Open(t) }, CleanUp: s.CleanUp, Lacks: s.Lacks}.Run(t)
	})
	t.Run("Artifacts", func(t *testing.T) {
		if s.Lacks.Artifacts {
			t.Skip("backend lacks this feature (Lacks.Artifacts)")
		}
		ArtifactSuite{Open: func(t *testing.T) ArtifactStore { return s.Open(t) }, CleanUp: s.CleanUp}.Run(t)
	})
	t.Run("Metrics", func(t *testing.T) {
		if s.Lacks.Metrics {
			t.Skip("backend lacks this feature (Lacks.Metrics)")
		}
		MetricSuite{Open: func(t *testing.T) MetricStore { return s.Open(t) }, CleanUp: s.CleanUp}.Run(t)
	})
	t.Run("Incidents", func(t *testing.T) {
		if s.Lacks.Incidents {
			t.Skip("backend lacks this feature (Lacks.Incidents)")
		}
		IncidentSuite{Open: func(t *testing.T) IncidentStore {
			st := s.Open(t)
			in, ok := st.(IncidentStore)
			if !ok {
				t.Fatalf("%T is no store.IncidentStore (set Lacks.Incidents)", st)
			}
			return in
		}, CleanUp: s.CleanUp}.Run(t)
	})
	t.Run("Retention", func(t *testing.T) {
		rs := RetentionSuite{Open: func(t *testing.T) RetentionStore { return s.Open(t) }, CleanUp: s.CleanUp, Lacks: s.Lacks}
		if s.Blobs != nil {
			rs.Blobs = func(st RetentionStore) store.BlobStore { return s.Blobs(st.(store.Store)) }
		}
		rs.Run(t)
	})
}

// Run runs every suite against stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	Suite{Open: open}.Run(t)
}

// withArtifacts is st as an artifact store too; the suite's Lacks said it
// is one.
func withArtifacts(t *testing.T, st RetentionStore) interface {
	RetentionStore
	store.ArtifactStore
} {
	t.Helper()
	a, ok := st.(interface {
		RetentionStore
		store.ArtifactStore
	})
	if !ok {
		t.Fatal("the store is not a store.ArtifactStore: set Lacks.Artifacts")
	}
	return a
}

// withMetrics is st as a metric store too.
func withMetrics(t *testing.T, st RetentionStore) interface {
	RetentionStore
	MetricStore
} {
	t.Helper()
	m, ok := st.(interface {
		RetentionStore
		MetricStore
	})
	if !ok {
		t.Fatal("the store is not a metric store: set Lacks.Metrics")
	}
	return m
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

func write(t *testing.T, st store.SpanWriter, spans ...*model.Span) {
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
