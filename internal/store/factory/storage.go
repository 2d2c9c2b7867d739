package factory

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Storage is the store.Store Open returns: the backends, with spans flagged
// for clock skew before they are written, every operation timed in
// rootline_store_op_seconds{op}, and the outcome of writes remembered for
// readiness (WriteHealth). It is safe for concurrent use.
type Storage struct {
	inner   backends
	maxSkew time.Duration
	now     func() time.Time
	hist    *prometheus.HistogramVec

	mu      sync.Mutex
	lastErr error // the last write's store.ErrUnavailable, nil once a write succeeded
}

var (
	_ store.Store              = (*Storage)(nil)
	_ store.WriteProber        = (*Storage)(nil)
	_ store.SpanArtifactReader = (*Storage)(nil)
)

// backends is what Storage wraps.
type backends interface {
	store.Store
	store.WriteProber
	Incidents() store.IncidentStore
}

func newStorage(c backends, opts Options) (*Storage, error) {
	s := &Storage{inner: c, maxSkew: opts.MaxClockSkew, now: opts.Now}
	s.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rootline_store_op_seconds",
		Help: "Latency of store operations by op (write_spans is one group commit of the pipeline).",
		// 0.1 ms to ~26 s: a commit with fsync is a few ms, a large purge seconds.
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"op"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(s.hist); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Storage) since(op string, start time.Time) {
	s.hist.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// wrote records the outcome of a write for WriteHealth: a failure that may
// pass marks the store unavailable, a success clears it. Other errors (a
// malformed batch, a closed store) say nothing about the store's health.
func (s *Storage) wrote(err error) {
	switch {
	case err == nil:
		s.mu.Lock()
		s.lastErr = nil
		s.mu.Unlock()
	case errors.Is(err, store.ErrUnavailable):
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}
}

// WriteHealth returns nil while the store can write, or the error of the
// last write that failed with store.ErrUnavailable until a write or a
// ProbeWrite succeeds again.
func (s *Storage) WriteHealth() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// ProbeWrite tests whether the store can write now (a tiny committed write
// where the span store supports it) and updates WriteHealth.
func (s *Storage) ProbeWrite(ctx context.Context) error {
	defer s.since("probe_write", time.Now())
	err := s.inner.ProbeWrite(ctx)
	s.wrote(err)
	return err
}

// WriteSpans flags spans stamped far from the server's clock, then writes.
func (s *Storage) WriteSpans(ctx context.Context, spans []*model.Span) error {
	// With the flagging disabled this still drops flags a client forged.
	return s.WriteFlaggedSpans(ctx, store.FlagClockSkew(spans, s.now().UnixNano(), s.maxSkew))
}

// WriteFlaggedSpans writes spans that store.FlagClockSkew already flagged
// where they were received: the Kafka stage's detectors write spans an
// ingester received earlier, whose receive time is the one that counts.
func (s *Storage) WriteFlaggedSpans(ctx context.Context, spans []*model.Span) error {
	defer s.since("write_spans", time.Now())
	err := s.inner.WriteSpans(ctx, spans)
	s.wrote(err)
	return err
}

func (s *Storage) WriteMetrics(ctx context.Context, points []store.MetricPoint) error {
	defer s.since("write_metrics", time.Now())
	err := s.inner.WriteMetrics(ctx, points)
	s.wrote(err)
	return err
}

func (s *Storage) PutArtifact(ctx context.Context, meta store.Artifact, r io.Reader) (store.Artifact, error) {
	defer s.since("put_artifact", time.Now())
	a, err := s.inner.PutArtifact(ctx, meta, r)
	s.wrote(err)
	return a, err
}

func (s *Storage) LinkArtifact(ctx context.Context, id string, spans []store.SpanRef) error {
	defer s.since("link_artifact", time.Now())
	err := s.inner.LinkArtifact(ctx, id, spans)
	s.wrote(err)
	return err
}

func (s *Storage) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	defer s.since("get_trace", time.Now())
	return s.inner.GetTrace(ctx, id)
}

func (s *Storage) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	defer s.since("find_traces", time.Now())
	return s.inner.FindTraces(ctx, q)
}

func (s *Storage) FindTraceIDs(ctx context.Context, q store.TraceQuery) ([]model.TraceID, error) {
	defer s.since("find_trace_ids", time.Now())
	return s.inner.FindTraceIDs(ctx, q)
}

func (s *Storage) GetServices(ctx context.Context) ([]string, error) {
	defer s.since("get_services", time.Now())
	return s.inner.GetServices(ctx)
}

func (s *Storage) GetOperations(ctx context.Context, service string) ([]store.Operation, error) {
	defer s.since("get_operations", time.Now())
	return s.inner.GetOperations(ctx, service)
}

func (s *Storage) Anomalies(ctx context.Context, q store.AnomalyQuery) ([]*model.Span, error) {
	defer s.since("anomalies", time.Now())
	return s.inner.Anomalies(ctx, q)
}

func (s *Storage) Dependencies(ctx context.Context, start, end int64) ([]store.DependencyLink, error) {
	defer s.since("dependencies", time.Now())
	return s.inner.Dependencies(ctx, start, end)
}

func (s *Storage) GetArtifact(ctx context.Context, id string) (store.Artifact, error) {
	defer s.since("get_artifact", time.Now())
	return s.inner.GetArtifact(ctx, id)
}

// OpenArtifact times the lookup; reading the content is the caller's time.
func (s *Storage) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	defer s.since("open_artifact", time.Now())
	return s.inner.OpenArtifact(ctx, id)
}

func (s *Storage) TraceArtifacts(ctx context.Context, id model.TraceID) ([]store.Artifact, error) {
	defer s.since("trace_artifacts", time.Now())
	return s.inner.TraceArtifacts(ctx, id)
}

// SpanArtifacts implements store.SpanArtifactReader.
func (s *Storage) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	defer s.since("span_artifacts", time.Now())
	return store.SpanArtifacts(ctx, s.inner, id)
}

func (s *Storage) FindMetrics(ctx context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	defer s.since("find_metrics", time.Now())
	return s.inner.FindMetrics(ctx, q)
}

func (s *Storage) Purge(ctx context.Context, p store.RetentionPolicy) (store.PurgeStats, error) {
	defer s.since("purge", time.Now())
	return s.inner.Purge(ctx, p)
}

// Close closes every backend.
func (s *Storage) Close() error { return s.inner.Close() }

// Incidents returns the store of incidents, or nil when the configured
// backends keep none (the server then tracks incidents in memory only).
func (s *Storage) Incidents() store.IncidentStore {
	in := s.inner.Incidents()
	if in == nil {
		return nil
	}
	return timedIncidents{in, s}
}

// timedIncidents times incident operations like the others.
type timedIncidents struct {
	in store.IncidentStore
	s  *Storage
}

func (t timedIncidents) PutIncident(ctx context.Context, in store.Incident) error {
	defer t.s.since("put_incident", time.Now())
	return t.in.PutIncident(ctx, in)
}

func (t timedIncidents) GetIncident(ctx context.Context, id string) (store.Incident, error) {
	defer t.s.since("get_incident", time.Now())
	return t.in.GetIncident(ctx, id)
}

func (t timedIncidents) FindIncidents(ctx context.Context, q store.IncidentQuery) ([]store.Incident, error) {
	defer t.s.since("find_incidents", time.Now())
	return t.in.FindIncidents(ctx, q)
}
