// Package httpstream is the byte-stream logic of `rootline run`, the syscall
// supervisor that traces an unmodified service (Rbinder: "Transparent Tracing
// of Microservice-based Applications", §3.2): it reads the HTTP/1.x messages
// on a socket's bytes as the service reads and writes them, extracts the
// trace context of inbound requests and inserts propagation headers into the
// requests and responses the service writes, so that the wire carries exactly
// the service's bytes plus added header lines.
//
// The package is pure: it sees byte slices, never file descriptors, so the
// supervisor (ptrace/seccomp, Linux only) stays a thin layer above it.
//
//   - Parser finds message boundaries incrementally in one direction, fed in
//     chunks split anywhere, and reports Events: message start, header block
//     complete (with the offset where lines may be inserted), body byte
//     counts, message end, and "opaque" for streams that are not, or stop
//     being, HTTP/1.x (TLS, HTTP/2, binary, malformed).
//   - Rewriter inserts lines into an outbound stream and maps partial writes
//     back to the application's bytes (see its contract).
//   - ExtractContext, NewRootContext and InjectHeaders handle W3C Trace
//     Context, B3 and x-request-id.
//   - ParseTiming and AppendTiming carry the Mirage wait model's timing
//     headers: rl, or rootline-server-time and rootline-wait.
//
// A supervisor wires one connection of a server like this:
//
//	in := httpstream.NewParser(httpstream.Requests)      // what the service reads
//	out := httpstream.NewRewriter(httpstream.Responses)  // what it writes
//
//	// after read(fd, buf) returned n:
//	for _, ev := range in.Feed(buf[:n]) {
//		if ev.Kind == httpstream.EventHeaders {
//			ctx, ok := httpstream.ExtractContext(ev.Msg.Headers)
//			if !ok {
//				ctx = httpstream.NewRootContext(nil)
//			}
//			out.ExpectResponse(ev.Msg.Method) // HEAD and CONNECT change the response
//			thread.serving = ctx
//		}
//	}
//
//	// on write(fd, p) by the service, before the syscall runs:
//	o := out.Write(p, func(dst []byte, m *httpstream.Message) []byte {
//		return httpstream.AppendTimingHeaders(dst, thread.timing())
//	})
//	n, err := sendOnWire(o) // Unchanged: run as is; else a writev of o.Segments
//	m := out.Sent(n)
//	// make the service's write return m, or err when m == 0
//
// and of a client the other way round: a Rewriter of Requests whose
// InjectFunc returns AppendInjectHeaders(dst, thread.serving,
// NewSpanID(nil), m.Headers) and calls ExpectResponse on the Parser of
// Responses.
package httpstream
