package run

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
)

type spanSink struct {
	mu    sync.Mutex
	spans []*model.Span
}

func (s *spanSink) Emit(sp *model.Span) {
	s.mu.Lock()
	s.spans = append(s.spans, sp)
	s.mu.Unlock()
}

func attr(s *model.Span, key string) (any, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			switch kv.Value.Type {
			case model.TypeInt:
				return kv.Value.Int, true
			case model.TypeFloat:
				return kv.Value.Float, true
			}
			return kv.Value.Str, true
		}
	}
	return nil, false
}

// TestKernelSpans builds the spans of one request through a middle service
// from the datapath's events: a SERVER span with the caller as parent and
// its wait fields, and a CLIENT span under it with the downstream's timing.
func TestKernelSpans(t *testing.T) {
	sink := &spanSink{}
	k := NewKernelSpans(KernelSpansConfig{Service: "mid", Host: "h", Sink: sink, MonoOffset: 1_000_000_000})
	trace := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	const caller, server, client = 0x1111, 0x2222, 0x3333
	peer := netip.MustParseAddrPort("10.0.0.7:4242")
	k.Event(&KernelEvent{Type: KevRequest, Flags: KflagSampled | 2, Tgid: 40, Tid: 41, StartMono: 100_000,
		TraceID: trace, SpanID: server, ParentID: caller, Peer: peer,
		Head: []byte("GET /orders/7?x=1 HTTP/1.1\r\nHost: mid:8080\r\nx-request-id: rid-1\r\n\r\n")})
	k.Event(&KernelEvent{Type: KevCall, Flags: KflagSampled, Tgid: 40, Tid: 42, StartMono: 200_000,
		TraceID: trace, SpanID: client, ParentID: server, Peer: netip.MustParseAddrPort("10.0.0.9:80"),
		Head: []byte("POST /pay HTTP/1.1\r\nHost: pay\r\nContent-Length: 3\r\n\r\n")})
	k.Event(&KernelEvent{Type: KevCallEnd, Flags: KflagSampled | KflagTimed, Tgid: 40, Tid: 42, Mono: 1_200_000,
		StartMono: 200_000, TraceID: trace, SpanID: client, ParentID: server, Status: 201,
		Server: 700 * time.Microsecond, Remote: 50 * time.Microsecond, Sock: 100 * time.Microsecond})
	k.Event(&KernelEvent{Type: KevRequestEnd, Flags: KflagSampled, Tgid: 40, Tid: 41, Mono: 1_500_000,
		StartMono: 100_000, TraceID: trace, SpanID: server, ParentID: caller, Status: 200,
		Local: 30 * time.Microsecond, Sock: 20 * time.Microsecond, Net: 300 * time.Microsecond, Remote: 50 * time.Microsecond,
		Tids: []int{41, 42}})
	if len(sink.spans) != 2 || k.Pending() != 0 {
		t.Fatalf("%d spans, %d pending; want 2 and 0", len(sink.spans), k.Pending())
	}
	cs, ss := sink.spans[0], sink.spans[1]

	if ss.Kind != model.KindServer || ss.Name != "GET /orders/7" || ss.TraceID != model.TraceID(trace) ||
		ss.SpanID != model.SpanID(spanID(server)) || ss.ParentSpanID != model.SpanID(spanID(caller)) {
		t.Errorf("server span %+v", ss)
	}
	if ss.Start != 1_000_100_000 || ss.Duration != 1_400_000 {
		t.Errorf("server span start %d duration %d, want 1000100000 and 1400000", ss.Start, ss.Duration)
	}
	for key, want := range map[string]any{
		"http.request.method": "GET", "url.path": "/orders/7", "server.address": "mid:8080",
		"network.peer.address": "10.0.0.7:4242", "http.response.status_code": int64(200),
		model.AttrWaitLocalMs: 0.03, model.AttrWaitNetMs: 0.3, model.AttrWaitRemoteMs: 0.05,
		model.AttrThreadIDs: "41,42", model.AttrThreadID: int64(41), "http.request.header.x-request-id": "rid-1",
		AttrWaitSocketMs: 0.02,
	} {
		if got, ok := attr(ss, key); !ok || got != want {
			t.Errorf("server span %s = %v (%T), want %v", key, got, got, want)
		}
	}

	if cs.Kind != model.KindClient || cs.Name != "POST" || cs.ParentSpanID != model.SpanID(spanID(server)) ||
		cs.SpanID != model.SpanID(spanID(client)) || cs.Duration != 1_000_000 {
		t.Errorf("client span %+v", cs)
	}
	for key, want := range map[string]any{
		"url.full": "http://pay/pay", "http.response.status_code": int64(201),
		model.AttrWaitNetMs: 0.2, model.AttrWaitRemoteMs: 0.05, "rootline.downstream.server_time_ms": 0.7,
		model.AttrWaitResponseSocketMs: 0.1, // the caller's: not in the 0.3 ms outside the callee
	} {
		if got, ok := attr(cs, key); !ok || got != want {
			t.Errorf("client span %s = %v, want %v", key, got, want)
		}
	}
}

// TestKernelSpansLostStart: an end whose start event was lost (a full ring
// buffer) still gives a span, with what the end knows; an unbound call is a
// root CLIENT span; the counters follow.
func TestKernelSpansLostStart(t *testing.T) {
	sink := &spanSink{}
	k := NewKernelSpans(KernelSpansConfig{Service: "s", Host: "h", Sink: sink})
	k.Event(&KernelEvent{Type: KevRequestEnd, SpanID: 9, ParentID: 8, StartMono: 10, Mono: 20, Status: 503, Tgid: 1})
	k.Event(&KernelEvent{Type: KevCall, Flags: KflagUnbound, SpanID: 5, StartMono: 10, Tgid: 1, Tid: 2,
		Head: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")})
	k.Event(&KernelEvent{Type: KevCallEnd, Flags: KflagClosed, SpanID: 5, StartMono: 10, Mono: 30, Tgid: 1})
	k.Event(&KernelEvent{Type: KevOpaque})
	k.Event(&KernelEvent{Type: KevSkip, Status: 1})
	if len(sink.spans) != 2 {
		t.Fatalf("%d spans, want 2", len(sink.spans))
	}
	if s := sink.spans[0]; s.Kind != model.KindServer || s.StatusCode != model.StatusError || s.Duration != 10 {
		t.Errorf("end-only server span %+v", s)
	}
	if s := sink.spans[1]; s.ParentSpanID != (model.SpanID{}) || s.StatusMessage == "" {
		t.Errorf("unbound call %+v: want a root span with no status (closed before a response)", s)
	}
	if k.Stats.Requests.Load() != 1 || k.Stats.Calls.Load() != 1 || k.Stats.Unbound.Load() != 1 ||
		k.Stats.Opaque.Load() != 1 || k.Stats.Skipped.Load() != 1 {
		t.Errorf("stats: requests %d calls %d unbound %d opaque %d skipped %d", k.Stats.Requests.Load(),
			k.Stats.Calls.Load(), k.Stats.Unbound.Load(), k.Stats.Opaque.Load(), k.Stats.Skipped.Load())
	}
}

// TestKernelSpansH2: HTTP/2 connections the datapath passed through are
// counted apart from the other opaque ones, into the Stats given, and warned
// about once per run, whatever their number.
func TestKernelSpansH2(t *testing.T) {
	var logs bytes.Buffer
	st := new(Stats)
	k := NewKernelSpans(KernelSpansConfig{Service: "s", Host: "h", Stats: st,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	peer := netip.MustParseAddrPort("127.0.0.1:50051")
	k.Event(&KernelEvent{Type: KevOpaque, Flags: KflagH2, Peer: peer, Tgid: 7})
	k.Event(&KernelEvent{Type: KevOpaque})
	k.Event(&KernelEvent{Type: KevOpaque, Flags: KflagH2, Peer: peer, Tgid: 7})
	if st.Opaque.Load() != 3 || st.H2Untraced.Load() != 2 || k.Stats != st {
		t.Errorf("opaque %d h2 %d, want 3 and 2 in the Stats given", st.Opaque.Load(), st.H2Untraced.Load())
	}
	if n := strings.Count(logs.String(), "HTTP/2 connections seen"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "-mode ptrace") ||
		!strings.Contains(logs.String(), "peer=127.0.0.1:50051") {
		t.Errorf("warning lacks its level, remedy or peer:\n%s", logs.String())
	}
}

type discardSink struct{}

func (discardSink) Emit(*model.Span) {}

// BenchmarkKernelSpans is `rootline run`'s user-space work per request of a
// middle service: the four datapath events of a SERVER span and its CLIENT
// span, heads as Go's net/http writes them with Rootline's lines.
func BenchmarkKernelSpans(b *testing.B) {
	k := NewKernelSpans(KernelSpansConfig{Service: "mid", Host: "h", Sink: discardSink{}})
	trace := [16]byte{1, 2, 3}
	peer := netip.MustParseAddrPort("10.0.0.7:4242")
	in := []byte("GET /orders/7 HTTP/1.1\r\nHost: mid:8080\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n" +
		"b3: 0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1-00f067aa0ba902b7\r\n" +
		"x-request-id: 0af76519-16cd-43dd-8448-eb211c80319c\r\nAccept-Encoding: gzip\r\n\r\n")
	out := []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:18003\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
	b.ReportAllocs()
	for i := range b.N {
		server, client := uint64(2*i+1), uint64(2*i+2)
		k.Event(&KernelEvent{Type: KevRequest, Flags: KflagSampled, Tgid: 40, Tid: 41, StartMono: 100_000,
			TraceID: trace, SpanID: server, ParentID: 7, Peer: peer, Head: in})
		k.Event(&KernelEvent{Type: KevCall, Flags: KflagSampled, Tgid: 40, Tid: 42, StartMono: 200_000,
			TraceID: trace, SpanID: client, ParentID: server, Peer: peer, Head: out})
		k.Event(&KernelEvent{Type: KevCallEnd, Flags: KflagSampled | KflagTimed, Tgid: 40, Tid: 42, Mono: 1_200_000,
			StartMono: 200_000, TraceID: trace, SpanID: client, ParentID: server, Status: 200,
			Server: 700 * time.Microsecond, Remote: 50 * time.Microsecond})
		k.Event(&KernelEvent{Type: KevRequestEnd, Flags: KflagSampled, Tgid: 40, Tid: 41, Mono: 1_500_000,
			StartMono: 100_000, TraceID: trace, SpanID: server, ParentID: 7, Status: 200, Tids: []int{41}})
	}
}

func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		head                          string
		ok                            bool
		method, target, host, request string
	}{
		{"GET /a?b=1 HTTP/1.1\r\nHost: svc:80\r\nX-Request-ID:  rid-7 \r\n\r\n", true, "GET", "/a?b=1", "svc:80", "rid-7"},
		{"POST / HTTP/1.0\nhost:\tx\n\n", true, "POST", "/", "x", ""},
		{"GET / HTTP/1.1\r\nHostname: no\r\nX-Request-Id: a\r\nx-request-id: b\r\nHOST: yes\r\n", true, "GET", "/", "yes", "a"},
		{"GET / HTTP/1.1\r\nUser-Agent: cut here", true, "GET", "/", "", ""},
		{"GET / HTTP/1.1\r\n\r\nHost: in the body\r\n", true, "GET", "/", "", ""},
		{"garbage", false, "", "", "", ""},
		{"", false, "", "", "", ""},
	} {
		h, ok := readHead([]byte(tc.head))
		if ok != tc.ok || string(h.method) != tc.method || string(h.target) != tc.target ||
			string(h.host) != tc.host || string(h.requestID) != tc.request {
			t.Errorf("readHead(%q) = %q %q %q %q %v; want %q %q %q %q %v", tc.head, h.method, h.target, h.host,
				h.requestID, ok, tc.method, tc.target, tc.host, tc.request, tc.ok)
		}
	}
}

// TestKernelSpansGo: the SERVER spans of a process marked as a Go program
// say so (process.runtime.name "go", which the kernel analysis reads to treat
// its threads as carriers of goroutines); other processes' do not.
func TestKernelSpansGo(t *testing.T) {
	sink := &spanSink{}
	k := NewKernelSpans(KernelSpansConfig{Service: "s", Host: "h", Sink: sink})
	k.MarkGo(7)
	for i, pid := range []int{7, 8} {
		id := uint64(10 + i)
		k.Event(&KernelEvent{Type: KevRequest, Tgid: pid, Tid: pid, SpanID: id, StartMono: 10, Head: []byte("GET / HTTP/1.1\r\n\r\n")})
		k.Event(&KernelEvent{Type: KevRequestEnd, Tgid: pid, Tid: pid, SpanID: id, StartMono: 10, Mono: 20, Status: 200})
	}
	if len(sink.spans) != 2 {
		t.Fatalf("%d spans, want 2", len(sink.spans))
	}
	for i, want := range []bool{true, false} {
		v, ok := attr(sink.spans[i], "process.runtime.name")
		if got := ok && v == "go"; got != want {
			t.Errorf("span of pid %d: process.runtime.name %v (%v), want go: %v", 7+i, v, ok, want)
		}
	}
}
