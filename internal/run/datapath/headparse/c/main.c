// The datapath's head parser (bpf/run/parse.h and bpf/run/context.h: the
// fields of request heads, and the framing and timing fields of responses) built
// for user space, as a filter: the BPF helpers and verifier aids those
// headers use are defined here as plain C. It reads heads from stdin, each
// a little-endian u32 length, u32 split, u32 flags (1: a response, 2: it
// answers HEAD) and the head's bytes, and writes a struct hp_req to stdout
// for each (see internal/run/datapath/headparse).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/types.h>

#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
#define __noinline __attribute__((noinline))
#define OPQ(v) (v)
#define ZERO 0
#define M1 (-1)
#define dbg(fmt, ...) \
	do {          \
	} while (0)

// bpf_loop calls cb(i, ctx) for i in [0, n) until it returns nonzero, and
// returns the iterations made (the kernel helper's contract).
static long hp_loop(__u32 n, long (*cb)(__u32, void *), void *ctx)
{
	__u32 i = 0;
	while (i < n) {
		long r = cb(i, ctx);
		i++;
		if (r)
			break;
	}
	return i;
}
#define bpf_loop(n, cb, ctx, flags) hp_loop((n), (long (*)(__u32, void *))(cb), (ctx))

#include "run/parse.h"
#include "run/context.h"

#include "headparse.h"

// scan feeds the head b[0:n) into hb as the datapath's reading does, in two
// pieces split at split, and returns scan_kept's answer for it; out gets the
// head's status and length.
static __s64 scan(struct conn *c, struct head_buf *hb, const uint8_t *b, uint32_t n, uint32_t split,
		  __u64 request, struct hp_req *out)
{
	memset(out, 0, sizeof(*out));
	if (n > RD_HEAD)
		n = RD_HEAD;
	if (split > n)
		split = n;
	memcpy(hb->b, b, n);
	__s64 res = -1;
	if (split > 0)
		res = scan_kept(c, &c->rd, hb, 0, request << 32 | split);
	if (res == -1)
		res = scan_kept(c, &c->rd, hb, split, request << 32 | n);
	if (res == -2) {
		out->status = HP_NOT_HTTP;
	} else if (res == -1) {
		out->status = HP_MORE;
	} else {
		out->status = HP_HEAD;
		out->head_len = (__u64)res >> 32;
	}
	return res;
}

void hp_parse_request(const uint8_t *b, uint32_t n, uint32_t split, struct hp_req *out)
{
	struct conn *c = calloc(1, sizeof(*c));
	struct req *r = calloc(1, sizeof(*r));
	struct ts_scan *t = calloc(1, sizeof(*t));
	if (!c || !r || !t)
		abort();
	if (scan(c, &c->qhead, b, n, split, 1, out) >= 0) {
		struct hinfo *hi = &c->rd.hi;
		out->is_head = c->head_req;
		decode_framing(&c->qhead, hi);
		if (!decode_tp(&c->qhead, hi) && !decode_b3(&c->qhead, hi))
			decode_xb3(&c->qhead, hi);
		out->has = hi->has;
		out->cl = hi->cl;
		out->ctx_ok = hi->ctx_ok;
		out->sampled = hi->sampled;
		out->w3c = hi->w3c;
		if (hi->ctx_ok) {
			memcpy(out->trace, hi->trace, 16);
			out->span = hi->span;
			if (hi->w3c && (hi->has & HD_TRACESTATE))
				r->ts_len = decode_ts(&c->qhead, hi, t, r);
		} else {
			out->denied = sampling_denied(&c->qhead, hi);
		}
		r->rid_len = decode_rid(&c->qhead, hi, r);
		out->ts_len = r->ts_len;
		memcpy(out->ts, r->ts, sizeof(out->ts));
		out->rid_len = r->rid_len;
		memcpy(out->rid, r->rid, sizeof(out->rid));
	}
	free(t);
	free(r);
	free(c);
}

void hp_parse_response(const uint8_t *b, uint32_t n, uint32_t split, int head_req, struct hp_req *out)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	if (scan(c, &c->shead, b, n, split, 0, out) >= 0) {
		struct hinfo *hi = &c->rd.hi;
		decode_framing(&c->shead, hi);
		decode_timing(&c->shead, hi);
		out->has = hi->has;
		out->cl = hi->cl;
		out->rstatus = hi->status;
		out->framing = response_framing(hi, head_req);
		out->timed = hi->timed;
		out->server_us = hi->server_us;
		out->wait_us = hi->wait_us;
	}
	free(c);
}

int main(void)
{
	static uint8_t buf[RD_HEAD];
	static struct hp_req out;
	uint32_t hdr[3]; // length, split, flags (1: a response, 2: it answers HEAD)
	// The first answer: RD_HEAD (the bytes of a head kept) and the size of
	// an answer.
	uint32_t hello[2] = {RD_HEAD, sizeof(struct hp_req)};
	if (fwrite(hello, sizeof(hello), 1, stdout) != 1 || fflush(stdout))
		return 1;
	while (fread(hdr, sizeof(hdr), 1, stdin) == 1) {
		if (hdr[0] > RD_HEAD || (hdr[0] && fread(buf, hdr[0], 1, stdin) != 1))
			return 1;
		if (hdr[2] & 1)
			hp_parse_response(buf, hdr[0], hdr[1], (hdr[2] & 2) != 0, &out);
		else
			hp_parse_request(buf, hdr[0], hdr[1], &out);
		if (fwrite(&out, sizeof(out), 1, stdout) != 1 || fflush(stdout))
			return 1;
	}
	return 0;
}
