package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc/codes"

	"github.com/rootline/rootline/internal/model"
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
// JSON, answered in the request's encoding, through the same admission.
func (r *Receivers) handleOTLPMetrics(w http.ResponseWriter, req *http.Request) {
	const rcv = receiverOTLPHTTP
	if r.metricSink() == nil {
		http.Error(w, "this server does not store metrics", http.StatusNotFound)
		return
	}
	res := r.budget.reserve(req.Context())
	defer res.release()
	exp := pmetricotlp.NewExportRequest()
	mt, done, ok := r.readOTLPHTTP(w, req, metricsSignal, res, exp)
	if !ok {
		return
	}
	defer done()
	if rej := r.exportMetrics(req.Context(), rcv, exp.Metrics()); rej != nil {
		r.refuse(w, rcv, mt, rej)
		return
	}
	r.writeOTLPHTTP(w, mt, pmetricotlp.NewExportResponse())
}

// exportMetrics translates and stores the points of one decoded export.
func (r *Receivers) exportMetrics(ctx context.Context, receiver string, md pmetric.Metrics) *rejection {
	sink := r.metricSink()
	if sink == nil {
		return refusal(http.StatusNotFound, outcomeUnsupported, "this server does not store metrics")
	}
	points, err := FromPdataMetrics(md, r.cfg.Limits)
	if err != nil {
		return invalidRequest(err, 0)
	}
	if err := sink.WriteMetrics(ctx, points); err != nil {
		r.logger.Warn("storing metrics failed", "receiver", receiver, "err", err)
		rej := refusal(http.StatusServiceUnavailable, outcomeError, "cannot store metrics")
		rej.code = codes.Unavailable
		// A full disk: retry later.
		rej.retry = errors.Is(err, store.ErrUnavailable)
		return rej
	}
	r.metrics.observe(receiver, outcomeAccepted, 0)
	return nil
}

// FromPdataMetrics flattens OTLP metrics into store points: gauges, sums and
// explicit-bucket histograms (exponential histograms and summaries are
// skipped). Resource attributes other than service.name and point attributes
// become labels, held to lim like span attributes (MaxAttributes labels per
// point, values cut to MaxValueBytes, names to MaxNameBytes). A label value
// nested deeper than lim.MaxAttributeDepth refuses the whole request with an
// *InvalidError.
func FromPdataMetrics(md pmetric.Metrics, lim Limits) ([]store.MetricPoint, error) {
	lim = lim.withDefaults()
	var out []store.MetricPoint
	var tooDeep string
	// label adds one attribute to l, unless l is full or the key too long.
	label := func(l map[string]string, k string, v pcommon.Value) {
		if len(l) >= lim.MaxAttributes || len(k) > lim.MaxNameBytes {
			return
		}
		s, ok := lim.AttrString(v)
		if !ok {
			tooDeep = depthError(lim.MaxAttributeDepth)
			return
		}
		l[k] = s
	}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		service := ""
		resLabels := map[string]string{}
		for k, v := range rm.Resource().Attributes().All() {
			if k == model.AttrServiceName {
				service, _ = lim.AttrString(v)
				service = truncate(service, lim.MaxNameBytes)
			} else {
				label(resLabels, k, v)
			}
		}
		if tooDeep != "" {
			return nil, invalidf(fmt.Sprintf("resourceMetrics[%d].resource", i), "%s", tooDeep)
		}
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				base := store.MetricPoint{Name: truncate(m.Name(), lim.MaxNameBytes), Service: service, Unit: truncate(m.Unit(), lim.MaxNameBytes)}
				labels := func(attrs pcommon.Map) map[string]string {
					l := make(map[string]string, min(len(resLabels)+attrs.Len(), lim.MaxAttributes))
					for k, v := range attrs.All() {
						label(l, k, v)
					}
					// Resource labels fill what the point's own leave.
					for k, v := range resLabels {
						if _, ok := l[k]; !ok && len(l) < lim.MaxAttributes {
							l[k] = v
						}
					}
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
				if tooDeep != "" {
					return nil, invalidf(fmt.Sprintf("resourceMetrics[%d].scopeMetrics[%d].metrics[%d]", i, j, k), "%s", tooDeep)
				}
			}
		}
	}
	return out, nil
}
