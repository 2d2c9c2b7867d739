package store

import "context"

// MetricKind is the shape of a metric point.
type MetricKind int

// Metric kinds, as OTLP has them (summaries and exponential histograms are
// not stored).
const (
	MetricGauge MetricKind = iota
	MetricSum
	MetricHistogram
)

// String names the kind as the API shows it.
func (k MetricKind) String() string {
	switch k {
	case MetricGauge:
		return "gauge"
	case MetricSum:
		return "sum"
	case MetricHistogram:
		return "histogram"
	}
	return "unknown"
}

// MetricPoint is one point of one series. A series is identified by Name,
// Service and Labels.
type MetricPoint struct {
	Name    string
	Service string // service.name of the resource ("" when absent)
	Unit    string
	Kind    MetricKind
	// Labels are the resource and point attributes other than service.name,
	// as text.
	Labels    map[string]string
	StartTime int64 // Unix ns; start of a cumulative point (0 if unknown)
	Time      int64 // Unix ns
	// Value of a gauge or sum.
	Value float64
	// Count, Sum, Bounds and Buckets of a histogram: len(Buckets) ==
	// len(Bounds)+1, per-bucket (not cumulative) counts, OTLP's layout.
	Count   uint64
	Sum     float64
	Bounds  []float64
	Buckets []uint64
}

// MetricQuery selects points. Zero fields do not filter.
type MetricQuery struct {
	Name    string
	Service string
	From    int64 // Unix ns, inclusive
	To      int64 // Unix ns, inclusive
	// Limit bounds the number of points; 0 means the backend default (10000).
	Limit int
	// OmitBuckets says the caller reads no histogram bounds or bucket
	// counts, only each point's value, count and sum: a backend may then
	// leave them out rather than decode them.
	OmitBuckets bool
}

// MetricSeries is the points of one series, oldest first. Points carry no
// Name, Service, Unit, Kind or Labels of their own (the series has them).
type MetricSeries struct {
	Name    string
	Service string
	Unit    string
	Kind    MetricKind
	Labels  map[string]string
	Points  []MetricPoint
}

// MetricWriter stores metric points (pushed as OTLP metrics).
//
// WriteMetrics MUST NOT return nil before the batch is durable; a batch is
// written atomically. The slice is owned by the caller and MUST NOT be
// retained. Implementations MUST be safe for concurrent use.
type MetricWriter interface {
	WriteMetrics(ctx context.Context, points []MetricPoint) error
}

// MetricReader queries metric points. Returned slices are owned by the
// caller. Implementations MUST be safe for concurrent use. Points older than
// the span retention (RetentionPolicy.Normal) are removed by Purge.
type MetricReader interface {
	// FindMetrics returns the series with points matching q, sorted by name,
	// service and labels.
	FindMetrics(ctx context.Context, q MetricQuery) ([]MetricSeries, error)
}
