// Package pipeline is the span path between receivers and the store: a bounded
// intake queue, anomaly detection and annotation, group commit into the store,
// and hand-off of committed spans to sinks (capture trigger, exporter).
//
// One goroutine owns the detector and the store writer. Concurrent requests
// queue up while a commit is in flight and are committed together in the next
// transaction (group commit), so each request waits for at most about two
// commits and the store sees large batches under load.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Key choices for the detector.
const (
	KeyByOperation = "operation" // service.name + span name (default)
	KeyByService   = "service"   // service.name only
)

// Config sets the pipeline's bounds.
type Config struct {
	// QueueSpans and QueueBytes bound the spans waiting for commit, in number
	// and in memory (SpanBytes); beyond either ConsumeSpans returns
	// ErrQueueFull. A single request larger than a bound is still admitted
	// when the queue is empty, so no valid request is refused forever.
	QueueSpans int   `yaml:"queue_spans"`
	QueueBytes int64 `yaml:"queue_bytes"`
	// MaxBatchSpans bounds the spans committed in one transaction.
	MaxBatchSpans int `yaml:"max_batch_spans"`
	// CommitDelay: while a commit would hold fewer than CommitDelaySpans
	// spans, it waits for more requests to join it, at most this long and
	// at most twice as long as the pipeline was idle before its first
	// request (0: it never waits). A trickle of small exports — every
	// traced process and sidecar sends a batch a second — then shares
	// commits: at small batches the store's cost per commit is most of its
	// cost per span. Clients that send as soon as they are acknowledged
	// leave the pipeline no idle time, so they are not slowed; full batches
	// (OTel SDKs under load send 512 spans) never wait.
	CommitDelay      time.Duration `yaml:"commit_delay"`
	CommitDelaySpans int           `yaml:"commit_delay_spans"`
	// KeyBy selects the detector key: "operation" or "service".
	KeyBy string `yaml:"key_by"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{QueueSpans: 200_000, QueueBytes: 128 << 20, MaxBatchSpans: 20_000, KeyBy: KeyByOperation,
		CommitDelay: 100 * time.Millisecond, CommitDelaySpans: 256}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.QueueSpans < 1 {
		errs = append(errs, fmt.Errorf("pipeline queue_spans must be ≥ 1, got %d", c.QueueSpans))
	}
	if c.QueueBytes < 1 {
		errs = append(errs, fmt.Errorf("pipeline queue_bytes must be ≥ 1, got %d", c.QueueBytes))
	}
	if c.MaxBatchSpans < 1 {
		errs = append(errs, fmt.Errorf("pipeline max_batch_spans must be ≥ 1, got %d", c.MaxBatchSpans))
	}
	if c.CommitDelay < 0 || c.CommitDelay > 10*time.Second {
		errs = append(errs, fmt.Errorf("pipeline commit_delay must be between 0 and 10s, got %v", c.CommitDelay))
	}
	if c.CommitDelaySpans < 0 {
		errs = append(errs, fmt.Errorf("pipeline commit_delay_spans must be ≥ 0, got %d", c.CommitDelaySpans))
	}
	if c.KeyBy != KeyByOperation && c.KeyBy != KeyByService {
		errs = append(errs, fmt.Errorf("pipeline key_by must be %q or %q, got %q", KeyByOperation, KeyByService, c.KeyBy))
	}
	return errors.Join(errs...)
}

// Sink receives spans after they are committed. OnCommitted is called from the
// pipeline's writer goroutine and MUST NOT block (enqueue and return); the spans
// MUST NOT be modified. They stay valid for as long as the sink keeps them.
type Sink interface {
	OnCommitted(spans []*model.Span)
}

type request struct {
	spans []*model.Span
	bytes int64      // SpanBytes of spans
	done  chan error // buffered, capacity 1
}

// Pipeline implements Consumer.
type Pipeline struct {
	cfg    Config
	writer store.SpanWriter
	det    anomaly.Detector
	sinks  []Sink
	logger *slog.Logger

	mu      sync.RWMutex // guards closing and sends on queue against close
	closing bool
	queue   chan *request
	queued  atomic.Int64 // spans admitted and not yet committed
	qbytes  atomic.Int64 // their SpanBytes
	stopped chan struct{}
	now     func() time.Time

	m metrics
}

type metrics struct {
	received, accepted, refusedFull, refusedClosed, failed prometheus.Counter
	stored, anomalies                                      prometheus.Counter
	queueDepth, queueBytes                                 prometheus.GaugeFunc
	batchSpans                                             prometheus.Histogram
}

var _ Consumer = (*Pipeline)(nil)

// New builds a pipeline writing to w and classifying with det. Sinks see every
// committed batch. reg may be nil. Call Run to start it and Close to drain it.
func New(cfg Config, w store.SpanWriter, det anomaly.Detector, sinks []Sink, logger *slog.Logger, reg prometheus.Registerer) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{
		cfg:     cfg,
		writer:  w,
		det:     det,
		sinks:   sinks,
		logger:  logger.With("component", "pipeline"),
		queue:   make(chan *request, 65536),
		stopped: make(chan struct{}),
		now:     time.Now,
	}
	p.m = metrics{
		received:      prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_received_total", Help: "Spans offered to the pipeline by receivers."}),
		accepted:      prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_accepted_total", Help: "Spans admitted to the intake queue."}),
		refusedFull:   prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_refused_queue_full_total", Help: "Spans refused because the intake queue was full (backpressure)."}),
		refusedClosed: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_refused_shutdown_total", Help: "Spans refused because the server was shutting down."}),
		failed:        prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_failed_total", Help: "Admitted spans whose commit failed (the request was answered with an error)."}),
		stored:        prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_spans_stored_total", Help: "Spans committed to the store."}),
		anomalies:     prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_pipeline_anomalies_total", Help: "Spans the detector marked anomalous."}),
		queueDepth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_pipeline_queue_spans", Help: "Spans waiting in the intake queue."},
			func() float64 { return float64(p.queued.Load()) }),
		queueBytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_pipeline_queue_bytes", Help: "Memory of the spans waiting in the intake queue (estimated), of pipeline.queue_bytes."},
			func() float64 { return float64(p.qbytes.Load()) }),
		batchSpans: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rootline_pipeline_commit_spans", Help: "Spans per group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{p.m.received, p.m.accepted, p.m.refusedFull, p.m.refusedClosed, p.m.failed,
			p.m.stored, p.m.anomalies, p.m.queueDepth, p.m.queueBytes, p.m.batchSpans} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register pipeline metrics: %w", err)
			}
		}
	}
	return p, nil
}

// ConsumeSpans admits spans and waits until they are committed. See Consumer.
func (p *Pipeline) ConsumeSpans(ctx context.Context, spans []*model.Span) error {
	n := int64(len(spans))
	p.m.received.Add(float64(n))
	if n == 0 {
		return nil
	}
	size := SpanBytes(spans)
	req := &request{spans: spans, bytes: size, done: make(chan error, 1)}
	p.mu.RLock()
	if p.closing {
		p.mu.RUnlock()
		p.m.refusedClosed.Add(float64(n))
		return ErrShuttingDown
	}
	after, afterBytes := p.queued.Add(n), p.qbytes.Add(size)
	full := after != n && (after > int64(p.cfg.QueueSpans) || afterBytes > p.cfg.QueueBytes)
	if !full {
		select {
		case p.queue <- req:
		default:
			full = true
		}
	}
	if full {
		p.queued.Add(-n)
		p.qbytes.Add(-size)
		p.mu.RUnlock()
		p.m.refusedFull.Add(float64(n))
		return ErrQueueFull
	}
	p.mu.RUnlock()
	p.m.accepted.Add(float64(n))
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The spans stay queued and will be committed; the client may retry
		// and store them twice, which readers tolerate (same ids).
		return ctx.Err()
	}
}

// Run commits queued requests until Close is called and the queue is drained.
// It returns nil after a clean drain.
func (p *Pipeline) Run() error {
	defer close(p.stopped)
	batch := make([]*request, 0, 64)
	var spans []*model.Span
	var delay *time.Timer
	idleSince := time.Now()
	for first := range p.queue {
		idle := time.Since(idleSince)
		batch = append(batch[:0], first)
		spans = append(spans[:0], first.spans...)
	drain:
		for len(spans) < p.cfg.MaxBatchSpans {
			select {
			case r, ok := <-p.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
				spans = append(spans, r.spans...)
			default:
				break drain
			}
		}
		if wait := min(p.cfg.CommitDelay, 2*idle); wait > 0 && len(spans) < p.cfg.CommitDelaySpans {
			// A small commit after a quiet time: let more requests join it
			// (see CommitDelay).
			if delay == nil {
				delay = time.NewTimer(wait)
			} else {
				delay.Reset(wait)
			}
		wait:
			for len(spans) < p.cfg.CommitDelaySpans {
				select {
				case r, ok := <-p.queue:
					if !ok {
						break wait
					}
					batch = append(batch, r)
					spans = append(spans, r.spans...)
				case <-delay.C:
					break wait
				}
			}
			delay.Stop()
		}
		p.commit(batch, spans)
		idleSince = time.Now()
	}
	return nil
}

func (p *Pipeline) commit(batch []*request, spans []*model.Span) {
	p.detect(spans)
	// The write is not bound to any request's context: once admitted, spans
	// are committed even if their client gave up. Its latency is the store's
	// rootline_store_op_seconds{op="write_spans"}.
	err := p.writer.WriteSpans(context.Background(), spans)
	p.m.batchSpans.Observe(float64(len(spans)))
	p.queued.Add(-int64(len(spans)))
	var size int64
	for _, r := range batch {
		size += r.bytes
	}
	p.qbytes.Add(-size)
	if err != nil {
		p.m.failed.Add(float64(len(spans)))
		p.logger.Error("store write failed; requests answered with an error", "spans", len(spans), "requests", len(batch), "err", err)
		err = fmt.Errorf("store write failed: %w", err)
	} else {
		p.m.stored.Add(float64(len(spans)))
	}
	for _, r := range batch {
		r.done <- err
	}
	if err != nil {
		return
	}
	// Sinks get their own slice: the batch buffer is reused.
	committed := make([]*model.Span, len(spans))
	copy(committed, spans)
	for _, s := range p.sinks {
		s.OnCommitted(committed)
	}
}

// detect classifies each span and annotates anomalous ones.
func (p *Pipeline) detect(spans []*model.Span) {
	if p.det == nil {
		return
	}
	p.m.anomalies.Add(float64(Detect(p.det, p.cfg.KeyBy, spans)))
}

// Detect classifies each span with det under the key keyBy names (KeyBy),
// annotates the anomalous ones and returns how many there were. The Kafka
// stage's detectors share it with the pipeline.
func Detect(det anomaly.Detector, keyBy string, spans []*model.Span) int {
	n := 0
	chk, _ := det.(anomaly.Checker)
	for _, s := range spans {
		var v anomaly.Verdict
		switch {
		case s.InFlight():
			// A request still open (model.AttrInFlight): its age is a lower
			// bound of its duration, judged but not observed, so that it
			// never enters the baseline; its final copy is observed once.
			if chk == nil {
				continue
			}
			v = chk.Check(KeyOf(keyBy, s), s.Duration)
		default:
			v = anomaly.ObserveWeighted(det, KeyOf(keyBy, s), s.Duration, s.End(), SampleWeight(s))
		}
		if !v.Anomalous {
			continue
		}
		n++
		Annotate(s, v)
	}
	return n
}

// SampleWeight is the number of spans s stands for: the adjusted count of
// the threshold it was sampled under (anomaly.AttrSamplingThreshold), 1
// when it carries none or an invalid one. The detector's baselines weight
// each duration by it, so that a node-side sample that keeps every slow
// trace and some of the normal ones does not pull baselines up.
func SampleWeight(s *model.Span) int {
	v, ok := s.Attr(anomaly.AttrSamplingThreshold)
	if !ok {
		return 1
	}
	t, ok := anomaly.ParseThreshold(v.Str)
	if !ok {
		return 1
	}
	return anomaly.AdjustedCount(t)
}

// KeyOf returns the detector key of a span under keyBy (KeyBy).
func KeyOf(keyBy string, s *model.Span) string {
	if keyBy == KeyByService {
		return s.Service
	}
	return DetectorKey(s.Service, s.Name)
}

// DetectorKey is the key of a (service, operation) pair under KeyByOperation.
func DetectorKey(service, operation string) string { return service + "/" + operation }

// Annotate marks a span anomalous with the attributes internal/model names
// (model.AttrAnomaly and the others of docs/api.md).
func Annotate(s *model.Span, v anomaly.Verdict) {
	s.SetAttr(model.Bool(model.AttrAnomaly, true))
	s.SetAttr(model.Float(model.AttrBaselineMs, float64(v.Baseline)/1e6))
	s.SetAttr(model.Float(model.AttrThreshold, v.Threshold))
	s.SetAttr(model.Bool(model.AttrError, true))
}

// Close stops admitting spans (ConsumeSpans returns ErrShuttingDown) and waits
// until every admitted span is committed or ctx ends.
func (p *Pipeline) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		close(p.queue)
	}
	p.mu.Unlock()
	select {
	case <-p.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pipeline drain: %d spans not committed: %w", p.queued.Load(), ctx.Err())
	}
}

// QueuedSpans returns the spans admitted and not yet committed.
func (p *Pipeline) QueuedSpans() int64 { return p.queued.Load() }
