package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// timedStore measures store latencies by operation for /metrics.
type timedStore struct {
	store.Store
	hist *prometheus.HistogramVec
}

func instrumentStore(s store.Store, reg prometheus.Registerer) store.Store {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rootline_store_op_seconds", Help: "Latency of store operations.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"op"})
	reg.MustRegister(h)
	return &timedStore{Store: s, hist: h}
}

func (t *timedStore) since(op string, start time.Time) {
	t.hist.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (t *timedStore) WriteSpans(ctx context.Context, spans []*model.Span) error {
	defer t.since("write_spans", time.Now())
	return t.Store.WriteSpans(ctx, spans)
}

func (t *timedStore) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	defer t.since("get_trace", time.Now())
	return t.Store.GetTrace(ctx, id)
}

func (t *timedStore) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	defer t.since("find_traces", time.Now())
	return t.Store.FindTraces(ctx, q)
}

func (t *timedStore) Purge(ctx context.Context, p store.RetentionPolicy) (store.PurgeStats, error) {
	defer t.since("purge", time.Now())
	return t.Store.Purge(ctx, p)
}
