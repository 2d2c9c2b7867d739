// Package datapath is the in-kernel datapath of `rootline run`
// (bpf/run_datapath.c): trace context propagation and the Mirage wait
// headers for an unmodified service, done by eBPF programs on the service's
// sockets instead of ptrace stops, so that the service never waits for a
// tracer on its request path.
//
// The service runs in a cgroup v2 of its own (Cgroup). A sock_ops program
// on it puts every TCP connection the service accepts (inbound) or makes
// (outbound) into a sockhash; an sk_msg program on the sockhash sees every
// write before it is queued and inserts header lines with
// bpf_msg_push_data (the application's buffer and the count its write
// returns stay its own); the sock_recv_length tracepoint follows what it
// reads. Requests are bound to the thread that read them,
// or in Go programs to the goroutine (R14), with uprobes on net/http's
// client hand-off (AddGo).
//
// User space only builds spans: Read delivers one Event per span start and
// end. If the ring buffer is full, events are lost (counted in Stats) but
// propagation goes on; if `rootline run` dies, the programs are detached
// with its file descriptors and the service runs on untraced.
package datapath

import (
	"errors"
	"net/netip"
	"time"
)

// ErrUnavailable: the datapath cannot run here (not root, no BPF, no
// cgroup v2, no sockmap support). Open wraps it.
var ErrUnavailable = errors.New("eBPF datapath unavailable")

// Event types.
const (
	EvRequest    = 1 // a request head was read on an inbound connection: a SERVER span starts
	EvRequestEnd = 2 // its response was written (or the connection closed)
	EvCall       = 3 // a request head was written on an outbound connection: a CLIENT span starts
	EvCallEnd    = 4 // its response was read (or the connection closed)
	EvOpaque     = 5 // a connection is not HTTP/1.x: passed through
	EvExec       = 6 // a process of the run executed a program
	EvSkip       = 7 // a head was left without the lines it should have had (Status: Skip*)
)

// Event flags.
const (
	FlagSampled  = 1
	FlagContext  = 2   // Request: the caller sent a trace context
	FlagOwn      = 4   // Call: the application wrote its own context
	FlagCut      = 8   // the head was longer than kept
	FlagClosed   = 16  // *End: the connection closed first
	FlagTimed    = 32  // CallEnd: the downstream's timing fields gave its server time
	FlagUnbound  = 64  // Call: made outside any request
	FlagInjected = 128 // the head got Rootline's header lines
	FlagH2       = 512 // Opaque: the connection began as HTTP/2 (its preface, or a SETTINGS frame first)
)

// Reasons of EvSkip (Event.Status).
const (
	SkipSendBuffer = 1 // the send buffer could not take the message whole
	SkipPush       = 2 // the kernel refused the insertion
	SkipSplit      = 3 // the head's final line break began in an earlier write
	SkipLong       = 4 // a request head longer than the datapath keeps (8 KiB)
)

// Event is one record of the datapath. Head and the slices are only valid
// during the callback that receives it.
type Event struct {
	Type, Flags uint32
	Tgid, Tid   int
	Mono        int64 // CLOCK_MONOTONIC ns
	Conn        uint64
	TraceID     [16]byte
	SpanID      uint64        // Request*: the SERVER span; Call*: the CLIENT span
	ParentID    uint64        // Request*: the caller's span; Call*: the SERVER span (0: none)
	StartMono   int64         // Request, *End: the span's start (a request: its first byte's arrival in the socket)
	Local       time.Duration // RequestEnd: run-queue wait of its threads and SockWait
	// Request, RequestEnd: how long the request's first byte waited in the
	// socket's receive queue before the service read it; CallEnd: how long
	// the response's did before the caller read it (not in Net).
	SockWait   time.Duration
	Net        time.Duration
	Remote     time.Duration
	ServerTime time.Duration // CallEnd: the downstream's server time (its timing fields)
	Status     int
	Tids       []int
	Peer       netip.AddrPort
	LocalPort  int
	Head       []byte // Request/Call: the head as read or written, before insertion; Exec: the file name
}

// Stats are the programs' counters.
type Stats struct {
	Lost     uint64 // events the ring buffer could not take
	NoConn   uint64 // connections whose state could not be made
	Injected uint64 // heads that got lines
	Skipped  uint64 // heads left unchanged that should have had lines
	Opaque   uint64 // connections found not to be HTTP/1.x
	H2       uint64 // of which those that began as HTTP/2
	NoReq    uint64 // requests whose state could not be made
	// Go net/http client hand-off: roundTrip calls made while servicing a
	// request, and requests handed over to the writeLoop that writes them.
	GoRoundTrips, GoHandoffs uint64
}
