package query

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

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

// getMetrics implements GET /api/v1/metrics?name=&service=&from=&to=&limit=:
// stored metric points (pushed as OTLP, e.g. the agents' kernel metrics)
// grouped by series. from and to are Unix ms or RFC 3339; from defaults to
// an hour before to, to to now.
func (a *API) getMetrics(w http.ResponseWriter, r *http.Request) {
	if a.metrics == nil {
		a.v1Error(w, r, http.StatusNotImplemented, errors.New("this store keeps no metrics"))
		return
	}
	q := r.URL.Query()
	mq := store.MetricQuery{Name: q.Get("name"), Service: q.Get("service"), To: a.now().UnixNano()}
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"to", &mq.To}, {"from", &mq.From}} {
		if s := q.Get(p.name); s != "" {
			v, err := parseMetricTime(s)
			if err != nil {
				a.v1Error(w, r, http.StatusBadRequest, badParam(p.name, err))
				return
			}
			*p.dst = v
		}
	}
	if q.Get("from") == "" {
		mq.From = mq.To - int64(time.Hour)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 100000 {
			a.v1Error(w, r, http.StatusBadRequest, badParam("limit", fmt.Errorf("%q is not in 1..100000", s)))
			return
		}
		mq.Limit = n
	}
	series, err := a.metrics.FindMetrics(r.Context(), mq)
	if err != nil {
		a.v1StoreError(w, r, err)
		return
	}
	out := make([]metricSeriesJSON, 0, len(series))
	for _, s := range series {
		sj := metricSeriesJSON{Name: s.Name, Service: s.Service, Unit: s.Unit, Kind: s.Kind.String(), Labels: s.Labels,
			Points: make([]metricPointJSON, 0, len(s.Points))}
		for _, p := range s.Points {
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
