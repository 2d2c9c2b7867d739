package httpstream

import (
	"bufio"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// hdrs builds Headers from "Name: value" strings.
func hdrs(lines ...string) Headers {
	var h Headers
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ":")
		h = append(h, Header{Name: []byte(name), Value: []byte(strings.TrimSpace(value))})
	}
	return h
}

func tid(s string) TraceID {
	var t TraceID
	b, _ := hex.DecodeString(s)
	copy(t[16-len(b):], b)
	return t
}

func sid(s string) SpanID {
	var id SpanID
	hex.Decode(id[:], []byte(s))
	return id
}

const (
	w3cTrace = "0af7651916cd43dd8448eb211c80319c"
	w3cSpan  = "b7ad6b7169203331"
	b3Trace  = "80f198ee56343ba864fe8b2a57d3eff7"
	b3Span   = "e457b5a2e4d86bd1"
	b3Parent = "05e3ac9a4f6e3b90"
)

func TestExtractContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Headers
		ok   bool
		want Context
	}{
		{"none", hdrs("Host: a"), false, Context{}},
		{"traceparent", hdrs("traceparent: 00-" + w3cTrace + "-" + w3cSpan + "-01"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true}},
		{"traceparent not sampled, any case name", hdrs("TraceParent: 00-" + w3cTrace + "-" + w3cSpan + "-00"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan)}},
		{"traceparent with tracestate over two lines", hdrs("traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-03", "tracestate: congo=t61rcWkgMzE", "Tracestate: rojo=00f067aa0ba902b7"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true, TraceState: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}},
		{"future version with more fields", hdrs("traceparent: 01-" + w3cTrace + "-" + w3cSpan + "-01-what-ever"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true}},
		{"version 00 with more fields", hdrs("traceparent: 00-" + w3cTrace + "-" + w3cSpan + "-01-x"), false, Context{}},
		{"version ff", hdrs("traceparent: ff-" + w3cTrace + "-" + w3cSpan + "-01"), false, Context{}},
		{"upper-case hex", hdrs("traceparent: 00-" + strings.ToUpper(w3cTrace) + "-" + w3cSpan + "-01"), false, Context{}},
		{"zero trace id", hdrs("traceparent: 00-" + strings.Repeat("0", 32) + "-" + w3cSpan + "-01"), false, Context{}},
		{"zero span id", hdrs("traceparent: 00-" + w3cTrace + "-" + strings.Repeat("0", 16) + "-01"), false, Context{}},
		{"short", hdrs("traceparent: 00-" + w3cTrace + "-" + w3cSpan + "-1"), false, Context{}},
		{"bad separator", hdrs("traceparent: 00_" + w3cTrace + "-" + w3cSpan + "-01"), false, Context{}},
		{"not hex", hdrs("traceparent: 00-" + w3cTrace[:31] + "g-" + w3cSpan + "-01"), false, Context{}},
		{"two traceparents", hdrs("traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01", "traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01"), false, Context{}},
		{"tracestate alone", hdrs("tracestate: a=b"), false, Context{}},
		{"tracestate with a control byte", hdrs("traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01", "tracestate: a=b\x01"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true}},
		{"b3 single", hdrs("b3: " + b3Trace + "-" + b3Span + "-1-" + b3Parent), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"b3 single 64-bit, not sampled", hdrs("B3: " + b3Trace[16:] + "-" + b3Span + "-0"), true,
			Context{TraceID: tid(b3Trace[16:]), SpanID: sid(b3Span)}},
		{"b3 single debug", hdrs("b3: " + b3Trace + "-" + b3Span + "-d"), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"b3 single deferred", hdrs("b3: " + b3Trace + "-" + b3Span), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"b3 single upper-case", hdrs("b3: " + strings.ToUpper(b3Trace) + "-" + b3Span), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"b3 sampling only", hdrs("b3: 0"), false, Context{}},
		{"b3 bad sampling", hdrs("b3: " + b3Trace + "-" + b3Span + "-2"), false, Context{}},
		{"b3 bad parent", hdrs("b3: " + b3Trace + "-" + b3Span + "-1-xyz"), false, Context{}},
		{"b3 too many fields", hdrs("b3: " + b3Trace + "-" + b3Span + "-1-" + b3Parent + "-x"), false, Context{}},
		{"b3 48-bit trace id", hdrs("b3: " + b3Trace[:12] + "-" + b3Span), false, Context{}},
		{"b3 zero span", hdrs("b3: " + b3Trace + "-0000000000000000"), false, Context{}},
		{"multi", hdrs("X-B3-TraceId: "+b3Trace, "X-B3-SpanId: "+b3Span, "X-B3-ParentSpanId: "+b3Parent, "X-B3-Sampled: 1"), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"multi not sampled", hdrs("x-b3-traceid: "+b3Trace[16:], "x-b3-spanid: "+b3Span, "x-b3-sampled: false"), true,
			Context{TraceID: tid(b3Trace[16:]), SpanID: sid(b3Span)}},
		{"multi debug flag wins", hdrs("x-b3-traceid: "+b3Trace, "x-b3-spanid: "+b3Span, "x-b3-sampled: 0", "x-b3-flags: 1"), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"multi without span", hdrs("x-b3-traceid: " + b3Trace), false, Context{}},
		{"multi bad trace", hdrs("x-b3-traceid: xyz", "x-b3-spanid: "+b3Span), false, Context{}},
		{"w3c wins over b3", hdrs("b3: "+b3Trace+"-"+b3Span, "traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01", "x-b3-traceid: "+b3Trace, "x-b3-spanid: "+b3Span), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true}},
		{"b3 wins over multi", hdrs("x-b3-traceid: "+w3cTrace, "x-b3-spanid: "+w3cSpan, "b3: "+b3Trace+"-"+b3Span+"-0"), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span)}},
		{"invalid w3c falls back to b3", hdrs("traceparent: garbage", "b3: "+b3Trace+"-"+b3Span), true,
			Context{TraceID: tid(b3Trace), SpanID: sid(b3Span), Sampled: true}},
		{"request id alone", hdrs("X-Request-ID: 1b4f0e98-2a3c-4d1e-9f6a-0c2e3b4d5f60"), false,
			Context{RequestID: "1b4f0e98-2a3c-4d1e-9f6a-0c2e3b4d5f60"}},
		{"request id with a context", hdrs("x-request-id: abc", "traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01"), true,
			Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true, RequestID: "abc"}},
		{"request id with a control byte", hdrs("x-request-id: a\x00b"), false, Context{}},
		{"request id too long", hdrs("x-request-id: " + strings.Repeat("a", 300)), false, Context{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ExtractContext(tc.h)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("got %+v, %v\nwant %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestInjectHeaders(t *testing.T) {
	ctx := Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true, TraceState: "congo=t61", RequestID: "req-1"}
	child := sid("00f067aa0ba902b7")
	all := "traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-01\r\n" +
		"tracestate: congo=t61\r\n" +
		"b3: " + w3cTrace + "-00f067aa0ba902b7-1-" + w3cSpan + "\r\n" +
		"x-b3-traceid: " + w3cTrace + "\r\n" +
		"x-b3-spanid: 00f067aa0ba902b7\r\n" +
		"x-b3-parentspanid: " + w3cSpan + "\r\n" +
		"x-b3-sampled: 1\r\n" +
		"x-request-id: req-1\r\n"
	root := NewRootContext(rand.NewPCG(1, 2))
	rootChild := NewSpanID(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name     string
		ctx      Context
		child    SpanID
		existing Headers
		want     string
	}{
		{"all", ctx, child, hdrs("Host: a"), all},
		{"app has traceparent: no trace headers", ctx, child, hdrs("TRACEPARENT: 00-" + b3Trace + "-" + b3Span + "-01"), "x-request-id: req-1\r\n"},
		{"app has b3", ctx, child, hdrs("b3: 0"), "x-request-id: req-1\r\n"},
		{"app has x-b3-traceid", ctx, child, hdrs("X-B3-TraceId: " + b3Trace), "x-request-id: req-1\r\n"},
		{"app has everything", ctx, child, hdrs("traceparent: x", "X-Request-Id: mine"), ""},
		{"app has tracestate and sampling", ctx, child, hdrs("tracestate: mine=1", "x-b3-flags: 1", "x-b3-parentspanid: 1"),
			"traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-01\r\n" +
				"b3: " + w3cTrace + "-00f067aa0ba902b7-1-" + w3cSpan + "\r\n" +
				"x-b3-traceid: " + w3cTrace + "\r\nx-b3-spanid: 00f067aa0ba902b7\r\nx-request-id: req-1\r\n"},
		{"not sampled, no parent, no state, derived request id", Context{TraceID: tid(w3cTrace)}, child, nil,
			"traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-00\r\n" +
				"b3: " + w3cTrace + "-00f067aa0ba902b7-0\r\n" +
				"x-b3-traceid: " + w3cTrace + "\r\nx-b3-spanid: 00f067aa0ba902b7\r\nx-b3-sampled: 0\r\n" +
				"x-request-id: " + RequestIDFor(tid(w3cTrace)) + "\r\n"},
		{"unsafe values are not written", Context{TraceID: tid(w3cTrace), TraceState: "a=1\r\nEvil: 1", RequestID: "x\r\nEvil: 2"}, child, nil,
			"traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-00\r\n" +
				"b3: " + w3cTrace + "-00f067aa0ba902b7-0\r\n" +
				"x-b3-traceid: " + w3cTrace + "\r\nx-b3-spanid: 00f067aa0ba902b7\r\nx-b3-sampled: 0\r\n" +
				"x-request-id: " + RequestIDFor(tid(w3cTrace)) + "\r\n"},
		{"no context", Context{RequestID: "r"}, child, nil, "x-request-id: r\r\n"},
		{"zero child", ctx, SpanID{}, nil, "x-request-id: req-1\r\n"},
		{"empty context", Context{}, child, nil, ""},
		{"root", root, rootChild, nil, "traceparent: 00-" + root.TraceID.String() + "-" + rootChild.String() + "-01\r\n" +
			"b3: " + root.TraceID.String() + "-" + rootChild.String() + "-1-" + root.SpanID.String() + "\r\n" +
			"x-b3-traceid: " + root.TraceID.String() + "\r\nx-b3-spanid: " + rootChild.String() + "\r\n" +
			"x-b3-parentspanid: " + root.SpanID.String() + "\r\nx-b3-sampled: 1\r\n" +
			"x-request-id: " + root.RequestID + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(InjectHeaders(tc.ctx, tc.child, tc.existing)); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestInjectRoundTrip checks that what InjectHeaders writes, the receiving
// side extracts as the child span, and that net/http reads the lines.
func TestInjectRoundTrip(t *testing.T) {
	src := rand.NewPCG(7, 8)
	for range 50 {
		ctx := NewRootContext(src)
		ctx.Sampled = src.Uint64()%2 == 0
		child := NewSpanID(src)
		lines := InjectHeaders(ctx, child, nil)
		raw := "GET / HTTP/1.1\r\nHost: a\r\n" + string(lines) + "\r\n"
		p := NewParser(Requests)
		var got Context
		var ok bool
		for _, ev := range p.Feed([]byte(raw)) {
			if ev.Kind == EventHeaders {
				got, ok = ExtractContext(ev.Msg.Headers)
			}
		}
		want := Context{TraceID: ctx.TraceID, SpanID: child, Sampled: ctx.Sampled, RequestID: ctx.RequestID}
		if !ok || got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		req, err := http.ReadRequest(bufioReader(raw))
		if err != nil || req.Header.Get("Traceparent") == "" || req.Header.Get("X-B3-Sampled") == "" {
			t.Fatalf("net/http: %v %v", err, req.Header)
		}
	}
}

func TestNewRootContext(t *testing.T) {
	a, b := NewRootContext(nil), NewRootContext(nil)
	if !a.TraceID.IsValid() || !a.SpanID.IsValid() || !a.Sampled || a.TraceID == b.TraceID {
		t.Fatalf("contexts %+v %+v", a, b)
	}
	id := a.RequestID
	if len(id) != 36 || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) || strings.Count(id, "-") != 4 {
		t.Fatalf("request id %q is not a version 4 UUID", id)
	}
	if got := strings.ReplaceAll(id, "-", ""); got[:12] != a.TraceID.String()[:12] || got[20:] != a.TraceID.String()[20:] {
		t.Fatalf("request id %q does not name trace %s", id, a.TraceID)
	}
	// A source that starts with zeros still gives valid ids.
	z := &zeroThen{n: 3, src: rand.NewPCG(1, 1)}
	if c := NewRootContext(z); !c.TraceID.IsValid() || !c.SpanID.IsValid() {
		t.Fatalf("context %+v", c)
	}
}

type zeroThen struct {
	n   int
	src rand.Source
}

func (z *zeroThen) Uint64() uint64 {
	if z.n > 0 {
		z.n--
		return 0
	}
	return z.src.Uint64()
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func TestSamplingDenied(t *testing.T) {
	for _, c := range []struct {
		h    Headers
		want bool
	}{
		{hdrs("b3: 0"), true},
		{hdrs("X-B3-Sampled: 0"), true},
		{hdrs("x-b3-sampled: False"), true},
		{hdrs(), false},
		{hdrs("b3: 1"), false},
		{hdrs("b3: d"), false},
		{hdrs("b3: 00"), false},
		{hdrs("X-B3-Sampled: 1"), false},
		{hdrs("X-B3-Sampled: 0", "X-B3-TraceId: 0af7651916cd43dd"), false}, // ids: a context (or an invalid one), not a bare decision
		{hdrs("b3: 1", "X-B3-Sampled: 0"), false},                          // the single header wins, as in ExtractContext
	} {
		if got := SamplingDenied(c.h); got != c.want {
			t.Errorf("%v: SamplingDenied %v, want %v", c.h, got, c.want)
		}
	}
}
