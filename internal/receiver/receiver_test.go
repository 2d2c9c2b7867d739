package receiver

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a consumer that keeps what it is given and answers err.
type recorder struct {
	mu    sync.Mutex
	spans []*model.Span
	err   error
}

func (r *recorder) ConsumeSpans(_ context.Context, spans []*model.Span) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.spans = append(r.spans, spans...)
	return nil
}

func (r *recorder) got() []*model.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*model.Span(nil), r.spans...)
}

// startReceivers starts all three receivers on loopback ports; they are shut
// down when the test ends.
func startReceivers(t *testing.T, c pipeline.Consumer, maxBytes int64, reg prometheus.Registerer) *Receivers {
	t.Helper()
	return startWithRegistry(t, Config{MaxRequestBytes: maxBytes}, c, reg)
}

func grpcClient(t *testing.T, addr string) ptraceotlp.GRPCClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return ptraceotlp.NewGRPCClient(cc)
}

func httpClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// makeTraces builds n valid spans of service svc, in one resource and scope.
func makeTraces(n int, svc string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	if svc != "" {
		rs.Resource().Attributes().PutStr(model.AttrServiceName, svc)
	}
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("test")
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(pcommon.TraceID{0xab, byte(i + 1)})
		s.SetSpanID(pcommon.SpanID{0xcd, byte(i + 1)})
		s.SetName(fmt.Sprintf("op-%d", i))
		s.SetKind(ptrace.SpanKindServer)
		s.SetStartTimestamp(1_700_000_000_000_000_000)
		s.SetEndTimestamp(1_700_000_000_005_000_000)
		s.Attributes().PutInt("http.response.status_code", 200)
	}
	return td
}

// zeroTraceID makes span i of td invalid.
func zeroTraceID(td ptrace.Traces, i int) ptrace.Traces {
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(i).SetTraceID(pcommon.TraceID{})
	return td
}

func otlpProto(t *testing.T, td ptrace.Traces) []byte {
	t.Helper()
	b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// truncated is b without its last third: a gzip stream cut short.
func truncated(b []byte) []byte { return b[:len(b)*2/3] }

// badCRC is a gzip stream whose trailer's CRC-32 does not match its data.
func badCRC(b []byte) []byte {
	out := append([]byte(nil), b...)
	out[len(out)-8] ^= 0xff
	return out
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type httpReq struct {
	method      string // default POST
	path        string
	contentType string
	encoding    string
	body        []byte
}

// do sends hr to base and reads the whole answer.
func do(t *testing.T, c *http.Client, base string, hr httpReq) (*http.Response, []byte) {
	t.Helper()
	resp, body, err := doErr(c, base, hr)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// doErr is do for goroutines other than the test's.
func doErr(c *http.Client, base string, hr httpReq) (*http.Response, []byte, error) {
	method := hr.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, "http://"+base+hr.path, bytes.NewReader(hr.body))
	if err != nil {
		return nil, nil, err
	}
	if hr.contentType != "" {
		req.Header.Set("Content-Type", hr.contentType)
	}
	if hr.encoding != "" {
		req.Header.Set("Content-Encoding", hr.encoding)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// wantStatus checks the answer of doErr.
func wantStatus(resp *http.Response, body []byte, err error, want int) error {
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("status %d (%q), want %d", resp.StatusCode, body, want)
	}
	return nil
}

// decodeStatus decodes an OTLP/HTTP error body in encoding contentType.
func decodeStatus(t *testing.T, contentType string, body []byte) *spb.Status {
	t.Helper()
	st := &spb.Status{}
	var err error
	if contentType == mediaJSON {
		err = protojson.Unmarshal(body, st)
	} else {
		err = proto.Unmarshal(body, st)
	}
	if err != nil {
		t.Fatalf("error body %q is not a %s Status: %v", body, contentType, err)
	}
	return st
}

func TestOTLPGRPC(t *testing.T) {
	for _, tc := range []struct {
		name       string
		td         ptrace.Traces
		consumeErr error
		maxBytes   int64
		opts       []grpc.CallOption
		wantCode   codes.Code
		wantMsg    string
		wantRetry  time.Duration
		wantSpans  int
	}{
		{name: "good", td: makeTraces(3, "checkout"), wantCode: codes.OK, wantSpans: 3},
		{name: "good gzip", td: makeTraces(2, "checkout"), opts: []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}, wantCode: codes.OK, wantSpans: 2},
		{name: "empty request", td: ptrace.NewTraces(), wantCode: codes.OK},
		{
			name: "zero trace id", td: zeroTraceID(makeTraces(3, "checkout"), 1),
			wantCode: codes.InvalidArgument, wantMsg: "resourceSpans[0].scopeSpans[0].spans[1]: traceId is all zeros",
		},
		{
			name: "queue full", td: makeTraces(1, "checkout"), consumeErr: pipeline.ErrQueueFull,
			wantCode: codes.ResourceExhausted, wantMsg: "queue is full", wantRetry: pipeline.RetryAfter,
		},
		{
			name: "queue full wrapped", td: makeTraces(1, "checkout"), consumeErr: fmt.Errorf("pipeline: %w", pipeline.ErrQueueFull),
			wantCode: codes.ResourceExhausted, wantRetry: pipeline.RetryAfter,
		},
		{name: "shutting down", td: makeTraces(1, "checkout"), consumeErr: pipeline.ErrShuttingDown, wantCode: codes.Unavailable},
		{
			name: "store unavailable", td: makeTraces(1, "checkout"),
			consumeErr: fmt.Errorf("store write failed: %w", fmt.Errorf("%w: disk full at /secret/path", store.ErrUnavailable)),
			wantCode:   codes.Unavailable, wantMsg: "retry later", wantRetry: pipeline.RetryAfter,
		},
		{name: "consumer canceled", td: makeTraces(1, "checkout"), consumeErr: context.Canceled, wantCode: codes.Canceled},
		{
			name: "internal error hides details", td: makeTraces(1, "checkout"), consumeErr: errors.New("sqlite: disk I/O error at /secret/path"),
			wantCode: codes.Internal, wantMsg: "internal error",
		},
		{name: "too large", td: makeTraces(200, "checkout"), maxBytes: 1024, wantCode: codes.ResourceExhausted, wantMsg: "larger than max"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.consumeErr}
			r := startReceivers(t, rec, tc.maxBytes, nil)
			client := grpcClient(t, r.Addrs().GRPC)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(tc.td), tc.opts...)
			st := status.Convert(err)
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Fatalf("status = %v %q, want %v with %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
			}
			if strings.Contains(st.Message(), "secret") {
				t.Errorf("message leaks the consumer's error: %q", st.Message())
			}
			var retry time.Duration
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					retry = ri.GetRetryDelay().AsDuration()
				}
			}
			if retry != tc.wantRetry {
				t.Errorf("RetryInfo delay = %v, want %v", retry, tc.wantRetry)
			}
			got := rec.got()
			if len(got) != tc.wantSpans {
				t.Fatalf("consumer got %d spans, want %d", len(got), tc.wantSpans)
			}
			if tc.wantSpans > 0 {
				s := got[0]
				if s.Service != "checkout" || s.Name != "op-0" || s.Kind != model.KindServer || s.Duration != 5_000_000 || s.Scope != "test" {
					t.Errorf("translated span = %+v", *s)
				}
				if v, _ := s.Attr("http.response.status_code"); v != (model.Value{Type: model.TypeInt, Int: 200}) {
					t.Errorf("status code attribute = %+v", v)
				}
			}
		})
	}
}

func TestOTLPHTTP(t *testing.T) {
	const limit = 64 << 10
	specJSON := readTestdata(t, "otlp_spec_example.json")
	for _, tc := range []struct {
		name       string
		req        httpReq
		consumeErr error
		wantStatus int
		// wantMsg is a substring of the Status message (of the plain-text body
		// when the request's encoding is unknown).
		wantMsg        string
		wantRetryAfter string
		wantSpans      int
	}{
		{name: "proto", req: httpReq{contentType: mediaProto, body: otlpProto(t, makeTraces(4, "cart"))}, wantStatus: 200, wantSpans: 4},
		{name: "json spec example", req: httpReq{contentType: mediaJSON, body: specJSON}, wantStatus: 200, wantSpans: 1},
		{name: "json with charset", req: httpReq{contentType: "application/json; charset=utf-8", body: specJSON}, wantStatus: 200, wantSpans: 1},
		{name: "json gzip", req: httpReq{contentType: mediaJSON, encoding: "gzip", body: gzipped(t, specJSON)}, wantStatus: 200, wantSpans: 1},
		{name: "proto gzip", req: httpReq{contentType: mediaProto, encoding: "gzip", body: gzipped(t, otlpProto(t, makeTraces(2, "cart")))}, wantStatus: 200, wantSpans: 2},
		{
			name:       "bad json syntax",
			req:        httpReq{contentType: mediaJSON, body: []byte(`{"resourceSpans": [ {"scopeSpans": `)},
			wantStatus: 400, wantMsg: "cannot decode ExportTraceServiceRequest",
		},
		{
			name:       "bad json hex id",
			req:        httpReq{contentType: mediaJSON, body: bytes.Replace(specJSON, []byte("5B8EFFF798038103D269B633813FC60C"), []byte("5B8EFFF7"), 1)},
			wantStatus: 400, wantMsg: "length mismatch",
		},
		{
			name:       "json zero trace id",
			req:        httpReq{contentType: mediaJSON, body: readTestdata(t, "otlp_bad_zero_trace_id.json")},
			wantStatus: 400, wantMsg: "resourceSpans[0].scopeSpans[1].spans[3]: traceId is all zeros",
		},
		{
			name:       "proto zero trace id",
			req:        httpReq{contentType: mediaProto, body: otlpProto(t, zeroTraceID(makeTraces(2, "cart"), 0))},
			wantStatus: 400, wantMsg: "resourceSpans[0].scopeSpans[0].spans[0]: traceId is all zeros",
		},
		{name: "proto garbage", req: httpReq{contentType: mediaProto, body: []byte{0xff, 0xff, 0xff}}, wantStatus: 400, wantMsg: "cannot decode"},
		{name: "not gzip", req: httpReq{contentType: mediaJSON, encoding: "gzip", body: specJSON}, wantStatus: 400, wantMsg: "cannot gunzip request body"},
		{name: "truncated gzip", req: httpReq{contentType: mediaJSON, encoding: "gzip", body: truncated(gzipped(t, specJSON))}, wantStatus: 400, wantMsg: "cannot gunzip request body"},
		{name: "gzip bad checksum", req: httpReq{contentType: mediaJSON, encoding: "gzip", body: badCRC(gzipped(t, specJSON))}, wantStatus: 400, wantMsg: "cannot gunzip request body"},
		{name: "too large", req: httpReq{contentType: mediaJSON, body: bytes.Repeat([]byte(" "), limit+1)}, wantStatus: 413, wantMsg: "larger than the limit"},
		{
			name:       "too large chunked",
			req:        httpReq{contentType: mediaProto, body: nil}, // replaced below by a body of unknown length
			wantStatus: 413, wantMsg: "larger than the limit",
		},
		{
			name:       "gzip bomb",
			req:        httpReq{contentType: mediaJSON, encoding: "gzip", body: gzipped(t, bytes.Repeat([]byte(" "), 4*limit))},
			wantStatus: 413, wantMsg: "larger than the limit",
		},
		{name: "wrong content type", req: httpReq{contentType: "text/plain", body: specJSON}, wantStatus: 415, wantMsg: "not supported"},
		{name: "no content type", req: httpReq{body: specJSON}, wantStatus: 415, wantMsg: "not supported"},
		{name: "unsupported encoding", req: httpReq{contentType: mediaJSON, encoding: "br", body: specJSON}, wantStatus: 415, wantMsg: `Content-Encoding "br"`},
		{name: "wrong method", req: httpReq{method: http.MethodGet}, wantStatus: 405, wantMsg: "only POST"},
		{name: "unknown path", req: httpReq{path: "/v1/metrics", contentType: mediaProto}, wantStatus: 404},
		{
			name: "queue full", req: httpReq{contentType: mediaJSON, body: specJSON}, consumeErr: pipeline.ErrQueueFull,
			wantStatus: 429, wantMsg: "queue is full", wantRetryAfter: "1",
		},
		{
			name: "queue full proto", req: httpReq{contentType: mediaProto, body: otlpProto(t, makeTraces(1, "cart"))}, consumeErr: pipeline.ErrQueueFull,
			wantStatus: 429, wantMsg: "queue is full", wantRetryAfter: "1",
		},
		{
			name: "shutting down", req: httpReq{contentType: mediaProto, body: otlpProto(t, makeTraces(1, "cart"))}, consumeErr: pipeline.ErrShuttingDown,
			wantStatus: 503, wantMsg: "shutting down", wantRetryAfter: "1",
		},
		{
			name: "store unavailable", req: httpReq{contentType: mediaProto, body: otlpProto(t, makeTraces(1, "cart"))},
			consumeErr: fmt.Errorf("%w: disk full at /secret/path", store.ErrUnavailable),
			wantStatus: 503, wantMsg: "store cannot write now", wantRetryAfter: "1",
		},
		{
			name: "internal error", req: httpReq{contentType: mediaJSON, body: specJSON}, consumeErr: errors.New("secret detail"),
			wantStatus: 500, wantMsg: "internal error",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.consumeErr}
			r := startReceivers(t, rec, limit, nil)
			if tc.req.path == "" {
				tc.req.path = "/v1/traces"
			}
			var resp *http.Response
			var body []byte
			if tc.name == "too large chunked" {
				// No Content-Length: the limit must hold while reading.
				req, err := http.NewRequest(http.MethodPost, "http://"+r.Addrs().HTTP+tc.req.path,
					io.MultiReader(bytes.NewReader(make([]byte, limit)), strings.NewReader("x")))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", tc.req.contentType)
				resp, err = httpClient(t).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			} else {
				resp, body = do(t, httpClient(t), r.Addrs().HTTP, tc.req)
			}

			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d (%q), want %d", resp.StatusCode, body, tc.wantStatus)
			}
			if got := resp.Header.Get("Retry-After"); got != tc.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetryAfter)
			}
			if tc.wantStatus == 405 && resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("Allow = %q", resp.Header.Get("Allow"))
			}
			if len(rec.got()) != tc.wantSpans {
				t.Errorf("consumer got %d spans, want %d", len(rec.got()), tc.wantSpans)
			}
			if bytes.Contains(body, []byte("secret")) {
				t.Errorf("body leaks the consumer's error: %q", body)
			}
			mt := mediaType(&http.Request{Header: http.Header{"Content-Type": {tc.req.contentType}}})
			ct := resp.Header.Get("Content-Type")
			if (tc.wantStatus == 200 || tc.wantStatus == 400 || tc.wantStatus == 413 || tc.wantStatus >= 429) && ct != mt {
				t.Errorf("response Content-Type = %q, want the request's %q", ct, mt)
			}
			switch {
			case tc.wantStatus == 200:
				exp := ptraceotlp.NewExportResponse()
				var err error
				if mt == mediaJSON {
					err = exp.UnmarshalJSON(body)
				} else {
					err = exp.UnmarshalProto(body)
				}
				if err != nil {
					t.Errorf("response %q is not an ExportTraceServiceResponse: %v", body, err)
				}
			case ct == mediaJSON || ct == mediaProto:
				st := decodeStatus(t, ct, body)
				if !strings.Contains(st.GetMessage(), tc.wantMsg) {
					t.Errorf("Status message = %q, want it to contain %q", st.GetMessage(), tc.wantMsg)
				}
				if tc.wantStatus == 400 && codes.Code(st.GetCode()) != codes.InvalidArgument {
					t.Errorf("Status code = %d, want InvalidArgument", st.GetCode())
				}
			default:
				if !strings.Contains(string(body), tc.wantMsg) {
					t.Errorf("body = %q, want it to contain %q", body, tc.wantMsg)
				}
			}
		})
	}
}

func TestOTLPHTTPJSONTranslation(t *testing.T) {
	rec := &recorder{}
	r := startReceivers(t, rec, 0, nil)
	resp, body := do(t, httpClient(t), r.Addrs().HTTP, httpReq{path: "/v1/traces", contentType: mediaJSON, body: readTestdata(t, "otlp_spec_example.json")})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := rec.got()
	if len(got) != 1 {
		t.Fatalf("got %d spans", len(got))
	}
	// The spec example's ids are upper-case hex.
	if got[0].TraceID.String() != "5b8efff798038103d269b633813fc60c" || got[0].SpanID.String() != "eee19b7ec3c1b174" ||
		got[0].ParentSpanID.String() != "eee19b7ec3c1b173" || got[0].Service != "my.service" {
		t.Errorf("span = %+v", *got[0])
	}
}

func TestZipkin(t *testing.T) {
	const limit = 64 << 10
	envoy := readTestdata(t, "zipkin_envoy.json")
	for _, tc := range []struct {
		name           string
		req            httpReq
		consumeErr     error
		wantStatus     int
		wantMsg        string
		wantRetryAfter string
		wantSpans      int
	}{
		{name: "envoy", req: httpReq{contentType: mediaJSON, body: envoy}, wantStatus: 202, wantSpans: 5},
		{name: "envoy gzip", req: httpReq{contentType: mediaJSON, encoding: "gzip", body: gzipped(t, envoy)}, wantStatus: 202, wantSpans: 5},
		{name: "no content type", req: httpReq{body: envoy}, wantStatus: 202, wantSpans: 5},
		{name: "empty list", req: httpReq{contentType: mediaJSON, body: []byte("[]")}, wantStatus: 202},
		{name: "bad trace id", req: httpReq{contentType: mediaJSON, body: readTestdata(t, "zipkin_bad_trace_id.json")}, wantStatus: 400, wantMsg: "spans[1]: traceId"},
		{name: "not a list", req: httpReq{contentType: mediaJSON, body: readTestdata(t, "zipkin_bad_not_list.json")}, wantStatus: 400, wantMsg: "not a JSON list"},
		{name: "proto3", req: httpReq{contentType: mediaProto, body: []byte{1}}, wantStatus: 415, wantMsg: "Zipkin proto3 is not supported"},
		{name: "thrift", req: httpReq{contentType: "application/x-thrift", body: []byte{1}}, wantStatus: 415, wantMsg: "send Zipkin v2 JSON"},
		{name: "v1", req: httpReq{path: "/api/v1/spans", contentType: mediaJSON, body: envoy}, wantStatus: 404, wantMsg: "Zipkin v1 is not supported"},
		{name: "get", req: httpReq{method: http.MethodGet}, wantStatus: 405, wantMsg: "only POST"},
		{name: "too large", req: httpReq{contentType: mediaJSON, body: bytes.Repeat([]byte(" "), limit+1)}, wantStatus: 413, wantMsg: "larger than the limit"},
		{name: "queue full", req: httpReq{contentType: mediaJSON, body: envoy}, consumeErr: pipeline.ErrQueueFull, wantStatus: 429, wantRetryAfter: "1"},
		{name: "shutting down", req: httpReq{contentType: mediaJSON, body: envoy}, consumeErr: pipeline.ErrShuttingDown, wantStatus: 503, wantRetryAfter: "1"},
		{name: "store unavailable", req: httpReq{contentType: mediaJSON, body: envoy}, consumeErr: store.ErrUnavailable, wantStatus: 503, wantRetryAfter: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{err: tc.consumeErr}
			r := startReceivers(t, rec, limit, nil)
			if tc.req.path == "" {
				tc.req.path = "/api/v2/spans"
			}
			resp, body := do(t, httpClient(t), r.Addrs().Zipkin, tc.req)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d (%q), want %d", resp.StatusCode, body, tc.wantStatus)
			}
			if !strings.Contains(string(body), tc.wantMsg) {
				t.Errorf("body = %q, want it to contain %q", body, tc.wantMsg)
			}
			if got := resp.Header.Get("Retry-After"); got != tc.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetryAfter)
			}
			got := rec.got()
			if len(got) != tc.wantSpans {
				t.Fatalf("consumer got %d spans, want %d", len(got), tc.wantSpans)
			}
			if tc.wantSpans == 5 {
				// The CLIENT span: µs in the payload, ns in the model.
				c := got[1]
				if c.Start != 1795308432515537*1000 || c.Duration != 884*1000 || c.Service != "frontend-proxy" || c.Kind != model.KindClient {
					t.Errorf("client span = %+v", *c)
				}
			}
		})
	}
}

// counterValue reads one counter from reg (0 when it has no such series).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var full atomic.Bool
	c := pipeline.ConsumerFunc(func(context.Context, []*model.Span) error {
		if full.Load() {
			return pipeline.ErrQueueFull
		}
		return nil
	})
	r := startReceivers(t, c, 1024, reg)
	hc := httpClient(t)
	do(t, hc, r.Addrs().HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: otlpProto(t, makeTraces(3, "a"))})
	do(t, hc, r.Addrs().HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: otlpProto(t, zeroTraceID(makeTraces(2, "a"), 1))})
	do(t, hc, r.Addrs().HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: make([]byte, 2048)})
	full.Store(true)
	do(t, hc, r.Addrs().Zipkin, httpReq{path: "/api/v2/spans",
		body: []byte(`[{"traceId":"1","id":"2","timestamp":3},{"traceId":"1","id":"3","timestamp":3},{"traceId":"1","id":"4","timestamp":3}]`)})
	_, err := grpcClient(t, r.Addrs().GRPC).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(makeTraces(4, "a")))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC export: %v", err)
	}

	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rootline_receiver_requests_total", map[string]string{"receiver": "otlp_http", "outcome": "accepted"}, 1},
		{"rootline_receiver_requests_total", map[string]string{"receiver": "otlp_http", "outcome": "invalid"}, 1},
		{"rootline_receiver_requests_total", map[string]string{"receiver": "otlp_http", "outcome": "too_large"}, 1},
		{"rootline_receiver_requests_total", map[string]string{"receiver": "zipkin", "outcome": "queue_full"}, 1},
		{"rootline_receiver_requests_total", map[string]string{"receiver": "otlp_grpc", "outcome": "queue_full"}, 1},
		{"rootline_receiver_spans_received_total", map[string]string{"receiver": "otlp_http"}, 5},
		{"rootline_receiver_spans_accepted_total", map[string]string{"receiver": "otlp_http"}, 3},
		{"rootline_receiver_spans_refused_total", map[string]string{"receiver": "otlp_http", "reason": "invalid"}, 2},
		{"rootline_receiver_spans_received_total", map[string]string{"receiver": "zipkin"}, 3},
		{"rootline_receiver_spans_refused_total", map[string]string{"receiver": "zipkin", "reason": "queue_full"}, 3},
		{"rootline_receiver_spans_refused_total", map[string]string{"receiver": "otlp_grpc", "reason": "queue_full"}, 4},
	} {
		if got := counterValue(t, reg, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

// TestMalformedRequestsAffectOnlyThemselves sends good and malformed requests
// over every transport at once: every good one must be stored and answered
// with success.
func TestMalformedRequestsAffectOnlyThemselves(t *testing.T) {
	rec := &recorder{}
	r := startReceivers(t, rec, 0, nil)
	addrs := r.Addrs()
	hc := httpClient(t)
	gc := grpcClient(t, addrs.GRPC)
	envoy := readTestdata(t, "zipkin_envoy.json")
	goodProto := otlpProto(t, makeTraces(3, "a"))
	badProto := otlpProto(t, zeroTraceID(makeTraces(3, "a"), 2))

	type result struct {
		good bool
		err  error
	}
	send := []func() result{
		func() result { // good OTLP/HTTP proto: 3 spans
			resp, body, err := doErr(hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: goodProto})
			return result{true, wantStatus(resp, body, err, 200)}
		},
		func() result { // good Zipkin: 5 spans
			resp, body, err := doErr(hc, addrs.Zipkin, httpReq{path: "/api/v2/spans", contentType: mediaJSON, body: envoy})
			return result{true, wantStatus(resp, body, err, 202)}
		},
		func() result { // good gRPC: 3 spans
			_, err := gc.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(makeTraces(3, "a")))
			return result{true, err}
		},
		func() result {
			resp, body, err := doErr(hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaProto, body: badProto})
			return result{false, wantStatus(resp, body, err, 400)}
		},
		func() result {
			resp, body, err := doErr(hc, addrs.HTTP, httpReq{path: "/v1/traces", contentType: mediaJSON, body: []byte(`{"resourceSpans":[{`)})
			return result{false, wantStatus(resp, body, err, 400)}
		},
		func() result {
			resp, body, err := doErr(hc, addrs.Zipkin, httpReq{path: "/api/v2/spans", contentType: mediaJSON, encoding: "gzip", body: envoy})
			return result{false, wantStatus(resp, body, err, 400)}
		},
		func() result {
			_, err := gc.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(zeroTraceID(makeTraces(3, "a"), 0)))
			if status.Code(err) != codes.InvalidArgument {
				return result{false, fmt.Errorf("malformed gRPC export: %v", err)}
			}
			return result{false, nil}
		},
	}
	spansPerGood := []int{3, 5, 3}

	const goodRequests = 21 // 7 of each good kind, interleaved with malformed ones
	var wg sync.WaitGroup
	results := make(chan result, 64)
	wantSpans := 0
	for i := range goodRequests {
		kind := i % 3
		wantSpans += spansPerGood[kind]
		wg.Go(func() { results <- send[kind]() })
		wg.Go(func() { results <- send[3+i%4]() })
	}
	wg.Wait()
	close(results)
	good := 0
	for res := range results {
		if res.err != nil {
			t.Errorf("good=%v: %v", res.good, res.err)
		}
		if res.good {
			good++
		}
	}
	if good != goodRequests {
		t.Errorf("%d good requests answered, want %d", good, goodRequests)
	}
	if got := len(rec.got()); got != wantSpans {
		t.Errorf("consumer got %d spans, want %d", got, wantSpans)
	}
}

// TestShutdownWaitsForInFlight blocks the consumer inside a request, shuts
// down, checks that new connections are refused while Shutdown waits, then
// lets the consumer finish: the request succeeds and only then does Shutdown
// return.
func TestShutdownWaitsForInFlight(t *testing.T) {
	for _, transport := range []string{receiverOTLPGRPC, receiverOTLPHTTP, receiverZipkin} {
		t.Run(transport, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var finished atomic.Bool
			c := pipeline.ConsumerFunc(func(ctx context.Context, spans []*model.Span) error {
				close(entered)
				<-release
				finished.Store(true)
				return nil
			})
			r, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ZipkinAddr: "127.0.0.1:0"}, c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			addrs := r.Addrs()
			hc := httpClient(t)
			protoBody := otlpProto(t, makeTraces(1, "a"))
			zipkinBody := readTestdata(t, "zipkin_full.json")

			var addr string
			requestErr := make(chan error, 1)
			switch transport {
			case receiverOTLPGRPC:
				addr = addrs.GRPC
				gc := grpcClient(t, addr)
				go func() {
					_, err := gc.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(makeTraces(1, "a")))
					requestErr <- err
				}()
			case receiverOTLPHTTP:
				addr = addrs.HTTP
				go func() {
					resp, body, err := doErr(hc, addr, httpReq{path: "/v1/traces", contentType: mediaProto, body: protoBody})
					requestErr <- wantStatus(resp, body, err, 200)
				}()
			case receiverZipkin:
				addr = addrs.Zipkin
				go func() {
					resp, body, err := doErr(hc, addr, httpReq{path: "/api/v2/spans", body: zipkinBody})
					requestErr <- wantStatus(resp, body, err, 202)
				}()
			}
			<-entered

			shutdownErr := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				shutdownErr <- r.Shutdown(ctx)
			}()

			// Shutdown stops accepting at once: wait until a dial fails.
			for deadline := time.Now().Add(10 * time.Second); ; {
				conn, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					break
				}
				conn.Close()
				if time.Now().After(deadline) {
					t.Fatal("still accepting connections after Shutdown began")
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case err := <-shutdownErr:
				t.Fatalf("Shutdown returned (%v) while a ConsumeSpans call was in flight", err)
			default:
			}

			close(release)
			if err := <-requestErr; err != nil {
				t.Errorf("in-flight request: %v", err)
			}
			if err := <-shutdownErr; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if !finished.Load() {
				t.Error("Shutdown returned before the ConsumeSpans call finished")
			}
		})
	}
}

// TestShutdownDeadline: when the context ends first, Shutdown cuts the
// requests off (their contexts are canceled) and reports it.
func TestShutdownDeadline(t *testing.T) {
	for _, transport := range []string{receiverOTLPGRPC, receiverOTLPHTTP} {
		t.Run(transport, func(t *testing.T) {
			entered := make(chan struct{})
			c := pipeline.ConsumerFunc(func(ctx context.Context, spans []*model.Span) error {
				close(entered)
				<-ctx.Done()
				return ctx.Err()
			})
			r, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}, c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			if transport == receiverOTLPGRPC {
				gc := grpcClient(t, r.Addrs().GRPC)
				go func() {
					defer close(done)
					gc.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(makeTraces(1, "a")))
				}()
			} else {
				hc := httpClient(t)
				body := otlpProto(t, makeTraces(1, "a"))
				go func() {
					defer close(done)
					resp, err := hc.Post("http://"+r.Addrs().HTTP+"/v1/traces", mediaProto, bytes.NewReader(body))
					if err == nil {
						resp.Body.Close()
					}
				}()
			}
			<-entered
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := r.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Shutdown = %v, want a deadline error", err)
			}
			<-done
		})
	}
}

func TestNewAndStartErrors(t *testing.T) {
	c := &recorder{}
	for _, tc := range []struct {
		name    string
		cfg     Config
		c       pipeline.Consumer
		wantErr string
	}{
		{name: "no address", cfg: Config{}, c: c, wantErr: "no address configured"},
		{name: "nil consumer", cfg: Config{HTTPAddr: ":0"}, wantErr: "nil consumer"},
		{name: "negative limit", cfg: Config{HTTPAddr: ":0", MaxRequestBytes: -1}, c: c, wantErr: "max_request_bytes -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, tc.c, nil, nil); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}

	t.Run("address in use", func(t *testing.T) {
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		r, err := New(Config{GRPCAddr: "127.0.0.1:0", ZipkinAddr: busy.Addr().String()}, c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), busy.Addr().String()) || !strings.Contains(err.Error(), "zipkin") {
			t.Fatalf("Start = %v, want an error naming zipkin and %s", err, busy.Addr())
		}
		if r.Addrs() != (Addresses{}) {
			t.Errorf("Addrs after a failed Start = %+v", r.Addrs())
		}
		if err := r.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown after a failed Start: %v", err)
		}
	})

	t.Run("metrics registered twice", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		if _, err := New(Config{HTTPAddr: ":0"}, c, nil, reg); err != nil {
			t.Fatal(err)
		}
		if _, err := New(Config{HTTPAddr: ":0"}, c, nil, reg); err == nil {
			t.Error("second New on the same registry succeeded")
		}
	})
}
