package receiver

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rootline/rootline/internal/store"
)

// OTLP metrics intake (POST /v1/metrics on the OTLP/HTTP port, and the
// MetricsService on the OTLP/gRPC port). Points are written straight to a
// store.MetricWriter, not through the span pipeline: they are few (the
// agents' kernel metrics every push interval) and carry no anomaly logic.

// SetMetricWriter makes the receivers accept OTLP metrics into w. Call it
// before Start; without it /v1/metrics answers 404 and gRPC Unimplemented.
func (r *Receivers) SetMetricWriter(w store.MetricWriter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metricWriter = w
}

func (r *Receivers) metricSink() store.MetricWriter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.metricWriter
}

// handleOTLPMetrics serves POST /v1/metrics like /v1/traces: protobuf or
// JSON, answered in the request's encoding.
func (r *Receivers) handleOTLPMetrics(w http.ResponseWriter, req *http.Request) {
	const rcv = receiverOTLPHTTP
	sink := r.metricSink()
	if sink == nil {
		http.Error(w, "this server does not store metrics", http.StatusNotFound)
		return
	}
	exp := pmetricotlp.NewExportRequest()
	mt, ok := r.readOTLPHTTP(w, req, "/v1/metrics", "ExportMetricsServiceRequest", exp)
	if !ok {
		return
	}
	if err := sink.WriteMetrics(req.Context(), FromPdataMetrics(exp.Metrics())); err != nil {
		r.logger.Warn("storing metrics failed", "receiver", rcv, "err", err)
		if errors.Is(err, store.ErrUnavailable) { // a full disk: retry later
			w.Header().Set("Retry-After", retryAfter)
		}
		writeStatus(w, mt, http.StatusServiceUnavailable, status.New(codes.Unavailable, "cannot store metrics"))
		return
	}
	r.writeOTLPHTTP(w, mt, pmetricotlp.NewExportResponse())
}

var _ pmetricotlp.GRPCServer = (*otlpMetricsGRPC)(nil)

// otlpMetricsGRPC serves the OTLP MetricsService.
type otlpMetricsGRPC struct {
	pmetricotlp.UnimplementedGRPCServer
	r *Receivers
}

func (s *otlpMetricsGRPC) Export(ctx context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	sink := s.r.metricSink()
	if sink == nil {
		return pmetricotlp.NewExportResponse(), status.Error(codes.Unimplemented, "this server does not store metrics")
	}
	if err := sink.WriteMetrics(ctx, FromPdataMetrics(req.Metrics())); err != nil {
		return pmetricotlp.NewExportResponse(), status.Error(codes.Unavailable, "cannot store metrics")
	}
	return pmetricotlp.NewExportResponse(), nil
}

// FromPdataMetrics flattens OTLP metrics into store points: gauges, sums and
// explicit-bucket histograms (exponential histograms and summaries are
// skipped). Resource attributes other than service.name and point attributes
// become labels.
func FromPdataMetrics(md pmetric.Metrics) []store.MetricPoint {
	var out []store.MetricPoint
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		service := ""
		resLabels := map[string]string{}
		rm.Resource().Attributes().Range(func(k string, v pcommon.Value) bool {
			if k == "service.name" {
				service = v.AsString()
			} else {
				resLabels[k] = v.AsString()
			}
			return true
		})
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				base := store.MetricPoint{Name: m.Name(), Service: service, Unit: m.Unit()}
				labels := func(attrs pcommon.Map) map[string]string {
					l := make(map[string]string, len(resLabels)+attrs.Len())
					for k, v := range resLabels {
						l[k] = v
					}
					attrs.Range(func(k string, v pcommon.Value) bool {
						l[k] = v.AsString()
						return true
					})
					return l
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge, pmetric.MetricTypeSum:
					var dps pmetric.NumberDataPointSlice
					if m.Type() == pmetric.MetricTypeSum {
						dps, base.Kind = m.Sum().DataPoints(), store.MetricSum
					} else {
						dps, base.Kind = m.Gauge().DataPoints(), store.MetricGauge
					}
					for d := range dps.Len() {
						dp := dps.At(d)
						p := base
						p.Labels = labels(dp.Attributes())
						p.StartTime, p.Time = int64(dp.StartTimestamp()), int64(dp.Timestamp())
						if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
							p.Value = float64(dp.IntValue())
						} else {
							p.Value = dp.DoubleValue()
						}
						out = append(out, p)
					}
				case pmetric.MetricTypeHistogram:
					dps := m.Histogram().DataPoints()
					base.Kind = store.MetricHistogram
					for d := range dps.Len() {
						dp := dps.At(d)
						p := base
						p.Labels = labels(dp.Attributes())
						p.StartTime, p.Time = int64(dp.StartTimestamp()), int64(dp.Timestamp())
						p.Count, p.Sum = dp.Count(), dp.Sum()
						p.Bounds = dp.ExplicitBounds().AsRaw()
						p.Buckets = dp.BucketCounts().AsRaw()
						if len(p.Buckets) != len(p.Bounds)+1 {
							// OTLP allows no buckets; anything else is malformed: keep the totals.
							p.Bounds, p.Buckets = nil, nil
						}
						out = append(out, p)
					}
				}
			}
		}
	}
	return out
}
