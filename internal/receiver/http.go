package receiver

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rootline/rootline/internal/pipeline"
)

// Media types of the OTLP/HTTP and Zipkin encodings.
const (
	mediaProto = "application/x-protobuf"
	mediaJSON  = "application/json"
)

// retryAfter is the Retry-After header value, pipeline.RetryAfter in whole
// seconds (at least 1).
var retryAfter = strconv.Itoa(max(1, int(math.Ceil(pipeline.RetryAfter.Seconds()))))

func (r *Receivers) otlpHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", r.handleOTLPHTTP)
	mux.HandleFunc("/v1/metrics", r.handleOTLPMetrics) // otlpmetrics.go
	return mux
}

// handleOTLPHTTP serves POST /v1/traces as the OTLP/HTTP specification says:
// the response, success or Status, is in the request's encoding.
func (r *Receivers) handleOTLPHTTP(w http.ResponseWriter, req *http.Request) {
	const rcv = receiverOTLPHTTP
	res := r.budget.reserve(req.Context())
	defer res.release()
	exp := ptraceotlp.NewExportRequest()
	mt, done, ok := r.readOTLPHTTP(w, req, tracesSignal, res, exp)
	if !ok {
		return
	}
	defer done()
	rej, o, err := r.exportTraces(req.Context(), rcv, exp.Traces())
	if rej != nil {
		r.refuse(w, rcv, mt, rej)
		return
	}
	if o != outcomeAccepted {
		writeRefused(w, mt, o, err)
		return
	}
	r.writeOTLPHTTP(w, mt, ptraceotlp.NewExportResponse())
}

// readOTLPHTTP checks and decodes the body of an OTLP/HTTP export of sig
// (POST, protobuf or JSON, maybe gzipped, with credentials when required)
// into exp, reserving its memory from res. It returns the request's media
// type, the encoding of the answer, and done, which gives back the
// receiver's slot; or it answers the request itself and returns false.
func (r *Receivers) readOTLPHTTP(w http.ResponseWriter, req *http.Request, sig signal, res *reservation, exp otlpRequest) (string, func(), bool) {
	const rcv = receiverOTLPHTTP
	if req.Method != http.MethodPost {
		r.refuse(w, rcv, "", refusal(http.StatusMethodNotAllowed, outcomeUnsupported, "only POST is allowed on "+sig.path))
		return "", nil, false
	}
	mt := mediaType(req)
	if mt != mediaProto && mt != mediaJSON {
		r.refuse(w, rcv, "", refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			fmt.Sprintf("Content-Type %q is not supported: use %s or %s", req.Header.Get("Content-Type"), mediaProto, mediaJSON)))
		return "", nil, false
	}
	body, rej := r.readRequest(w, req, rcv, res)
	if rej != nil {
		r.refuse(w, rcv, mt, rej)
		return "", nil, false
	}
	s := r.slots[rcv]
	if !s.tryTake() {
		r.refuse(w, rcv, mt, r.busy(rcv))
		return "", nil, false
	}
	if rej := r.decodeOTLP(body, mt, sig, res, exp); rej != nil {
		s.give()
		r.refuse(w, rcv, mt, rej)
		return "", nil, false
	}
	return mt, s.give, true
}

// readRequest checks the request's credentials, then reads its body.
func (r *Receivers) readRequest(w http.ResponseWriter, req *http.Request, receiver string, res *reservation) ([]byte, *rejection) {
	verified := req.TLS != nil && len(req.TLS.VerifiedChains) > 0
	if rej := r.authenticate(req.Header.Get("Authorization"), verified); rej != nil {
		return nil, rej
	}
	body, err := readBody(w, req, r.cfg.MaxRequestBytes, res)
	if errors.Is(err, errOverBudget) || errors.Is(err, errExceedsBudget) {
		return nil, r.budgetRejection(err, res.held+max(req.ContentLength, 0))
	}
	if err != nil {
		return nil, err.(*rejection)
	}
	return body, nil
}

// writeOTLPHTTP answers an accepted OTLP/HTTP export with resp in encoding mt.
func (r *Receivers) writeOTLPHTTP(w http.ResponseWriter, mt string, resp otlpResponse) {
	var out []byte
	var err error
	if mt == mediaJSON {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil { // cannot happen for an empty response; the data is stored anyway
		r.logger.Error("encoding export response failed", "receiver", receiverOTLPHTTP, "err", err)
	}
	w.Header().Set("Content-Type", mt)
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

func (r *Receivers) zipkinHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v2/spans", r.handleZipkin)
	mux.HandleFunc("/api/v1/spans", func(w http.ResponseWriter, _ *http.Request) {
		r.refuse(w, receiverZipkin, "", refusal(http.StatusNotFound, outcomeUnsupported,
			"Zipkin v1 is not supported: send Zipkin v2 JSON to /api/v2/spans"))
	})
	return mux
}

// handleZipkin serves POST /api/v2/spans with a JSON list of spans and answers
// 202 Accepted, as a Zipkin server does. Errors are plain text.
func (r *Receivers) handleZipkin(w http.ResponseWriter, req *http.Request) {
	const rcv = receiverZipkin
	if req.Method != http.MethodPost {
		r.refuse(w, rcv, "", refusal(http.StatusMethodNotAllowed, outcomeUnsupported, "only POST is allowed on /api/v2/spans"))
		return
	}
	switch mt := mediaType(req); mt {
	case mediaJSON, "": // Zipkin servers take a body without Content-Type as JSON
	case mediaProto:
		r.refuse(w, rcv, "", refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			"Zipkin proto3 is not supported: send Zipkin v2 JSON (application/json)"))
		return
	default:
		r.refuse(w, rcv, "", refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			fmt.Sprintf("Content-Type %q is not supported: send Zipkin v2 JSON (application/json)", req.Header.Get("Content-Type"))))
		return
	}
	res := r.budget.reserve(req.Context())
	defer res.release()
	body, rej := r.readRequest(w, req, rcv, res)
	if rej != nil {
		r.refuse(w, rcv, "", rej)
		return
	}
	s := r.slots[rcv]
	if !s.tryTake() {
		r.refuse(w, rcv, "", r.busy(rcv))
		return
	}
	defer s.give()
	scan, err := scanJSON(body, zipkinJSONNesting, zipkinJSONCosts, "")
	if err != nil {
		r.refuse(w, rcv, "", invalidRequest(&InvalidError{Reason: err.Error()}, 0))
		return
	}
	if rej := r.reserveDecoding(res, scan.estimate); rej != nil {
		r.refuse(w, rcv, "", rej)
		return
	}
	spans, err := FromZipkin(body, r.cfg.Limits)
	if err != nil {
		r.refuse(w, rcv, "", invalidRequest(err, 0))
		return
	}
	r.card.apply(spans)
	if o, err := r.consume(req.Context(), rcv, spans); o != outcomeAccepted {
		writeRefused(w, "", o, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// refuse records, logs and answers a request refused before the consumer saw
// it. mt is the OTLP encoding of the answer, or "" for plain text.
func (r *Receivers) refuse(w http.ResponseWriter, receiver, mt string, e *rejection) {
	r.metrics.observe(receiver, e.outcome, e.spans)
	r.logRefused(receiver, e.outcome, e.status, e.invalid)
	switch {
	case e.status == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodPost)
	case e.challenge != "":
		w.Header().Set("WWW-Authenticate", e.challenge)
	case e.retry:
		w.Header().Set("Retry-After", retryAfter)
	}
	if mt == "" {
		http.Error(w, e.msg, e.status)
		return
	}
	writeStatus(w, mt, e.status, e.grpcStatus())
}

// grpcStatus is e as a gRPC status, with RetryInfo when the client should
// retry.
func (e *rejection) grpcStatus() *status.Status {
	st := status.New(e.code, e.msg)
	if e.retry {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(pipeline.RetryAfter)}); err == nil {
			return d
		}
	}
	return st
}

// writeRefused answers a request whose spans the consumer refused.
func writeRefused(w http.ResponseWriter, mt string, o outcome, err error) {
	code := http.StatusInternalServerError
	switch o {
	case outcomeQueueFull:
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfter)
	case outcomeShuttingDown, outcomeCanceled, outcomeUnavailable:
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", retryAfter)
	}
	st := grpcStatus(o, err)
	if mt == "" {
		http.Error(w, st.Message(), code)
		return
	}
	writeStatus(w, mt, code, st)
}

// writeStatus writes st as a google.rpc.Status in encoding mt.
func writeStatus(w http.ResponseWriter, mt string, code int, st *status.Status) {
	var b []byte
	var err error
	if mt == mediaJSON {
		b, err = protojson.Marshal(st.Proto())
	} else {
		b, err = proto.Marshal(st.Proto())
	}
	if err != nil {
		http.Error(w, st.Message(), code)
		return
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(b)
}

// mediaType returns the request's media type without parameters, "" when
// there is none or it cannot be parsed.
func mediaType(req *http.Request) string {
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// readBody reads the whole body, gunzipped if Content-Encoding says gzip, as
// it arrives: memory is reserved from res chunk by chunk, never for the
// length the request claims. Both the body and its decompressed form are
// bounded by limit, so a small gzip bomb cannot take the memory a large body
// may not. A body that does not arrive within the server's read timeout is
// answered 408, and the connection closed.
//
// Its error is a *rejection, or one of res.grow's.
func readBody(w http.ResponseWriter, req *http.Request, limit int64, res *reservation) ([]byte, error) {
	tooLarge := refusal(http.StatusRequestEntityTooLarge, outcomeTooLarge,
		fmt.Sprintf("request body is larger than the limit of %d bytes (receiver.max_request_bytes)", limit))
	if req.ContentLength > limit {
		return nil, tooLarge
	}
	body := http.MaxBytesReader(w, req.Body, limit)
	var rd io.Reader = body
	gzipped := false
	switch enc := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, bodyError(err, true, tooLarge)
		}
		defer zr.Close()
		rd, gzipped = zr, true
	default:
		return nil, refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			fmt.Sprintf("Content-Encoding %q is not supported: use gzip or none", enc))
	}
	b, err := readAll(rd, limit, res)
	switch {
	case errors.Is(err, errBodyTooLarge):
		return nil, tooLarge
	case errors.Is(err, errOverBudget), errors.Is(err, errExceedsBudget):
		return nil, err
	case err != nil:
		return nil, bodyError(err, gzipped, tooLarge)
	}
	return b, nil
}

// bodyError is the answer to a body that could not be read (or gunzipped).
func bodyError(err error, gzipped bool, tooLarge *rejection) *rejection {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return tooLarge
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return refusal(http.StatusRequestTimeout, outcomeTimeout, "request body did not arrive within the read timeout (receiver.read_timeout)")
	}
	if gzipped {
		return refusal(http.StatusBadRequest, outcomeInvalid, "cannot gunzip request body: "+err.Error())
	}
	return refusal(http.StatusBadRequest, outcomeInvalid, "cannot read request body: "+err.Error())
}
