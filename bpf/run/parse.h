// Reading a head: its lines are found and each field line classified as
// it arrives (scan_kept, field_line, classify); the start line is checked
// (first_line) and the framing decoded (decode_framing). No map or kernel
// access: bpf_loop, OPQ, ZERO, M1 and dbg come from the includer
// (bpf/run_datapath.c, or the user-space harness in
// internal/run/datapath/headparse), so that the same code is
// differential-tested against httpstream's parser.
#pragma once

#include "run/state.h"

static __always_inline int hexval(__u8 c, int upper_ok)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (upper_ok && c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

// name_is compares h[at:at+n] with the lower-case literal lit ignoring
// case, eight bytes at a time: each word of the head, with bit 5 set in the
// bytes where lit has a letter, must equal lit's word (other bytes compare
// exactly: 'A' | 0x20 is 'a', but '\r' | 0x20 would be '-'). The words of
// lit and their masks are constants the compiler folds. (h has 8 bytes of
// slack after RD_HEAD, so a word at any masked offset is in bounds.)
#define NAME_IS(h, at, lit) name_is((h), (at), lit, sizeof(lit) - 1)
static __always_inline __u64 lit_byte(const char *lit, __u32 n, __u32 i, int letters)
{
	if (i >= n)
		return 0;
	__u8 c = lit[i];
	if (letters)
		return c >= 'a' && c <= 'z' ? 0x20 : 0;
	return c;
}

static __always_inline __u64 lit_word(const char *lit, __u32 n, __u32 k, int letters)
{
	__u64 w = 0;
#pragma unroll
	for (__u32 j = 0; j < 8; j++)
		w |= lit_byte(lit, n, k + j, letters) << (8 * j);
	return w;
}

static __always_inline int name_is(__u8 *h, __u32 at, const char *lit, __u32 n)
{
#pragma unroll
	for (__u32 k = 0; k < n; k += 8) {
		__u64 keep = n - k >= 8 ? ~0ULL : (1ULL << (8 * (n - k))) - 1;
		__u64 w = *(__u64 *)(h + ((at + k) & HEAD_MASK));
		if (((w | lit_word(lit, n, k, 1)) & keep) != lit_word(lit, n, k, 0))
			return 0;
	}
	return 1;
}

static __always_inline void field(struct hinfo *hi, __u32 x, __u32 bit, __u32 vs, __u32 ve)
{
	if (!(hi->has & bit) && x < HX_N) {
		hi->off[x] = vs;
		hi->len[x] = ve - vs;
	}
	hi->has |= bit;
}

// cl_cb reads a Content-Length value a byte per iteration (the end acts as
// a comma): a list of equal decimal numbers of 1 to 18 digits, equal to
// those of earlier Content-Length fields, empty elements ignored, at least
// one number (RFC 9112 §6.3 lets a recipient take a list of identical values
// as one; httpstream's parseContentLength).
struct cl_ctx {
	__u8 *h;
	__u32 at;
	__u32 end;
	__u64 v;
	__u32 digits;
	__u32 phase; // 0: before the number, 1: in it, 2: after it
	__u32 bad;
	__u32 seen;  // cl holds an earlier number (of this field or an earlier one)
	__u64 cl;
	__u32 got;   // this field had a number
};

static long cl_cb(__u32 i, struct cl_ctx *x)
{
	int last = x->at >= x->end;
	__u8 c = last ? ',' : x->h[x->at & HEAD_MASK];
	x->at++;
	if (c == ',') {
		if (x->digits > 0) {
			if (x->seen && x->v != x->cl) {
				x->bad = 1;
				return 1;
			}
			x->cl = x->v;
			x->seen = 1;
			x->got = 1;
		}
		x->v = 0;
		x->digits = 0;
		x->phase = 0;
		if (!last)
			return 0;
		if (!x->got)
			x->bad = 1;
		return 1;
	}
	if (c == ' ' || c == '\t') {
		if (x->phase == 1)
			x->phase = 2;
		return 0;
	}
	if (c >= '0' && c <= '9' && x->phase != 2 && x->digits < 18) {
		x->phase = 1;
		x->digits++;
		x->v = x->v * 10 + (c - '0');
		return 0;
	}
	x->bad = 1;
	return 1;
}

// classify records a header field (name h[ls:colon], value h[vs:ve]) that
// Rootline reads; values are decoded after the whole head is classified.
__noinline int classify(struct head_buf *hb, struct hinfo *hi, __u32 ls, __u32 colon, __u64 vse)
{
	if (!hb || !hi)
		return 0;
	__u8 *h = hb->b;
	__u32 vs = vse >> 32, ve = (__u32)vse;
	switch (colon - ls) {
	case 2:
		if (NAME_IS(h, ls, "b3"))
			field(hi, HX_B3, HD_B3, vs, ve);
		else if (NAME_IS(h, ls, "rl")) {
			field(hi, HX_RL, HD_RL, vs, ve);
			hi->rl_count++;
		}
		break;
	case 10:
		if (NAME_IS(h, ls, "tracestate")) {
			hi->has |= HD_TRACESTATE;
			if (ve > vs) {
				__u32 k = hi->ts_fields;
				if (k < TS_FIELDS) {
					hi->ts_off[k & (TS_FIELDS - 1)] = vs;
					hi->ts_len[k & (TS_FIELDS - 1)] = ve - vs;
				}
				hi->ts_fields = k + 1;
			}
		}
		else if (NAME_IS(h, ls, "x-b3-flags"))
			field(hi, HX_XFLAGS, HD_B3FLAGS, vs, ve);
		break;
	case 11:
		if (NAME_IS(h, ls, "traceparent")) {
			field(hi, HX_TP, HD_TRACEPARENT, vs, ve);
			hi->tp_count++;
		} else if (NAME_IS(h, ls, "x-b3-spanid"))
			field(hi, HX_XSPAN, HD_B3SPAN, vs, ve);
		break;
	case 12:
		if (NAME_IS(h, ls, "x-b3-traceid"))
			field(hi, HX_XTRACE, HD_B3TRACE, vs, ve);
		else if (NAME_IS(h, ls, "x-b3-sampled"))
			field(hi, HX_XSAMPLED, HD_B3SAMPLED, vs, ve);
		else if (NAME_IS(h, ls, "x-request-id"))
			field(hi, HX_RID, HD_RID, vs, ve);
		break;
	case 13:
		if (NAME_IS(h, ls, "rootline-wait"))
			field(hi, HX_WAIT, HD_WAIT, vs, ve);
		break;
	case 17:
		if (NAME_IS(h, ls, "transfer-encoding")) {
			// the last one decides (decode_framing)
			hi->off[HX_TE] = vs;
			hi->len[HX_TE] = ve - vs;
			hi->has |= HD_TE;
		}
		else if (NAME_IS(h, ls, "x-b3-parentspanid"))
			hi->has |= HD_B3PARENT;
		break;
	case 20:
		if (NAME_IS(h, ls, "rootline-server-time"))
			field(hi, HX_ST, HD_SERVERTIME, vs, ve);
		break;
	}
	return 0;
}

struct hex_ctx {
	__u8 *h;
	__u32 at;
	__u32 upper_ok;
	__u8 *out;
	__u32 bad;
	__u32 nz;
};

static long hex_cb(__u32 i, struct hex_ctx *x)
{
	int hi = hexval(x->h[(x->at + 2 * i) & HEAD_MASK], x->upper_ok);
	int lo = hexval(x->h[(x->at + 2 * i + 1) & HEAD_MASK], x->upper_ok);
	if (hi < 0 || lo < 0) {
		x->bad = 1;
		return 1;
	}
	__u8 v = (hi << 4) | lo;
	x->out[i & 15] = v;
	x->nz |= v;
	return 0;
}

// hex_into decodes 2*n hex digits at h[at] into out[0:n] (n ≤ 16): 1 if
// valid, -1 if all zeros, 0 if not hex.
static __noinline int hex_into(__u8 *h, __u32 at, __u8 *out, __u32 n, __u32 upper_ok)
{
	if (!h || !out || n > 16)
		return 0;
	struct hex_ctx x = {.h = h, .at = OPQ(at), .upper_ok = OPQ(upper_ok), .out = out, .bad = ZERO, .nz = ZERO};
	bpf_loop(n, hex_cb, &x, 0);
	if (x.bad)
		return 0;
	return x.nz ? 1 : -1;
}

static __always_inline __u64 span_from(__u8 *b)
{
	__u64 v = 0;
	for (int k = 0; k < 8; k++)
		v = (v << 8) | b[k];
	return v;
}

struct num_ctx {
	__u8 *h;
	__u32 at;
	__u32 n;
	__u64 v;
	__u64 best; // rootline-wait: the largest number that starts a list element
	__u32 digits;
	__u32 want;
	__u32 in;
};

static long num_cb(__u32 i, struct num_ctx *x)
{
	if (i >= x->n)
		return 1;
	__u8 c = x->h[(x->at + i) & HEAD_MASK];
	if (c >= '0' && c <= '9' && x->want) {
		x->v = x->v * 10 + (c - '0');
		x->digits++;
		x->in = 1;
		return 0;
	}
	if (x->in) {
		if (x->v > x->best)
			x->best = x->v;
		x->in = 0;
		x->v = 0;
	}
	if (c == ',')
		x->want = 1;
	else if (c != ' ' && c != '\t')
		x->want = 0;
	return 0;
}

// number reads the leading decimal digits of h[at:at+n] (list: the largest
// number starting an element of a comma-separated list).
static __noinline __u64 number(__u8 *h, __u32 at, __u32 n, __u32 list)
{
	if (!h)
		return 0;
	struct num_ctx x = {.h = h, .at = OPQ(at), .n = OPQ(n > 256 ? 256 : n), .v = ZERO, .best = ZERO, .digits = ZERO, .want = 1, .in = ZERO};
	bpf_loop(256, num_cb, &x, 0);
	if (x.in && x.v > x.best)
		x.best = x.v;
	if (!list && x.digits > 19)
		return 0;
	return x.best;
}

// The compact timing form, rl: <server>;<key>=<µs>... (httpstream's
// HeaderCompact): rl_cb reads a value a byte per iteration (the end acts as
// a ';'), strictly, for a value off the grammar is ignored whole, as
// httpstream's ParseTiming refuses it: numbers of 1 to 15 digits, keys of
// 1 to 8 lower-case letters, the waits l, n and r at most once each, other
// keys skipped.
#define RL_MAX 128 // httpstream.MaxCompactTiming
#define RL_L 1
#define RL_N 2
#define RL_R 4

struct rl_ctx {
	__u8 *h;
	__u32 at;
	__u32 end;
	__u64 v;
	__u64 server;
	__u64 wait;   // the largest wait
	__u32 digits;
	__u32 phase;  // 0: in the server time, 1: in a key, 2: in a key's value
	__u32 key;    // RL_* of the key being read (0: another key)
	__u32 klen;
	__u32 seen;   // RL_* of the waits read
	__u32 bad;
	__u32 done;
};

static long rl_cb(__u32 i, struct rl_ctx *x)
{
	int last = x->at >= x->end;
	__u8 c = last ? ';' : x->h[x->at & HEAD_MASK];
	x->at++;
	if (x->phase == 1) {
		if (c >= 'a' && c <= 'z' && x->klen < 8) {
			__u32 k = c == 'l' ? RL_L : c == 'n' ? RL_N : c == 'r' ? RL_R : 0;
			x->key = x->klen == 0 ? k : 0;
			x->klen++;
			return 0;
		}
		if (c == '=' && x->klen > 0 && !last) {
			x->phase = 2;
			return 0;
		}
		x->bad = 1;
		return 1;
	}
	if (c >= '0' && c <= '9') {
		if (x->digits >= 15) {
			x->bad = 1;
			return 1;
		}
		x->v = x->v * 10 + (c - '0');
		x->digits++;
		return 0;
	}
	if (c != ';' || x->digits == 0) {
		x->bad = 1;
		return 1;
	}
	if (x->phase == 0) {
		x->server = x->v;
	} else if (x->key) {
		if (x->seen & x->key) {
			x->bad = 1;
			return 1;
		}
		x->seen |= x->key;
		if (x->v > x->wait)
			x->wait = x->v;
	}
	x->v = 0;
	x->digits = 0;
	x->phase = 1;
	x->key = 0;
	x->klen = 0;
	if (!last)
		return 0;
	x->done = 1;
	return 1;
}

// decode_timing reads a downstream's timing fields, of either form
// (httpstream's ParseTiming): hi->timed when they give a server time, with
// hi->server_us and hi->wait_us, the largest wait they report. The long
// form's values are read leniently (leading digits); a malformed or
// repeated rl, or one whose server time differs from rootline-server-time,
// leaves the response untimed.
__noinline int decode_timing(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb || !hi)
		return 0;
	__u8 *h = hb->b;
	__u64 server = 0, wait = 0;
	__u32 have = 0;
	hi->timed = 0;
	if (hi->has & HD_SERVERTIME) {
		server = number(h, hi->off[HX_ST], hi->len[HX_ST], 0);
		have = 1;
	}
	if (hi->has & HD_WAIT)
		wait = number(h, hi->off[HX_WAIT], hi->len[HX_WAIT], 1);
	if (hi->has & HD_RL) {
		__u32 n = hi->len[HX_RL], at = hi->off[HX_RL];
		if (hi->rl_count != 1 || n > RL_MAX)
			return 0;
		struct rl_ctx x = {.h = h, .at = OPQ(at), .end = OPQ(at + n), .v = ZERO, .server = ZERO, .wait = ZERO,
				   .digits = ZERO, .phase = ZERO, .key = ZERO, .klen = ZERO, .seen = ZERO, .bad = ZERO,
				   .done = ZERO};
		bpf_loop(RL_MAX + 1, rl_cb, &x, 0);
		if (x.bad || !x.done || (have && x.server != server))
			return 0;
		server = x.server;
		have = 1;
		if (x.wait > wait)
			wait = x.wait;
	}
	hi->server_us = server;
	hi->wait_us = wait;
	hi->timed = have;
	return 0;
}

// te_cb finds the last coding of a Transfer-Encoding value h[vs:at),
// walking back a byte per iteration: [s, e) is the last list element that
// is not empty, without whitespace around it (httpstream's lastToken).
struct te_ctx {
	__u8 *h;
	__u32 vs;
	__u32 at;
	__s32 s;
	__s32 e;
};

static long te_cb(__u32 i, struct te_ctx *x)
{
	if (x->at <= x->vs)
		return 1;
	x->at--;
	__u8 c = x->h[x->at & HEAD_MASK];
	if (x->e < 0) {
		if (c == ' ' || c == '\t' || c == ',')
			return 0;
		x->e = x->at + 1;
		x->s = x->at;
		return 0;
	}
	if (c == ',')
		return 1;
	if (c != ' ' && c != '\t')
		x->s = x->at;
	return 0;
}

// decode_framing decides the body's framing as RFC 9112 §6.3 (and
// httpstream's framing): Transfer-Encoding overrides Content-Length, and is
// chunked when its last coding is; otherwise Content-Length (classify has
// read it).
__noinline int decode_framing(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb || !hi)
		return 0;
	if (!(hi->has & HD_TE))
		return 0;
	__u8 *h = hb->b;
	__u32 vs = hi->off[HX_TE];
	struct te_ctx x = {.h = h, .vs = OPQ(vs), .at = OPQ(vs + hi->len[HX_TE]), .s = M1, .e = M1};
	bpf_loop(RD_HEAD, te_cb, &x, 0);
	hi->has &= ~(HD_CL | HD_CL_BAD);
	if (x.e >= 0 && x.e - x.s == 7 && NAME_IS(h, x.s, "chunked"))
		hi->has |= HD_CHUNKED;
	else
		hi->has |= HD_TE_OTHER;
	return 0;
}

// What follows a response head (response_framing), as RFC 9112 §6.3 and
// httpstream's framing decide it.
#define RB_OPAQUE 0  // not followed: the connection passes through untouched
#define RB_INTERIM 1 // a 1xx response: the final one follows
#define RB_NONE 2    // no body
#define RB_CHUNKED 3
#define RB_LENGTH 4  // hi->cl bytes
#define RB_CLOSE 5   // until the connection closes

// response_framing decides how a decoded response head's body is delimited;
// head_req: it answers a HEAD request. A response that has no body (1xx,
// 204, 304, to HEAD) has none whatever its Content-Length says.
static __always_inline int response_framing(struct hinfo *hi, int head_req)
{
	if (hi->has & HD_BAD)
		return RB_OPAQUE;
	if (hi->status >= 100 && hi->status < 200)
		return RB_INTERIM;
	if (head_req || hi->status == 204 || hi->status == 304)
		return RB_NONE;
	if (hi->has & HD_CHUNKED)
		return RB_CHUNKED;
	if (hi->has & HD_CL_BAD)
		return RB_OPAQUE;
	if (hi->has & HD_CL)
		return hi->cl == 0 ? RB_NONE : RB_LENGTH;
	return RB_CLOSE;
}

// first_line_ok checks a complete first line h[0:n) (n counts its '\n'):
// a request line "METHOD SP target SP HTTP/1.x" or a status line
// "HTTP/1.x NNN ...".
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

// has_byte is nonzero when a byte of w is c (exact for "any", RFC-free
// bit trick; the caller checks the bytes of a flagged word one by one).
static __always_inline __u64 has_byte(__u64 w, __u8 c)
{
	__u64 t = w ^ (ONES * c);
	return (t - ONES) & ~t & HIGHS;
}

struct ctl_ctx {
	__u8 *h;
	__u32 n;
	__u32 bad;
};

// ctl_cb checks 8 bytes: a byte below 0x20 or 0x7f (DEL) is a control
// byte. (w - 0x20..) & ~w & 0x80.. is nonzero exactly when a byte of w is
// below 0x20.
static long ctl_cb(__u32 i, struct ctl_ctx *x)
{
	__u32 k = 8 * i;
	if (k >= x->n)
		return 1;
	__u64 w = *(__u64 *)(x->h + (k & HEAD_MASK));
	if (x->n - k < 8)
		w |= ~0ULL << (8 * (x->n - k)); // past the line: not control bytes
	if (((w - 0x2020202020202020ULL) & ~w & HIGHS) || has_byte(w, 0x7f)) {
		x->bad = 1;
		return 1;
	}
	return 0;
}

static __always_inline int first_line_ok(__u8 *h, __u32 n, int request, __u8 *is_head);

// first_line checks a complete first line hb[0:n) (n counts its '\n'): a
// request line "METHOD SP target SP HTTP/1.x" or a status line "HTTP/1.x
// NNN ...". Returns 0 if it is neither, 1 if fine, 3 for a HEAD request. A
// global function: verified once, not at every line of every head.
__noinline int first_line(struct head_buf *hb, __u32 n, __u32 request)
{
	if (!hb)
		return 0;
	__u8 is_head = 0;
	int ok = first_line_ok(hb->b, n, request, &is_head);
	return ok ? 1 | (is_head << 1) : 0;
}

static __always_inline int first_line_ok(__u8 *h, __u32 n, int request, __u8 *is_head)
{
	if (n < 2)
		return 0;
	// No control bytes before the line break.
	struct ctl_ctx x = {.h = h, .n = OPQ(n - 1), .bad = ZERO};
	if (h[(n - 2) & HEAD_MASK] == '\r')
		x.n--;
	bpf_loop(RD_HEAD / 8 + 1, ctl_cb, &x, 0);
	if (x.bad)
		return 0;
	__u32 e = n - 1;
	if (h[(e - 1) & HEAD_MASK] == '\r')
		e--;
	if (!request)
		return e >= 12 && name_is(h, 0, "http/1.", 7) && h[8 & HEAD_MASK] == ' ';
	if (e < 14)
		return 0;
	// method: upper-case letters up to the first space
	__u32 m = 0;
	for (__u32 k = 0; k < 24; k++) {
		__u8 c = h[k & HEAD_MASK];
		if (c == ' ') {
			m = k;
			break;
		}
		if (!(c >= 'A' && c <= 'Z') && c != '-' && c != '_')
			return 0;
	}
	if (m == 0)
		return 0;
	if (m == 4 && h[0] == 'H' && h[1] == 'E' && h[2] == 'A' && h[3] == 'D')
		*is_head = 1;
	// " HTTP/1.0" or " HTTP/1.1" at the end
	if (!name_is(h, e - 9, " http/1.", 8))
		return 0;
	__u8 v = h[(e - 1) & HEAD_MASK];
	return v == '0' || v == '1';
}

struct copy_ctx {
	__u8 *dst;
	__u32 doff;
	__u8 *src;
	__u32 soff;
	__u32 n;
};

// copy_in_cb copies scratch data (SCR bytes) into a head buffer.
static long copy_in_cb(__u32 i, struct copy_ctx *c)
{
	if (i >= c->n)
		return 1;
	c->dst[(c->doff + i) & HEAD_MASK] = c->src[(c->soff + i) & SCR_MASK];
	return 0;
}

//
// A head is copied into its connection's head buffer as it arrives (at
// most RD_HEAD bytes are kept), and scanned there for line breaks eight
// bytes at a time; each complete line is classified at once, so the head
// is parsed by the time its end is found. Bytes past the kept part are
// only scanned for the end.

// Finding the next byte c in buf[pos:end): a word per iteration.
struct find_ctx {
	__u8 *buf;
	__u32 pos;
	__u32 end;
	__u32 c;
	__s32 at; // where it is (-1: not there)
};

static __always_inline long find_word(struct find_ctx *x, __u32 k, __u64 w)
{
	if (!has_byte(w, x->c))
		return 0;
	for (int j = 0; j < 8; j++) {
		if (k + j < x->end && x->buf[(k + j) & HEAD_MASK] == x->c) {
			x->at = k + j;
			return 1;
		}
	}
	return 0;
}

static long find_head_cb(__u32 i, struct find_ctx *x)
{
	__u32 k = x->pos + 8 * i;
	if (k >= x->end)
		return 1;
	return find_word(x, k, *(__u64 *)(x->buf + (k & HEAD_MASK)));
}

static long find_data_cb(__u32 i, struct find_ctx *x)
{
	__u32 k = x->pos + 8 * i;
	if (k >= x->end)
		return 1;
	__u64 w = *(__u64 *)(x->buf + (k & SCR_MASK));
	if (!has_byte(w, x->c))
		return 0;
	for (int j = 0; j < 8; j++) {
		if (k + j < x->end && x->buf[(k + j) & SCR_MASK] == x->c) {
			x->at = k + j;
			return 1;
		}
	}
	return 0;
}

// find returns the index of the first c in a head buffer's [pos, end)
// (data: in scratch data instead), or -1.
static __always_inline __s32 find(__u8 *buf, __u32 pos, __u32 end, __u8 c, int data)
{
	struct find_ctx x = {.buf = buf, .pos = OPQ(pos), .end = OPQ(end), .c = c, .at = M1};
	if (data)
		bpf_loop(SCR / 8 + 1, find_data_cb, &x, 0);
	else
		bpf_loop(RD_HEAD / 8 + 1, find_head_cb, &x, 0);
	return x.at;
}

// trim_cb drops one whitespace byte (SP, HTAB) from either end of a field
// value h[vs:ve), or stops when there is none.
struct trim_ctx {
	__u8 *h;
	__u32 vs;
	__u32 ve;
};

static long trim_cb(__u32 i, struct trim_ctx *x)
{
	__u8 a = x->h[x->vs & HEAD_MASK], b = x->h[(x->ve - 1) & HEAD_MASK];
	if (x->vs < x->ve && (a == ' ' || a == '\t')) {
		x->vs++;
		return 0;
	}
	if (x->ve > x->vs && (b == ' ' || b == '\t')) {
		x->ve--;
		return 0;
	}
	return 1;
}

// token_cb checks that a field name h[at:end) is a token (RFC 9110
// §5.6.2), eight bytes per iteration: no byte below 0x21 or above 0x7e, and
// none of the delimiters "(),/:;<=>?@[\]{} (bytes past the name count as
// 'a').
struct token_ctx {
	__u8 *h;
	__u32 at;
	__u32 end;
	__u32 bad;
};

static long token_cb(__u32 i, struct token_ctx *x)
{
	if (x->at >= x->end)
		return 1;
	__u64 w = *(__u64 *)(x->h + (x->at & HEAD_MASK));
	__u32 n = x->end - x->at;
	if (n < 8) {
		__u64 keep = (1ULL << (8 * n)) - 1;
		w = (w & keep) | (0x6161616161616161ULL & ~keep);
	}
	x->at += 8;
	if ((w & HIGHS) || ((w - 0x2121212121212121ULL) & ~w & HIGHS) || has_byte(w, 0x7f) ||
	    has_byte(w, '"') || has_byte(w, '(') || has_byte(w, ')') || has_byte(w, ',') ||
	    has_byte(w, '/') || has_byte(w, ':') || has_byte(w, ';') || has_byte(w, '<') ||
	    has_byte(w, '=') || has_byte(w, '>') || has_byte(w, '?') || has_byte(w, '@') ||
	    has_byte(w, '[') || has_byte(w, '\\') || has_byte(w, ']') || has_byte(w, '{') ||
	    has_byte(w, '}')) {
		x->bad = 1;
		return 1;
	}
	return 0;
}

// field_line classifies the field line h[ls:e) (without its line break).
__noinline int field_line(struct head_buf *hb, struct hinfo *hi, __u32 ls, __u32 e)
{
	if (!hb || !hi)
		return 0;
	__u8 *h = hb->b;
	__s32 colon = find(h, ls, e, ':', 0);
	// One loop state at a time, in one stack slot: the call chain above
	// leaves little of the 512 bytes.
	union {
		struct token_ctx tk;
		struct trim_ctx t;
		struct cl_ctx cl;
	} u;
	u.tk = (struct token_ctx){.h = h, .at = OPQ(ls), .end = colon, .bad = ZERO};
	if (colon > (__s32)ls)
		bpf_loop(RD_HEAD, token_cb, &u.tk, 0);
	if (colon <= (__s32)ls || u.tk.bad) {
		// no name and colon, an obsolete folded line, or a name that is
		// not a token (space before the colon): not something to add
		// lines to
		hi->has |= HD_BAD;
		return 0;
	}
	u.t = (struct trim_ctx){.h = h, .vs = OPQ(colon + 1), .ve = OPQ(e)};
	bpf_loop(RD_HEAD, trim_cb, &u.t, 0);
	__u32 vs = u.t.vs, ve = u.t.ve;
	classify(hb, hi, ls, colon, (__u64)vs << 32 | ve);
	// Content-Length is read here rather than in classify: its loop there
	// would nest one call too deep for the verifier.
	if (colon - ls == 14 && NAME_IS(h, ls, "content-length")) {
		u.cl = (struct cl_ctx){.h = h, .at = OPQ(vs), .end = ve, .v = ZERO, .digits = ZERO, .phase = ZERO,
				       .bad = ZERO, .cl = hi->cl, .seen = (hi->has & HD_CL) ? 1 : 0, .got = ZERO};
		bpf_loop(RD_HEAD + 1, cl_cb, &u.cl, 0);
		if (u.cl.bad)
			hi->has |= HD_CL_BAD;
		hi->cl = u.cl.cl;
		hi->has |= HD_CL;
	}
	return 0;
}

// status_line records a status line's code: "HTTP/1.x NNN".
static __always_inline void status_line(__u8 *h, struct hinfo *hi, __u32 e)
{
	if (e < 12 || h[8] != ' ')
		return;
	__u8 a = h[9], b = h[10], c = h[11];
	if (a >= '0' && a <= '9' && b >= '0' && b <= '9' && c >= '0' && c <= '9')
		hi->status = (a - '0') * 100 + (b - '0') * 10 + (c - '0');
}

// The lines of the kept part of a head, one per iteration.
struct lines_ctx {
	struct conn *c;
	struct half *h;
	struct head_buf *hb;
	__u32 end;     // kept bytes to scan up to
	__u32 pos;     // where to look for the next line break
	__s32 eoh;     // head offset after the head's final line break (-1: not yet)
	__s32 brk;     // head offset where the final line break starts
	__u32 bad;
	__u32 request;
};

static long lines_cb(__u32 i, struct lines_ctx *x)
{
	struct half *h = x->h;
	__u8 *hb = x->hb->b;
	__s32 p = find(hb, x->pos, x->end, '\n', 0);
	if (p < 0)
		return 1;
	__u32 P = p, ls = h->ls;
	x->pos = P + 1;
	// the line is h[ls:e), e before a CR
	__u32 e = P;
	if (P > ls && hb[(P - 1) & HEAD_MASK] == '\r')
		e = P - 1;
	h->ls = P + 1;
	if (h->lines == 0) {
		h->lines = 1;
		int fl = first_line(x->hb, P + 1, x->request);
		if (!fl) {
			x->bad = 1;
			return 1;
		}
		if (x->request)
			x->c->head_req = fl >> 1;
		else
			status_line(hb, &h->hi, e);
		return 0;
	}
	h->lines++;
	if (e == ls) {
		// the empty line: the head ends here
		x->eoh = P + 1;
		x->brk = P > ls ? P - 1 : P;
		return 1;
	}
	field_line(x->hb, &h->hi, ls, e);
	return 0;
}

// scan_kept scans the kept head bytes [from, to) of h: -1 when the head
// goes on, -2 when it is not HTTP/1.x, else its end and final line break
// (head offsets) as end << 32 | brk.
static __noinline __s64 scan_kept(struct conn *c, struct half *h, struct head_buf *hb, __u32 from, __u64 to_req)
{
	if (!c || !h || !hb)
		return -2;
	__u32 to = (__u32)to_req;
	struct lines_ctx lx = {.c = c, .h = h, .hb = hb, .end = OPQ(to), .pos = OPQ(from),
			       .eoh = M1, .brk = M1, .bad = ZERO, .request = OPQ(to_req >> 32)};
	bpf_loop(RD_HEAD, lines_cb, &lx, 0);
	if (lx.bad)
		return -2;
	if (lx.eoh < 0)
		return -1;
	return (__s64)((__u64)(__u32)lx.eoh << 32 | (__u32)lx.brk);
}
