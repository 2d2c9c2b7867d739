// Per-connection and per-request state of the datapath: what a head
// says (struct hinfo), each direction of a connection (struct half), the
// connection (struct conn) and a request being serviced (struct req). Plain
// C: the user-space test harness of the parsers includes it too.
#pragma once

#include <linux/types.h>
#include "run_datapath.h"
#include "run/arrival.h"

// Half states: what the next byte of one direction is.
#define H_IDLE 0    // the start of a message (a head)
#define H_HEAD 1    // inside a head
#define H_BODY 2    // inside a body of known length (body bytes left)
#define H_CHUNK 4   // inside a chunked body (struct half's chunk parser)
#define H_CLOSE 5   // inside a body that ends with the connection
#define H_OPAQUE 6  // not HTTP/1.x: pass through

#define DIR_IN 1
#define DIR_OUT 2

// MAX_STEPS bounds the steps (a head piece, a body skip, a chunk size
// line) that follow one read or write.
#define MAX_STEPS 16384

// HSTEP: head bytes copied and scanned per step; most heads end within one.
#define HSTEP 1024
// Messages that got lines inserted are made linear again up to this size
// (an order-2 allocation at most).
#define PULL_MAX 16384

// SCR: bytes scanned per step (a power of two).
#define SCR 4096
#define SCR_MASK (SCR - 1)
#define HEAD_MASK (RD_HEAD - 1)
// A head longer than this (or a first line longer than the kept head)
// makes the connection opaque rather than be scanned forever.
#define MAX_HEAD (64 * 1024)

// What a head says, classified line by line (head_feed).
#define HD_TRACEPARENT 0x1
#define HD_TRACESTATE 0x2
#define HD_B3 0x4
#define HD_B3TRACE 0x8
#define HD_B3SPAN 0x10
#define HD_B3PARENT 0x20
#define HD_B3SAMPLED 0x40
#define HD_B3FLAGS 0x80
#define HD_RID 0x100
#define HD_CL 0x200
#define HD_CHUNKED 0x400
#define HD_SERVERTIME 0x800
#define HD_WAIT 0x1000
#define HD_TP_MANY 0x2000
#define HD_CL_BAD 0x4000
#define HD_BAD 0x8000 // a malformed field line: the head is not followed
#define HD_TE 0x10000       // a Transfer-Encoding field (the last one is HX_TE)
#define HD_TE_OTHER 0x20000 // Transfer-Encoding whose last coding is not chunked
#define HD_RL 0x40000       // an rl field (the compact timing form)

// Header fields a head's parse records (value offsets, first occurrence).
#define HX_TP 0
#define HX_TS 1
#define HX_B3 2
#define HX_XTRACE 3
#define HX_XSPAN 4
#define HX_XSAMPLED 5
#define HX_XFLAGS 6
#define HX_RID 7
#define HX_CL 8
#define HX_TE 9
#define HX_ST 10
#define HX_WAIT 11
#define HX_RL 12
#define HX_N 13

// tracestate: fields of a head combined, and list members (W3C Trace
// Context allows 32; httpstream.maxTraceStateFields).
#define TS_FIELDS 32
#define TS_MEMBERS 32

struct hinfo {
	__u32 has;     // HD_* bits
	__u32 status;  // a response's status code
	__u32 tp_count;
	__u32 rl_count; // rl fields (more than one: malformed)
	__u16 off[HX_N];
	__u16 len[HX_N];
	// decoded
	__u64 cl;
	__u64 server_us;
	__u64 wait_us;
	__u8 trace[16]; // the context found (ctx_ok)
	__u64 span;
	__u8 sampled;
	__u8 ctx_ok;
	__u8 w3c;      // the context came from traceparent (tracestate goes with it)
	__u8 timed;    // a response's timing fields gave a server time (decode_timing)
	__u8 _pad2[4];
	__u8 tmp[16];
	// The non-empty tracestate fields, in order (combined into one list).
	__u32 ts_fields; // how many were seen (past TS_FIELDS: the list is dropped)
	__u16 ts_off[TS_FIELDS];
	__u16 ts_len[TS_FIELDS];
};

struct half {
	__u8 state;
	__u8 cut;      // the head is longer than kept
	__u8 last;     // the head's last byte so far
	__u8 _pad;
	// 32 bits, so that the verifier sees them as any value: a counter
	// with a bounded range starting a bpf_loop would make every
	// iteration a new state to verify.
	__u32 len;     // head bytes so far
	__u32 kept;    // of which in the head buffer
	__u32 ls;      // head offset where the current line starts
	__u32 lines;   // head lines completed
	__u32 finals;  // heads completed on this side (final ones for responses)
	__u64 body;    // body bytes left (H_BODY)
	__u64 start;   // when the current head began (ns): a request head's first byte's arrival in the socket
	__u64 sock;    // how long the head's first byte waited in the socket before the read (ns)
	// chunked body parser
	__u32 cstate;  // CS_*
	__u32 cdigits; // hex digits of the size line so far
	__u64 csize;   // the chunk's size, then its data bytes left
	struct hinfo hi; // the head's fields, classified line by line
};

// Requests (or calls) a connection holds awaiting their responses.
#define RQ 32

// An outbound request written and not yet answered: a CLIENT span.
struct callrec {
	__u64 span;    // 0: none
	__u64 parent;  // the SERVER span it is part of (0: unbound)
	__u64 start;
	__u64 server;  // the downstream's rootline-server-time (µs)
	__u64 wait;    // the largest wait it reported (µs)
	__u32 tid;
	__u32 flags;   // RD_F_*; RD_F_CUT is reused for "HEAD request"
	__u32 status;
	__u32 sock_us; // how long its response's first byte waited in the socket before the caller read it
	__u8 trace[16];
};
#define CALL_HEAD RD_F_CUT

// A head buffer; its own type so that global functions can take it whole.
struct head_buf {
	__u8 b[RD_HEAD + 8]; // + 8: a word read at the last offsets
};

struct conn {
	__u64 addr;      // the struct sock's address (the key), as a number
	__u32 slot;      // the run that follows it (rd_slot, rd_gen of its sock_ops)
	__u32 gen;
	__u32 wseq;      // the TCP write sequence up to which writes were followed
	__u8 wseq_ok;
	__u8 dir;
	__u8 family;
	__u8 head_req;   // the last request head was HEAD
	__u8 h2;         // it began as HTTP/2 (passed through, RD_F_H2)
	__u16 rport;
	__u16 lport;
	__u32 raddr[4];
	struct half rd;
	struct half wr;
	// inbound: requests read whose responses are not written yet (HTTP/1.1
	// pipelining: answered in order), and the one being answered
	__u64 rq[RQ];
	__u8 rq_head[RQ];  // it is a HEAD request: its response has no body
	__u32 rq_first;
	__u32 rq_next;
	__u64 req;
	__u32 rsp_status;
	// outbound: calls written whose responses are not read yet, and the one
	// whose response is being read
	__u32 cq_first;
	__u32 cq_next;
	__u32 noprop;    // the formats its run does not write (rd_noprop)
	__u32 timing;    // the timing form its run writes (rd_timing)
	struct callrec cq[RQ];
	struct callrec call;
	struct arrivals arr;   // when the last segments arrived (tcp_probe)
	struct head_buf qhead; // a request head (inbound: read; outbound: written)
	struct head_buf shead; // a response head (inbound: written; outbound: read)
};

// A request being serviced: a SERVER span.
struct req {
	__u8 trace[16];
	__u64 parent;
	__u64 span;
	__u64 sk;
	__u64 start;
	__u64 local_ns;
	__u64 max_net;
	__u64 max_remote;
	__u64 sock_ns;  // its head's wait in the socket's receive queue (in local_ns too)
	__u64 seg_rd;   // run_delay of seg_tid at the request's last event on it
	__u64 g;        // Go: the goroutine bound
	__u32 seg_tid;
	__u32 tgid;
	__u32 bound;    // the thread bound (non-Go)
	__u32 flags;    // RD_F_SAMPLED | RD_F_CTX
	__u32 ntids;
	__u32 tids[RD_MAX_TIDS];
	__u16 ts_len;
	__u16 rid_len;
	__u8 ts[RD_TS];
	__u8 rid[RD_RID];
};

struct gkey {
	__u32 tgid;
	__u32 _pad;
	__u64 g;
};

struct call_ids {
	__u8 trace[16];
	__u64 span;
	__u64 parent;
	__u8 sampled;
};

#define TEXT 2048
#define TEXT_MASK (TEXT - 1)
// A tracestate list being read (decode_ts): the member being read, then
// the members found.
struct ts_member {
	__u16 off;  // head offset of its first byte
	__u16 len;  // key "=" value, without whitespace around
	__u16 klen;
	__u16 keep; // propagated (a long list is cut)
	__u64 hash; // of the key (FNV-1a), to find duplicates quickly
};

struct ts_scan {
	__u32 f;     // the field being read
	__u32 p;     // the offset in it
	__s32 ms;    // head offset of the member's first byte (-1: none yet)
	__u32 end;   // head offset past its last byte that is not whitespace
	__s32 eq;    // head offset of its '=' (-1: in the key)
	__s32 at;    // head offset of the last '@' in the key
	__s32 tab;   // head offset of the first tab in its value (-1: none)
	__u32 ats;   // '@' in the key
	__u32 digit; // the key starts with a digit
	__u32 n;     // members found
	__u32 bad;   // the list is invalid
	__u32 _pad;
	__u64 hash;
	struct ts_member m[TS_MEMBERS];
};


