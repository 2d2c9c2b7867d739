package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/export"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/overhead"
)

// relayServer is an OTLP/HTTP receiver for the relay's tests: it decodes
// each request as the server does (pdata) and answers with the codes given,
// then 200.
type relayServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	names    []string // the spans received, in order
	answers  []int
}

func newRelayServer(t *testing.T, answers ...int) *relayServer {
	s := &relayServer{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("request headers %v", r.Header)
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Errorf("gzip: %v", err)
			return
		}
		body, _ := io.ReadAll(zr)
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil || bytes.Contains(body, []byte("poison")) {
			http.Error(w, "malformed", http.StatusBadRequest)
			return
		}
		if len(s.answers) > 0 {
			code := s.answers[0]
			s.answers = s.answers[1:]
			http.Error(w, "answer", code)
			return
		}
		rss := req.Traces().ResourceSpans()
		for i := range rss.Len() {
			ss := rss.At(i).ScopeSpans()
			for j := range ss.Len() {
				spans := ss.At(j).Spans()
				for k := range spans.Len() {
					s.names = append(s.names, spans.At(k).Name())
				}
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *relayServer) received() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, append([]string(nil), s.names...)
}

// otlpBody is an OTLP trace request of one process's spans named names.
func otlpBody(service string, names ...string) []byte {
	var spans []*model.Span
	for i, n := range names {
		spans = append(spans, &model.Span{TraceID: model.TraceID{byte(i + 1)}, SpanID: model.SpanID{byte(i + 1)}, Service: service, Name: n,
			Kind: model.KindServer, Start: time.Now().UnixNano(), Duration: 1000,
			Resource: []model.KeyValue{model.String(model.AttrServiceName, service)}})
	}
	return export.AppendOTLP(nil, spans)
}

func postRelay(t testing.TB, r *relay, body []byte, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, agentapi.TracesPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	r.handle(w, req)
	return w
}

// TestRelayBatches: the bodies of several processes (identity and gzip)
// reach the server as one request holding all their spans; malformed ones
// are refused at the door; beyond the bound the relay answers 503; a body
// the server cannot decode loses only its own spans; a server that refuses
// the agent stops the relay taking more.
func TestRelayBatches(t *testing.T) {
	srv := newRelayServer(t)
	endpoint := srv.URL + "/v1/traces"
	r := newRelay(RelayConfig{Every: time.Hour, MaxPendingBytes: 4096}, srv.Client(), "tok", func() string { return endpoint }, slog.New(slog.DiscardHandler))
	ctx := context.Background()

	if w := postRelay(t, r, otlpBody("a", "a1", "a2"), nil); w.Code != http.StatusOK {
		t.Fatalf("identity body: %d %s", w.Code, w.Body)
	}
	zipped := export.AppendGzip(nil, otlpBody("b", "b1"))
	if w := postRelay(t, r, zipped, map[string]string{"Content-Encoding": "gzip"}); w.Code != http.StatusOK {
		t.Fatalf("gzip body: %d %s", w.Code, w.Body)
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		header map[string]string
		code   int
	}{
		{"JSON", []byte(`{"resourceSpans":[]}`), map[string]string{"Content-Type": "application/json"}, http.StatusUnsupportedMediaType},
		{"another field", []byte{0x10, 0x01}, nil, http.StatusBadRequest},
		{"truncated", otlpBody("c", "c1")[:10], nil, http.StatusBadRequest},
		{"not gzip", []byte("plain"), map[string]string{"Content-Encoding": "gzip"}, http.StatusBadRequest},
		{"beyond the bound", otlpBody("d", strings.Repeat("x", 5000)), nil, http.StatusServiceUnavailable},
	} {
		if w := postRelay(t, r, tc.body, tc.header); w.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.code)
		}
	}
	r.flush(ctx)
	n, names := srv.received()
	if n != 1 || strings.Join(names, ",") != "a1,a2,b1" {
		t.Fatalf("%d requests, spans %v; want one request of a1,a2,b1", n, names)
	}

	// A body the server cannot decode: the batch is refused, then sent
	// body by body.
	postRelay(t, r, otlpBody("e", "e1"), nil)
	postRelay(t, r, otlpBody("f", "poison"), nil)
	postRelay(t, r, otlpBody("g", "g1"), nil)
	r.flush(ctx)
	n, names = srv.received()
	if n != 5 || strings.Join(names, ",") != "a1,a2,b1,e1,g1" {
		t.Fatalf("%d requests, spans %v; want 5 requests (the batch, then each of 3) and e1, g1 added", n, names)
	}
	if r.held != 0 {
		t.Errorf("%d bytes held after the flushes", r.held)
	}

	// The server refuses the agent's token: the relay takes no more, and
	// says so with 404, which sends `rootline run` to the server.
	srv.mu.Lock()
	srv.answers = []int{http.StatusUnauthorized}
	srv.mu.Unlock()
	postRelay(t, r, otlpBody("h", "h1"), nil)
	r.flush(ctx)
	if w := postRelay(t, r, otlpBody("i", "i1"), nil); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "refuses") {
		t.Errorf("after the server refused the agent: %d %s, want 404", w.Code, w.Body)
	}
}

// TestRelayRetries: a server that answers "retry later" or is down gets the
// batch again; bodies taken meanwhile go in the next one. Without a server
// endpoint the relay takes nothing.
func TestRelayRetries(t *testing.T) {
	srv := newRelayServer(t, http.StatusServiceUnavailable)
	endpoint := ""
	var mu sync.Mutex
	r := newRelay(RelayConfig{Every: 20 * time.Millisecond}, srv.Client(), "tok", func() string { mu.Lock(); defer mu.Unlock(); return endpoint }, slog.New(slog.DiscardHandler))
	r.poster.Initial = 10 * time.Millisecond
	if w := postRelay(t, r, otlpBody("a", "a1"), nil); w.Code != http.StatusNotFound {
		t.Fatalf("no endpoint known: %d, want 404", w.Code)
	}
	mu.Lock()
	endpoint = srv.URL + "/v1/traces"
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	postRelay(t, r, otlpBody("a", "a1"), nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, names := srv.received(); len(names) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the batch answered 503 never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Stopping sends what is held.
	postRelay(t, r, otlpBody("b", "b1"), nil)
	cancel()
	<-done
	if n, names := srv.received(); strings.Join(names, ",") != "a1,b1" || r.poster.Retried.Load() != 1 {
		t.Errorf("%d requests, spans %v, %d retried; want a1,b1 after one retry", n, names, r.poster.Retried.Load())
	}
}

func TestServerTracesURL(t *testing.T) {
	for _, tc := range []struct {
		server string
		reply  agentapi.RegistrationReply
		want   string
	}{
		{"http://10.0.0.5:16686", agentapi.RegistrationReply{OTLPHTTPPort: 4318}, "http://10.0.0.5:4318/v1/traces"},
		{"https://rootline.example:443/", agentapi.RegistrationReply{OTLPHTTPPort: 4318, OTLPHTTPTLS: true}, "https://rootline.example:4318/v1/traces"},
		{"http://[::1]:16686", agentapi.RegistrationReply{OTLPHTTPPort: 9}, "http://[::1]:9/v1/traces"},
		{"http://10.0.0.5:16686", agentapi.RegistrationReply{}, ""},
	} {
		if got := serverTracesURL(tc.server, tc.reply); got != tc.want {
			t.Errorf("serverTracesURL(%s, %+v) = %q, want %q", tc.server, tc.reply, got, tc.want)
		}
	}
}

// TestRelayChunks: what is held goes in requests of at most
// relayFlushBytes, so a burst stays under the server's request limit.
func TestRelayChunks(t *testing.T) {
	srv := newRelayServer(t)
	endpoint := srv.URL + "/v1/traces"
	r := newRelay(RelayConfig{Every: time.Hour}, srv.Client(), "tok", func() string { return endpoint }, slog.New(slog.DiscardHandler))
	big := strings.Repeat("x", 3<<20) // 3 MiB a body: two do not fit in one request
	for _, n := range []string{"a", "b", "c"} {
		if w := postRelay(t, r, otlpBody(n, n+big), nil); w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", n, w.Code, w.Body)
		}
	}
	r.flush(context.Background())
	if n, names := srv.received(); n != 3 || len(names) != 3 {
		t.Errorf("%d requests of %d spans, want 3 of one each", n, len(names))
	}
}

// BenchmarkRelay: the agent's CPU to relay one second of a node's spans in
// the demo mesh at 15 req/s (~390 spans: ten processes each sending one
// body of 39 SERVER or CLIENT spans as `rootline run` makes them): taking
// the bodies, concatenating them, gzipping, posting. The receiver here
// discards what it reads; its share of the CPU (an HTTP server reading one
// request) is in the figure.
func BenchmarkRelay(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	endpoint := srv.URL + "/v1/traces"
	r := newRelay(RelayConfig{Every: time.Hour}, srv.Client(), "", func() string { return endpoint }, slog.New(slog.DiscardHandler))
	const perBody = 39
	bodies := make([][]byte, 10)
	var in int
	for p := range bodies {
		bodies[p] = export.AppendOTLP(nil, runSpans(fmt.Sprintf("svc-%d", p), uint64(p), perBody))
		in += len(bodies[p])
	}
	ctx := context.Background()
	var out int
	cpu0 := overhead.CPU(os.Getpid())
	for b.Loop() {
		for _, body := range bodies {
			if w := postRelay(b, r, body, nil); w.Code != http.StatusOK {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
		r.flush(ctx)
		out = len(r.zipped)
	}
	spans := float64(len(bodies) * perBody)
	b.ReportMetric(float64(overhead.CPU(os.Getpid())-cpu0)/float64(b.N)/spans, "cpu-ns/span")
	b.ReportMetric(float64(in)/spans, "in-B/span")
	b.ReportMetric(float64(out)/spans, "out-B/span")
}

// runSpans are n spans of one process with the resource and attributes
// `rootline run` gives them, their ids and times drawn from seed.
func runSpans(service string, seed uint64, n int) []*model.Span {
	res := []model.KeyValue{model.String(model.AttrServiceName, service), model.Int(model.AttrProcessPID, 4242),
		model.String("telemetry.sdk.name", "rootline-run"), model.String(model.AttrHostName, "node-1"),
		model.String(model.AttrServiceInstanceID, "node-1:4242")}
	spans := make([]*model.Span, n)
	start := time.Now().UnixNano()
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := range spans {
		kind := model.KindServer
		if i%2 == 1 {
			kind = model.KindClient
		}
		s := &model.Span{Service: service, Name: "GET /work", Kind: kind,
			Start: start + rnd.Int64N(1e9), Duration: 1_000_000 + rnd.Int64N(50_000_000),
			Resource: res, Scope: "rootline-run",
			Attributes: []model.KeyValue{model.String("http.request.method", "GET"), model.String("url.path", "/work"),
				model.String("server.address", service+":8080"), model.String("network.peer.address", "10.84.0.7:51234"),
				model.Float(model.AttrWaitLocalMs, 0.012), model.Float(model.AttrWaitNetMs, 0.3),
				model.Float(model.AttrWaitRemoteMs, 0), model.String(model.AttrThreadIDs, "4250"),
				model.Int("http.response.status_code", 200), model.Int(model.AttrThreadID, 4250)}}
		// Ids are random: they are most of what does not compress.
		for _, id := range [][]byte{s.TraceID[:], s.SpanID[:], s.ParentSpanID[:]} {
			for j := range id {
				id[j] = byte(rnd.Uint32())
			}
		}
		spans[i] = s
	}
	return spans
}
