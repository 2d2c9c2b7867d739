// The in-kernel datapath of `rootline run`: trace context propagation and
// the Mirage wait headers for an unmodified service, with no stop of the
// service on its request path (Rbinder, "Transparent Tracing of Microservice-based Applications" §3.2, no ptrace).
//
// - sock_ops (attached to the run's cgroup v2) sees every TCP connection of
//   the service established: accepted ones are inbound, connected ones
//   outbound. Each goes into a sockhash (so that the sk_msg program sees its
//   writes) and gets a struct conn, keyed by the address of its struct sock.
// - The sock_recv_length tracepoint (every read, recvfrom, readv and recvmsg
//   on a socket) follows what the service reads: request heads on
//   inbound connections (the caller's trace context: traceparent, b3,
//   x-b3-*, x-request-id, tracestate), response heads on outbound ones (the
//   downstream's timing fields: rl, or rootline-server-time and
//   rootline-wait).
// - The sk_msg program sees what the service writes, before it is queued:
//   a request head on an outbound connection gets traceparent, b3, x-b3-*
//   and x-request-id lines for the request the writing thread (or Go
//   goroutine) services; a response head on an inbound connection gets the
//   timing line rl (or, with rd_timing, rootline-server-time and
//   rootline-wait). bpf_msg_push_data inserts the
//   lines before the head's final line break: the application's buffer is
//   untouched and its write returns its own byte count.
// - Go: goroutines move between threads, so requests are bound to the
//   goroutine (R14 in Go's internal ABI on amd64, intact at the syscall
//   instruction); uprobes on net/http.(*persistConn).roundTrip and
//   net/http.(*Request).write hand a request over to the writeLoop goroutine
//   that writes it.
// - Events go to user space through a ring buffer, which builds the spans;
//   a full ring loses spans (counted), never propagation.
//
// HTTP/1.x framing is followed per direction: heads are scanned byte by
// byte, bodies skipped by their Content-Length. A body of unknown length on
// a request (chunked) lasts until the other side starts a head; on a
// response, until "0\r\n\r\n" ends a read or write, or the connection
// closes. Anything that does not start like HTTP/1.x makes the connection
// opaque: it passes untouched.
//
// Build: go generate ./internal/run/datapath/ (bpf2go).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "run_datapath.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Build with -DRD_DEBUG to trace the parsers to /sys/kernel/tracing/trace.
#ifdef RD_DEBUG
#define dbg(fmt, ...) bpf_printk(fmt, ##__VA_ARGS__)
#else
#define dbg(fmt, ...) \
	do {          \
	} while (0)
#endif

// The run's cgroup v2 id: only its processes are followed; its slot in the
// shared datapath (rd_rings, rd_gens, rd_stats) and the slot's generation.
// Set at load, and read only by the run's own programs (sock_ops, the
// process tracepoints, the Go probes): rd_msg and rd_recv are shared by
// every run on the node and take the slot from the connection.
volatile const __u64 rd_cgroup = 0;
volatile const __u32 rd_slot = 0;
volatile const __u32 rd_gen = 0;
// Bytes a CPU sends to a run's ring before it wakes the reader: a quarter
// of the ring over the CPUs. Set at load.
volatile const __u64 rd_wake_bytes = 1 << 18;
// The propagation formats (RD_PROP_*) the run does not write on its
// outbound requests; 0 writes them all. Set at load; its sock_ops copies it
// into each connection (conn.noprop), where the shared rd_msg reads it.
volatile const __u32 rd_noprop = 0;
// The form of the timing fields the run writes on responses (RD_TIMING_*).
// Set at load, and copied into each connection (conn.timing) by sock_ops
// as rd_noprop is.
volatile const __u32 rd_timing = RD_TIMING_COMPACT;

// Writable globals, so their values are unknown to the verifier (it does
// not track what map memory holds). The state of bpf_loop callbacks starts
// from them instead of constants: a counter that starts at a known 0 would
// be a new state at every iteration, and the callback would be verified
// once per iteration instead of a few times.
volatile __s32 rt_zero = 0;
volatile __s32 rt_m1 = -1;
#define ZERO rt_zero
#define M1 rt_m1

#include "run/kernel.h"
#include "run/state.h"
#include "run/maps.h"
#include "run/prof.h"
#include "run/parse.h"
#include "run/context.h"
#include "run/timing.h"
#include "run/spans.h"

// ---- heads: one pass, a word at a time ----

// The end of a head past its kept part, one line break per iteration.
struct tail_ctx {
	struct half *h;
	__u8 *data;
	__u32 pos;     // data index
	__u32 end;
	__u32 base;    // head offset of data[0]
	__u8 prev;     // the byte before data[pos]
	__s32 eoh;
	__s32 brk;
};

static long tail_cb(__u32 i, struct tail_ctx *x)
{
	__s32 p = find(x->data, x->pos, x->end, '\n', 1);
	if (p < 0)
		return 1;
	__u32 P = p;
	__u32 ls = x->h->ls; // head offset
	__u32 hp = x->base + P;
	__u8 before = P > x->pos ? x->data[(P - 1) & SCR_MASK] : x->prev;
	x->h->ls = hp + 1;
	x->h->lines++;
	x->pos = P + 1;
	if (hp == ls || (hp == ls + 1 && before == '\r')) {
		x->eoh = hp + 1;
		x->brk = hp == ls ? hp : hp - 1;
		return 1;
	}
	x->prev = '\n';
	return 0;
}

// scan_tail looks for the end of a head in s->data[from:to), past its kept
// part; base is the head offset of s->data[0]. Returns as scan_kept.
static __noinline __s64 scan_tail(struct half *h, struct scratch *s, __u32 from, __u32 to, __u32 base)
{
	if (!h || !s)
		return -1;
	__u8 prev = from > 0 ? s->data[(from - 1) & SCR_MASK] : h->last;
	struct tail_ctx tx = {.h = h, .data = s->data, .pos = OPQ(from), .end = OPQ(to), .base = OPQ(base),
			      .prev = prev, .eoh = M1, .brk = M1};
	bpf_loop(SCR, tail_cb, &tx, 0);
	if (tx.eoh < 0)
		return -1;
	return (__s64)((__u64)(__u32)tx.eoh << 32 | (__u32)tx.brk);
}

// head_feed takes the head bytes s->data[from:to) of one side of c
// (is_write: what the service writes): it keeps them, classifies the
// lines they complete, and returns the index in s->data where the head
// ends (to when it does not end there). s->so gets brk, the index in
// s->data of the head's final line break (-1: not in this data), done
// and bad (not HTTP/1.x).
__noinline __u32 head_feed(struct conn *c, int is_write, struct scratch *s, __u32 from, __u32 to)
{
	if (!c || !s)
		return to;
	struct half *h = is_write ? &c->wr : &c->rd;
	// Request heads: read on inbound connections, written on outbound ones.
	int request = (c->dir == DIR_IN) != is_write;
	struct head_buf *hb = request ? &c->qhead : &c->shead;
	s->so.brk = -1;
	s->so.done = 0;
	s->so.bad = 0;
	__u32 base = h->len; // head offset of data[from]
	__u32 n = to - from;
	__u32 kept0 = h->kept;
	// Keep what fits: in one copy when the head starts here.
	__u32 k = 0;
	if (kept0 < RD_HEAD) {
		k = n < RD_HEAD - kept0 ? n : RD_HEAD - kept0;
		if (kept0 == 0 && base == 0) {
			__u64 sz = k;
			asm volatile("" : "+r"(sz));
			sz &= RD_HEAD | (RD_HEAD - 1);
			if (sz > RD_HEAD)
				sz = RD_HEAD;
			if (bpf_probe_read_kernel(hb->b, sz, s->data + (from & SCR_MASK)) < 0)
				sz = 0;
			k = sz;
		} else {
			struct copy_ctx cc = {.dst = hb->b, .doff = OPQ(kept0), .src = s->data, .soff = OPQ(from), .n = OPQ(k)};
			bpf_loop(SCR, copy_in_cb, &cc, 0);
		}
		h->kept = kept0 + k;
	}
	__s32 eoh = -1, brk = -1;
	if (k > 0) {
		__s64 r = scan_kept(c, h, hb, kept0, (__u64)request << 32 | (kept0 + k));
		if (r == -2) {
			s->so.bad = 1;
			return to;
		}
		if (r >= 0) {
			eoh = r >> 32;
			brk = (__s32)r;
		}
	}
	if (eoh < 0 && n > k) {
		// past the kept part: only the end is looked for
		if (h->lines == 0) {
			s->so.bad = 1; // a first line longer than we keep
			return to;
		}
		h->cut = 1;
		__s64 r = scan_tail(h, s, from + k, to, base - from);
		if (r >= 0) {
			eoh = r >> 32;
			brk = (__s32)r;
		}
	}
	__u32 end = to;
	if (eoh >= 0) {
		end = from + (eoh - base);
		s->so.done = 1;
		// in s->data, unless it began in earlier data
		s->so.brk = (__u32)brk >= base ? (__s32)(from + (brk - base)) : -1;
	}
	h->len = base + (end - from);
	if (end > from)
		h->last = s->data[(end - 1) & SCR_MASK];
	if (h->len > MAX_HEAD)
		s->so.bad = 1;
	return end;
}

// The steps below, shared by reads (read_step) and writes (msg_step).

// body_step passes over body bytes (a Content-Length body or a chunk's data)
// without looking at them. It returns 1 if h was in such a state.
static __always_inline int body_step(struct conn *c, struct half *h, __u64 sk, int wr,
				     struct scratch *s, __u32 left, __u32 *off)
{
	if (h->state == H_BODY) {
		__u32 k = left < h->body ? left : (__u32)h->body;
		h->body -= k;
		*off += k;
		if (h->body == 0) {
			h->state = H_IDLE;
			body_done(c, sk, wr, 0, s);
		}
		return 1;
	}
	if (h->state == H_CHUNK && h->cstate == CS_DATA) {
		__u32 k = left < h->csize ? left : (__u32)h->csize;
		h->csize -= k;
		*off += k;
		if (h->csize == 0)
			h->cstate = CS_DCR;
		return 1;
	}
	return 0;
}

// chunk_step scans a chunk-size line copied to s->data (wz bytes). It
// returns 1 when the connection turned opaque.
static __always_inline int chunk_step(struct conn *c, struct half *h, __u64 sk, int wr,
				      struct scratch *s, __u64 wz, __u32 *off)
{
	__s32 res;
	*off += chunk_scan(h, s->data, wz, &res);
	if (res < 0) {
		make_opaque(c, sk, s);
		return 1;
	}
	if (res > 0) {
		h->state = H_IDLE;
		body_done(c, sk, wr, 0, s);
	}
	return 0;
}

// copy_len bounds n to [0, max] in a form the verifier follows through the
// copy helpers (max + mask is a power of two minus one, or max itself).
#define copy_len(n, mask, max)                   \
	({                                       \
		__u64 __z = (n);                 \
		asm volatile("" : "+r"(__z));    \
		__z &= (mask) | (max);           \
		if (__z > (max))                 \
			__z = (max);             \
		__z;                             \
	})

// h2_start reports whether the m bytes of d begin an HTTP/2 connection
// (RFC 9113 §3.4): the client's preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
// its first 14 bytes are enough: no HTTP/1.x request line starts so), or a
// server's first frame, SETTINGS on stream 0 without ACK, whose length is a
// multiple of 6 (a server may write it before it reads the preface). Bytes
// too few to tell are not HTTP/2. Two words at constant offsets: the
// callers run deep in bpf_loop callbacks, where a byte-wise test with a
// variable offset spilled registers past the 512-byte stack of the chain.
static __always_inline int h2_start(__u8 *d, __u32 m)
{
	if (m < 9)
		return 0;
	__u64 w0 = *(__u64 *)d;       // bytes 0-7
	__u64 w1 = *(__u64 *)(d + 6); // bytes 6-13
	if (w0 == 0x5448202a20495250ULL) // "PRI * HT"
		return m >= 14 && w1 == 0x302e322f50545448ULL; // "HTTP/2.0"
	// length (24 bits, its first byte 0), type SETTINGS, flags 0, stream 0
	__u32 len = (((w0 >> 8) & 0xff) << 8) | ((w0 >> 16) & 0xff);
	return (w0 & 0xff) == 0 && ((w0 >> 24) & 0xff) == 4 && (w0 >> 32) == 0 && ((w1 >> 16) & 0xff) == 0 &&
	       len % 6 == 0;
}

// head_begin looks at the first of m bytes in s->data where no message is
// under way: line breaks between messages are skipped (RFC 9112 §2.2), and a
// request must start with a method, a response with "H". It returns where
// the head starts, m if the bytes were all line breaks, or -1 if they are not
// HTTP/1.x (the connection turns opaque if it has not carried a message yet;
// otherwise they are bytes of a body this side lost track of).
static __always_inline int head_begin(struct conn *c, struct half *h, __u64 sk, struct scratch *s,
				      int request, __u32 m, __u64 ts)
{
	__u32 p = 0;
	for (int k = 0; k < 4; k++) {
		if (p < m && (s->data[p & SCR_MASK] == '\r' || s->data[p & SCR_MASK] == '\n'))
			p++;
	}
	if (p >= m)
		return m;
	__u8 b = s->data[p & SCR_MASK];
	if (p == 0 && h2_start(s->data, m)) {
		// HTTP/2 (its preface, or a server's SETTINGS frame first: on a
		// new connection, or after a 101 to h2c): not followed in the
		// kernel; counted and reported so that the run can say so. Where
		// an HTTP/1.x message should start, these bytes would make the
		// connection opaque anyway.
		c->h2 = 1;
		make_opaque(c, sk, s);
		return -1;
	}
	if (request ? !(b >= 'A' && b <= 'Z') : b != 'H') {
		if (c->wr.finals == 0 && c->rd.finals == 0)
			make_opaque(c, sk, s);
		return -1;
	}
	__builtin_memset(h, 0, __builtin_offsetof(struct half, finals));
	__builtin_memset(&h->hi, 0, sizeof(h->hi));
	h->state = H_HEAD;
	h->start = ts;
	h->sock = 0;
	return p;
}

// head_arrived dates a head whose first byte (TCP sequence number seq) the
// service read at ts: from when that byte arrived in the socket (arrival.h),
// never later than the read. The difference is the time the head waited in
// the socket's receive queue for the service to read it: a request's, which
// its SERVER span starts before; a response's, which its call does not
// count as the network's (a caller held off its CPU reads it late).
__noinline int head_arrived(struct conn *c, __u32 seq, __u64 ts)
{
	if (!c)
		return 0;
	__u64 at = arrival_of(&c->arr, seq);
	if (!at || at > ts)
		at = ts;
	c->rd.start = at;
	c->rd.sock = ts - at;
	return 0;
}

// One read being followed, in SCR-byte steps.
struct read_ctx {
	struct conn *c;
	struct scratch *s;
	__u64 sk;
	__u64 ubuf;
	__u64 ts;
	__u32 n;
	__u32 off;
	__u32 seq; // TCP sequence number of ubuf[0]
};

// read_step follows the next piece of a read: a body skipped without
// copying, or up to SCR bytes copied and scanned as (part of) a head.
static long read_step(__u32 i, struct read_ctx *x)
{
	struct conn *c = x->c;
	struct scratch *s = x->s;
	struct half *h = &c->rd;
	__u64 sk = x->sk;
	if (x->off >= x->n || h->state == H_OPAQUE)
		return 1;
	__u32 left = x->n - x->off;
	if (body_step(c, h, sk, 0, s, left, &x->off))
		return 0;
	if (h->state == H_CLOSE)
		return 1;
	if (h->state == H_CHUNK) {
		// A size line: a small window is enough.
		__u32 w = left < CW ? left : CW;
		__u64 wz = copy_len(w, CW - 1, CW);
		if (bpf_probe_read_user(s->data, wz, (void *)(x->ubuf + x->off)) < 0)
			return 1;
		return chunk_step(c, h, sk, 0, s, wz, &x->off);
	}
	__u32 m = left < HSTEP ? left : HSTEP;
	__u64 sz = copy_len(m, SCR_MASK, SCR);
	PROF(2);
	if (bpf_probe_read_user(s->data, sz, (void *)(x->ubuf + x->off)) < 0)
		return 1;
	PROF(3);
	__u32 p = 0;
	if (h->state == H_IDLE) {
		int b = head_begin(c, h, sk, s, c->dir == DIR_IN, m, x->ts);
		PROF(4);
		if (b < 0)
			return 1;
		if ((__u32)b >= m) {
			x->off += m;
			return 0;
		}
		p = b;
		head_arrived(c, x->seq + x->off + p, x->ts);
	}
	__u32 end = head_feed(c, 0, s, p, m);
	PROF(5);
	if (s->so.bad) {
		make_opaque(c, sk, s);
		return 1;
	}
	x->off += end;
	if (!s->so.done)
		return 0;
	if (c->dir == DIR_IN)
		request_read(c, sk, s, h->len);
	else
		response_read(c, sk, s);
	PROF(6);
	return 0;
}

// The buffers of one read: a flat buffer (iovcnt 0) or up to 4 iovecs.
struct iov_ctx {
	struct conn *c;
	struct scratch *s;
	__u64 sk;
	__u64 buf;
	__u64 iovcnt;
	__u64 left;
	__u64 ts;
	__u32 seq; // TCP sequence number of the next byte read
};

static long iov_cb(__u32 i, struct iov_ctx *x)
{
	if (!x->left)
		return 1;
	struct iovec_u v = {.base = x->buf, .len = x->left};
	if (x->iovcnt) {
		if (i >= x->iovcnt ||
		    bpf_probe_read_user(&v, sizeof(v), (void *)(x->buf + i * sizeof(v))) < 0)
			return 1;
	} else if (i > 0) {
		return 1;
	}
	__u64 k = v.len < x->left ? v.len : x->left;
	struct read_ctx r = {.c = x->c, .s = x->s, .sk = x->sk, .ubuf = v.base, .ts = x->ts, .n = OPQ(k), .off = ZERO,
			     .seq = x->seq};
	bpf_loop(MAX_STEPS, read_step, &r, 0);
	if (r.off < r.n && x->c->rd.state != H_OPAQUE && x->c->rd.state != H_CLOSE)
		make_opaque(x->c, x->sk, x->s);
	x->left -= k;
	x->seq += k;
	return 0;
}

// A segment reached an established socket: tcp_probe fires at the start
// of tcp_rcv_established, before the segment is queued, for every segment
// of every TCP socket on the node (from the backlog, when the segment came
// while a reader held the socket, the time is when the reader let go). On
// a connection followed, the new in-order bytes it carries are recorded
// with the time (arrival.h), so that a head read later is dated from its
// arrival: a request's, and a response's. The same one-load filter as
// rd_recv turns away the sockets of no run.
SEC("tp_btf/tcp_probe")
int BPF_PROG(rd_seg, struct sock *sk, const struct sk_buff *skb)
{
#ifdef RD_FLOOR
	return 0;
#endif
	if (!sk->sk_user_data)
		return 0;
	__u32 se[2]; // struct tcp_skb_cb's seq and end_seq
	if (bpf_core_read(se, sizeof(se), &skb->cb) < 0 || se[0] == se[1])
		return 0; // a pure ACK (about half the segments of a request/response exchange): no lookup
	__u64 key = (__u64)sk;
	struct conn *c = bpf_map_lookup_elem(&rd_conns, &key);
	if (!c || c->rd.state == H_OPAQUE || !live(c, key))
		return 0;
	__u32 rcv_nxt = BPF_CORE_READ((struct tcp_sock *)sk, rcv_nxt);
	arrival_note(&c->arr, se[0], se[1], rcv_nxt, bpf_ktime_get_ns());
	return 0;
}

// Syscall numbers (x86-64) of the reads followed.
#define NR_READ 0
#define NR_READV 19
#define NR_RECVFROM 45
#define NR_RECVMSG 47

// A socket read returned: sock_recv_length fires in sock_recvmsg for read,
// recvfrom, readv and recvmsg alike, in the reading thread, with the socket
// and the count. The user buffer is in the registers the syscall was made
// with. One program on one socket tracepoint: no syscall tracepoint (which
// would put every system call of every process on the slow path), no walk
// from descriptor to socket, nothing kept between entry and exit.
SEC("tp_btf/sock_recv_length")
int BPF_PROG(rd_recv, struct sock *sock, int ret, int flags)
{
	if (ret < 0 || (flags & MSG_PEEK))
		return 0; // errors; peeked bytes will be read again
#ifdef RD_FLOOR
	return 0;
#endif
	// This runs for every socket read of every process on the node, once
	// per `rootline run`. Ours are in the rd_socks sockhash (sockops drops
	// a connection that cannot join it), so they hold a psock in
	// sk_user_data: one load turns away the others (a sidecar's, say)
	// before the hash lookup.
	if (!sock->sk_user_data)
		return 0;
	PROF_START();
	__u64 key = (__u64)sock;
	struct conn *c = bpf_map_lookup_elem(&rd_conns, &key);
	if (!c || !live(c, key))
		return 0;
	PROF(0);
	struct scratch *s = scratch();
	if (!s)
		return 0;
	__u64 sk = c->addr;
	if (ret == 0) {
		// EOF: a close-delimited body ends.
		if (c->rd.state == H_CLOSE) {
			c->rd.state = H_IDLE;
			body_done(c, sk, 0, 0, s);
		}
		return 0;
	}
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	__u64 nr = BPF_CORE_READ(regs, orig_ax), buf = BPF_CORE_READ(regs, si), iovcnt = 0;
	switch (nr) {
	case NR_READ:
	case NR_RECVFROM:
		break;
	case NR_READV:
		iovcnt = BPF_CORE_READ(regs, dx);
		break;
	case NR_RECVMSG: {
		struct user_msghdr_u mh;
		if (bpf_probe_read_user(&mh, sizeof(mh), (void *)buf) < 0) {
			make_opaque(c, sk, s);
			return 0;
		}
		buf = mh.iov;
		iovcnt = mh.iovlen;
		break;
	}
	default:
		// io_uring, recvmmsg, a kernel read: bytes the program cannot see
		make_opaque(c, sk, s);
		return 0;
	}
	// The read took the bytes before copied_seq: the first one's sequence
	// number dates the heads it holds (head_arrived).
	__u32 seq = BPF_CORE_READ((struct tcp_sock *)sock, copied_seq) - (__u32)ret;
	struct iov_ctx x = {.c = c, .s = s, .sk = sk, .buf = buf, .iovcnt = OPQ(iovcnt), .left = OPQ(ret),
			    .ts = bpf_ktime_get_ns(), .seq = seq};
	PROF(1);
	bpf_loop(4, iov_cb, &x, 0);
	PROF(7);
	if (x.left)
		make_opaque(c, sk, s); // more iovecs than followed: the stream is lost
	return 0;
}

// ---- writing ----

// The request the writing thread or goroutine services (0: none).
static __always_inline __u64 current_request(__u32 tgid, __u32 tid)
{
	if (bpf_map_lookup_elem(&rd_gopids, &tgid)) {
		struct gkey k = {.tgid = tgid, .g = cur_g()};
		__u64 *v = bpf_map_lookup_elem(&rd_gowrites, &k);
		if (v) {
			__u64 span = *v;
			bpf_map_delete_elem(&rd_gowrites, &k);
			return span;
		}
		v = bpf_map_lookup_elem(&rd_goroutines, &k);
		return v ? *v : 0;
	}
	__u64 *v = bpf_map_lookup_elem(&rd_threads, &tid);
	return v ? *v : 0;
}

// room_for reports whether the socket's send buffer takes the first n bytes
// of a message at once. After a partial send the kernel subtracts the
// unsent bytes from the count the application's write returns; that count
// is only right if the inserted lines were sent whole, i.e. if the send got
// at least as far as their end (n: the insertion offset plus their length).
static __always_inline int room_for(struct conn *c, __u32 n)
{
	struct sock *sk = (struct sock *)c->addr;
	int sndbuf = 0, queued = 0;
	if (bpf_core_read(&sndbuf, sizeof(sndbuf), &sk->sk_sndbuf) < 0 ||
	    bpf_core_read(&queued, sizeof(queued), &sk->sk_wmem_queued) < 0)
		return 0;
	// skb overhead: count every byte twice
	return sndbuf - queued > (int)(2 * n + 4096);
}

static __always_inline void skip(struct conn *c, __u64 sk, __u32 why)
{
	dbg("skip why=%d", why);
	stat(c->slot, RD_STAT_SKIP);
	struct scratch *s = scratch();
	if (!s)
		return;
	ev_reset(&s->ev, RD_EV_SKIP, c, sk);
	s->ev.status = why;
	emit(&s->ev, c);
}

struct ins_ctx {
	__u8 *d;
	__u8 *e;
	__u8 *text;
	__u32 n;
	__u32 k;
};

// Helpers may not write packets: one byte at a time.
static long ins_cb(__u32 i, struct ins_ctx *x)
{
	__u32 k = x->k;
	if (k >= x->n)
		return 1;
	__u8 *w = x->d + (k & TEXT_MASK);
	if (k + 8 <= x->n) {
		// a word at a time
		if (w + 8 > x->e)
			return 1;
		*(__u64 *)w = *(__u64 *)(x->text + (k & TEXT_MASK));
		x->k = k + 8;
		return 0;
	}
	if (w + 1 > x->e)
		return 1;
	*w = x->text[k & TEXT_MASK];
	x->k = k + 1;
	return 0;
}

// insert puts the text's n bytes at offset at of the message.
static __noinline int insert(struct sk_msg_md *msg, __u32 at, __u8 *text, __u32 n)
{
	if (n == 0 || n > TEXT)
		return 0;
	if (bpf_msg_push_data(msg, at, n, 0) < 0)
		return -1;
	if (bpf_msg_pull_data(msg, at, at + n, 0) < 0)
		return -1;
	struct ins_ctx x = {.d = msg->data, .e = msg->data_end, .text = text, .n = OPQ(n), .k = ZERO};
	bpf_loop(TEXT, ins_cb, &x, 0);
	if (x.k != n)
		return -1;
	return 0;
}

// request_lines builds what a request head from the request r (NULL: none)
// gets: the propagation headers of httpstream.AppendInjectHeaders.

// off are the formats (RD_PROP_*) the run does not write (its conn's
// noprop).
static __noinline __u32 request_lines(struct text *t, struct req *r, struct call_ids *ci, struct hinfo *hi, __u32 off)
{
	__u8 *trace = ci->trace;
	__u64 span = ci->span, parent = ci->parent;
	__u8 sampled = ci->sampled;
	int instrumented = hi->has & (HD_TRACEPARENT | HD_B3 | HD_B3TRACE | HD_B3SPAN);
	if (!instrumented) {
		__u8 smp = sampled ? '1' : '0';
		if (!(off & RD_PROP_W3C)) {
			PUT(t, "traceparent: 00-");
			put_hex(t, trace, 16);
			PUT(t, "-");
			put_span(t, span);
			PUT(t, "-0");
			put(t, (const char *)&smp, 1);
			PUT(t, "\r\n");
			if (r && r->ts_len > 0 && !(hi->has & HD_TRACESTATE)) {
				PUT(t, "tracestate: ");
				struct put_ctx p = {.src = r->ts, .n = OPQ(r->ts_len), .text = t->b, .at = OPQ(t->n)};
				bpf_loop(RD_TS, put_ts_cb, &p, 0);
				t->n += p.n;
				PUT(t, "\r\n");
			}
		}
		if (!(off & RD_PROP_B3)) {
			PUT(t, "b3: ");
			put_hex(t, trace, 16);
			PUT(t, "-");
			put_span(t, span);
			PUT(t, "-");
			put(t, (const char *)&smp, 1);
			if (parent) {
				PUT(t, "-");
				put_span(t, parent);
			}
			PUT(t, "\r\n");
		}
		if (!(off & RD_PROP_B3MULTI)) {
			PUT(t, "x-b3-traceid: ");
			put_hex(t, trace, 16);
			PUT(t, "\r\nx-b3-spanid: ");
			put_span(t, span);
			PUT(t, "\r\n");
			if (parent && !(hi->has & HD_B3PARENT)) {
				PUT(t, "x-b3-parentspanid: ");
				put_span(t, parent);
				PUT(t, "\r\n");
			}
			if (!(hi->has & (HD_B3SAMPLED | HD_B3FLAGS))) {
				PUT(t, "x-b3-sampled: ");
				put(t, (const char *)&smp, 1);
				PUT(t, "\r\n");
			}
		}
	}
	if (!(off & RD_PROP_RID) && !(hi->has & HD_RID)) {
		PUT(t, "x-request-id: ");
		if (r && r->rid_len > 0) {
			struct put_ctx p = {.src = r->rid, .n = OPQ(r->rid_len), .text = t->b, .at = OPQ(t->n)};
			bpf_loop(RD_RID, put_rid_cb, &p, 0);
			t->n += p.n;
		} else {
			put_uuid(t, trace);
		}
		PUT(t, "\r\n");
	}
	return t->n;
}

// Complete request head written on an outbound connection: a CLIENT span.
__noinline int request_written(struct sk_msg_md *msg, struct conn *c, __u64 sk, struct scratch *s, __s32 brk)
{
	if (!c || !s)
		return 0;
	struct hinfo *hi = &c->wr.hi;
	__u32 hlen = c->wr.len;
	__u32 kept = hlen > RD_HEAD ? RD_HEAD : hlen;
	decode_framing(&c->qhead, hi);
	PROF(40);
	if (hi->has & (HD_BAD | HD_CL_BAD | HD_TE_OTHER)) {
		make_opaque(c, sk, s);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u64 parent = current_request(tgid, tid);
	struct req *r = 0;
	if (parent) {
		r = bpf_map_lookup_elem(&rd_reqs, &parent);
		if (!r)
			parent = 0;
	}
	struct call_ids *ci = &s->ci;
	ci->span = rand64();
	ci->parent = parent;
	ci->sampled = 1;
	__u32 flags = 0;
	if (r) {
		__builtin_memcpy(ci->trace, r->trace, 16);
		ci->sampled = (r->flags & RD_F_SAMPLED) != 0;
		touch(r);
	} else {
		__u64 a = rand64(), b = rand64();
		__builtin_memcpy(ci->trace, &a, 8);
		__builtin_memcpy(ci->trace + 8, &b, 8);
		flags |= RD_F_UNBOUND;
	}
	if (ci->sampled)
		flags |= RD_F_SAMPLED;
	if (hi->has & (HD_TRACEPARENT | HD_B3 | HD_B3TRACE | HD_B3SPAN))
		flags |= RD_F_OWN;

	struct text t = {.b = s->text};
	PROF(41);
	request_lines(&t, r, ci, hi, c->noprop);
	PROF(42);
	if (t.n > 0) {
		if (c->wr.cut)
			skip(c, sk, RD_SKIP_LONG); // its own context may be past what was kept: never send two
		else if (brk < 0)
			skip(c, sk, RD_SKIP_SPLIT);
		else if (!room_for(c, brk + t.n))
			skip(c, sk, RD_SKIP_SNDBUF);
		else if (insert(msg, brk, s->text, t.n) < 0)
			skip(c, sk, RD_SKIP_PUSH);
		else {
			flags |= RD_F_INJECTED;
			stat(c->slot, RD_STAT_INJECT);
		}
	}
	PROF(43);
	if (c->cq_next - c->cq_first >= RQ) {
		// More calls awaiting answers than kept: the oldest is given up.
		struct callrec *o = &c->cq[c->cq_first & (RQ - 1)];
		c->cq_first++;
		end_callrec(c, sk, o, RD_F_CLOSED, s);
	}
	struct callrec *q = &c->cq[c->cq_next & (RQ - 1)];
	q->span = ci->span;
	q->parent = parent;
	q->start = c->wr.start;
	q->tid = tid;
	q->flags = flags | (c->head_req ? CALL_HEAD : 0);
	q->status = 0;
	q->sock_us = 0;
	q->server = 0;
	q->wait = 0;
	__builtin_memcpy(q->trace, ci->trace, 16);
	c->cq_next++;

	if (!(flags & RD_F_OWN)) {
		struct rd_event *ev = &s->ev;
		ev_reset(ev, RD_EV_CALL, c, sk);
		ev->flags |= flags;
		if (hlen > RD_HEAD)
			ev->flags |= RD_F_CUT;
		__builtin_memcpy(ev->trace, ci->trace, 16);
		ev->span = ci->span;
		ev->parent = parent;
		ev->start = c->wr.start;
		copy_head(ev, &c->qhead, kept);
		PROF(44);
		emit(ev, c);
	}
	PROF(45);
	// The body: counted, none, or (chunked) until a final response head is read.
	c->wr.finals++;
	c->wr.state = H_IDLE;
	if (hi->has & HD_CHUNKED) {
		chunk_start(&c->wr);
	} else if ((hi->has & HD_CL) && hi->cl > 0) {
		c->wr.state = H_BODY;
		c->wr.body = hi->cl;
	}
	return 0;
}

// Complete response head written on an inbound connection.
__noinline int response_written(struct sk_msg_md *msg, struct conn *c, __u64 sk, struct scratch *s, __s32 brk)
{
	if (!c || !s)
		return 0;
	struct hinfo *hi = &c->wr.hi;
	decode_framing(&c->shead, hi);
	PROF(46);
	if (hi->has & HD_BAD) {
		make_opaque(c, sk, s);
		return 0;
	}
	c->wr.state = H_IDLE;
	if (hi->status >= 100 && hi->status < 200)
		return 0; // interim: the final response follows
	c->wr.finals++;
	// Responses answer requests in order: the oldest awaiting one.
	if (c->req)
		end_request(c, sk, RD_F_CLOSED, s); // its body was not followed to the end
	__u8 head_req = 0;
	if (c->rq_first != c->rq_next) {
		c->req = c->rq[c->rq_first & (RQ - 1)];
		head_req = c->rq_head[c->rq_first & (RQ - 1)];
		c->rq_first++;
	}
	int rb = response_framing(hi, head_req);
	if (rb == RB_OPAQUE) {
		make_opaque(c, sk, s); // a Content-Length it cannot follow: no lines either
		return 0;
	}
	c->rsp_status = hi->status;
	dbg("response head req=%x queued=%d brk=%d", c->req, c->rq_next - c->rq_first, brk);
	__u64 span = c->req;
	struct req *r = span ? bpf_map_lookup_elem(&rd_reqs, &span) : 0;
	PROF(47);
	if (r) {
		touch(r);
		unbind_request(r);
		// A response with timing fields of its own (the application's, or a
		// downstream's it passes on) keeps them and gets none: a second set
		// would conflict with them at the caller.
		if (!(hi->has & (HD_SERVERTIME | HD_WAIT | HD_RL))) {
			__u64 now = bpf_ktime_get_ns();
			__u64 server = now > r->start ? (now - r->start) / 1000 : 0;
			__u64 local = r->local_ns / 1000, net = r->max_net / 1000, remote = r->max_remote / 1000;
			struct text t = {.b = s->text};
			if (c->timing == RD_TIMING_LONG) {
				PUT(&t, "rootline-server-time: ");
				put_num(&t, server);
				PUT(&t, "\r\nrootline-wait: ");
				put_num(&t, local);
				PUT(&t, ";kind=local, ");
				put_num(&t, net);
				PUT(&t, ";kind=net, ");
				put_num(&t, remote);
				PUT(&t, ";kind=remote\r\n");
			} else {
				// httpstream.AppendCompactTiming: the waits that are not 0.
				PUT(&t, "rl: ");
				put_num(&t, server);
				if (local) {
					PUT(&t, ";l=");
					put_num(&t, local);
				}
				if (net) {
					PUT(&t, ";n=");
					put_num(&t, net);
				}
				if (remote) {
					PUT(&t, ";r=");
					put_num(&t, remote);
				}
				PUT(&t, "\r\n");
			}
			PROF(48);
			if (brk < 0)
				skip(c, sk, RD_SKIP_SPLIT);
			else if (!room_for(c, brk + t.n))
				skip(c, sk, RD_SKIP_SNDBUF);
			else if (insert(msg, brk, s->text, t.n) < 0)
				skip(c, sk, RD_SKIP_PUSH);
			else
				stat(c->slot, RD_STAT_INJECT);
			PROF(49);
		}
	}
	switch (rb) {
	case RB_NONE:
		end_request(c, sk, 0, s);
		break;
	case RB_CHUNKED:
		chunk_start(&c->wr);
		break;
	case RB_LENGTH:
		c->wr.state = H_BODY;
		c->wr.body = hi->cl;
		break;
	default:
		c->wr.state = H_CLOSE;
	}
	return 0;
}

// unseen accounts for n bytes the connection sent without this program
// seeing them: the rest of a body of known length, else the stream is lost
// (opaque). It reports whether the connection is still followed.
static __always_inline int unseen(struct conn *c, __u64 sk, __u32 n, struct scratch *s)
{
	struct half *h = &c->wr;
	if (h->state == H_OPAQUE)
		return 0;
	if (h->state == H_CLOSE)
		return 1;
	if (h->state == H_BODY && n <= h->body) {
		h->body -= n;
		if (h->body == 0) {
			h->state = H_IDLE;
			body_done(c, sk, 1, 0, s);
		}
		return 1;
	}
	if (h->state == H_CHUNK && h->cstate == CS_DATA && n <= h->csize) {
		h->csize -= n;
		if (h->csize == 0)
			h->cstate = CS_DCR;
		return 1;
	}
	make_opaque(c, sk, s);
	return 0;
}

// One write being followed, in SCR-byte steps.
struct msg_ctx {
	struct sk_msg_md *msg;
	struct conn *c;
	struct scratch *s;
	__u64 sk;
	__u64 ts;
	__u32 size;
	__u32 off;
};

static long msg_step(__u32 i, struct msg_ctx *x)
{
	struct sk_msg_md *msg = x->msg;
	struct conn *c = x->c;
	struct scratch *s = x->s;
	struct half *h = &c->wr;
	__u64 sk = x->sk;
	if (x->off >= x->size || h->state == H_OPAQUE)
		return 1;
	__u32 left = x->size - x->off;
	dbg("wr step state=%d cs=%d off=%d", h->state, h->cstate, x->off);
	dbg("   size=%d body=%d csize=%d", x->size, h->body, h->csize);
	if (body_step(c, h, sk, 1, s, left, &x->off))
		return 0;
	if (h->state == H_CLOSE)
		return 1;
	if (h->state == H_CHUNK) {
		// A size line: a small window is enough.
		__u32 w = left < CW ? left : CW;
		if (bpf_msg_pull_data(msg, x->off, x->off + w, 0) < 0)
			return 1;
		__u8 *d = msg->data, *e = msg->data_end;
		if ((__u64)(e - d) < w)
			w = e - d;
		__u64 wz = copy_len(w, CW - 1, CW);
		if (wz == 0 || bpf_probe_read_kernel(s->data, wz, d) < 0)
			return 1;
		return chunk_step(c, h, sk, 1, s, wz, &x->off);
	}
	__u32 m = left < HSTEP ? left : HSTEP;
	PROF(12);
	if (bpf_msg_pull_data(msg, x->off, x->off + m, 0) < 0)
		return 1;
	PROF(13);
	__u8 *d = msg->data, *e = msg->data_end;
	__u64 avail = (__u64)(e - d);
	if (avail < m)
		m = avail;
	__u64 sz = copy_len(m, SCR_MASK, SCR);
	if (sz == 0 || bpf_probe_read_kernel(s->data, sz, d) < 0)
		return 1;
	m = sz;
	PROF(14);
	__u32 p = 0;
	if (h->state == H_IDLE) {
		int b = head_begin(c, h, sk, s, c->dir == DIR_OUT, m, x->ts);
		PROF(15);
		if (b < 0)
			return 1;
		if ((__u32)b >= m) {
			x->off += m;
			return 0;
		}
		p = b;
	}
	__u32 end = head_feed(c, 1, s, p, m);
	PROF(16);
	if (s->so.bad) {
		make_opaque(c, sk, s);
		return 1;
	}
	if (!s->so.done) {
		x->off += end;
		return 0;
	}
	// brk indexes this step's data; the insertion offset is in the
	// message. A head that began in an earlier write still gets its lines
	// before its final line break, unless that break began there too.
	__s32 brk = s->so.brk;
	__s32 at = brk >= 0 ? (__s32)(x->off + brk) : -1;
	if (c->dir == DIR_OUT)
		request_written(msg, c, sk, s, at);
	else
		response_written(msg, c, sk, s, at);
	PROF(17);
	// What was inserted shifts the rest of the message.
	__u32 grown = msg->size - x->size;
	x->size = msg->size;
	x->off += end + grown;
	return 0;
}

#ifdef RD_FLOOR
// The mechanism's floor (bench/RESULTS.md, built with -DRD_FLOOR by
// bench/datapath-variant.sh): a fixed text of the real lines' length
// inserted after the first line of every request and response head
// written, and the message made linear again; nothing parsed, nothing
// recorded.
static __always_inline int floor_msg(struct sk_msg_md *msg, struct scratch *s)
{
	void *d = (void *)(long)msg->data, *e = (void *)(long)msg->data_end;
	if (d + 4 > e)
		return SK_PASS;
	__u32 w = *(__u32 *)d;
	int rsp = w == 0x50545448, req = w == 0x20544547;
	if (!rsp && !req)
		return SK_PASS;
	__u32 at = 0;
	for (int i = 4; i < 128; i++) {
		if (d + i + 1 > e)
			break;
		if (*(__u8 *)(d + i) == '\n') {
			at = i + 1;
			break;
		}
	}
	if (!at)
		return SK_PASS;
	struct text t = {.b = s->text};
	if (req) {
		PUT(&t, "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n");
		PUT(&t, "b3: 4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1-00f067aa0ba902b7\r\n");
		PUT(&t, "x-b3-traceid: 4bf92f3577b34da6a3ce929d0e0e4736\r\nx-b3-spanid: 00f067aa0ba902b7\r\n");
		PUT(&t, "x-b3-parentspanid: 00f067aa0ba902b7\r\nx-b3-sampled: 1\r\n");
		PUT(&t, "x-request-id: 4bf92f35-77b3-4da6-a3ce-929d0e0e4736\r\n");
	} else {
		PUT(&t, "rl: 1234;l=12;n=3;r=456\r\n");
	}
	__u32 n = t.n;
	__u32 size = msg->size;
	insert(msg, at, s->text, n);
	if (msg->size != size && msg->size <= PULL_MAX)
		bpf_msg_pull_data(msg, 0, msg->size, 0);
	return SK_PASS;
}
#endif

SEC("sk_msg")
int rd_msg(struct sk_msg_md *msg)
{
	PROF_START();
	__u64 sk = (__u64)msg->sk;
	struct conn *c = bpf_map_lookup_elem(&rd_conns, &sk);
	if (!c || c->wr.state == H_OPAQUE || !live(c, sk))
		return SK_PASS;
	PROF(10);
	sk = c->addr; // the same value, as a number the verifier lets functions take
	struct scratch *s = scratch();
	if (!s)
		return SK_PASS;
#ifdef RD_FLOOR
	return floor_msg(msg, s);
#endif
	// The kernel runs this program on what a write copied in, before it is
	// sent. After a partial send the application writes the unsent bytes
	// again, and the program sees them again (skip them); and the next
	// write after a partial send goes out without the program (account
	// for bytes never seen). The TCP write sequence tells both apart.
	__u32 seq0 = 0, skipn = 0;
	struct tcp_sock *tp = (struct tcp_sock *)c->addr;
	if (bpf_core_read(&seq0, sizeof(seq0), &tp->write_seq) < 0)
		return SK_PASS;
	dbg("msg seq0=%u wseq=%u size=%u", seq0, c->wseq, msg->size);
	if (c->wseq_ok) {
		__s32 d = (__s32)(c->wseq - seq0);
		if (d > 0)
			skipn = d;
		else if (d < 0 && !unseen(c, sk, -d, s))
			return SK_PASS;
	}
	__u32 size = msg->size;
	struct msg_ctx x = {.msg = msg, .c = c, .s = s, .sk = sk, .ts = bpf_ktime_get_ns(), .size = OPQ(size),
			    .off = OPQ(skipn < size ? skipn : size)};
	PROF(11);
	// Steps cost only what they do; the bound is for messages of many
	// tiny chunks. A message not followed to its end loses the stream.
	bpf_loop(MAX_STEPS, msg_step, &x, 0);
	if (x.off < x.size && c->wr.state != H_OPAQUE && c->wr.state != H_CLOSE)
		make_opaque(c, sk, s);
	// bpf_msg_push_data puts the inserted lines in a page of their own
	// between two pieces of the application's bytes, and tcp_bpf sends each
	// piece by itself without MSG_MORE: with Nagle on (Java's and Python's
	// servers and clients leave it on) the pieces after the first wait for
	// an ACK from the peer. One linear piece goes out as the write would have.
	PROF(18);
	if (msg->size != size && msg->size <= PULL_MAX)
		bpf_msg_pull_data(msg, 0, msg->size, 0);
	PROF(19);
	__u32 end = seq0 + msg->size;
	if (!c->wseq_ok || (__s32)(end - c->wseq) > 0)
		c->wseq = end;
	c->wseq_ok = 1;
	return SK_PASS;
}

// ---- connections ----

SEC("sockops")
int rd_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	struct bpf_sock *bsk = skops->sk;
	if (!bsk)
		return 1;
	__u64 sk = (__u64)bsk;
	struct scratch *s = scratch_at(1);
	if (!s)
		return 1;
	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		__u32 family = skops->family;
		if (family != AF_INET && family != AF_INET6)
			return 1;
		__u32 z = 0;
		struct conn *zc = bpf_map_lookup_elem(&rd_zconn, &z);
		if (!zc || bpf_map_update_elem(&rd_conns, &sk, zc, BPF_ANY) < 0) {
			stat(rd_slot, RD_STAT_NOCONN);
			return 1;
		}
		struct conn *c = bpf_map_lookup_elem(&rd_conns, &sk);
		if (!c)
			return 1;
		c->addr = sk;
		c->slot = rd_slot;
		c->gen = rd_gen;
		c->noprop = rd_noprop;
		c->timing = rd_timing;
		c->dir = op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB ? DIR_OUT : DIR_IN;
		c->family = family;
		c->lport = skops->local_port;
		c->rport = bpf_ntohl(skops->remote_port);
		if (family == AF_INET) {
			c->raddr[0] = skops->remote_ip4;
		} else {
			c->raddr[0] = skops->remote_ip6[0];
			c->raddr[1] = skops->remote_ip6[1];
			c->raddr[2] = skops->remote_ip6[2];
			c->raddr[3] = skops->remote_ip6[3];
		}
		if (bpf_sock_hash_update(skops, &rd_socks, &sk, BPF_ANY) < 0) {
			bpf_map_delete_elem(&rd_conns, &sk);
			stat(rd_slot, RD_STAT_NOCONN);
			return 1;
		}
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
		return 1;
	}
	if (op == BPF_SOCK_OPS_STATE_CB && skops->args[1] == BPF_TCP_CLOSE) {
		struct conn *c = bpf_map_lookup_elem(&rd_conns, &sk);
		if (!c)
			return 1;
		sk = c->addr;
		int closed_body = c->dir == DIR_IN ? c->wr.state == H_CLOSE : c->rd.state == H_CLOSE;
		end_all(c, sk, closed_body ? 0 : RD_F_CLOSED, s);
		bpf_map_delete_elem(&rd_conns, &sk);
	}
	return 1;
}

// ---- threads and processes ----

// A thread or process started while servicing a request works for it.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(rd_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!ours())
		return 0;
	__u32 ptid = parent->pid, ctid = child->pid;
	__u64 *v = bpf_map_lookup_elem(&rd_threads, &ptid);
	if (v) {
		__u64 span = *v;
		bpf_map_update_elem(&rd_threads, &ctid, &span, BPF_ANY);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(rd_exit, struct task_struct *p)
{
	if (!ours())
		return 0;
	__u32 tid = p->pid, tgid = p->tgid;
	bpf_map_delete_elem(&rd_threads, &tid);
	if (tid == tgid)
		bpf_map_delete_elem(&rd_gopids, &tgid);
	return 0;
}

// Shared: a run's process exits (its main thread). Its slot's generation
// goes to 0, so that the shared programs leave its connections alone even
// when it was killed and could not say so (its own programs are gone with
// its file descriptors).
SEC("tp_btf/sched_process_exit")
int BPF_PROG(rd_runexit, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (p->pid != tgid)
		return 0;
	__u32 *slot = bpf_map_lookup_elem(&rd_runpids, &tgid);
	if (!slot)
		return 0;
	__u32 k = *slot, zero = 0;
	bpf_map_update_elem(&rd_gens, &k, &zero, BPF_ANY);
	bpf_map_delete_elem(&rd_runpids, &tgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(rd_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	if (!ours())
		return 0;
	struct scratch *s = scratch();
	if (!s)
		return 0;
	struct rd_event *ev = &s->ev;
	ev_reset(ev, RD_EV_EXEC, 0, 0);
	int n = bpf_probe_read_kernel_str(ev->head, 256, BPF_CORE_READ(bprm, filename));
	ev->head_len = n > 0 ? n : 0;
	emit_to(ev, rd_slot, rd_gen);
	return 0;
}

// ---- Go net/http client hand-off ----

// net/http.(*persistConn).roundTrip(pc, req *transportRequest) on the
// calling goroutine: transportRequest's first field is the *Request.
SEC("uprobe")
int rd_go_roundtrip(struct pt_regs *ctx)
{
	if (!ours())
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gkey gk = {.tgid = tgid, .g = BPF_CORE_READ(ctx, r14)};
	__u64 *span = bpf_map_lookup_elem(&rd_goroutines, &gk);
	if (!span)
		return 0;
	__u64 v = *span;
	__u64 treq = BPF_CORE_READ(ctx, bx);
	__u64 req = 0;
	if (bpf_probe_read_user(&req, sizeof(req), (void *)treq) < 0 || !req)
		return 0;
	struct gkey rk = {.tgid = tgid, .g = req};
	bpf_map_update_elem(&rd_goreqs, &rk, &v, BPF_ANY);
	stat(rd_slot, RD_STAT_GO_RT);
	return 0;
}

// net/http.(*Request).write(r, …) on the connection's writeLoop goroutine.
SEC("uprobe")
int rd_go_reqwrite(struct pt_regs *ctx)
{
	if (!ours())
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gkey rk = {.tgid = tgid, .g = BPF_CORE_READ(ctx, ax)};
	__u64 *span = bpf_map_lookup_elem(&rd_goreqs, &rk);
	if (!span)
		return 0;
	__u64 v = *span;
	bpf_map_delete_elem(&rd_goreqs, &rk);
	struct gkey gk = {.tgid = tgid, .g = BPF_CORE_READ(ctx, r14)};
	bpf_map_update_elem(&rd_gowrites, &gk, &v, BPF_ANY);
	stat(rd_slot, RD_STAT_GO_WR);
	return 0;
}
