package receiver

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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

// httpError is a request refused before its spans reach the consumer.
type httpError struct {
	status  int
	outcome outcome
	msg     string // for the client
	spans   int    // decoded spans refused with the request
	// invalid, when set, is logged: Rootline's own description of the problem.
	// Decoders' messages are not, as they quote the payload.
	invalid *InvalidError
}

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
	exp := ptraceotlp.NewExportRequest()
	mt, ok := r.readOTLPHTTP(w, req, "/v1/traces", "ExportTraceServiceRequest", exp)
	if !ok {
		return
	}
	td := exp.Traces()
	spans, err := FromPdata(td)
	if err != nil {
		r.refuse(w, rcv, mt, invalidRequest(err, td.SpanCount()))
		return
	}
	if o, err := r.consume(req.Context(), rcv, spans); o != outcomeAccepted {
		writeRefused(w, mt, o, err)
		return
	}
	r.writeOTLPHTTP(w, mt, ptraceotlp.NewExportResponse())
}

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

// readOTLPHTTP decodes the body of an OTLP/HTTP export to path (POST,
// protobuf or JSON, maybe gzipped) into exp; message is exp's protobuf
// message name, for the error text. It returns the request's media type, the
// encoding of the answer, or answers the request itself and returns false.
func (r *Receivers) readOTLPHTTP(w http.ResponseWriter, req *http.Request, path, message string, exp otlpRequest) (string, bool) {
	const rcv = receiverOTLPHTTP
	if req.Method != http.MethodPost {
		r.refuse(w, rcv, "", refusal(http.StatusMethodNotAllowed, outcomeUnsupported, "only POST is allowed on "+path))
		return "", false
	}
	mt := mediaType(req)
	if mt != mediaProto && mt != mediaJSON {
		r.refuse(w, rcv, "", refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			fmt.Sprintf("Content-Type %q is not supported: use %s or %s", req.Header.Get("Content-Type"), mediaProto, mediaJSON)))
		return "", false
	}
	body, herr := readBody(w, req, r.cfg.MaxRequestBytes)
	if herr != nil {
		r.refuse(w, rcv, mt, herr)
		return "", false
	}
	var err error
	if mt == mediaJSON {
		err = exp.UnmarshalJSON(body)
	} else {
		err = exp.UnmarshalProto(body)
	}
	if err != nil {
		r.refuse(w, rcv, mt, refusal(http.StatusBadRequest, outcomeInvalid, "cannot decode "+message+": "+err.Error()))
		return "", false
	}
	return mt, true
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
	body, herr := readBody(w, req, r.cfg.MaxRequestBytes)
	if herr != nil {
		r.refuse(w, rcv, "", herr)
		return
	}
	spans, err := FromZipkin(body)
	if err != nil {
		r.refuse(w, rcv, "", invalidRequest(err, 0))
		return
	}
	if o, err := r.consume(req.Context(), rcv, spans); o != outcomeAccepted {
		writeRefused(w, "", o, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func refusal(status int, o outcome, msg string) *httpError {
	return &httpError{status: status, outcome: o, msg: msg}
}

// invalidRequest is the answer to spans a translation refused.
func invalidRequest(err error, spans int) *httpError {
	e := &httpError{status: http.StatusBadRequest, outcome: outcomeInvalid, msg: err.Error(), spans: spans}
	errors.As(err, &e.invalid)
	return e
}

// refuse records, logs and answers a request refused before the consumer saw
// it. mt is the OTLP encoding of the answer, or "" for plain text.
func (r *Receivers) refuse(w http.ResponseWriter, receiver, mt string, e *httpError) {
	r.metrics.observe(receiver, e.outcome, e.spans)
	r.logRefused(receiver, e.outcome, e.status, e.invalid)
	if e.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	if mt == "" {
		http.Error(w, e.msg, e.status)
		return
	}
	code := codes.InvalidArgument
	if e.status == http.StatusRequestEntityTooLarge {
		code = codes.ResourceExhausted
	}
	writeStatus(w, mt, e.status, status.New(code, e.msg))
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

// readBody reads the whole body, gunzipped if Content-Encoding says gzip. Both
// the body and its decompressed form are bounded by limit, so a small gzip
// bomb cannot take the memory a large body may not.
func readBody(w http.ResponseWriter, req *http.Request, limit int64) ([]byte, *httpError) {
	tooLarge := refusal(http.StatusRequestEntityTooLarge, outcomeTooLarge,
		fmt.Sprintf("request body is larger than the limit of %d bytes", limit))
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
		rd, gzipped = io.LimitReader(zr, limit+1), true
	default:
		return nil, refusal(http.StatusUnsupportedMediaType, outcomeUnsupported,
			fmt.Sprintf("Content-Encoding %q is not supported: use gzip or none", enc))
	}
	var buf bytes.Buffer
	if n := req.ContentLength; n > 0 {
		buf.Grow(int(n))
	}
	if _, err := buf.ReadFrom(rd); err != nil {
		return nil, bodyError(err, gzipped, tooLarge)
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

// bodyError is the answer to a body that could not be read (or gunzipped).
func bodyError(err error, gzipped bool, tooLarge *httpError) *httpError {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return tooLarge
	}
	if gzipped {
		return refusal(http.StatusBadRequest, outcomeInvalid, "cannot gunzip request body: "+err.Error())
	}
	return refusal(http.StatusBadRequest, outcomeInvalid, "cannot read request body: "+err.Error())
}
