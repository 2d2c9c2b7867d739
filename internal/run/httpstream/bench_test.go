package httpstream

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchRequest is a typical request: a 300-byte header block and a 1 KiB
// JSON body.
func benchRequest() []byte {
	hdr := "POST /api/v1/orders/12345/items?expand=price HTTP/1.1\r\n" +
		"Host: orders.shop.svc.cluster.local:8080\r\n" +
		"User-Agent: checkout/1.4.2 (go-http-client)\r\n" +
		"Accept: application/json\r\n" +
		"Content-Type: application/json\r\n" +
		"Content-Length: 1024\r\n" +
		"Accept-Encoding: gzip\r\n"
	pad := 300 - len(hdr) - len("X-Pad: \r\n\r\n")
	hdr += "X-Pad: " + strings.Repeat("p", pad) + "\r\n\r\n"
	return []byte(hdr + `{"items":[` + strings.Repeat(`{"sku":"A-1","n":1},`, 60)[:1024-12] + `]}`)
}

// The benchmarks push one message per iteration through a long-lived
// connection, as the supervisor would. Compare runs with benchstat.

func BenchmarkRewriter(b *testing.B) {
	msg := benchRequest()
	if len(msg) != 300+1024 {
		b.Fatalf("message of %d bytes", len(msg))
	}
	ctx := NewRootContext(rand.NewPCG(1, 2))
	src := rand.NewPCG(3, 4)
	for _, bc := range []struct {
		name   string
		inject InjectFunc
	}{
		{"noinject", nil},
		{"inject", func(dst []byte, m *Message) []byte {
			return AppendInjectHeaders(dst, ctx, NewSpanID(src), m.Headers)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := NewRewriter(Requests)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				out := r.Write(msg, bc.inject)
				if r.Sent(out.Len) != len(msg) {
					b.Fatal("short acknowledgment")
				}
			}
		})
	}
	for _, split := range []int{2, 8} {
		b.Run(fmt.Sprintf("inject/writes=%d", split), func(b *testing.B) {
			r := NewRewriter(Requests)
			inject := func(dst []byte, m *Message) []byte { return AppendInjectHeaders(dst, ctx, NewSpanID(src), m.Headers) }
			step := (len(msg) + split - 1) / split
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				for i := 0; i < len(msg); i += step {
					p := msg[i:min(len(msg), i+step)]
					out := r.Write(p, inject)
					r.Sent(out.Len)
				}
			}
		})
	}
}

func BenchmarkParser(b *testing.B) {
	msg := benchRequest()
	p := NewParser(Requests)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Feed(msg)) != 4 {
			b.Fatal("unexpected events")
		}
	}
}

func BenchmarkExtractContext(b *testing.B) {
	h := hdrs("Host: a", "User-Agent: x", "Accept: */*", "traceparent: 00-"+w3cTrace+"-"+w3cSpan+"-01", "tracestate: congo=t61rcWkgMzE", "x-request-id: 1b4f0e98-2a3c-4d1e-9f6a-0c2e3b4d5f60")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ExtractContext(h); !ok {
			b.Fatal("no context")
		}
	}
}
