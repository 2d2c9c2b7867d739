// Package readtap copies what supervised processes read from their sockets
// to `rootline run`'s tracer with eBPF instead of ptrace stops
// (bpf/run_reads.c). The tracer watches each socket it has classified
// (Watch), and at each of its ptrace stops drains the reads made since
// (Drain) before it handles the stop: a record is written at the read's
// exit, so every read a thread finished before its current stop is there.
// The seccomp filter can then leave read(2) and recvfrom(2) untraced, which
// removes most ptrace stops of a request (entry and exit of every read, and
// of every EAGAIN read of an event loop).
//
// Costs: the programs run at every read and recvfrom of every process on
// the machine and return after one hash lookup unless the socket is
// watched. A watched read is copied once into the ring buffer. If the ring
// buffer is full, the chunk is dropped and counted; the reader notices the
// gap in the socket's read sequence and reports the read as Incomplete, so
// the tracer stops parsing that connection (passes it through) instead of
// misreading it.
package readtap

import "errors"

// ErrUnavailable: the read tap cannot run here (not root, BPF or syscall
// tracepoints unavailable). Open wraps it.
var ErrUnavailable = errors.New("eBPF socket read tap unavailable")

// Read is one successful read of a watched socket.
type Read struct {
	// Mono is CLOCK_MONOTONIC at the read's exit, in nanoseconds.
	Mono int64
	// G is the reading thread's R14 at the call: the current goroutine of
	// a Go program (amd64 ABIInternal).
	G uint64
	// RunDelay is the thread's run-queue wait so far at the read, in
	// nanoseconds (the second field of /proc/<pid>/task/<tid>/schedstat).
	RunDelay  int64
	Tgid, Tid int
	FD        int
	// Seq numbers the successful reads of the socket from 0.
	Seq  uint32
	Data []byte
	// Incomplete: Data is not all the read returned (a chunk was lost, the
	// read was longer than the copy limit, or the buffer was unreadable).
	Incomplete bool
}
