// The in-kernel datapath of `rootline run` (bpf/run_datapath.c), shared with
// internal/run/datapath, which reads these structs from raw bytes: keep
// the Go offsets there in step with any change here.
#pragma once

#include <linux/types.h>

// Bytes of a request head (request line and header fields) kept per
// connection and copied to user space; a longer head is cut (RD_F_CUT) and
// the context headers past the cut are not seen.
#define RD_HEAD 8192
// Bytes of a response head kept: the status line and the few fields read
// from it (framing and the downstream's rootline-* timing).
#define RD_RHEAD RD_HEAD
// tracestate and x-request-id values kept for propagation.
#define RD_TS 512
#define RD_RID 256

// Event types (rd_event.type).
#define RD_EV_REQ 1      // a request head was read on an inbound connection: a SERVER span starts
#define RD_EV_REQ_END 2  // its response was written (or the connection closed): the SERVER span ends
#define RD_EV_CALL 3     // a request head was written on an outbound connection: a CLIENT span starts
#define RD_EV_CALL_END 4 // its response was read (or the connection closed): the CLIENT span ends
#define RD_EV_OPAQUE 5   // a connection carries something other than HTTP/1.x: passed through
#define RD_EV_EXEC 6     // a process of the run executed a program (Go probes may be due)
#define RD_EV_SKIP 7     // a head was left unchanged; status says why (RD_SKIP_*)

// rd_event.flags
#define RD_F_SAMPLED 1   // the trace is sampled
#define RD_F_CTX 2       // REQ: the request carried a context (else a trace started here)
#define RD_F_OWN 4       // CALL: the application wrote its own trace context: nothing injected
#define RD_F_CUT 8       // head longer than kept
#define RD_F_CLOSED 16   // *_END: the connection closed before the message was complete
#define RD_F_TIMED 32    // CALL_END: the downstream sent rootline-server-time
#define RD_F_UNBOUND 64  // CALL: made outside any request (a root CLIENT span)
#define RD_F_INJECTED 128 // the head got Rootline's header lines
#define RD_F_IPV6 256    // raddr is an IPv6 address
#define RD_F_H2 512      // OPAQUE: the connection began as HTTP/2 (preface or SETTINGS), which the datapath does not follow

// Reasons a head was left unchanged (RD_EV_SKIP status).
// Propagation formats (rd_noprop: those a run does not write); the bits of
// httpstream.Formats.
#define RD_PROP_W3C 1     // traceparent (and tracestate)
#define RD_PROP_B3 2      // b3
#define RD_PROP_B3MULTI 4 // x-b3-traceid, x-b3-spanid, x-b3-parentspanid, x-b3-sampled
#define RD_PROP_RID 8     // x-request-id

// The form of the timing fields written on responses (rd_timing; see
// httpstream.HeaderCompact).
#define RD_TIMING_COMPACT 0 // rl: <server>;l=<local>;n=<net>;r=<remote>
#define RD_TIMING_LONG 1    // rootline-server-time and rootline-wait

#define RD_SKIP_SNDBUF 1 // the send buffer could not take the message whole: inserting could mislead the application's byte count
#define RD_SKIP_PUSH 2   // bpf_msg_push_data failed
#define RD_SKIP_SPLIT 3  // the head's end was in a later write than its start and the earlier part was already sent
#define RD_SKIP_LONG 4   // a request head longer than kept (RD_HEAD): the application's own context may be past it

#define RD_MAX_TIDS 8

// Runs one shared datapath serves at once (each has a slot: its events
// ring, generation and counters).
#define RD_SLOTS 64

// rd_event: one record of the ring buffer. Only the first head_len bytes
// of head are written.
struct rd_event {
	__u32 type;
	__u32 tgid;
	__u32 tid;
	__u32 flags;
	__u64 ts;      // CLOCK_MONOTONIC ns
	__u64 sk;      // the connection (kernel address of its struct sock)
	__u8 trace[16];
	__u64 span;    // REQ*: the SERVER span; CALL*: the CLIENT span
	__u64 parent;  // REQ*: the caller's span (0: root); CALL*: the SERVER span it is part of (0: unbound)
	__u64 start;   // *_END: the span's start
	__u64 local_ns;  // REQ_END: run-queue wait of the request's threads and its socket wait (sock_ns)
	__u64 net_ns;    // REQ_END: largest network wait of its calls; CALL_END: this call's
	__u64 remote_ns; // REQ_END: largest wait its downstreams reported; CALL_END: this call's downstream's
	__u64 server_ns; // CALL_END: the downstream's rootline-server-time
	__u64 sock_ns;   // REQ, REQ_END: how long the request's first byte waited in the socket before the service read it (start is its arrival; in local_ns too); CALL_END: the response's, before the caller read it (not in net_ns)
	__u32 status;    // *_END: HTTP status (0: none); SKIP: the reason
	__u32 ntids;
	__u32 tids[RD_MAX_TIDS]; // REQ_END: threads that worked on the request
	__u32 raddr[4];  // the peer (IPv4 in raddr[0], network order)
	__u16 rport;     // host order
	__u16 lport;     // host order
	__u32 head_len;
	__u8 head[RD_HEAD]; // REQ/CALL: the head as read or written (before insertion); EXEC: the file name
};
