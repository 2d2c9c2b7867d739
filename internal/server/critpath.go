package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
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
	// backlog holds the deferred captures that completed before an
	// incident's start (its baseline), undeferred when it opened: they go
	// after the queue, at most backlogShare of one CPU (readyAt), so that
	// a burst of them does not slow the services the incident is about.
	backlog chan []string
	readyAt time.Time
	log     *slog.Logger
	done    *prometheus.CounterVec
	secs    prometheus.Histogram
	// onStored, when set, is called after each capture's paths are stored;
	// onBaseline instead for the backlog's (an incident's baseline, which
	// does not call for its verdict at once).
	onStored, onBaseline func()
	// active, when set, reports whether an incident is open or settling:
	// a capture that completes while none is waits in deferred, and its
	// paths are computed when one opens (undefer) within keep of it.
	active func() bool
	keep   time.Duration
	mu     sync.Mutex
	// deferred holds the captures waiting for an incident, oldest first.
	deferred []deferredCapture
}

type deferredCapture struct {
	ids []string
	at  time.Time
}

// maxDeferred bounds the captures waiting for an incident (at the default
// capture.max_per_minute of 12 and a 2-min lookback, 24).
const maxDeferred = 256

// critpathQueue bounds the captures waiting for their paths; beyond it they
// are dropped (counted): GET /api/v1/traces/{id}/critical-path still
// computes them on demand.
const critpathQueue = 256

// backlogShare is the share of one CPU the backlog's paths may take: after
// each, the runner waits (1/backlogShare − 1) times as long as it took
// before the next (a capture of the queue or a suspect's goes at once).
// Measured in the demo mesh (bench/RESULTS.md): computed back to back, the
// 15 captures deferred before an incident took the server to 100–135 % of a
// CPU for 8 s just after it opened, on the two CPUs the services shared.
const backlogShare = 0.5

// newCritpathRunner returns a runner reading spans from st and storing
// paths through arts.
func newCritpathRunner(st store.SpanReader, arts store.ArtifactStore, logger *slog.Logger, reg prometheus.Registerer) (*critpathRunner, error) {
	r := &critpathRunner{
		an: &critpath.Analyzer{Spans: st, Artifacts: arts, Logger: logger.With("component", "critpath"),
			Cache: critpath.NewStoredCache(critpath.DefaultStoredCacheBytes)},
		arts:    arts,
		queue:   make(chan []string, critpathQueue),
		urgent:  make(chan []string, critpathQueue),
		backlog: make(chan []string, critpathQueue),
		log:     logger.With("component", "critpath"),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_critpath_snapshots_total",
			Help: "Kernel snapshots of completed captures analysed for critical paths, by outcome (stored, failed, dropped), and captures whose paths waited for an incident (deferred) or were left to be computed when asked for (expired)."}, []string{"outcome"}),
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
	} else if r.active != nil && !r.active() {
		r.postpone(c.Artifacts, time.Now())
		return
	}
	r.enqueue(q, c.Artifacts)
}

func (r *critpathRunner) enqueue(q chan []string, ids []string) {
	select {
	case q <- ids:
	default:
		r.done.WithLabelValues("dropped").Inc()
		r.log.Warn("critical-path queue full: the capture's paths will be computed when asked for", "artifacts", len(ids))
	}
}

// postpone keeps a capture's artifacts until an incident opens, forgetting
// those older than keep.
func (r *critpathRunner) postpone(ids []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	if len(r.deferred) >= maxDeferred {
		r.deferred = r.deferred[1:]
		r.done.WithLabelValues("expired").Inc()
	}
	r.deferred = append(r.deferred, deferredCapture{ids: ids, at: now})
	r.done.WithLabelValues("deferred").Inc()
}

// expire forgets the deferred captures older than keep: no incident's
// verdict reads paths that far before its onset; they are computed when
// asked for. The caller holds r.mu.
func (r *critpathRunner) expire(now time.Time) {
	n := 0
	for n < len(r.deferred) && now.Sub(r.deferred[n].at) > r.keep {
		n++
	}
	if n > 0 {
		r.done.WithLabelValues("expired").Add(float64(n))
		r.deferred = slices.Delete(r.deferred, 0, n)
	}
}

// undefer queues the deferred captures, newest first: those that completed
// at or after start (an incident's own; 0: all) on the queue, the older
// ones — its culprit's baseline — on the backlog.
func (r *critpathRunner) undefer(start int64) {
	r.mu.Lock()
	r.expire(time.Now())
	list := r.deferred
	r.deferred = nil
	r.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		q := r.queue
		if list[i].at.UnixNano() < start {
			q = r.backlog
		}
		r.enqueue(q, list[i].ids)
	}
}

func (r *critpathRunner) run(ctx context.Context) error {
	for {
		ids, paced, ok := r.next(ctx)
		if !ok {
			return nil
		}
		hook := r.onStored
		if paced {
			hook = r.onBaseline
		}
		t0 := time.Now()
		for _, id := range ids {
			if r.one(ctx, id) && hook != nil {
				hook()
			}
		}
		if paced {
			r.readyAt = time.Now().Add(time.Duration(float64(time.Since(t0)) * (1/backlogShare - 1)))
		}
	}
}

// next waits for the next capture to analyse: a suspect's first, then the
// queue's, then the backlog's once readyAt has passed (paced true); false
// once ctx is done.
func (r *critpathRunner) next(ctx context.Context) (ids []string, paced, ok bool) {
	for _, q := range []chan []string{r.urgent, r.queue} {
		select {
		case ids := <-q:
			return ids, false, true
		default:
		}
	}
	for {
		var backlog chan []string
		var wait <-chan time.Time
		if d := time.Until(r.readyAt); d <= 0 {
			backlog = r.backlog
		} else if len(r.backlog) > 0 {
			wait = time.After(d) // collected once unreferenced, fired or not
		}
		select {
		case <-ctx.Done():
			return nil, false, false
		case ids := <-r.urgent:
			return ids, false, true
		case ids := <-r.queue:
			return ids, false, true
		case ids := <-backlog:
			return ids, true, true
		case <-wait:
			// readyAt has passed: the backlog's turn, unless the
			// others have something.
		}
	}
}

// one computes and stores the paths of snapshot id; false when it did
// not (not a snapshot, or failed).
func (r *critpathRunner) one(ctx context.Context, id string) bool {
	art, err := r.arts.GetArtifact(ctx, id)
	if err != nil || !critpath.IsSnapshot(art.Kind, art.MediaType) {
		return false
	}
	t0 := time.Now()
	st, err := r.an.Capture(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			r.done.WithLabelValues("failed").Inc()
			r.log.Warn("critical paths not computed", "snapshot", id, "capture", art.CaptureID, "err", err)
		}
		return false
	}
	r.secs.Observe(time.Since(t0).Seconds())
	r.done.WithLabelValues("stored").Inc()
	r.log.Info("critical paths stored", "snapshot", id, "capture", art.CaptureID, "paths", len(st.Paths),
		"notes", len(st.Notes), "seconds", time.Since(t0).Seconds())
	return true
}
