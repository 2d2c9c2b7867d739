package receiver

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
)

// Values of the receiver label: one per receiver and transport.
const (
	receiverOTLPGRPC = "otlp_grpc"
	receiverOTLPHTTP = "otlp_http"
	receiverZipkin   = "zipkin"
)

// outcome is how one request ended (the outcome label).
type outcome string

const (
	outcomeAccepted     outcome = "accepted"
	outcomeInvalid      outcome = "invalid"       // undecodable or invalid spans
	outcomeTooLarge     outcome = "too_large"     // body over MaxRequestBytes
	outcomeUnsupported  outcome = "unsupported"   // method, media type or encoding
	outcomeQueueFull    outcome = "queue_full"    // pipeline.ErrQueueFull
	outcomeShuttingDown outcome = "shutting_down" // pipeline.ErrShuttingDown
	outcomeCanceled     outcome = "canceled"      // the client went away
	outcomeUnavailable  outcome = "unavailable"   // store.ErrUnavailable: full disk, I/O error
	outcomeError        outcome = "error"         // any other consumer error
	// Admission (admission.go): refused before decoding.
	outcomeOverloaded      outcome = "overloaded"      // no slot or no memory left for it
	outcomeUnauthenticated outcome = "unauthenticated" // no or wrong credentials
	outcomeTimeout         outcome = "timeout"         // its body did not arrive in time
)

// refusedReason is the reason label of refused spans for an outcome.
func (o outcome) refusedReason() string {
	switch o {
	case outcomeInvalid, outcomeTooLarge, outcomeQueueFull, outcomeShuttingDown, outcomeUnavailable, outcomeOverloaded:
		return string(o)
	}
	return "error"
}

// consumeOutcome classifies a Consumer's answer.
func consumeOutcome(err error) outcome {
	switch {
	case err == nil:
		return outcomeAccepted
	case errors.Is(err, pipeline.ErrQueueFull):
		return outcomeQueueFull
	case errors.Is(err, pipeline.ErrShuttingDown):
		return outcomeShuttingDown
	case errors.Is(err, store.ErrUnavailable):
		return outcomeUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	}
	return outcomeError
}

type metrics struct {
	requests *prometheus.CounterVec
	received *prometheus.CounterVec
	accepted *prometheus.CounterVec
	refused  *prometheus.CounterVec
	// overflow counts spans renamed by the cardinality caps, by kind
	// (service, operation).
	overflow *prometheus.CounterVec
	inflight prometheus.Collector
	active   prometheus.Collector
}

// newMetrics builds the receivers' metrics; the gauges read r's budget and
// slots.
func newMetrics(reg prometheus.Registerer, r *Receivers) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rootline_receiver_requests_total",
			Help: "Requests the span receivers answered, by receiver and outcome.",
		}, []string{"receiver", "outcome"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rootline_receiver_spans_received_total",
			Help: "Spans in requests the receivers could decode.",
		}, []string{"receiver"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rootline_receiver_spans_accepted_total",
			Help: "Spans the receivers handed to the pipeline and acknowledged.",
		}, []string{"receiver"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rootline_receiver_spans_refused_total",
			Help: "Decoded spans the receivers refused, by reason (invalid, queue_full, shutting_down, error). " +
				"Bodies over the size limit are refused unread and counted only in rootline_receiver_requests_total.",
		}, []string{"receiver", "reason"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rootline_receiver_cardinality_overflow_spans_total",
			Help: "Spans stored under the overflow service or operation name because a cardinality cap was reached, by kind (service, operation).",
		}, []string{"kind"}),
		inflight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rootline_receiver_inflight_bytes",
			Help: "Memory reserved by the requests in flight (bodies and decoding estimates), of receiver.max_inflight_bytes.",
		}, func() float64 { return float64(r.budget.used.Load()) }),
		active: activeRequests{r},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.received, m.accepted, m.refused, m.overflow, m.inflight, m.active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records one answered request of receiver that carried spans decoded
// spans (0 when the body could not be decoded).
func (m *metrics) observe(receiver string, o outcome, spans int) {
	m.requests.WithLabelValues(receiver, string(o)).Inc()
	if spans == 0 {
		return
	}
	m.received.WithLabelValues(receiver).Add(float64(spans))
	if o == outcomeAccepted {
		m.accepted.WithLabelValues(receiver).Add(float64(spans))
	} else {
		m.refused.WithLabelValues(receiver, o.refusedReason()).Add(float64(spans))
	}
}

// activeRequests reports each receiver's requests being decoded or stored.
type activeRequests struct{ r *Receivers }

var activeDesc = prometheus.NewDesc("rootline_receiver_active_requests",
	"Requests each receiver is decoding or storing, of receiver.max_concurrent_requests.", []string{"receiver"}, nil)

func (a activeRequests) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

func (a activeRequests) Collect(ch chan<- prometheus.Metric) {
	for name, s := range a.r.slots {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(len(s)), name)
	}
}
