package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/store"
)

// critpathRunner computes, in the background, the critical paths of the
// spans each completed capture explains, from its kernel snapshot, and
// stores them as a "critical-path" artifact of the capture (critpath.Analyzer
// Capture). One at a time: a large snapshot takes seconds of CPU, and the
// ingest path must not wait for it.
type critpathRunner struct {
	an    *critpath.Analyzer
	arts  store.ArtifactStore
	queue chan []string // a capture's artifact ids
	// urgent holds the captures of suspects (capture.Capture.Suspect): an
	// open incident's verdict waits for their paths, so they go before the
	// queue, which may be minutes long on a loaded server.
	urgent chan []string
	log    *slog.Logger
	done   *prometheus.CounterVec
	secs   prometheus.Histogram
	// onStored, when set, is called after each capture's paths are stored.
	onStored func()
}

// critpathQueue bounds the captures waiting for their paths; beyond it they
// are dropped (counted): GET /api/v1/traces/{id}/critical-path still
// computes them on demand.
const critpathQueue = 256

// newCritpathRunner returns a runner reading spans from st and storing
// paths through arts.
func newCritpathRunner(st store.SpanReader, arts store.ArtifactStore, logger *slog.Logger, reg prometheus.Registerer) (*critpathRunner, error) {
	r := &critpathRunner{
		an: &critpath.Analyzer{Spans: st, Artifacts: arts, Logger: logger.With("component", "critpath"),
			Cache: critpath.NewStoredCache(critpath.DefaultStoredCacheBytes)},
		arts:   arts,
		queue:  make(chan []string, critpathQueue),
		urgent: make(chan []string, critpathQueue),
		log:    logger.With("component", "critpath"),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_critpath_snapshots_total",
			Help: "Kernel snapshots of completed captures analysed for critical paths, by outcome (stored, failed, dropped)."}, []string{"outcome"}),
		secs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rootline_critpath_seconds",
			Help: "Time to compute and store the critical paths of one kernel snapshot.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 8)}),
	}
	for _, c := range []prometheus.Collector{r.done, r.secs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// finished is the capture manager's hook: it never blocks.
func (r *critpathRunner) finished(c capture.Capture) {
	if len(c.Artifacts) == 0 {
		return
	}
	q := r.queue
	if c.Suspect {
		q = r.urgent
	}
	select {
	case q <- c.Artifacts:
	default:
		r.done.WithLabelValues("dropped").Inc()
		r.log.Warn("critical-path queue full: the capture's paths will be computed when asked for", "capture", c.ID)
	}
}

func (r *critpathRunner) run(ctx context.Context) error {
	for {
		ids, ok := r.next(ctx)
		if !ok {
			return nil
		}
		for _, id := range ids {
			r.one(ctx, id)
		}
	}
}

// next waits for the next capture to analyse, a suspect's first; false
// once ctx is done.
func (r *critpathRunner) next(ctx context.Context) ([]string, bool) {
	select {
	case ids := <-r.urgent:
		return ids, true
	default:
	}
	select {
	case <-ctx.Done():
		return nil, false
	case ids := <-r.urgent:
		return ids, true
	case ids := <-r.queue:
		return ids, true
	}
}

func (r *critpathRunner) one(ctx context.Context, id string) {
	art, err := r.arts.GetArtifact(ctx, id)
	if err != nil || !critpath.IsSnapshot(art.Kind, art.MediaType) {
		return
	}
	t0 := time.Now()
	st, err := r.an.Capture(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			r.done.WithLabelValues("failed").Inc()
			r.log.Warn("critical paths not computed", "snapshot", id, "capture", art.CaptureID, "err", err)
		}
		return
	}
	r.secs.Observe(time.Since(t0).Seconds())
	r.done.WithLabelValues("stored").Inc()
	if r.onStored != nil {
		r.onStored()
	}
	r.log.Info("critical paths stored", "snapshot", id, "capture", art.CaptureID, "paths", len(st.Paths),
		"notes", len(st.Notes), "seconds", time.Since(t0).Seconds())
}
