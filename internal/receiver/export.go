package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc/codes"

	"github.com/rootline/rootline/internal/bearer"
)

// What OTLP/HTTP and OTLP/gRPC share once a request's body is in hand: the
// pre-scan, the memory it reserves, decoding, translation and the limits.

// signal is one kind of OTLP export.
type signal struct {
	path    string  // OTLP/HTTP path
	message string  // protobuf request message, for errors
	root    msgKind // its kind, for the pre-scan
}

var (
	tracesSignal  = signal{path: "/v1/traces", message: "ExportTraceServiceRequest", root: kindTraceRequest}
	metricsSignal = signal{path: "/v1/metrics", message: "ExportMetricsServiceRequest", root: kindMetricsRequest}
)

// otlpRequest is an OTLP export request of pdata (ptraceotlp, pmetricotlp).
type otlpRequest interface {
	UnmarshalProto(data []byte) error
	UnmarshalJSON(data []byte) error
}

// otlpResponse is an OTLP export response of pdata.
type otlpResponse interface {
	MarshalProto() ([]byte, error)
	MarshalJSON() ([]byte, error)
}

// decodeOTLP pre-scans body (encoding mt) for sig, reserves from res what
// decoding it takes, and decodes it into exp.
func (r *Receivers) decodeOTLP(body []byte, mt string, sig signal, res *reservation, exp otlpRequest) *rejection {
	depth := r.cfg.Limits.MaxAttributeDepth
	var scan scanResult
	var err error
	if mt == mediaJSON {
		scan, err = scanJSON(body, otlpJSONNesting(depth), otlpJSONCosts, otlpJSONLimit(depth))
	} else {
		scan, err = scanProto(body, sig.root, depth)
	}
	if err != nil {
		rej := refusal(http.StatusBadRequest, outcomeInvalid, "cannot decode "+sig.message+": "+err.Error())
		// The pre-scan's messages are Rootline's own and quote nothing.
		rej.invalid = &InvalidError{Reason: err.Error()}
		return rej
	}
	if rej := r.reserveDecoding(res, scan.estimate); rej != nil {
		return rej
	}
	if mt == mediaJSON {
		err = exp.UnmarshalJSON(body)
	} else {
		err = exp.UnmarshalProto(body)
	}
	if err != nil {
		return refusal(http.StatusBadRequest, outcomeInvalid, "cannot decode "+sig.message+": "+err.Error())
	}
	return nil
}

// reserveDecoding reserves the estimate of what decoding a body allocates.
func (r *Receivers) reserveDecoding(res *reservation, estimate int64) *rejection {
	return r.budgetRejection(res.grow(estimate), res.held+estimate)
}

// budgetRejection is the answer to a failed reservation of need bytes in
// all, nil for none.
func (r *Receivers) budgetRejection(err error, need int64) *rejection {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExceedsBudget):
		return refusal(http.StatusRequestEntityTooLarge, outcomeTooLarge, fmt.Sprintf(
			"this request needs about %s to be read and decoded, more than the receivers may hold for all requests in flight "+
				"(%s, receiver.max_inflight_bytes): send smaller batches", mib(need), mib(r.budget.size)))
	case errors.Is(err, errMemoryPressure):
		return overloaded("the server's memory is at its limit (--memory-limit) while the collector catches up: retry later")
	}
	return r.overBudget()
}

// overBudget is the answer when the memory budget is in use by others.
func (r *Receivers) overBudget() *rejection {
	return overloaded(fmt.Sprintf("the receivers' memory for requests in flight (%s) is in use: retry later", mib(r.budget.size)))
}

// busy is the answer when a receiver works on as many requests as it may.
func (r *Receivers) busy(receiver string) *rejection {
	return overloaded(fmt.Sprintf("%s receiver is handling %d requests, its limit (receiver.max_concurrent_requests): retry later",
		receiver, r.cfg.MaxConcurrentRequests))
}

// exportTraces translates, bounds and hands the spans of one decoded export
// to the consumer. A rejection means the consumer never saw them; otherwise
// the consumer's outcome and error are returned.
func (r *Receivers) exportTraces(ctx context.Context, receiver string, td ptrace.Traces) (*rejection, outcome, error) {
	spans, err := FromPdata(td, r.cfg.Limits)
	if err != nil {
		return invalidRequest(err, td.SpanCount()), "", nil
	}
	r.card.apply(spans)
	o, err := r.consume(ctx, receiver, spans)
	return nil, o, err
}

// invalidRequest is the answer to content a translation refused.
func invalidRequest(err error, spans int) *rejection {
	rej := refusal(http.StatusBadRequest, outcomeInvalid, err.Error())
	rej.spans = spans
	errors.As(err, &rej.invalid)
	return rej
}

// authenticate checks a request's credentials: a client certificate the
// client CA verified (the TLS handshake already refused any other), or the
// bearer token, when one is configured.
func (r *Receivers) authenticate(authorization string, verifiedCert bool) *rejection {
	if verifiedCert {
		return nil
	}
	res := r.token.Check(authorization)
	if res == bearer.OK {
		return nil
	}
	rej := refusal(http.StatusUnauthorized, outcomeUnauthenticated, res.Message())
	rej.code = codes.Unauthenticated
	rej.challenge = res.Challenge()
	return rej
}
