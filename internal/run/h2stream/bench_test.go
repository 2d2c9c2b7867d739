package h2stream

import (
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// BenchmarkUpgradableHTTP1: what following a connection's possible upgrade
// costs its HTTP/1.x messages, which the supervisor now parses through an
// Upgradable: the same 300-byte head and 1 KiB body through a Rewriter of the
// plain HTTP/1.x Parser and of an Upgradable, a line added to each head.
func BenchmarkUpgradableHTTP1(b *testing.B) {
	hdr := "POST /api/v1/orders/12345/items?expand=price HTTP/1.1\r\nHost: orders.shop.svc.cluster.local:8080\r\n" +
		"Content-Type: application/json\r\nContent-Length: 1024\r\n"
	hdr += "X-Pad: " + strings.Repeat("p", 300-len(hdr)-len("X-Pad: \r\n\r\n")) + "\r\n\r\n"
	msg := []byte(hdr + strings.Repeat("x", 1024))
	inject := func(dst []byte, _ *httpstream.Message) []byte {
		return append(dst, "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"...)
	}
	for _, bc := range []struct {
		name string
		r    func() *httpstream.Rewriter
	}{
		{"http1", func() *httpstream.Rewriter { return httpstream.NewRewriter(httpstream.Requests) }},
		{"upgradable", func() *httpstream.Rewriter { return httpstream.NewRewriterFor(NewUpgradable(httpstream.Requests)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := bc.r()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				out := r.Write(msg, inject)
				if r.Sent(out.Len) != len(msg) {
					b.Fatal("short acknowledgment")
				}
			}
		})
	}
}
