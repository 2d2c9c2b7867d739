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
)

// refusedReason is the reason label of refused spans for an outcome.
func (o outcome) refusedReason() string {
	switch o {
	case outcomeInvalid, outcomeTooLarge, outcomeQueueFull, outcomeShuttingDown, outcomeUnavailable:
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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
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
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.received, m.accepted, m.refused} {
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
