// When the bytes of an inbound connection arrived in its socket: a ring of
// the last RA segments of new in-order data (their sequence range and the
// time TCP took them), kept by the tcp_probe program (bpf/run_datapath.c),
// and read when the service reads a request head, so that the request's
// SERVER span starts when its first byte could have been read, not when the
// service got round to reading it (the time a busy or throttled service
// leaves a request in its socket's receive queue is the callee's wait, not
// the caller's network). Plain C: a user-space test harness includes it too
// (internal/run/datapath/arrival).
#pragma once

#include <linux/types.h>

// Segments remembered per connection. A request head is read at most a few
// segments after it arrived unless the client pipelines many requests (or
// large bodies) ahead of a slow server; past RA segments the head's own
// segment is forgotten and the next one remembered bounds its arrival.
#define RA 8

struct arrival {
	__u32 seq; // the first new byte
	__u32 end; // past the last one
	__u64 ts;  // CLOCK_MONOTONIC ns (0: an empty slot)
};

struct arrivals {
	struct arrival a[RA];
	__u32 next; // the slot the next segment takes
	__u32 _pad;
};

// Sequence numbers wrap at 2^32: compare them by their signed difference
// (RFC 793's modular arithmetic).
#define SEQ_LT(a, b) ((__s32)((a) - (b)) < 0)
#define SEQ_LE(a, b) ((__s32)((a) - (b)) <= 0)

// arrival_note records a segment carrying bytes [seq, end) that TCP takes at
// ts, when it expects byte rcv_nxt next. Only new in-order bytes count:
// [rcv_nxt, end). A retransmission of bytes already received adds nothing;
// an out-of-order segment is not readable until the hole before it fills,
// and the segment that fills it is recorded then (its bytes only: what the
// out-of-order queue adds past it is bounded below, arrival_of).
static __always_inline void arrival_note(struct arrivals *r, __u32 seq, __u32 end, __u32 rcv_nxt, __u64 ts)
{
	if (!SEQ_LT(rcv_nxt, end) || SEQ_LT(rcv_nxt, seq))
		return;
	__u32 i = r->next % RA;
	r->a[i].seq = rcv_nxt;
	r->a[i].end = end;
	r->a[i].ts = ts;
	r->next = i + 1;
}

// arrival_of returns when byte seq arrived: the time of the recorded segment
// that holds it; else the earliest time of a segment recorded after it (it
// was readable by then: a later in-order segment is only taken once every
// byte before it is); else 0 (not known: the caller takes the read's time).
// It never returns a time earlier than the byte's arrival, so the socket
// wait it yields is never more than the byte waited.
static __always_inline __u64 arrival_of(struct arrivals *r, __u32 seq)
{
	__u64 after = 0;
	for (int i = 0; i < RA; i++) {
		struct arrival *e = &r->a[i];
		if (!e->ts)
			continue;
		if (SEQ_LE(e->seq, seq) && SEQ_LT(seq, e->end))
			return e->ts;
		if (SEQ_LT(seq, e->seq) && (!after || e->ts < after))
			after = e->ts;
	}
	return after;
}
