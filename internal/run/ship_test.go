package run

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/export"
	"github.com/rootline/rootline/internal/model"
)

// otlpServer counts the spans and connections an OTLP/HTTP receiver got.
type otlpServer struct {
	*httptest.Server
	spans, conns, posts atomic.Int64
	mu                  sync.Mutex
	names               []string
	auth                string
	encodings           []string // each request's Content-Encoding
}

func newOTLPServer(t *testing.T) *otlpServer {
	o := &otlpServer{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := readBatch(r)
		if err != nil {
			t.Errorf("the receiver cannot decode the batch: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rs := req.Traces().ResourceSpans()
		o.mu.Lock()
		o.auth = r.Header.Get("Authorization")
		o.encodings = append(o.encodings, r.Header.Get("Content-Encoding"))
		for i := range rs.Len() {
			ss := rs.At(i).ScopeSpans()
			for j := range ss.Len() {
				for k := range ss.At(j).Spans().Len() {
					o.names = append(o.names, ss.At(j).Spans().At(k).Name())
				}
			}
		}
		o.mu.Unlock()
		o.spans.Add(int64(req.Traces().SpanCount()))
		o.posts.Add(1)
		_, _ = w.Write([]byte("{}")) // a body the shipper must read for the connection to be kept
	}))
	o.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	return o
}

// readBatch decodes an OTLP/HTTP protobuf request, gunzipping it when its
// Content-Encoding says so.
func readBatch(r *http.Request) (ptraceotlp.ExportRequest, error) {
	req := ptraceotlp.NewExportRequest()
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return req, fmt.Errorf("Content-Encoding gzip, but the body is not: %w", err)
		}
		rd = zr
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		return req, err
	}
	return req, req.UnmarshalProto(body)
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func testSpan(name string) *model.Span {
	return &model.Span{TraceID: model.TraceID{1}, SpanID: model.SpanID{2}, Service: "svc", Name: name,
		Kind: model.KindServer, Start: time.Now().UnixNano(), Duration: 1000, Scope: "rootline-run",
		Resource: []model.KeyValue{model.String(model.AttrServiceName, "svc")}}
}

// A span goes out within Every on its own; Flush sends at once; batches
// reuse one connection; the token is sent; stopping sends what is left.
func TestShipper(t *testing.T) {
	o := newOTLPServer(t)
	const every = 300 * time.Millisecond
	s := NewShipper(ShipperConfig{Endpoint: o.URL + "/v1/traces", Token: "tok", Every: every})
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)

	s.Emit(testSpan("timed"))
	took := waitFor(t, "a span sent by the timer", 5*time.Second, func() bool { return o.spans.Load() == 1 })
	if took < every/2 {
		t.Errorf("the span went out after %v, before its batch's time (%v)", took, every)
	}

	for i := range 3 {
		s.Emit(testSpan("flushed"))
		s.Flush()
		took = waitFor(t, "flushed spans", 5*time.Second, func() bool { return o.spans.Load() == int64(2+i) })
		if took > every/2 {
			t.Errorf("Flush took %v: it should not wait for the timer (%v)", took, every)
		}
	}
	if n := o.conns.Load(); n != 1 {
		t.Errorf("%d connections for %d batches: the connection should be kept", n, o.posts.Load())
	}

	// Idle: nothing is sent, however long.
	posts := o.posts.Load()
	time.Sleep(2 * every)
	if o.posts.Load() != posts {
		t.Error("an idle shipper sent a request")
	}

	s.Emit(testSpan("at exit"))
	cancel()
	s.Wait()
	if o.spans.Load() != 5 || s.Sent.Load() != 5 || s.Dropped.Load()+s.Failed.Load() != 0 {
		t.Errorf("received %d, sent %d, dropped %d, failed %d; want 5 sent", o.spans.Load(), s.Sent.Load(),
			s.Dropped.Load(), s.Failed.Load())
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.auth != "Bearer tok" {
		t.Errorf("Authorization = %q", o.auth)
	}
	if o.names[0] != "timed" || o.names[4] != "at exit" {
		t.Errorf("spans received: %v", o.names)
	}
	for _, e := range o.encodings {
		if e != "gzip" {
			t.Errorf("Content-Encoding %q; the shipper gzips by default", e)
		}
	}
}

// NoCompression sends the protobuf as it is, and gzip takes most of the
// bytes off a batch of the tracer's spans.
func TestShipperCompression(t *testing.T) {
	batch := make([]*model.Span, 20)
	for i := range batch {
		batch[i] = testSpan("GET /api/items")
		batch[i].TraceID[15], batch[i].SpanID[7] = byte(i), byte(i)
		batch[i].Attributes = []model.KeyValue{model.String("http.request.method", "GET"),
			model.String("url.path", "/api/items"), model.String("server.address", "items:8080"),
			model.Int("http.response.status_code", 200), model.Float(model.AttrWaitLocalMs, 0.25)}
	}
	for _, tc := range []struct {
		name     string
		off      bool
		encoding string
	}{{"default", false, "gzip"}, {"no compression", true, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOTLPServer(t)
			s := NewShipper(ShipperConfig{Endpoint: o.URL + "/v1/traces", NoCompression: tc.off, Batch: len(batch)})
			ctx, cancel := context.WithCancel(context.Background())
			go s.Run(ctx)
			for _, sp := range batch {
				s.Emit(sp)
			}
			waitFor(t, "the batch", 5*time.Second, func() bool { return o.spans.Load() == int64(len(batch)) })
			cancel()
			s.Wait()
			o.mu.Lock()
			defer o.mu.Unlock()
			if len(o.encodings) != 1 || o.encodings[0] != tc.encoding {
				t.Errorf("encodings %q, want one request with %q", o.encodings, tc.encoding)
			}
			raw := export.AppendOTLP(nil, batch)
			if sent := len(s.zipped); tc.off && sent != 0 || !tc.off && (sent == 0 || sent > len(raw)/2) {
				t.Errorf("sent %d bytes gzipped for %d of protobuf (want none when off, under half when on)", sent, len(raw))
			}
		})
	}
}

// A dead server costs the spans (counted), never a blocked Emit; a full
// queue drops.
func TestShipperDeadServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	s := NewShipper(ShipperConfig{Endpoint: "http://" + addr + "/v1/traces", Queue: 4, Every: time.Hour})
	for range 10 {
		s.Emit(testSpan("x")) // Run is not running: the queue fills
	}
	if s.Dropped.Load() != 6 {
		t.Errorf("dropped %d of 10 with a queue of 4, want 6", s.Dropped.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	s.Flush()
	waitFor(t, "failed spans counted", 5*time.Second, func() bool { return s.Failed.Load() == 4 })
	cancel()
	s.Wait()
}

// flakyServer answers the first len(answers) posts with those statuses (and
// Retry-After when set), then 200; it counts the spans of accepted posts.
type flakyServer struct {
	*httptest.Server
	posts, spans atomic.Int64
}

func newFlakyServer(t *testing.T, retryAfter string, answers ...int) *flakyServer {
	f := &flakyServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := readBatch(r)
		n := f.posts.Add(1)
		if int(n) <= len(answers) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			http.Error(w, "later", answers[n-1])
			return
		}
		if err != nil {
			t.Errorf("decode: %v", err)
		}
		f.spans.Add(int64(req.Traces().SpanCount()))
	}))
	t.Cleanup(f.Close)
	return f
}

// TestShipperRetries: answers that say "retry later" get the batch again,
// after an exponential backoff with jitter or the server's Retry-After when
// longer, within MaxRetryTime; other failures are not retried.
func TestShipperRetries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answers    []int
		retryAfter string
		maxTime    time.Duration
		sent       int64
		failed     int64
		retried    int64
		posts      int64
		minWait    []time.Duration // lower bound of each wait
		maxWait    []time.Duration // upper bound of each wait
	}{
		{name: "503 then 200", answers: []int{503}, sent: 3, retried: 1, posts: 2,
			minWait: []time.Duration{50 * time.Millisecond}, maxWait: []time.Duration{100 * time.Millisecond}},
		{name: "backoff doubles up to its cap", answers: []int{429, 502, 504, 503, 503}, sent: 3, retried: 5, posts: 6,
			minWait: []time.Duration{50, 100, 200, 200, 200}, maxWait: []time.Duration{100, 200, 400, 400, 400}},
		{name: "Retry-After is honoured when longer", answers: []int{429}, retryAfter: "2", sent: 3, retried: 1, posts: 2,
			minWait: []time.Duration{2 * time.Second}, maxWait: []time.Duration{2 * time.Second}},
		{name: "gives up after MaxRetryTime", answers: []int{503, 503, 503, 503, 503, 503, 503, 503, 503, 503}, retryAfter: "1",
			maxTime: 2500 * time.Millisecond, failed: 3, retried: 2, posts: 3,
			minWait: []time.Duration{time.Second, time.Second}, maxWait: []time.Duration{time.Second, time.Second}},
		{name: "400 is not retried", answers: []int{400}, failed: 3, posts: 1},
		{name: "retries disabled", answers: []int{503}, maxTime: -1, failed: 3, posts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFlakyServer(t, tc.retryAfter, tc.answers...)
			maxTime := tc.maxTime
			if maxTime == 0 {
				maxTime = time.Hour
			}
			s := NewShipper(ShipperConfig{Endpoint: f.URL + "/v1/traces", Every: time.Hour,
				RetryInitial: 100 * time.Millisecond, RetryMaxDelay: 400 * time.Millisecond, MaxRetryTime: maxTime})
			// The waits are recorded and advance a fake clock, not slept.
			var waits []time.Duration
			clock := time.Now()
			s.dest.Now = func() time.Time { return clock }
			s.dest.Sleep = func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d)
				clock = clock.Add(d)
				return nil
			}
			for range 3 {
				s.Emit(testSpan("x"))
			}
			ctx, cancel := context.WithCancel(context.Background())
			go s.Run(ctx)
			s.Flush()
			waitFor(t, "batch settled", 20*time.Second, func() bool { return s.Sent.Load()+s.Failed.Load() == 3 })
			cancel()
			s.Wait()
			if s.Sent.Load() != tc.sent || s.Failed.Load() != tc.failed || s.Retried() != tc.retried ||
				f.posts.Load() != tc.posts || f.spans.Load() != tc.sent {
				t.Errorf("sent %d, failed %d, retried %d, posts %d, received %d; want %d, %d, %d, %d, %d",
					s.Sent.Load(), s.Failed.Load(), s.Retried(), f.posts.Load(), f.spans.Load(),
					tc.sent, tc.failed, tc.retried, tc.posts, tc.sent)
			}
			if len(waits) != len(tc.minWait) {
				t.Fatalf("waits %v, want %d of them", waits, len(tc.minWait))
			}
			for i, w := range waits {
				lo, hi := tc.minWait[i], tc.maxWait[i]
				if lo < time.Millisecond { // given in ms
					lo, hi = lo*time.Millisecond, hi*time.Millisecond
				}
				if w < lo || w > hi {
					t.Errorf("wait %d = %v, want within [%v, %v]", i, w, lo, hi)
				}
			}
		})
	}
}

// TestShipperViaAgent: with an agent, batches go to its relay uncompressed;
// when it cannot take them they go to the server (gzipped), and an agent
// that has no relay for the process is not asked again.
func TestShipperViaAgent(t *testing.T) {
	for _, tc := range []struct {
		name string
		// agentCode: what the agent answers (0: a relay that takes the
		// batch; -1: no agent listening).
		agentCode          int
		toAgent, toServer  int64
		agentPosts         int64 // after two batches
		wantAgentEncodings string
	}{
		{name: "the relay takes them", toAgent: 2, agentPosts: 2, wantAgentEncodings: ","},
		{name: "no relay", agentCode: http.StatusNotFound, toServer: 2, agentPosts: 1},
		{name: "not for this caller", agentCode: http.StatusForbidden, toServer: 2, agentPosts: 1},
		{name: "no agent", agentCode: -1, toServer: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := newOTLPServer(t)
			// agent decodes what the agent's listener takes.
			agent := newOTLPServer(t)
			var agentPosts atomic.Int64
			listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				agentPosts.Add(1)
				if r.URL.Path != agentapi.TracesPath {
					t.Errorf("posted to the agent's %s", r.URL.Path)
				}
				if tc.agentCode > 0 {
					http.Error(w, "no", tc.agentCode)
					return
				}
				agent.Config.Handler.ServeHTTP(w, r)
			}))
			defer listener.Close()
			addr := listener.URL
			if tc.agentCode < 0 {
				listener.Close()
			}
			c, err := agentapi.NewAgentClient(addr, agentapi.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := NewShipper(ShipperConfig{Endpoint: server.URL + "/v1/traces", Every: time.Hour, Agent: c, MaxRetryTime: -1})
			ctx, cancel := context.WithCancel(context.Background())
			go s.Run(ctx)
			for i := range 2 {
				s.Emit(testSpan("x"))
				s.Flush()
				waitFor(t, "batch sent", 10*time.Second, func() bool { return s.Sent.Load()+s.Failed.Load() == int64(i+1) })
			}
			cancel()
			s.Wait()
			if agent.spans.Load() != tc.toAgent || server.spans.Load() != tc.toServer || s.Relayed.Load() != tc.toAgent || s.Failed.Load() != 0 {
				t.Errorf("agent got %d spans, server %d, relayed %d, failed %d; want %d, %d", agent.spans.Load(), server.spans.Load(), s.Relayed.Load(), s.Failed.Load(), tc.toAgent, tc.toServer)
			}
			if agentPosts.Load() != tc.agentPosts {
				t.Errorf("%d posts to the agent, want %d", agentPosts.Load(), tc.agentPosts)
			}
			agent.mu.Lock()
			if enc := strings.Join(agent.encodings, ","); enc != tc.wantAgentEncodings && tc.toAgent > 0 {
				t.Errorf("encodings to the agent %q, want none", enc)
			}
			agent.mu.Unlock()
			server.mu.Lock()
			for _, e := range server.encodings {
				if e != "gzip" {
					t.Errorf("a batch to the server with Content-Encoding %q", e)
				}
			}
			server.mu.Unlock()
		})
	}
}
