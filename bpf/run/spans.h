// Spans from what the service reads: a request head read starts a SERVER
// span, its response ends it; a response read ends a CLIENT span. Bodies are
// followed by length or chunk by chunk.
#pragma once

#include "run/maps.h"
#include "run/prof.h"
#include "run/parse.h"
#include "run/context.h"
#include "run/timing.h"

// copy_head puts the first n bytes of a head buffer into an event.
static __always_inline void copy_head(struct rd_event *ev, struct head_buf *hb, __u32 n)
{
	__u64 sz = n;
	asm volatile("" : "+r"(sz));
	sz &= RD_HEAD | (RD_HEAD - 1);
	if (sz > RD_HEAD)
		sz = RD_HEAD;
	if (bpf_probe_read_kernel(ev->head, sz, hb->b) < 0)
		sz = 0;
	ev->head_len = sz;
}

static __always_inline void bind_request(struct conn *c, struct req *r)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (bpf_map_lookup_elem(&rd_gopids, &tgid)) {
		struct gkey k = {.tgid = tgid, .g = cur_g()};
		r->g = k.g;
		bpf_map_update_elem(&rd_goroutines, &k, &r->span, BPF_ANY);
	} else {
		r->bound = tid;
		bpf_map_update_elem(&rd_threads, &tid, &r->span, BPF_ANY);
	}
}

static __always_inline void unbind_request(struct req *r)
{
	if (r->g) {
		struct gkey k = {.tgid = r->tgid, .g = r->g};
		__u64 *v = bpf_map_lookup_elem(&rd_goroutines, &k);
		if (v && *v == r->span)
			bpf_map_delete_elem(&rd_goroutines, &k);
		r->g = 0;
	}
	if (r->bound) {
		__u32 tid = r->bound;
		__u64 *v = bpf_map_lookup_elem(&rd_threads, &tid);
		if (v && *v == r->span)
			bpf_map_delete_elem(&rd_threads, &tid);
		r->bound = 0;
	}
}

// Chunked body parser states (RFC 9112 §7.1): size lines and the line
// breaks after data are scanned byte by byte, data is skipped by count.
#define CS_SIZE 0    // in the chunk-size digits
#define CS_EXT 1     // in chunk extensions, up to the line's end
#define CS_SLF 2     // after the size line's CR
#define CS_DATA 3    // in chunk data (csize bytes left)
#define CS_DCR 4     // after chunk data: CR
#define CS_DLF 5     // after chunk data: LF
#define CS_TRAILER 6 // at the start of a trailer line (or the final empty line)
#define CS_TLINE 7   // in a trailer line
#define CS_TLF 8     // after the final CR

// Chunk window: bytes copied to scan a size line.
#define CW 64

struct chunk_ctx {
	struct half *h;
	__u8 *b;   // CW bytes
	__u32 n;
	__u32 pos; // bytes consumed
	__s32 res; // 1: the body ended at pos; -1: malformed; 0: more
};

static long chunk_cb(__u32 i, struct chunk_ctx *x)
{
	struct half *h = x->h;
	if (x->pos >= x->n || h->cstate == CS_DATA)
		return 1;
	__u8 c = x->b[x->pos & (CW - 1)];
	x->pos++;
	int hv = hexval(c, 1);
	switch (h->cstate) {
	case CS_SIZE:
		if (hv >= 0 && h->cdigits < 15) {
			h->csize = h->csize * 16 + hv;
			h->cdigits++;
			return 0;
		}
		if (h->cdigits == 0) {
			x->res = -1;
			return 1;
		}
		if (c == ';' || c == ' ' || c == '\t')
			h->cstate = CS_EXT;
		else if (c == '\r')
			h->cstate = CS_SLF;
		else if (c == '\n')
			goto size_done;
		else {
			x->res = -1;
			return 1;
		}
		return 0;
	case CS_EXT:
		if (c == '\n')
			goto size_done;
		return 0;
	case CS_SLF:
		if (c != '\n') {
			x->res = -1;
			return 1;
		}
		goto size_done;
	case CS_DCR:
		if (c == '\r') {
			h->cstate = CS_DLF;
			return 0;
		}
		if (c != '\n') {
			x->res = -1;
			return 1;
		}
		h->cstate = CS_SIZE;
		return 0;
	case CS_DLF:
		if (c != '\n') {
			x->res = -1;
			return 1;
		}
		h->cstate = CS_SIZE;
		return 0;
	case CS_TRAILER:
		if (c == '\r')
			h->cstate = CS_TLF;
		else if (c == '\n')
			goto body_done;
		else
			h->cstate = CS_TLINE;
		return 0;
	case CS_TLINE:
		if (c == '\n')
			h->cstate = CS_TRAILER;
		return 0;
	case CS_TLF:
		if (c != '\n') {
			x->res = -1;
			return 1;
		}
		goto body_done;
	}
	return 0;
size_done:
	h->cdigits = ZERO;
	if (h->csize == 0) {
		h->cstate = CS_TRAILER;
		return 0;
	}
	h->cstate = CS_DATA;
	return 1; // data is skipped by the caller
body_done:
	x->res = 1;
	return 1;
}

// chunk_scan runs the chunk parser over b[0:n): it returns the bytes it
// consumed and in *res whether the body ended there (1) or is malformed
// (-1). It stops where chunk data starts, for the caller to skip.
static __always_inline __u32 chunk_scan(struct half *h, __u8 *b, __u32 n, __s32 *res)
{
	struct chunk_ctx x = {.h = h, .b = b, .n = OPQ(n), .pos = ZERO, .res = ZERO};
	bpf_loop(CW, chunk_cb, &x, 0);
	*res = x.res;
	return x.pos;
}

static __always_inline void chunk_start(struct half *h)
{
	h->state = H_CHUNK;
	h->cstate = CS_SIZE;
	h->cdigits = ZERO;
	h->csize = 0;
}

// end_span sends REQ_END for a request of an inbound connection (the one
// being answered, with its status, or one still queued: status 0) and
// forgets it.
__noinline int end_span(struct conn *c, __u64 sk, __u64 span, __u32 flags, struct scratch *s)
{
	if (!span || !c)
		return 0;
	struct req *r = bpf_map_lookup_elem(&rd_reqs, &span);
	if (!r)
		return 0;
	unbind_request(r);
	if (s) {
		struct rd_event *ev = &s->ev;
		ev_reset(ev, RD_EV_REQ_END, c, sk);
		ev->flags |= flags | (r->flags & (RD_F_SAMPLED | RD_F_CTX));
		__builtin_memcpy(ev->trace, r->trace, 16);
		ev->span = r->span;
		ev->parent = r->parent;
		ev->start = r->start;
		ev->local_ns = r->local_ns;
		ev->sock_ns = r->sock_ns;
		ev->net_ns = r->max_net;
		ev->remote_ns = r->max_remote;
		ev->status = span == c->req ? c->rsp_status : 0;
		__u32 nt = r->ntids;
		if (nt > RD_MAX_TIDS)
			nt = RD_MAX_TIDS;
		ev->ntids = nt;
		for (int i = 0; i < RD_MAX_TIDS; i++)
			ev->tids[i] = r->tids[i];
		emit(ev, c);
	}
	bpf_map_delete_elem(&rd_reqs, &span);
	return 0;
}

// end_request ends the request whose response was being written.
static __always_inline void end_request(struct conn *c, __u64 sk, __u32 flags, struct scratch *s)
{
	__u64 span = c->req;
	end_span(c, sk, span, flags, s);
	c->req = 0;
}

// end_callrec sends CALL_END for a call of an outbound connection and
// folds its waits into the request that made it (Mirage §4.2).
__noinline int end_callrec(struct conn *c, __u64 sk, struct callrec *q, __u32 flags, struct scratch *s)
{
	if (!c || !q || !q->span)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 client = now > q->start ? now - q->start : 0;
	__u64 server = q->server * 1000;
	__u64 sockw = (__u64)q->sock_us * 1000; // the caller's, not the network's
	__u64 net = 0, remote = q->wait * 1000;
	if (q->flags & RD_F_TIMED)
		net = client > server + sockw ? client - server - sockw : 0;
	else
		remote = 0;
	if (q->parent) {
		__u64 p = q->parent;
		struct req *r = bpf_map_lookup_elem(&rd_reqs, &p);
		if (r) {
			if (net > r->max_net)
				r->max_net = net;
			if (remote > r->max_remote)
				r->max_remote = remote;
			if (!(flags & RD_F_CLOSED))
				touch(r);
		}
	}
	if (!(q->flags & RD_F_OWN) && s) { // else the application reports its own span
		struct rd_event *ev = &s->ev;
		ev_reset(ev, RD_EV_CALL_END, c, sk);
		ev->flags |= flags | (q->flags & (RD_F_TIMED | RD_F_SAMPLED | RD_F_UNBOUND));
		__builtin_memcpy(ev->trace, q->trace, 16);
		ev->span = q->span;
		ev->parent = q->parent;
		ev->start = q->start;
		ev->net_ns = net;
		ev->remote_ns = remote;
		ev->server_ns = server;
		ev->sock_ns = sockw;
		ev->status = q->status;
		ev->tids[0] = q->tid;
		emit(ev, c);
	}
	q->span = 0;
	return 0;
}

// end_call ends the call whose response was being read.
static __always_inline void end_call(struct conn *c, __u64 sk, __u32 flags, struct scratch *s)
{
	end_callrec(c, sk, &c->call, flags, s);
}

// end_all ends everything a closing connection still holds.
__noinline int end_all(struct conn *c, __u64 sk, __u32 flags, struct scratch *s)
{
	if (!c)
		return 0;
	if (c->dir == DIR_IN) {
		end_request(c, sk, flags, s);
		for (int i = 0; i < RQ; i++) {
			if (c->rq_first == c->rq_next)
				break;
			__u64 span = c->rq[c->rq_first & (RQ - 1)];
			c->rq_first++;
			end_span(c, sk, span, RD_F_CLOSED, s);
		}
	} else {
		end_call(c, sk, flags, s);
		for (int i = 0; i < RQ; i++) {
			if (c->cq_first == c->cq_next)
				break;
			struct callrec *q = &c->cq[c->cq_first & (RQ - 1)];
			c->cq_first++;
			end_callrec(c, sk, q, RD_F_CLOSED, s);
		}
	}
	return 0;
}

// Complete request head read on an inbound connection: a SERVER span starts.
__noinline int request_read(struct conn *c, __u64 sk, struct scratch *s, __u32 hlen)
{
	if (!c || !s)
		return 0;
	struct hinfo *hi = &c->rd.hi;
	__u32 kept = hlen > RD_HEAD ? RD_HEAD : hlen;
	decode_framing(&c->qhead, hi);
	// A request whose last coding is not chunked has no length either.
	if (hi->has & (HD_BAD | HD_CL_BAD | HD_TE_OTHER)) {
		make_opaque(c, sk, s); // malformed: the service will answer it, or not, untouched
		return 0;
	}
	if (!decode_tp(&c->qhead, hi) && !decode_b3(&c->qhead, hi))
		decode_xb3(&c->qhead, hi);
	PROF(20);
	if (c->rq_next - c->rq_first >= RQ) {
		// More requests awaiting answers than kept: the oldest is given up.
		__u64 old = c->rq[c->rq_first & (RQ - 1)];
		c->rq_first++;
		end_span(c, sk, old, RD_F_CLOSED, s);
	}
	__u64 span = rand64();
	if (bpf_map_update_elem(&rd_reqs, &span, &s->zreq, BPF_NOEXIST) < 0) {
		stat(c->slot, RD_STAT_NOREQ);
		return 0;
	}
	struct req *r = bpf_map_lookup_elem(&rd_reqs, &span);
	if (!r)
		return 0;
	PROF(21);
	__u64 id = bpf_get_current_pid_tgid();
	r->span = span;
	r->sk = sk;
	r->tgid = id >> 32;
	r->start = c->rd.start;
	// The time the head waited in the socket for the service to read it
	// is the service's own wait (Mirage's local wait), not its caller's
	// network: it starts the request's local wait.
	r->sock_ns = c->rd.sock;
	r->local_ns = c->rd.sock;
	r->seg_tid = (__u32)id;
	r->seg_rd = run_delay();
	r->tids[0] = (__u32)id;
	r->ntids = 1;
	if (hi->ctx_ok) {
		__builtin_memcpy(r->trace, hi->trace, 16);
		r->parent = hi->span;
		r->flags = RD_F_CTX | (hi->sampled ? RD_F_SAMPLED : 0);
		// tracestate goes with a W3C context only.
		if (hi->w3c && (hi->has & HD_TRACESTATE))
			r->ts_len = decode_ts(&c->qhead, hi, &s->ts, r);
	} else {
		__u64 a = rand64(), b = rand64();
		__builtin_memcpy(r->trace, &a, 8);
		__builtin_memcpy(r->trace + 8, &b, 8);
		r->flags = sampling_denied(&c->qhead, hi) ? 0 : RD_F_SAMPLED;
	}
	r->rid_len = decode_rid(&c->qhead, hi, r);
	dbg("request read span=%x queued=%d", span, c->rq_next - c->rq_first);
	c->rq[c->rq_next & (RQ - 1)] = span;
	c->rq_head[c->rq_next & (RQ - 1)] = c->head_req;
	c->rq_next++;
	c->rd.finals++;
	PROF(22);
	bind_request(c, r);
	PROF(23);

	struct rd_event *ev = &s->ev;
	ev_reset(ev, RD_EV_REQ, c, sk);
	ev->flags |= r->flags;
	if (hlen > RD_HEAD)
		ev->flags |= RD_F_CUT;
	__builtin_memcpy(ev->trace, r->trace, 16);
	ev->span = span;
	ev->parent = r->parent;
	ev->start = r->start;
	ev->sock_ns = r->sock_ns;
	copy_head(ev, &c->qhead, kept);
	PROF(24);
	emit(ev, c);
	PROF(25);

	// The request body: counted, or chunked.
	c->rd.state = H_IDLE;
	if (hi->has & HD_CHUNKED) {
		chunk_start(&c->rd);
	} else if ((hi->has & HD_CL) && hi->cl > 0) {
		c->rd.state = H_BODY;
		c->rd.body = hi->cl;
	}
	return 0;
}

// Complete response head read on an outbound connection.
__noinline int response_read(struct conn *c, __u64 sk, struct scratch *s)
{
	if (!c || !s)
		return 0;
	struct hinfo *hi = &c->rd.hi;
	decode_framing(&c->shead, hi);
	decode_timing(&c->shead, hi);
	PROF(26);
	if (hi->has & HD_BAD) {
		make_opaque(c, sk, s);
		return 0;
	}
	c->rd.state = H_IDLE;
	if (hi->status >= 100 && hi->status < 200)
		return 0; // an interim response: another head follows
	c->rd.finals++;
	// The oldest call awaiting an answer gets it.
	if (c->call.span)
		end_call(c, sk, RD_F_CLOSED, s); // its body was not followed to the end
	if (c->cq_first != c->cq_next) {
		c->call = c->cq[c->cq_first & (RQ - 1)];
		c->cq_first++;
	}
	c->call.status = hi->status;
	c->call.sock_us = c->rd.sock / 1000;
	if (hi->timed) {
		c->call.flags |= RD_F_TIMED;
		c->call.server = hi->server_us;
		c->call.wait = hi->wait_us;
	}
	switch (response_framing(hi, c->call.flags & CALL_HEAD)) {
	case RB_NONE:
		end_call(c, sk, 0, s);
		break;
	case RB_CHUNKED:
		chunk_start(&c->rd);
		break;
	case RB_LENGTH:
		c->rd.state = H_BODY;
		c->rd.body = hi->cl;
		break;
	case RB_CLOSE:
		c->rd.state = H_CLOSE;
		break;
	default:
		make_opaque(c, sk, s); // a Content-Length it cannot follow
	}
	return 0;
}

// Body of one direction finished (a counted, chunked or close-delimited body).
static __always_inline void body_done(struct conn *c, __u64 sk, int is_write, __u32 flags, struct scratch *s)
{
	if (is_write) {
		if (c->dir == DIR_IN)
			end_request(c, sk, flags, s);
	} else {
		if (c->dir == DIR_OUT)
			end_call(c, sk, flags, s);
	}
}
