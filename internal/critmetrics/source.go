package critmetrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/store"
)

// Source reads the stored kernel metric series of a window.
type Source interface {
	// KernelMetrics returns every kernel metric series with points in
	// [from, to] (Unix ns; zero: unbounded). It MUST fail rather than
	// return a truncated window.
	KernelMetrics(ctx context.Context, from, to int64) ([]store.MetricSeries, error)
}

// StoreLimit bounds the points read per metric from a store.
const StoreLimit = 2_000_000

// ErrTooManyPoints: the window holds more points of a metric than a source
// reads.
var ErrTooManyPoints = errors.New("critmetrics: too many points in the window")

// StoreSource reads a store (a stopped server's data directory, or the
// server's own store).
type StoreSource struct {
	Reader store.MetricReader
	// Limit bounds the points read per metric; 0: StoreLimit.
	Limit int
}

// KernelMetrics implements Source, one query per metric.
func (s StoreSource) KernelMetrics(ctx context.Context, from, to int64) ([]store.MetricSeries, error) {
	if to == 0 {
		to = time.Now().Add(24 * time.Hour).UnixNano()
	}
	limit := s.Limit
	if limit <= 0 {
		limit = StoreLimit
	}
	var out []store.MetricSeries
	for _, mt := range kmetrics.Metrics() {
		ss, err := s.Reader.FindMetrics(ctx, store.MetricQuery{Name: mt.ExportName(), From: from, To: to, Limit: limit})
		if err != nil {
			return nil, err
		}
		if countPoints(ss) >= limit {
			return nil, fmt.Errorf("%w: more than %d points of %s: narrow the window (--from/--to)", ErrTooManyPoints, limit, mt.ExportName())
		}
		out = append(out, ss...)
	}
	return out, nil
}

func countPoints(ss []store.MetricSeries) int {
	n := 0
	for _, s := range ss {
		n += len(s.Points)
	}
	return n
}

// APILimit is the most points GET /api/v1/metrics returns per request.
const APILimit = 100000

// APISource reads a running server's GET /api/v1/metrics.
type APISource struct {
	// URL is the server's query API base (http://host:16686).
	URL    string
	Token  string
	Client *http.Client
}

type apiPoint struct {
	Time    int64     `json:"timeUnixNano"`
	Start   int64     `json:"startTimeUnixNano"`
	Value   *float64  `json:"value"`
	Count   *uint64   `json:"count"`
	Sum     *float64  `json:"sum"`
	Bounds  []float64 `json:"bounds"`
	Buckets []uint64  `json:"buckets"`
}

type apiSeries struct {
	Name    string            `json:"name"`
	Service string            `json:"service"`
	Unit    string            `json:"unit"`
	Kind    string            `json:"kind"`
	Labels  map[string]string `json:"labels"`
	Points  []apiPoint        `json:"points"`
}

// KernelMetrics implements Source, one request per metric (and per service
// when a metric has more points than one answer holds).
func (s APISource) KernelMetrics(ctx context.Context, from, to int64) ([]store.MetricSeries, error) {
	if from == 0 {
		from = time.Now().Add(-24 * time.Hour).UnixNano()
	}
	if to == 0 {
		to = time.Now().UnixNano()
	}
	var out []store.MetricSeries
	for _, mt := range kmetrics.Metrics() {
		ss, err := s.get(ctx, mt.ExportName(), "", from, to)
		if err != nil {
			return nil, err
		}
		if countPoints(ss) >= APILimit {
			// Split by service: each answer must be complete.
			svcs := map[string]bool{}
			for _, x := range ss {
				svcs[x.Service] = true
			}
			ss = nil
			for svc := range svcs {
				part, err := s.get(ctx, mt.ExportName(), svc, from, to)
				if err != nil {
					return nil, err
				}
				if countPoints(part) >= APILimit {
					return nil, fmt.Errorf("critmetrics: more than %d points of %s for service %s: narrow --from/--to", APILimit, mt.ExportName(), svc)
				}
				ss = append(ss, part...)
			}
		}
		out = append(out, ss...)
	}
	return out, nil
}

func (s APISource) get(ctx context.Context, name, service string, from, to int64) ([]store.MetricSeries, error) {
	q := url.Values{"name": {name}, "limit": {strconv.Itoa(APILimit)},
		"from": {strconv.FormatInt(from/1e6, 10)}, "to": {strconv.FormatInt((to+1e6-1)/1e6, 10)}}
	if service != "" {
		q.Set("service", service)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/metrics?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("critmetrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 512<<20))
	if err != nil {
		return nil, fmt.Errorf("critmetrics: read %s: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := string(body)
		if len(msg) > 300 {
			msg = msg[:300]
		}
		if resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("critmetrics: the server wants a token (--auth.token-file or ROOTLINE_AUTH_TOKEN): %s", msg)
		}
		return nil, fmt.Errorf("critmetrics: GET /api/v1/metrics: %s: %s", resp.Status, msg)
	}
	var doc struct {
		Series []apiSeries `json:"series"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("critmetrics: GET /api/v1/metrics: %w", err)
	}
	out := make([]store.MetricSeries, 0, len(doc.Series))
	for _, a := range doc.Series {
		ms := store.MetricSeries{Name: a.Name, Service: a.Service, Unit: a.Unit, Labels: a.Labels}
		switch a.Kind {
		case "histogram":
			ms.Kind = store.MetricHistogram
		case "sum":
			ms.Kind = store.MetricSum
		default:
			ms.Kind = store.MetricGauge
		}
		for _, p := range a.Points {
			mp := store.MetricPoint{Time: p.Time, StartTime: p.Start, Bounds: p.Bounds, Buckets: p.Buckets}
			if p.Value != nil {
				mp.Value = *p.Value
			}
			if p.Count != nil {
				mp.Count = *p.Count
			}
			if p.Sum != nil {
				mp.Sum = *p.Sum
			}
			ms.Points = append(ms.Points, mp)
		}
		out = append(out, ms)
	}
	return out, nil
}
