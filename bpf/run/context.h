// Trace context: the context of a request head (traceparent with its
// tracestate, b3, X-B3-*, x-request-id; the same rules as httpstream's
// ExtractContext) and the text of the lines inserted into heads. Pure, like
// run/parse.h.
#pragma once

#include "run/parse.h"

// The trace context of a request head: W3C first (exactly one
// traceparent), then the b3 header, then X-B3-* (httpstream.ExtractContext).
// Three functions, called in turn until one finds a context, each small
// enough for the stack the call chain above it leaves.

// decode_tp reads traceparent: VV-{32 hex}-{16 hex}-FF, lower case.
__noinline int decode_tp(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb || !hi || !(hi->has & HD_TRACEPARENT) || hi->tp_count != 1)
		return 0;
	__u8 *h = hb->b;
	__u32 vs = hi->off[HX_TP], vl = hi->len[HX_TP];
	if (vl < 55 || h[(vs + 2) & HEAD_MASK] != '-' || h[(vs + 35) & HEAD_MASK] != '-' ||
	    h[(vs + 52) & HEAD_MASK] != '-' || (vl > 55 && h[(vs + 55) & HEAD_MASK] != '-'))
		return 0;
	int v1 = hexval(h[vs & HEAD_MASK], 0), v2 = hexval(h[(vs + 1) & HEAD_MASK], 0);
	int f1 = hexval(h[(vs + 53) & HEAD_MASK], 0), f2 = hexval(h[(vs + 54) & HEAD_MASK], 0);
	if (v1 < 0 || v2 < 0 || f1 < 0 || f2 < 0)
		return 0;
	int ver = v1 * 16 + v2, fl = f1 * 16 + f2;
	if (ver == 0xff || (ver == 0 && vl != 55))
		return 0;
	if (hex_into(h, vs + 3, hi->trace, 16, 0) != 1 || hex_into(h, vs + 36, hi->tmp, 8, 0) != 1)
		return 0;
	hi->span = span_from(hi->tmp);
	hi->sampled = fl & 1;
	hi->ctx_ok = 1;
	hi->w3c = 1;
	return 1;
}

// decode_b3 reads b3: {trace}-{span}[-{sampling}[-{parent}]].
__noinline int decode_b3(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb || !hi || !(hi->has & HD_B3))
		return 0;
	__u8 *h = hb->b;
	__u32 vs = hi->off[HX_B3], ve = vs + hi->len[HX_B3], tl;
	if (ve >= vs + 49 && h[(vs + 32) & HEAD_MASK] == '-')
		tl = 32;
	else if (ve >= vs + 33 && h[(vs + 16) & HEAD_MASK] == '-')
		tl = 16;
	else
		return 0;
	__builtin_memset(hi->trace, 0, 16);
	if ((tl == 32 ? hex_into(h, vs, hi->trace, 16, 1) : hex_into(h, vs, hi->trace + 8, 8, 1)) != 1)
		return 0;
	__u32 ss = vs + tl + 1;
	if (hex_into(h, ss, hi->tmp, 8, 1) != 1)
		return 0;
	hi->span = span_from(hi->tmp);
	hi->sampled = 1;
	__u32 e = ss + 16;
	if (e < ve) {
		// "-" and one sampling character, then nothing or "-" and a
		// parent span of 16 hex digits, not all zero
		if (h[e & HEAD_MASK] != '-' || e + 2 > ve || (e + 2 < ve && h[(e + 2) & HEAD_MASK] != '-'))
			return 0;
		__u8 sc = h[(e + 1) & HEAD_MASK];
		if (sc == '0')
			hi->sampled = 0;
		else if (sc != '1' && sc != 'd')
			return 0;
		if (e + 2 < ve && (ve != e + 19 || hex_into(h, e + 3, hi->tmp, 8, 1) != 1))
			return 0;
	}
	hi->ctx_ok = 1;
	return 1;
}

// xb3_unsampled: the head has X-B3-Sampled: 0 (or false).
static __always_inline int xb3_unsampled(__u8 *h, struct hinfo *hi)
{
	if (!(hi->has & HD_B3SAMPLED))
		return 0;
	__u32 o = hi->off[HX_XSAMPLED], l = hi->len[HX_XSAMPLED];
	return (l == 1 && h[o & HEAD_MASK] == '0') || (l == 5 && NAME_IS(h, o, "false"));
}

// sampling_denied: a head without a context says not to sample (`b3: 0`, or
// X-B3-Sampled 0 without ids), as httpstream.SamplingDenied.
static __always_inline int sampling_denied(struct head_buf *hb, struct hinfo *hi)
{
	__u8 *h = hb->b;
	if (hi->has & HD_B3)
		return hi->len[HX_B3] == 1 && h[hi->off[HX_B3] & HEAD_MASK] == '0';
	return !(hi->has & (HD_B3TRACE | HD_B3SPAN)) && xb3_unsampled(h, hi);
}

// decode_xb3 reads X-B3-TraceId, X-B3-SpanId, X-B3-Sampled and X-B3-Flags.
__noinline int decode_xb3(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb || !hi || !(hi->has & HD_B3TRACE) || !(hi->has & HD_B3SPAN) || hi->len[HX_XSPAN] != 16)
		return 0;
	__u8 *h = hb->b;
	__u32 vl = hi->len[HX_XTRACE];
	__builtin_memset(hi->trace, 0, 16);
	if (vl == 32) {
		if (hex_into(h, hi->off[HX_XTRACE], hi->trace, 16, 1) != 1)
			return 0;
	} else if (vl != 16 || hex_into(h, hi->off[HX_XTRACE], hi->trace + 8, 8, 1) != 1) {
		return 0;
	}
	if (hex_into(h, hi->off[HX_XSPAN], hi->tmp, 8, 1) != 1)
		return 0;
	hi->span = span_from(hi->tmp);
	hi->sampled = !xb3_unsampled(h, hi);
	if ((hi->has & HD_B3FLAGS) && hi->len[HX_XFLAGS] == 1 && h[hi->off[HX_XFLAGS] & HEAD_MASK] == '1')
		hi->sampled = 1;
	hi->ctx_ok = 1;
	return 1;
}

//
// decode_ts combines a request's tracestate fields into one list and
// writes what is propagated into r->ts, as httpstream's traceState does
// (its comment has the rules): members checked as they are read, a byte
// per iteration; then duplicates; then the cut to RD_TS by whole members.

#define FNV_OFFSET 14695981039346656037ULL
#define FNV_PRIME 1099511628211ULL

static __always_inline int ts_lower(__u8 c) { return c >= 'a' && c <= 'z'; }
static __always_inline int ts_digit(__u8 c) { return c >= '0' && c <= '9'; }
static __always_inline int ts_keychar(__u8 c)
{
	return ts_lower(c) || ts_digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

static __always_inline void ts_reset(struct ts_scan *t)
{
	t->ms = -1;
	t->eq = -1;
	t->at = -1;
	t->tab = -1;
	t->ats = 0;
	t->digit = 0;
	t->end = 0;
	t->hash = FNV_OFFSET;
}

// ts_member_end checks the member just read and records it.
static __always_inline void ts_member_end(struct ts_scan *t)
{
	if (t->ms < 0)
		return; // empty or whitespace only: allowed, dropped
	__s32 ms = t->ms, eq = t->eq, end = t->end;
	if (eq < 0 || eq == ms || end <= eq + 1 || end - (eq + 1) > 256 || (t->tab >= 0 && t->tab < end)) {
		t->bad = 1;
		return;
	}
	__u32 klen = eq - ms;
	if (t->ats == 0) {
		if (klen > 256 || t->digit)
			t->bad = 1;
	} else if (t->ats == 1) {
		__u32 tenant = t->at - ms, system = eq - t->at - 1;
		if (tenant < 1 || tenant > 241 || system < 1 || system > 14)
			t->bad = 1;
	} else {
		t->bad = 1;
	}
	if (t->bad)
		return;
	if (t->n >= TS_MEMBERS) {
		t->bad = 1;
		return;
	}
	struct ts_member *m = &t->m[t->n & (TS_MEMBERS - 1)];
	m->off = ms;
	m->len = end - ms;
	m->klen = klen;
	m->keep = 1;
	m->hash = t->hash;
	t->n++;
	ts_reset(t);
}

struct ts_ctx {
	__u8 *h;
	struct hinfo *hi;
	struct ts_scan *t;
};

static long ts_cb(__u32 i, struct ts_ctx *x)
{
	struct ts_scan *t = x->t;
	struct hinfo *hi = x->hi;
	__u32 f = t->f;
	if (f >= hi->ts_fields || f >= TS_FIELDS)
		return 1;
	if (t->p >= hi->ts_len[f & (TS_FIELDS - 1)]) {
		// the end of a field ends a member (fields join with commas)
		ts_member_end(t);
		t->f = f + 1;
		t->p = 0;
		return t->bad ? 1 : 0;
	}
	__u32 at = hi->ts_off[f & (TS_FIELDS - 1)] + t->p;
	t->p++;
	__u8 c = x->h[at & HEAD_MASK];
	if (c == ',') {
		ts_member_end(t);
		return t->bad ? 1 : 0;
	}
	int ows = c == ' ' || c == '\t';
	if (t->ms < 0) {
		if (ows)
			return 0;
		t->ms = at;
	}
	if ((c < 0x20 && c != '\t') || c > 0x7e) {
		t->bad = 1;
		return 1;
	}
	if (!ows)
		t->end = at + 1;
	if (t->eq < 0) {
		// the key
		if (c == '=') {
			t->eq = at;
			return 0;
		}
		if (c == '@') {
			t->ats++;
			t->at = at;
		} else if (!ts_keychar(c) || (at == (__u32)t->ms && !ts_lower(c) && !ts_digit(c)) ||
			   (t->ats && at == (__u32)t->at + 1 && !ts_lower(c))) {
			t->bad = 1;
			return 1;
		}
		if (at == (__u32)t->ms && ts_digit(c))
			t->digit = 1;
		t->hash = (t->hash ^ c) * FNV_PRIME;
		return 0;
	}
	// the value
	if (c == '=') {
		t->bad = 1;
		return 1;
	}
	if (c == '\t' && t->tab < 0)
		t->tab = at;
	return 0;
}

// Duplicate keys: each pair of members, compared byte by byte when their
// keys' lengths and hashes agree.
struct dup_ctx {
	__u8 *h;
	struct ts_scan *t;
	__u32 q;   // the pair: i = q / TS_MEMBERS, j = q % TS_MEMBERS
	__u32 b;   // the byte of the keys being compared
	__u32 dup;
};

static long dup_cb(__u32 k, struct dup_ctx *x)
{
	struct ts_scan *t = x->t;
	__u32 q = x->q, i = q / TS_MEMBERS, j = q % TS_MEMBERS;
	if (i >= t->n)
		return 1;
	struct ts_member *a = &t->m[i & (TS_MEMBERS - 1)], *b = &t->m[j & (TS_MEMBERS - 1)];
	if (j <= i || j >= t->n || a->klen != b->klen || a->hash != b->hash) {
		x->q = q + 1;
		x->b = 0;
		return 0;
	}
	if (x->b >= a->klen) {
		x->dup = 1;
		return 1;
	}
	if (x->h[(a->off + x->b) & HEAD_MASK] != x->h[(b->off + x->b) & HEAD_MASK]) {
		x->q = q + 1;
		x->b = 0;
		return 0;
	}
	x->b++;
	return 0;
}

// The members kept, copied out with commas between them.
struct ts_out {
	__u8 *h;
	struct ts_scan *t;
	__u8 *dst;
	__u32 k;     // the member
	__u32 b;     // its byte
	__u32 o;     // bytes written
	__u32 comma; // a comma goes before the next member's first byte
};

static long ts_out_cb(__u32 i, struct ts_out *x)
{
	struct ts_scan *t = x->t;
	if (x->k >= t->n || x->k >= TS_MEMBERS || x->o >= RD_TS)
		return 1;
	struct ts_member *m = &t->m[x->k & (TS_MEMBERS - 1)];
	if (!m->keep || x->b >= m->len) {
		if (m->keep)
			x->comma = 1;
		x->k++;
		x->b = 0;
		return 0;
	}
	if (x->b == 0 && x->comma) {
		x->dst[x->o & (RD_TS - 1)] = ',';
		x->o++;
		x->comma = 0;
		return 0;
	}
	x->dst[x->o & (RD_TS - 1)] = x->h[(m->off + x->b) & HEAD_MASK];
	x->o++;
	x->b++;
	return 0;
}

// Sums the members' lengths (cut: dropping those over 128 bytes first),
// then drops members from the end until the list fits.
struct cut_ctx {
	struct ts_scan *t;
	__u32 n;
	__u32 total; // bytes of the members kept, without commas
	__u32 kept;
	__u32 cut;
};

static long sum_cb(__u32 i, struct cut_ctx *x)
{
	if (i >= x->n)
		return 1;
	struct ts_member *m = &x->t->m[i & (TS_MEMBERS - 1)];
	if (x->cut && m->len > 128)
		m->keep = 0;
	if (m->keep) {
		x->total += m->len;
		x->kept++;
	}
	return 0;
}

static long cut_cb(__u32 i, struct cut_ctx *x)
{
	if (x->kept == 0 || x->total + x->kept - 1 <= RD_TS || i >= x->n)
		return 1;
	struct ts_member *m = &x->t->m[(x->n - 1 - i) & (TS_MEMBERS - 1)];
	if (m->keep) {
		m->keep = 0;
		x->total -= m->len;
		x->kept--;
	}
	return 0;
}

// decode_ts returns the length of the tracestate written into r->ts (0:
// none to propagate).
__noinline int decode_ts(struct head_buf *hb, struct hinfo *hi, struct ts_scan *t, struct req *r)
{
	if (!hb || !hi || !t || !r)
		return 0;
	if (hi->ts_fields == 0 || hi->ts_fields > TS_FIELDS)
		return 0;
	t->f = 0;
	t->p = 0;
	t->n = 0;
	t->bad = 0;
	ts_reset(t);
	struct ts_ctx x = {.h = hb->b, .hi = hi, .t = t};
	bpf_loop(RD_HEAD + TS_FIELDS + 1, ts_cb, &x, 0);
	if (t->bad || t->n == 0)
		return 0;
	struct dup_ctx d = {.h = hb->b, .t = t, .q = ZERO, .b = ZERO, .dup = ZERO};
	bpf_loop(TS_MEMBERS * TS_MEMBERS + TS_MEMBERS * TS_MEMBERS / 2 * 257, dup_cb, &d, 0);
	if (d.dup)
		return 0;
	// The cut: members over 128 bytes first, then from the end.
	struct cut_ctx k = {.t = t, .n = OPQ(t->n), .total = ZERO, .kept = ZERO, .cut = ZERO};
	bpf_loop(TS_MEMBERS, sum_cb, &k, 0);
	if (k.total + k.kept - 1 > RD_TS) {
		k.cut = 1;
		k.total = 0;
		k.kept = 0;
		bpf_loop(TS_MEMBERS, sum_cb, &k, 0);
		bpf_loop(TS_MEMBERS, cut_cb, &k, 0);
	}
	struct ts_out o = {.h = hb->b, .t = t, .dst = r->ts, .k = ZERO, .b = ZERO, .o = ZERO, .comma = ZERO};
	bpf_loop(RD_TS + 2 * TS_MEMBERS + 2, ts_out_cb, &o, 0);
	return o.o;
}

struct text {
	__u8 *b;
	__u32 n;
};

// put writes n bytes of s, eight at a time: for a literal, each word is a
// constant the compiler folds into one store. The bytes past n in the last
// word are overwritten by what follows (text has 8 bytes of slack).
static __always_inline void put(struct text *t, const char *s, __u32 n)
{
#pragma unroll
	for (__u32 k = 0; k < n; k += 8) {
		__u64 w = 0;
		__builtin_memcpy(&w, s + k, n - k < 8 ? n - k : 8);
		*(__u64 *)(t->b + ((t->n + k) & TEXT_MASK)) = w;
	}
	t->n += n;
}
#define PUT(t, lit) put((t), lit, sizeof(lit) - 1)

// hex8 spells v as 8 lower-case hex digits, most significant first, in
// the bytes of a little-endian u64: no branch and no loop, so that writing
// ids costs the verifier nothing per digit.
static __always_inline __u64 hex8(__u32 v)
{
	__u64 z = __builtin_bswap32(v);
	z = (z | (z << 16)) & 0x0000FFFF0000FFFFULL;
	z = (z | (z << 8)) & 0x00FF00FF00FF00FFULL;
	__u64 w = ((z >> 4) & 0x000F000F000F000FULL) | ((z & 0x000F000F000F000FULL) << 8);
	__u64 letters = ((w + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
	return w + 0x3030303030303030ULL + letters * 39;
}

static __always_inline void put8(struct text *t, __u64 w)
{
	*(__u64 *)(t->b + (t->n & TEXT_MASK)) = w;
	t->n += 8;
}

// put_hex writes the n bytes at v (n a multiple of 4) in hex.
static __always_inline void put_hex(struct text *t, __u8 *v, __u32 n)
{
	for (__u32 k = 0; k < n; k += 4)
		put8(t, hex8((__u32)v[k] << 24 | (__u32)v[k + 1] << 16 | (__u32)v[k + 2] << 8 | v[k + 3]));
}

static __always_inline void put_span(struct text *t, __u64 s)
{
	put8(t, hex8(s >> 32));
	put8(t, hex8((__u32)s));
}

struct num_put {
	__u8 *b;
	__u32 at;  // where the last digit goes
	__u64 v;
	__u32 n;   // digits written
};

static long put_num_cb(__u32 i, struct num_put *x)
{
	x->b[(x->at - i) & TEXT_MASK] = '0' + x->v % 10;
	x->v /= 10;
	x->n = i + 1;
	return x->v == 0;
}

static long digits_cb(__u32 i, __u64 *v)
{
	*v /= 10;
	return *v == 0;
}

// put_num writes v in decimal.
static __always_inline void put_num(struct text *t, __u64 v)
{
	__u64 w = v;
	__u32 n = bpf_loop(20, digits_cb, &w, 0); // iterations made: the digit count
	struct num_put x = {.b = t->b, .at = OPQ(t->n + n - 1), .v = OPQ(v), .n = ZERO};
	bpf_loop(20, put_num_cb, &x, 0);
	t->n += x.n;
}

// A header value copied into a request's state (tracestate, x-request-id),
// checked to be printable so that it can be written back into a header.
struct val_ctx {
	__u8 *src; // a head
	__u32 off;
	__u32 n;
	__u8 *dst;
	__u32 bad;
};

static long copy_rid_cb(__u32 i, struct val_ctx *v)
{
	if (i >= v->n)
		return 1;
	__u8 ch = v->src[(v->off + i) & HEAD_MASK];
	if (ch < 0x20 || ch > 0x7e)
		v->bad = 1;
	v->dst[i & (RD_RID - 1)] = ch;
	return 0;
}

// decode_rid copies the request's x-request-id into r->rid and returns its
// length: 0 when there is none, or it is longer than RD_RID or not printable
// ASCII (it must be safe to write back into a header).
__noinline int decode_rid(struct head_buf *hb, struct hinfo *hi, struct req *r)
{
	if (!hb || !hi || !r)
		return 0;
	__u32 n = hi->len[HX_RID];
	if (!(hi->has & HD_RID) || n == 0 || n > RD_RID)
		return 0;
	struct val_ctx v = {.src = hb->b, .off = OPQ(hi->off[HX_RID]), .n = OPQ(n), .dst = r->rid, .bad = ZERO};
	bpf_loop(RD_RID, copy_rid_cb, &v, 0);
	return v.bad ? 0 : n;
}

// A request's tracestate or x-request-id written into inserted lines.
struct put_ctx {
	__u8 *src;
	__u32 n;
	__u8 *text;
	__u32 at;
};

static long put_ts_cb(__u32 i, struct put_ctx *p)
{
	if (i >= p->n)
		return 1;
	p->text[(p->at + i) & TEXT_MASK] = p->src[i & (RD_TS - 1)];
	return 0;
}

static long put_rid_cb(__u32 i, struct put_ctx *p)
{
	if (i >= p->n)
		return 1;
	p->text[(p->at + i) & TEXT_MASK] = p->src[i & (RD_RID - 1)];
	return 0;
}

// put_uuid writes the trace id as a version 4 UUID (httpstream.RequestIDFor):
// 8-4-4-4-12 hex digits. put8 writes 8 digits and keeps n of them; the
// rest is overwritten by what follows.
static __always_inline void put_uuid(struct text *t, __u8 *tr)
{
	__u8 u6 = (tr[6] & 0x0f) | 0x40, u8v = (tr[8] & 0x3f) | 0x80;
	put8(t, hex8((__u32)tr[0] << 24 | (__u32)tr[1] << 16 | (__u32)tr[2] << 8 | tr[3]));
	PUT(t, "-");
	put8(t, hex8((__u32)tr[4] << 24 | (__u32)tr[5] << 16));
	t->n -= 4;
	PUT(t, "-");
	put8(t, hex8((__u32)u6 << 24 | (__u32)tr[7] << 16));
	t->n -= 4;
	PUT(t, "-");
	put8(t, hex8((__u32)u8v << 24 | (__u32)tr[9] << 16));
	t->n -= 4;
	PUT(t, "-");
	put8(t, hex8((__u32)tr[10] << 24 | (__u32)tr[11] << 16 | (__u32)tr[12] << 8 | tr[13]));
	put8(t, hex8((__u32)tr[14] << 24 | (__u32)tr[15] << 16));
	t->n -= 4;
}
