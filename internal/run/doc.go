// Package run is the request-tracing layer of `rootline run -- CMD`
// (docs/run.md: the request cycle of a thread and the Mirage wait model): it
// joins the syscall supervisor (internal/run/supervisor) with the HTTP/1.x
// stream logic (internal/run/httpstream) so that an unmodified service, in any
// language, propagates trace context and reports spans and waits.
//
// # What it does per connection
//
// Inbound sockets (accepted): the bytes the service reads are parsed as
// requests; each request's trace context is extracted (W3C, B3, x-request-id)
// or a new trace is started, and the request is bound to the thread that
// read it (Go: to the goroutine, see below). Responses the service writes get
// the timing line (rl, or rootline-server-time and rootline-wait in the long
// form: httpstream.HeaderCompact); when a response ends
// the SERVER span is emitted.
//
// Outbound sockets (connected): requests the service writes get traceparent,
// b3 and x-request-id lines for the request bound to the writing thread, as a
// new CLIENT span (headers the application set itself are kept: an
// instrumented application propagates its own context, and then no CLIENT
// span is made). Responses the service reads are parsed for the downstream's
// timing headers: net_wait = client time − downstream server time,
// remote_wait = the largest wait the downstream reported.
//
// Cleartext HTTP/2 (prior knowledge, or an HTTP/1.1 connection upgraded by
// "Upgrade: h2c") is followed by stream (h2_linux.go). Non-HTTP and TLS
// streams go opaque and pass through untouched; the count is in Stats.
//
// # Reads without ptrace stops
//
// With Config.Reads (readtap.Tap, eBPF tracepoints on read and recvfrom)
// those calls are left out of the seccomp filter: the tracer watches each
// socket it classifies (at connect's entry, accept's exit, and for a forked
// child its inherited sockets before it runs) and, at the start of every
// hook, drains the reads made since. A read's record is submitted at the
// read's exit, before the thread can enter another call, so the tracer
// knows every read that precedes the stop it handles: a request read is
// bound before the response write is rewritten. The record carries the
// goroutine (R14) and the thread's run-queue wait at the read, so Go binding
// and local_wait are the same as with stops. A gap in a socket's read
// sequence (ring buffer full) makes the connection opaque.
//
// # Rewriting a write
//
// When httpstream says a write's bytes change (a header block gets lines),
// the call is rewritten at its entry stop into writev (or sendmsg, keeping
// flags and address) over an iovec array in a per-thread scratch mapping:
// the application's own buffers are referenced in place, only inserted lines
// are copied. The scratch is mmap'd in the tracee by an injected system call
// the first time a thread needs it. At the exit stop the registers the
// application passed are restored and the return value is set to the count of
// the application's bytes that were written (httpstream.Rewriter.Sent); when
// only inserted bytes were taken the original call is restarted, so the
// application never sees a short count it did not cause.
//
// # Go programs
//
// Go runs goroutines on any OS thread, so a thread's binding says little
// about which request a call belongs to. For a Go binary (it has a
// .go.buildinfo or .gopclntab section) requests are bound to the goroutine:
// in Go's internal ABI on amd64 the current g is in R14, which is intact at
// the syscall instruction of the runtime's syscall wrappers
// (internal/runtime/syscall.Syscall6 is ABIInternal). net/http writes a
// client request from the connection's writeLoop goroutine, not from the
// handler's, so a goroutine without a binding that writes a request is given
// the request whose goroutine last made a call on the same OS thread (the
// handler hands the request over through a channel, and the runtime runs the
// woken writeLoop next on the same thread), if that request is still open
// and has no call in flight; otherwise the most recently started open
// request without a call in flight. TestGoAssociation measures how often
// this is wrong under load.
//
// # Records for the other layers
//
// Each SERVER span carries process.pid, thread.id (the thread that read the
// request) and rootline.thread.ids (every thread that made a traced call for
// it): with the span's start and end these are the thread↔request records
// the profilers and the kernel analysis join on.
//
// # The role
//
// Run is `rootline run` itself (cmd/rootline only parses its flags into
// Options): it ships spans through a Shipper, runs the command with the
// in-kernel datapath (internal/run/datapath, whose events KernelSpans makes
// into spans) or, when that cannot load, under the supervisor with this
// package's Tracer (reads through internal/run/readtap when it loads),
// registers the process with the local agent, and runs the command untraced
// when tracing cannot start. DatapathSweeper is the agent's component that
// removes the shared datapaths no run holds.
package run
