package query

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// latencySample bounds the traces read per service for its p95.
const latencySample = 500

// serviceLatencyJSON compares a service's recent p95 with the detector's
// baseline (the median of its operations' window medians).
type serviceLatencyJSON struct {
	Service    string  `json:"service"`
	Spans      int     `json:"spans"`      // spans the p95 was computed from
	P95Ns      int64   `json:"p95Ns"`      // 0 without spans
	BaselineNs int64   `json:"baselineNs"` // 0 when the detector has no verdict-ready key yet
	Ratio      float64 `json:"ratio"`      // p95 / baseline; 0 when either is unknown
}

// getServiceLatency implements GET /api/v1/services/latency?lookback=1h[&service=]:
// for each service, the p95 duration of its spans in the newest traces
// (at most 500) of the lookback, against the detector's baseline.
func (a *API) getServiceLatency(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lookback := time.Hour
	if s := q.Get(paramLookback); s != "" {
		d, err := parseLongDuration(s)
		if err != nil || d <= 0 {
			a.v1Error(w, r, http.StatusBadRequest, badParam(paramLookback, fmt.Errorf("%q is not a positive duration", s)))
			return
		}
		lookback = d
	}
	services := []string{q.Get("service")}
	if services[0] == "" {
		var err error
		if services, err = a.spans.GetServices(r.Context()); err != nil {
			a.v1StoreError(w, r, err)
			return
		}
	}
	baselines := map[string][]int64{}
	if a.detector != nil {
		for _, st := range a.detector() {
			if st.Baseline <= 0 || st.Fill == 0 {
				continue
			}
			svc, _, _ := strings.Cut(st.Key, "/") // keys are "service/operation" or "service"
			baselines[svc] = append(baselines[svc], st.Baseline)
		}
	}
	now := time.Now()
	out := make([]serviceLatencyJSON, 0, len(services))
	for _, svc := range services {
		traces, err := a.spans.FindTraces(r.Context(), store.TraceQuery{Service: svc, StartMin: now.Add(-lookback).UnixNano(), Limit: latencySample})
		if err != nil {
			a.v1StoreError(w, r, err)
			return
		}
		var durs []int64
		for _, t := range traces {
			for _, s := range t {
				if s.Service == svc {
					durs = append(durs, s.Duration)
				}
			}
		}
		row := serviceLatencyJSON{Service: svc, Spans: len(durs), P95Ns: quantile(durs, 0.95), BaselineNs: quantile(baselines[svc], 0.5)}
		if row.P95Ns > 0 && row.BaselineNs > 0 {
			row.Ratio = float64(row.P95Ns) / float64(row.BaselineNs)
		}
		out = append(out, row)
	}
	a.writeJSON(w, r, http.StatusOK, out)
}

// quantile returns the nearest-rank q-quantile of v (sorted in place), 0 for none.
func quantile(v []int64, q float64) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(q*float64(len(v))+0.5) - 1
	return v[min(max(i, 0), len(v)-1)]
}
