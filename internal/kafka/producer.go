package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
)

// Producer is the ingester's pipeline.Consumer: it writes each request's
// spans to the spans topic and returns once Kafka acknowledged all of them.
type Producer struct {
	cfg     Config
	cl      *kgo.Client
	log     *slog.Logger
	maxSkew time.Duration
	now     func() time.Time

	// ctx lives as long as the Producer: records are produced under it, not
	// under a client's request, so that a client giving up does not fail
	// other clients' records batched with its own.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.RWMutex
	closing bool
	flight  sync.WaitGroup

	failLog atomic.Int64
	m       producerMetrics
}

type producerMetrics struct {
	spans, records, refusedFull, failed prometheus.Counter
	recordBytes                         prometheus.Histogram
	buffered                            prometheus.GaugeFunc
}

var _ pipeline.Consumer = (*Producer)(nil)

// NewProducer connects to the brokers (lazily: it fails only on bad
// settings). maxSkew is the server's clock-skew bound (store.FlagClockSkew),
// applied here, where spans are received. reg may be nil.
func NewProducer(cfg Config, maxSkew time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Producer, error) {
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codecs[cfg.Compression]),
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes+64<<10)),
		// Records that Kafka has not acknowledged by then fail, when it is
		// safe to (see RecordDeliveryTimeout); the client was answered
		// "retry later" already at ProduceTimeout.
		kgo.RecordDeliveryTimeout(2*cfg.ProduceTimeout),
		kgo.UnknownTopicRetries(-1),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Producer{cfg: cfg, cl: cl, log: logger.With("component", "kafka-producer"), maxSkew: maxSkew, now: time.Now}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.m = producerMetrics{
		spans:       prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_ingester_spans_produced_total", Help: "Spans Kafka acknowledged (acks=all)."}),
		records:     prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_ingester_records_produced_total", Help: "Records Kafka acknowledged."}),
		refusedFull: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_ingester_spans_refused_buffer_full_total", Help: "Spans refused because max_buffered_bytes were waiting for Kafka (answered 429 / RESOURCE_EXHAUSTED)."}),
		failed:      prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_ingester_spans_failed_total", Help: "Spans of requests answered 503 / UNAVAILABLE because Kafka did not acknowledge them in time."}),
		recordBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rootline_ingester_record_bytes", Help: "Size of produced records.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 8)}),
		buffered: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_ingester_buffered_records", Help: "Records waiting for Kafka's acknowledgement."},
			func() float64 { return float64(cl.BufferedProduceRecords()) }),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{p.m.spans, p.m.records, p.m.refusedFull, p.m.failed, p.m.recordBytes, p.m.buffered} {
			if err := reg.Register(c); err != nil {
				cl.Close()
				return nil, err
			}
		}
	}
	return p, nil
}

// Records splits spans into records: one service per record (the key), at
// most maxBytes of encoded spans each (a single larger span gets a record
// of its own). Spans of a service keep their order.
func Records(spans []*model.Span, maxBytes int, ts time.Time) []*kgo.Record {
	var order []string
	by := map[string][]*model.Span{}
	for _, s := range spans {
		if _, ok := by[s.Service]; !ok {
			order = append(order, s.Service)
		}
		by[s.Service] = append(by[s.Service], s)
	}
	var out []*kgo.Record
	for _, svc := range order {
		group := by[svc]
		start, size := 0, 0
		flush := func(end int) {
			if end > start {
				out = append(out, &kgo.Record{Key: []byte(svc), Value: model.AppendSpans(nil, group[start:end]), Timestamp: ts})
			}
			start, size = end, 0
		}
		for i, s := range group {
			n := model.EncodedSize(s)
			if size > 0 && size+n > maxBytes {
				flush(i)
			}
			size += n
		}
		flush(len(group))
	}
	return out
}

// ConsumeSpans implements pipeline.Consumer: it returns nil once Kafka
// acknowledged every record (acks=all); pipeline.ErrQueueFull when too much
// waits for Kafka already; an error wrapping store.ErrUnavailable when
// Kafka did not acknowledge in time (the client retries; records that
// reached Kafka anyway are stored once, the writes being idempotent);
// pipeline.ErrShuttingDown once Close began.
func (p *Producer) ConsumeSpans(ctx context.Context, spans []*model.Span) error {
	if len(spans) == 0 {
		return nil
	}
	p.mu.RLock()
	if p.closing {
		p.mu.RUnlock()
		return pipeline.ErrShuttingDown
	}
	p.flight.Add(1)
	p.mu.RUnlock()
	defer p.flight.Done()

	now := p.now()
	recs := Records(store.FlagClockSkew(spans, now.UnixNano(), p.maxSkew), p.cfg.MaxRecordBytes, now)
	done := make(chan error, len(recs))
	for _, r := range recs {
		p.m.recordBytes.Observe(float64(len(r.Value)))
		p.cl.TryProduce(p.ctx, r, func(_ *kgo.Record, err error) { done <- err })
	}
	timer := time.NewTimer(p.cfg.ProduceTimeout)
	defer timer.Stop()
	var first error
	for range recs {
		select {
		case err := <-done:
			if err != nil && first == nil {
				first = err
			}
		case <-timer.C:
			p.m.failed.Add(float64(len(spans)))
			return fmt.Errorf("kafka: no acknowledgement within %v: %w", p.cfg.ProduceTimeout, store.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch {
	case first == nil:
		p.m.spans.Add(float64(len(spans)))
		p.m.records.Add(float64(len(recs)))
		return nil
	case errors.Is(first, kgo.ErrMaxBuffered):
		p.m.refusedFull.Add(float64(len(spans)))
		return pipeline.ErrQueueFull
	case errors.Is(first, context.Canceled) && p.ctx.Err() != nil:
		return pipeline.ErrShuttingDown
	}
	p.m.failed.Add(float64(len(spans)))
	p.logFailure(first)
	return fmt.Errorf("kafka: produce: %w", errors.Join(store.ErrUnavailable, first))
}

// logFailure logs a produce failure at most once every 10 s: while Kafka is
// down every request fails the same way.
func (p *Producer) logFailure(err error) {
	now := time.Now().UnixNano()
	if last := p.failLog.Load(); now-last < int64(10*time.Second) || !p.failLog.CompareAndSwap(last, now) {
		return
	}
	p.log.Error("Kafka did not take spans; receivers answer 503 / UNAVAILABLE until it does", "err", err)
}

// Ping checks that a broker answers.
func (p *Producer) Ping(ctx context.Context) error { return p.cl.Ping(ctx) }

// Close stops taking spans, waits for the requests in flight (at most
// until ctx ends), then closes the client.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.flight.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("kafka: %w while requests waited for Kafka", ctx.Err())
	}
	p.cancel()
	p.cl.Close()
	return err
}
