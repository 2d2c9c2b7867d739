package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
)

// Writer stores spans whose clock skew the ingester already flagged (see
// factory.Storage.WriteFlaggedSpans). Writes MUST be idempotent per (trace
// id, span id): records are consumed again after a crash.
type Writer interface {
	WriteFlaggedSpans(ctx context.Context, spans []*model.Span) error
}

// Detector consumes the spans topic in the detectors' consumer group:
// detection, storage, then the offset commit, then the sinks (capture,
// export). Each owned partition has its own detector windows (its services'
// keys), rebuilt from the partition when it is assigned and dropped when it
// is revoked.
type Detector struct {
	cfg    Config
	detCfg anomaly.Config
	keyBy  string
	w      Writer
	sinks  []pipeline.Sink
	log    *slog.Logger
	cl     *kgo.Client
	adm    *kadm.Client
	optsFn func() ([]kgo.Opt, error)

	mu   sync.Mutex
	dets map[int32]*anomaly.Median

	failLog atomic.Int64
	m       detectorMetrics
}

type detectorMetrics struct {
	records, spans, anomalies, corrupt, storeRetries, commitFailures prometheus.Counter
	rebuildSeconds                                                   prometheus.Histogram
	rebuildRecords                                                   prometheus.Counter
	partitions                                                       prometheus.GaugeFunc
}

// NewDetector builds a detector member of cfg.Group. keyBy and detCfg are
// the pipeline's detector settings. reg may be nil.
func NewDetector(cfg Config, detCfg anomaly.Config, keyBy string, w Writer, sinks []pipeline.Sink, logger *slog.Logger, reg prometheus.Registerer) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := detCfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Detector{cfg: cfg, detCfg: detCfg, keyBy: keyBy, w: w, sinks: sinks, log: logger.With("component", "kafka-detector"),
		dets: map[int32]*anomaly.Median{}, optsFn: cfg.clientOpts}
	opts, err := cfg.clientOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// Rebalances wait while a polled batch is stored and committed, so
		// that a commit is never made for a partition this member lost.
		kgo.BlockRebalanceOnPoll(),
		// Assignment rebuilds windows; allow it time on a loaded machine.
		kgo.RebalanceTimeout(2*time.Minute),
		kgo.SessionTimeout(15*time.Second),
		kgo.OnPartitionsAssigned(d.assigned),
		kgo.OnPartitionsRevoked(d.revoked),
		kgo.OnPartitionsLost(d.revoked),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if d.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	d.adm = kadm.NewClient(d.cl)
	d.m = detectorMetrics{
		records:        prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_records_total", Help: "Records consumed, stored and committed."}),
		spans:          prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_spans_stored_total", Help: "Spans written to the span store."}),
		anomalies:      prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_anomalies_total", Help: "Spans the detector marked anomalous."}),
		corrupt:        prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_records_corrupt_total", Help: "Records that were not a span encoding (skipped)."}),
		storeRetries:   prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_store_retries_total", Help: "Store writes tried again after a failure (the batch is retried until stored)."}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_commit_failures_total", Help: "Offset commits that failed (their records are consumed again and stored once)."}),
		rebuildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rootline_detector_rebuild_seconds", Help: "Time to rebuild a partition's detector windows on assignment.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}),
		rebuildRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_detector_rebuild_records_total", Help: "Records read to rebuild detector windows."}),
		partitions: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_detector_partitions", Help: "Partitions of the spans topic this detector owns."},
			func() float64 { d.mu.Lock(); defer d.mu.Unlock(); return float64(len(d.dets)) }),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{d.m.records, d.m.spans, d.m.anomalies, d.m.corrupt, d.m.storeRetries, d.m.commitFailures,
			d.m.rebuildSeconds, d.m.rebuildRecords, d.m.partitions} {
			if err := reg.Register(c); err != nil {
				d.cl.Close()
				return nil, err
			}
		}
	}
	return d, nil
}

// Run consumes until ctx ends, then leaves the group (its partitions go to
// the other detectors at once). A batch being stored when ctx ends is not
// committed: its new owner consumes it again.
func (d *Detector) Run(ctx context.Context) error {
	defer d.cl.Close()
	for {
		fetches := d.cl.PollRecords(ctx, d.cfg.MaxPollRecords)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			d.cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				d.logFailure("fetch failed; retrying", err, "topic", t, "partition", p)
			}
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			d.cl.AllowRebalance()
			continue
		}
		spans := d.detect(recs)
		if !d.store(ctx, spans) {
			d.cl.AllowRebalance()
			return nil
		}
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := d.cl.CommitRecords(cctx, recs...); err != nil {
			d.m.commitFailures.Inc()
			d.log.Warn("offset commit failed; the records will be consumed again (and stored once)", "records", len(recs), "err", err)
		}
		cancel()
		d.m.records.Add(float64(len(recs)))
		if len(spans) > 0 {
			for _, s := range d.sinks {
				s.OnCommitted(spans)
			}
		}
		d.cl.AllowRebalance()
	}
}

// detect decodes records and classifies their spans with the windows of
// their partition, in offset order.
func (d *Detector) detect(recs []*kgo.Record) []*model.Span {
	var out []*model.Span
	for _, r := range recs {
		spans, err := model.DecodeSpans(r.Value)
		if err != nil {
			d.m.corrupt.Inc()
			d.log.Error("skipping a record that is not a span encoding", "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		d.m.anomalies.Add(float64(pipeline.Detect(d.detector(r.Partition), d.keyBy, spans)))
		out = append(out, spans...)
	}
	return out
}

func (d *Detector) detector(p int32) *anomaly.Median {
	d.mu.Lock()
	defer d.mu.Unlock()
	det := d.dets[p]
	if det == nil {
		det, _ = anomaly.NewMedian(d.detCfg, nil) // validated in NewDetector
		d.dets[p] = det
	}
	return det
}

// storeChunk is the most spans one store write takes. A batch of records
// is written in chunks so that a store that times out now and then (a
// loaded node) makes progress chunk by chunk, instead of retrying a whole
// batch that any one slow statement fails.
const storeChunk = 1024

// chunkEnd returns where the first chunk of spans ends: after at most limit
// spans, extended to the end of the trace the limit falls in, so that a
// trace's consecutive spans (a record holds a request's spans together) are
// written together.
func chunkEnd(spans []*model.Span, limit int) int {
	if len(spans) <= limit {
		return len(spans)
	}
	end := limit
	for end < len(spans) && spans[end].TraceID == spans[end-1].TraceID {
		end++
	}
	return end
}

// store writes until the store takes the spans or ctx ends (false): a
// batch is never skipped, so nothing Kafka holds is lost to a store outage.
// A failed chunk is written again; chunks already stored are not (they
// would be if the batch were consumed again, and writes are idempotent).
func (d *Detector) store(ctx context.Context, spans []*model.Span) bool {
	backoff := 100 * time.Millisecond
	for len(spans) > 0 {
		n := chunkEnd(spans, storeChunk)
		err := d.w.WriteFlaggedSpans(ctx, spans[:n])
		if err == nil {
			d.m.spans.Add(float64(n))
			spans, backoff = spans[n:], 100*time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		d.m.storeRetries.Inc()
		d.logFailure("span store write failed; retrying the chunk until it is stored", err, "spans", n, "backoff", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return true
}

// logFailure logs at most once every 10 s.
func (d *Detector) logFailure(msg string, err error, attrs ...any) {
	now := time.Now().UnixNano()
	if last := d.failLog.Load(); now-last < int64(10*time.Second) || !d.failLog.CompareAndSwap(last, now) {
		return
	}
	d.log.Error(msg, append(attrs, "err", err)...)
}

// States returns the detector state of every key this member owns.
func (d *Detector) States() []anomaly.KeyState {
	d.mu.Lock()
	dets := make([]*anomaly.Median, 0, len(d.dets))
	for _, det := range d.dets {
		dets = append(dets, det)
	}
	d.mu.Unlock()
	var out []anomaly.KeyState
	for _, det := range dets {
		out = append(out, det.States()...)
	}
	slices.SortFunc(out, func(a, b anomaly.KeyState) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Owns reports whether this member owns partition p of the spans topic.
// The owner of partition 0 runs the retention purge: exactly one detector
// at a time.
func (d *Detector) Owns(p int32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.dets[p]
	return ok
}

func (d *Detector) assigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	parts := assigned[d.cfg.Topic]
	if len(parts) == 0 {
		return
	}
	offs, err := d.adm.FetchOffsets(ctx, d.cfg.Group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		d.log.Warn("cannot read the group's offsets; windows of the new partitions start empty", "err", err)
	}
	starts, serr := d.adm.ListStartOffsets(ctx, d.cfg.Topic)
	for _, p := range parts {
		det, _ := anomaly.NewMedian(d.detCfg, nil)
		if err == nil && serr == nil {
			end := int64(-1)
			if o, ok := offs.Lookup(d.cfg.Topic, p); ok {
				end = o.At
			}
			low := int64(0)
			if s, ok := starts.Lookup(d.cfg.Topic, p); ok {
				low = s.Offset
			}
			t0 := time.Now()
			n, keys, err := d.rebuild(ctx, p, low, end, det)
			d.m.rebuildSeconds.Observe(time.Since(t0).Seconds())
			d.m.rebuildRecords.Add(float64(n))
			if err != nil {
				d.log.Warn("rebuilding detector windows failed part-way; detection of its services starts from what was read", "partition", p, "err", err)
			}
			d.log.Info("partition assigned", "partition", p, "rebuilt_from_records", n, "keys", keys, "took", time.Since(t0).Round(time.Millisecond))
		}
		d.mu.Lock()
		d.dets[p] = det
		d.mu.Unlock()
	}
}

func (d *Detector) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range revoked[d.cfg.Topic] {
		delete(d.dets, p)
	}
	if n := len(revoked[d.cfg.Topic]); n > 0 {
		d.log.Info("partitions revoked", "partitions", revoked[d.cfg.Topic])
	}
}
