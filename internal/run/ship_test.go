package run

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/model"
)

// otlpServer counts the spans and connections an OTLP/HTTP receiver got.
type otlpServer struct {
	*httptest.Server
	spans, conns, posts atomic.Int64
	mu                  sync.Mutex
	names               []string
	auth                string
}

func newOTLPServer(t *testing.T) *otlpServer {
	o := &otlpServer{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			t.Errorf("the receiver cannot decode the batch: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rs := req.Traces().ResourceSpans()
		o.mu.Lock()
		o.auth = r.Header.Get("Authorization")
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
