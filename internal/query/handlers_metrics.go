package query

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/critmetrics"
	"github.com/rootline/rootline/internal/store"
)

// SetMetricReader enables GET /api/v1/metrics over r (nil disables it).
// Call it before serving.
func (a *API) SetMetricReader(r store.MetricReader) { a.metrics = r }

type metricPointJSON struct {
	TimeUnixNano      int64     `json:"timeUnixNano"`
	StartTimeUnixNano int64     `json:"startTimeUnixNano,omitempty"`
	Value             *float64  `json:"value,omitempty"`
	Count             *uint64   `json:"count,omitempty"`
	Sum               *float64  `json:"sum,omitempty"`
	Bounds            []float64 `json:"bounds,omitempty"`
	Buckets           []uint64  `json:"buckets,omitempty"`
}

type metricSeriesJSON struct {
	Name    string            `json:"name"`
	Service string            `json:"service"`
	Unit    string            `json:"unit"`
	Kind    string            `json:"kind"`
	Labels  map[string]string `json:"labels"`
	Points  []metricPointJSON `json:"points"`
}

// parseMetricTime reads a from/to parameter: Unix milliseconds or RFC 3339.
func parseMetricTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms * int64(time.Millisecond), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither Unix milliseconds nor RFC 3339", s)
	}
	return t.UnixNano(), nil
}

// Bounds of the metric endpoints.
const (
	// MaxMetricSeries is the most series one GET /api/v1/metrics answer
	// holds; a query matching more is refused (narrow it with name,
	// service or container) rather than answered in part.
	MaxMetricSeries = 5000
	// MaxMetricWindow is the longest window of the metric endpoints.
	MaxMetricWindow = 31 * 24 * time.Hour
)

// metricWindow reads the from and to parameters (Unix ms or RFC 3339): to
// defaults to now, from to an hour before to; the window must be at most
// maxSpan long.
func (a *API) metricWindow(q url.Values, maxSpan time.Duration) (from, to int64, err error) {
	to = a.now().UnixNano()
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"to", &to}, {"from", &from}} {
		if s := q.Get(p.name); s != "" {
			v, err := parseMetricTime(s)
			if err != nil {
				return 0, 0, badParam(p.name, err)
			}
			*p.dst = v
		}
	}
	if q.Get("from") == "" {
		from = to - int64(time.Hour)
	}
	if from > to {
		return 0, 0, badParam("from", errors.New("from is after to"))
	}
	if to-from > int64(maxSpan) {
		return 0, 0, badParam("from", fmt.Errorf("the window is longer than %s", maxSpan))
	}
	return from, to, nil
}

// getMetrics implements
// GET /api/v1/metrics?name=&service=&container=&from=&to=&limit=&points=:
// stored metric points (pushed as OTLP, e.g. the agents' kernel metrics)
// grouped by series. from and to are Unix ms or RFC 3339; from defaults to
// an hour before to, to to now. limit bounds the points read (all series
// together), points thins each series to at most that many points (the
// first, the last and evenly spaced ones between: the stored series are
// cumulative, so the increments between kept points stay exact).
func (a *API) getMetrics(w http.ResponseWriter, r *http.Request) {
	if a.metrics == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errors.New("this store keeps no metrics"))
		return
	}
	q := r.URL.Query()
	mq := store.MetricQuery{Name: q.Get("name"), Service: q.Get("service")}
	var err error
	if mq.From, mq.To, err = a.metricWindow(q, MaxMetricWindow); err != nil {
		a.v1Error(w, r, http.StatusBadRequest, err)
		return
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 100000 {
			a.v1Error(w, r, http.StatusBadRequest, badParam("limit", fmt.Errorf("%q is not in 1..100000", s)))
			return
		}
		mq.Limit = n
	}
	maxPoints := 0
	if s := q.Get("points"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > 100000 {
			a.v1Error(w, r, http.StatusBadRequest, badParam("points", fmt.Errorf("%q is not in 2..100000", s)))
			return
		}
		maxPoints = n
	}
	series, err := a.metrics.FindMetrics(r.Context(), mq)
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	if ctr := q.Get("container"); ctr != "" {
		series = slices.DeleteFunc(series, func(s store.MetricSeries) bool { return s.Labels[critmetrics.ContainerLabel] != ctr })
	}
	if len(series) > MaxMetricSeries {
		a.v1Error(w, r, http.StatusBadRequest, fmt.Errorf("%d series match, at most %d are answered: narrow the query with name, service or container", len(series), MaxMetricSeries))
		return
	}
	out := make([]metricSeriesJSON, 0, len(series))
	for _, s := range series {
		pts := thinPoints(s.Points, maxPoints)
		sj := metricSeriesJSON{Name: s.Name, Service: s.Service, Unit: s.Unit, Kind: s.Kind.String(), Labels: s.Labels,
			Points: make([]metricPointJSON, 0, len(pts))}
		for _, p := range pts {
			pj := metricPointJSON{TimeUnixNano: p.Time, StartTimeUnixNano: p.StartTime}
			if s.Kind == store.MetricHistogram {
				pj.Count, pj.Sum, pj.Bounds, pj.Buckets = &p.Count, &p.Sum, p.Bounds, p.Buckets
			} else {
				pj.Value = &p.Value
			}
			sj.Points = append(sj.Points, pj)
		}
		out = append(out, sj)
	}
	a.writeJSON(w, r, http.StatusOK, map[string]any{"series": out})
}

// thinPoints keeps at most n of pts (n < 2: all): the first, the last and
// evenly spaced ones between.
func thinPoints(pts []store.MetricPoint, n int) []store.MetricPoint {
	if n < 2 || len(pts) <= n {
		return pts
	}
	out := make([]store.MetricPoint, n)
	for i := range n {
		out[i] = pts[i*(len(pts)-1)/(n-1)]
	}
	return out
}
