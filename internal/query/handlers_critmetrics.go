package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/critmetrics"
	"github.com/rootline/rootline/internal/store"
)

// Bounds of the kernel-metric analyses served by the query API: what one
// request may read and compute.
const (
	// MaxAnalysisWindow is the longest window analysed.
	MaxAnalysisWindow = 24 * time.Hour
	// AnalysisPointLimit bounds the points read per kernel metric.
	AnalysisPointLimit = 500_000
	// AnalysisTimeout bounds one analysis; a longer one answers 503 (its
	// work still finishes, in the one slot analyses share).
	AnalysisTimeout = 60 * time.Second
)

// kernelMetrics reads the kernel metric series of the request's window.
func (a *API) kernelMetrics(w http.ResponseWriter, r *http.Request) (series []store.MetricSeries, from, to int64, ok bool) {
	if a.metrics == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errors.New("this store keeps no metrics"))
		return nil, 0, 0, false
	}
	from, to, err := a.metricWindow(r.URL.Query(), MaxAnalysisWindow)
	if err != nil {
		a.v1Error(w, r, http.StatusBadRequest, err)
		return nil, 0, 0, false
	}
	series, err = critmetrics.StoreSource{Reader: a.metrics, Limit: AnalysisPointLimit}.KernelMetrics(r.Context(), from, to)
	switch {
	case errors.Is(err, critmetrics.ErrTooManyPoints):
		a.v1Error(w, r, http.StatusBadRequest, err)
		return nil, 0, 0, false
	case err != nil:
		a.v1StoreError(w, r, err)
		return nil, 0, 0, false
	}
	return series, from, to, true
}

// analysisError answers an error of critmetrics: no data or too little is
// the client's window (404 and 422), anything else the server's.
func (a *API) analysisError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, critmetrics.ErrNoData):
		a.v1Error(w, r, http.StatusNotFound, err)
	case errors.Is(err, critmetrics.ErrTooShort):
		a.v1Error(w, r, http.StatusUnprocessableEntity, err)
	case errors.Is(err, context.DeadlineExceeded):
		a.v1Error(w, r, http.StatusServiceUnavailable, fmt.Errorf("the analysis took longer than %s: narrow the window or name a service", AnalysisTimeout))
	case errors.Is(err, context.Canceled):
		a.v1Error(w, r, http.StatusServiceUnavailable, err)
	default:
		a.v1Error(w, r, http.StatusBadRequest, err)
	}
}

// analyze runs f in the analyses' slot, giving up (not f) after
// AnalysisTimeout or when the client goes away.
func (a *API) analyze(ctx context.Context, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, AnalysisTimeout)
	defer cancel()
	select {
	case a.critmetricsSlot <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-a.critmetricsSlot }()
		done <- f()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// getCriticalMetrics implements
// GET /api/v1/critical-metrics?service=&from=&to=&step=&k=&maxK=: the
// CriticalMetrics analysis (critmetrics.Report, the output of `rootline
// analyze critical-metrics --json`) of the stored kernel metrics of the
// window, of one service or of every one. A coarser step makes shorter
// series: k-Shape's shape extraction is cubic in their length, so a long
// window at the agents' push interval takes minutes.
func (a *API) getCriticalMetrics(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	// The seed of the command's default: the same window, the same answer.
	opts := critmetrics.Options{Seed: 1}
	if svc := q.Get(paramService); svc != "" {
		opts.Services = []string{svc}
	}
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"k", &opts.K, 20}, {"maxK", &opts.MaxK, 20}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 2 || n > p.max {
				a.v1Error(w, r, http.StatusBadRequest, badParam(p.name, fmt.Errorf("%q is not in 2..%d", s, p.max)))
				return
			}
			*p.dst = n
		}
	}
	if s := q.Get("step"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 100*time.Millisecond || d > time.Hour {
			a.v1Error(w, r, http.StatusBadRequest, badParam("step", fmt.Errorf("%q is not a duration in 100ms..1h", s)))
			return
		}
		opts.Step = d
	}
	series, from, to, ok := a.kernelMetrics(w, r)
	if !ok {
		return
	}
	opts.From, opts.To = from, to
	var rep *critmetrics.Report
	err := a.analyze(r.Context(), func() (err error) {
		rep, err = critmetrics.Analyze(series, opts)
		return err
	})
	if err != nil {
		a.analysisError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, rep)
}

// getMetricsTimeline implements
// GET /api/v1/metrics/timeline?service=&container=&from=&to=&buckets=: the
// stored kernel metrics per container on one time grid of at most buckets
// intervals (critmetrics.Timeline): per interval each metric's value, event
// count and histogram, what the UI's metrics view draws.
func (a *API) getMetricsTimeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := critmetrics.TimelineOptions{Service: q.Get(paramService), Container: q.Get("container")}
	if s := q.Get("buckets"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > critmetrics.MaxTimelineBuckets {
			a.v1Error(w, r, http.StatusBadRequest, badParam("buckets", fmt.Errorf("%q is not in 1..%d", s, critmetrics.MaxTimelineBuckets)))
			return
		}
		opts.Buckets = n
	}
	series, from, to, ok := a.kernelMetrics(w, r)
	if !ok {
		return
	}
	opts.From, opts.To = from, to
	var tl *critmetrics.Timeline
	err := a.analyze(r.Context(), func() (err error) {
		tl, err = critmetrics.BuildTimeline(series, opts)
		return err
	})
	if err != nil {
		a.analysisError(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, tl)
}
