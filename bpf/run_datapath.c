// The in-kernel datapath of `rootline run`: trace context propagation and
// the Mirage wait headers for an unmodified service, with no stop of the
// service on its request path (Rbinder, seed 002 §3.2, without ptrace).
//
// - sock_ops (attached to the run's cgroup v2) sees every TCP connection of
//   the service established: accepted ones are inbound, connected ones
//   outbound. Each goes into a sockhash (so that the sk_msg program sees its
//   writes) and gets a struct conn, keyed by the address of its struct sock.
// - The sock_recv_length tracepoint (every read, recvfrom, readv and recvmsg
//   on a socket) follows what the service reads: request heads on
//   inbound connections (the caller's trace context: traceparent, b3,
//   x-b3-*, x-request-id, tracestate), response heads on outbound ones (the
//   downstream's rootline-server-time and rootline-wait).
// - The sk_msg program sees what the service writes, before it is queued:
//   a request head on an outbound connection gets traceparent, b3, x-b3-*
//   and x-request-id lines for the request the writing thread (or Go
//   goroutine) services; a response head on an inbound connection gets
//   rootline-server-time and rootline-wait. bpf_msg_push_data inserts the
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
// Build: go generate ./internal/rbinder/datapath/ (bpf2go).

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

// Writable globals, so their values are unknown to the verifier (it does
// not track what map memory holds). The state of bpf_loop callbacks starts
// from them instead of constants: a counter that starts at a known 0 would
// be a new state at every iteration, and the callback would be verified
// once per iteration instead of a few times.
volatile __s32 rt_zero = 0;
volatile __s32 rt_m1 = -1;
#define ZERO rt_zero
#define M1 rt_m1

// ---- kernel types (CO-RE) ----

struct pt_regs {
	unsigned long r14;
	unsigned long bx;
	unsigned long ax;
	unsigned long dx;
	unsigned long si;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct sched_info {
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct sched_info sched_info;
} __attribute__((preserve_access_index));

struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

struct sock_common {
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	int sk_sndbuf;
	int sk_wmem_queued;
	void *sk_user_data;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 write_seq;
} __attribute__((preserve_access_index));

struct iovec_u {
	__u64 base;
	__u64 len;
};

struct user_msghdr_u {
	__u64 name;
	__s32 namelen;
	__s32 _pad;
	__u64 iov;
	__u64 iovlen;
};

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2

// ---- per-connection state ----

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
#define HX_N 12

// tracestate: fields of a head combined, and list members (W3C Trace
// Context allows 32; httpstream.maxTraceStateFields).
#define TS_FIELDS 32
#define TS_MEMBERS 32

struct hinfo {
	__u32 has;     // HD_* bits
	__u32 status;  // a response's status code
	__u32 tp_count;
	__u32 _pad;
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
	__u8 _pad2[5];
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
	__u64 start;   // when the current head began (ns)
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
	__u32 _pad;
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
	__u8 _pad;
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
	__u32 _pad2;
	struct callrec cq[RQ];
	struct callrec call;
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


// ---- maps ----

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct conn);
} rd_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} rd_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct req);
} rd_reqs SEC(".maps");

// thread → the request it services (non-Go processes)
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} rd_threads SEC(".maps");

// Go: goroutine → the request it services
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gkey);
	__type(value, __u64);
} rd_goroutines SEC(".maps");

// Go: *http.Request → the request that made it (roundTrip); consumed by
// (*Request).write
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct gkey);
	__type(value, __u64);
} rd_goreqs SEC(".maps");

// Go: writeLoop goroutine → the request whose client request it writes
// next; consumed by the write
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct gkey);
	__type(value, __u64);
} rd_gowrites SEC(".maps");

// Go processes of the run (set by user space)
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} rd_gopids SEC(".maps");



// Each run's events ring, by slot. One datapath serves every `rootline run`
// of the node (see internal/rbinder/datapath): each reads its own ring.
struct rd_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, RD_SLOTS);
	__type(key, __u32);
	__array(values, struct rd_ring);
} rd_rings SEC(".maps");

// The generation of the run that holds each slot (0: none). A connection
// of a run that is gone (killed: its slot later taken by another) carries
// an older generation, and its events go nowhere.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RD_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} rd_gens SEC(".maps");

// Bytes each CPU sent to each slot's ring since it last woke the reader.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RD_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} rd_unread SEC(".maps");

// The process of each run (its tgid → its slot): when it exits, however it
// dies, rd_runexit clears its slot's generation, and its connections pass
// through untouched from then on.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * RD_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} rd_runpids SEC(".maps");

// Counters, indexes RD_STAT_* (read by user space).
#define RD_STAT_LOST 0     // events the ring buffer could not take
#define RD_STAT_NOCONN 1   // conn state could not be made
#define RD_STAT_INJECT 2   // heads that got lines
#define RD_STAT_SKIP 3     // heads left unchanged that should have had lines
#define RD_STAT_OPAQUE 4   // connections found not to be HTTP/1.x
#define RD_STAT_NOREQ 5    // request state could not be made
#define RD_STAT_GO_RT 6    // Go roundTrip calls made while servicing a request
#define RD_STAT_GO_WR 7    // Go client requests handed over to their writeLoop
#define RD_STAT_N 8
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RD_SLOTS * RD_STAT_N);
	__type(key, __u32);
	__type(value, __u64);
} rd_stats SEC(".maps");


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

struct scratch {
	__u64 l; // opaque()
	__u8 data[SCR + RD_HEAD + 8]; // SCR bytes; the rest lets a head be copied from any offset
	__u8 text[TEXT + 8]; // + 8: put8 at the last offsets
	struct hinfo hi;
	struct call_ids ci;
	struct scan_out {
		__s32 brk;  // index of the head's final line break in data (-1: not there)
		__s32 done; // the head ended in data
		__s32 bad;  // not HTTP/1.x
	} so;
	struct rd_event ev;
	struct ts_scan ts;
	struct req zreq;   // stays zero
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct scratch);
} rd_scratch SEC(".maps");

// The initial value of a new conn: stays zero. Not in the per-CPU scratch,
// whose values the kernel limits to 32 KiB.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct conn);
} rd_zconn SEC(".maps");

// Force bpf2go to emit Go types for the shared structs.
const struct rd_event *_rd_event __attribute__((unused));

// ---- helpers ----

// stat counts one event of counter i for the run in slot.
static __always_inline void stat(__u32 slot, __u32 i)
{
	__u32 k = slot * RD_STAT_N + i;
	__u64 *v = bpf_map_lookup_elem(&rd_stats, &k);
	if (v)
		*v += 1;
}

// Scratch space: slot 0 for programs that run in process context, slot 1
// for sock_ops, which may run in a softirq that interrupts one of them.
static __always_inline struct scratch *scratch_at(__u32 slot)
{
	return bpf_map_lookup_elem(&rd_scratch, &slot);
}
#define scratch() scratch_at(0)

// opaque returns v as a value the verifier does not know (it does not track
// map memory). What starts a bpf_loop callback's state goes through it, so
// that the callback is verified for any value rather than once per value
// reaching it.
static __always_inline __u64 opaque(__u64 v)
{
	struct scratch *s = scratch();
	if (!s)
		return 0;
	s->l = v;
	return *(volatile __u64 *)&s->l;
}
#define OPQ(v) ((__typeof__(v))opaque(v))

static __always_inline int ours(void)
{
	return bpf_get_current_cgroup_id() == rd_cgroup;
}

static __always_inline __u64 run_delay(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	return BPF_CORE_READ(t, sched_info.run_delay);
}

static __always_inline __u64 cur_g(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	return BPF_CORE_READ(regs, r14);
}

static __always_inline __u64 rand64(void)
{
	__u64 v = ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32();
	return v ? v : 1; // ids are never zero
}

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


// emit_to sends ev (head_len bytes of head) to the run in slot, if it is
// still the run of generation gen.
static __always_inline void emit_to(struct rd_event *ev, __u32 slot, __u32 gen)
{
	__u32 *g = bpf_map_lookup_elem(&rd_gens, &slot);
	if (!g || *g != gen)
		return;
	void *ring = bpf_map_lookup_elem(&rd_rings, &slot);
	if (!ring) {
		stat(slot, RD_STAT_LOST);
		return;
	}
	__u32 n = ev->head_len;
	if (n > RD_HEAD)
		n = RD_HEAD;
	__u64 sz = __builtin_offsetof(struct rd_event, head) + n;
	asm volatile("" : "+r"(sz));
	if (sz > sizeof(struct rd_event))
		sz = sizeof(struct rd_event);
	// User space reads the ring on a timer (datapath.Read, every second in
	// `rootline run`); it is woken early once this CPU alone has sent an
	// rd_wake_bytes share of a quarter of the ring since it last woke it (a
	// count of its own: asking the ring how full it is reads cache lines
	// the reader writes), so a burst cannot fill the ring between two reads.
	__u64 flags = BPF_RB_NO_WAKEUP;
	__u64 *unread = bpf_map_lookup_elem(&rd_unread, &slot);
	if (unread) {
		*unread += sz;
		if (*unread >= rd_wake_bytes) {
			*unread = 0;
			flags = BPF_RB_FORCE_WAKEUP;
		}
	}
	if (bpf_ringbuf_output(ring, ev, sz, flags) < 0)
		stat(slot, RD_STAT_LOST);
}

// emit sends ev to the run that follows connection c.
#define emit(ev, c) emit_to((ev), (c)->slot, (c)->gen)

// live reports whether the run that follows c is still there. A connection
// of a run that is gone is forgotten: it passes through from then on.
static __always_inline int live(struct conn *c, __u64 key)
{
	__u32 slot = c->slot;
	__u32 *g = bpf_map_lookup_elem(&rd_gens, &slot);
	if (g && *g == c->gen)
		return 1;
	bpf_map_delete_elem(&rd_conns, &key);
	return 0;
}

static __always_inline void ev_reset(struct rd_event *ev, __u32 type, struct conn *c, __u64 sk)
{
	__builtin_memset(ev, 0, __builtin_offsetof(struct rd_event, head));
	__u64 id = bpf_get_current_pid_tgid();
	ev->type = type;
	ev->tgid = id >> 32;
	ev->tid = (__u32)id;
	ev->ts = bpf_ktime_get_ns();
	ev->sk = sk;
	if (c) {
		ev->raddr[0] = c->raddr[0];
		ev->raddr[1] = c->raddr[1];
		ev->raddr[2] = c->raddr[2];
		ev->raddr[3] = c->raddr[3];
		ev->rport = c->rport;
		ev->lport = c->lport;
		if (c->family == AF_INET6)
			ev->flags |= RD_F_IPV6;
	}
}

static __always_inline void make_opaque(struct conn *c, __u64 sk, struct scratch *s)
{
	dbg("opaque dir=%d rd=%d wr=%d", c->dir, c->rd.state, c->wr.state);
	if (c->rd.state == H_OPAQUE)
		return;
	c->rd.state = H_OPAQUE;
	c->wr.state = H_OPAQUE;
	stat(c->slot, RD_STAT_OPAQUE);
	ev_reset(&s->ev, RD_EV_OPAQUE, c, sk);
	emit(&s->ev, c);
}

// touch charges a request's run-queue wait on the calling thread since its
// last event there, and records the thread.
static __always_inline void touch(struct req *r)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 rd = run_delay();
	if (r->seg_tid == tid) {
		if (rd > r->seg_rd)
			r->local_ns += rd - r->seg_rd;
	} else {
		int known = 0;
		for (int i = 0; i < RD_MAX_TIDS; i++) {
			if (i < r->ntids && r->tids[i] == tid)
				known = 1;
		}
		if (!known && r->ntids < RD_MAX_TIDS) {
			__u32 k = r->ntids;
			if (k < RD_MAX_TIDS)
				r->tids[k] = tid;
			r->ntids = k + 1;
		}
		r->seg_tid = tid;
	}
	r->seg_rd = rd;
}

// ---- head scanning ----

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
	case 14:
		if (NAME_IS(h, ls, "content-length"))
			field(hi, HX_CL, HD_CL, vs, ve);
		break;
	case 17:
		if (NAME_IS(h, ls, "transfer-encoding"))
			field(hi, HX_TE, HD_CHUNKED, vs, ve);
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
	int ver = hexval(h[vs & HEAD_MASK], 0) * 16 + hexval(h[(vs + 1) & HEAD_MASK], 0);
	int fl = hexval(h[(vs + 53) & HEAD_MASK], 0) * 16 + hexval(h[(vs + 54) & HEAD_MASK], 0);
	if (ver < 0 || ver == 0xff || (ver == 0 && vl != 55) || fl < 0)
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
	hi->sampled = 1;
	if (ss + 16 < ve) {
		__u8 sc = h[(ss + 17) & HEAD_MASK];
		if (h[(ss + 16) & HEAD_MASK] != '-' || ss + 17 >= ve)
			return 0;
		if (sc == '0')
			hi->sampled = 0;
		else if (sc != '1' && sc != 'd')
			return 0;
	}
	hi->span = span_from(hi->tmp);
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

// ---- tracestate ----
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

struct digit_ctx {
	__u8 *h;
	__u32 at;
	__u32 n;
	__u32 bad;
};

static long digit_cb(__u32 i, struct digit_ctx *x)
{
	if (i >= x->n)
		return 1;
	__u8 c = x->h[(x->at + i) & HEAD_MASK];
	if (c < '0' || c > '9') {
		x->bad = 1;
		return 1;
	}
	return 0;
}

// digits_only reports whether h[at:at+n] is all decimal digits.
static __always_inline int digits_only(__u8 *h, __u32 at, __u32 n)
{
	struct digit_ctx x = {.h = h, .at = OPQ(at), .n = OPQ(n), .bad = ZERO};
	bpf_loop(32, digit_cb, &x, 0);
	return !x.bad;
}

// decode_framing reads Content-Length and Transfer-Encoding.
__noinline int decode_framing(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb)
		return 0;
	__u8 *h = hb->b;
	if (!hi)
		return 0;
	if (hi->has & HD_CL) {
		__u32 o = hi->off[HX_CL], l = hi->len[HX_CL];
		hi->cl = number(h, o, l, 0);
		// Digits only: anything else is a framing the kernel side does not
		// follow (RFC 9112 §6.3: a bad Content-Length is an error).
		if (l == 0 || l > 19 || !digits_only(h, o, l))
			hi->has |= HD_CL_BAD;
	}
	if (hi->has & HD_CHUNKED) {
		// chunked must be the last coding
		__u32 o = hi->off[HX_TE], l = hi->len[HX_TE];
		if (l < 7 || !NAME_IS(h, o + l - 7, "chunked"))
			hi->has &= ~HD_CHUNKED;
	}
	return 0;
}

// decode_timing reads a downstream's rootline-server-time and rootline-wait.
__noinline int decode_timing(struct head_buf *hb, struct hinfo *hi)
{
	if (!hb)
		return 0;
	__u8 *h = hb->b;
	if (!hi)
		return 0;
	if (hi->has & HD_SERVERTIME)
		hi->server_us = number(h, hi->off[HX_ST], hi->len[HX_ST], 0);
	if (hi->has & HD_WAIT)
		hi->wait_us = number(h, hi->off[HX_WAIT], hi->len[HX_WAIT], 1);
	return 0;
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

// ---- building inserted lines ----

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

// ---- reading ----


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
	__u64 net = 0, remote = q->wait * 1000;
	if (q->flags & RD_F_TIMED)
		net = client > server ? client - server : 0;
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
	if (hi->has & (HD_BAD | HD_CL_BAD)) {
		make_opaque(c, sk, s); // malformed: the service will answer it, or not, untouched
		return 0;
	}
	if (!decode_tp(&c->qhead, hi) && !decode_b3(&c->qhead, hi))
		decode_xb3(&c->qhead, hi);
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
	__u64 id = bpf_get_current_pid_tgid();
	r->span = span;
	r->sk = sk;
	r->tgid = id >> 32;
	r->start = c->rd.start;
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
	__u32 n = hi->len[HX_RID];
	if ((hi->has & HD_RID) && n > 0 && n <= RD_RID) {
		struct val_ctx v = {.src = c->qhead.b, .off = OPQ(hi->off[HX_RID]), .n = OPQ(n), .dst = r->rid, .bad = ZERO};
		bpf_loop(RD_RID, copy_rid_cb, &v, 0);
		if (!v.bad)
			r->rid_len = n;
	}
	dbg("request read span=%x queued=%d", span, c->rq_next - c->rq_first);
	c->rq[c->rq_next & (RQ - 1)] = span;
	c->rq_head[c->rq_next & (RQ - 1)] = c->head_req;
	c->rq_next++;
	c->rd.finals++;
	bind_request(c, r);

	struct rd_event *ev = &s->ev;
	ev_reset(ev, RD_EV_REQ, c, sk);
	ev->flags |= r->flags;
	if (hlen > RD_HEAD)
		ev->flags |= RD_F_CUT;
	__builtin_memcpy(ev->trace, r->trace, 16);
	ev->span = span;
	ev->parent = r->parent;
	ev->start = r->start;
	copy_head(ev, &c->qhead, kept);
	emit(ev, c);

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
	if (hi->has & (HD_BAD | HD_CL_BAD)) {
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
	if (hi->has & HD_SERVERTIME) {
		c->call.flags |= RD_F_TIMED;
		c->call.server = hi->server_us;
		c->call.wait = hi->wait_us;
	}
	if ((c->call.flags & CALL_HEAD) || hi->status == 204 || hi->status == 304) {
		end_call(c, sk, 0, s);
	} else if (hi->has & HD_CHUNKED) {
		chunk_start(&c->rd);
	} else if (hi->has & HD_CL) {
		if (hi->cl == 0) {
			end_call(c, sk, 0, s);
		} else {
			c->rd.state = H_BODY;
			c->rd.body = hi->cl;
		}
	} else {
		c->rd.state = H_CLOSE;
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


// ---- heads: one pass, a word at a time ----
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

// field_line classifies the field line h[ls:e) (without its line break).
__noinline int field_line(struct head_buf *hb, struct hinfo *hi, __u32 ls, __u32 e)
{
	if (!hb || !hi)
		return 0;
	__u8 *h = hb->b;
	__s32 colon = find(h, ls, e, ':', 0);
	if (colon <= (__s32)ls || h[ls & HEAD_MASK] == ' ' || h[ls & HEAD_MASK] == '\t' ||
	    h[(colon - 1) & HEAD_MASK] == ' ') {
		// no name and colon, an obsolete folded line, or space before
		// the colon: not something to add lines to
		hi->has |= HD_BAD;
		return 0;
	}
	struct trim_ctx t = {.h = h, .vs = OPQ(colon + 1), .ve = OPQ(e)};
	bpf_loop(RD_HEAD, trim_cb, &t, 0);
	classify(hb, hi, ls, colon, (__u64)t.vs << 32 | t.ve);
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
	if (request ? !(b >= 'A' && b <= 'Z') : b != 'H') {
		if (c->wr.finals == 0 && c->rd.finals == 0)
			make_opaque(c, sk, s);
		return -1;
	}
	__builtin_memset(h, 0, __builtin_offsetof(struct half, finals));
	__builtin_memset(&h->hi, 0, sizeof(h->hi));
	h->state = H_HEAD;
	h->start = ts;
	return p;
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
	if (bpf_probe_read_user(s->data, sz, (void *)(x->ubuf + x->off)) < 0)
		return 1;
	__u32 p = 0;
	if (h->state == H_IDLE) {
		int b = head_begin(c, h, sk, s, c->dir == DIR_IN, m, x->ts);
		if (b < 0)
			return 1;
		if ((__u32)b >= m) {
			x->off += m;
			return 0;
		}
		p = b;
	}
	__u32 end = head_feed(c, 0, s, p, m);
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
	struct read_ctx r = {.c = x->c, .s = x->s, .sk = x->sk, .ubuf = v.base, .ts = x->ts, .n = OPQ(k), .off = ZERO};
	bpf_loop(MAX_STEPS, read_step, &r, 0);
	if (r.off < r.n && x->c->rd.state != H_OPAQUE && x->c->rd.state != H_CLOSE)
		make_opaque(x->c, x->sk, x->s);
	x->left -= k;
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
	// This runs for every socket read of every process on the node, once
	// per `rootline run`. Ours are in the rd_socks sockhash (sockops drops
	// a connection that cannot join it), so they hold a psock in
	// sk_user_data: one load turns away the others (a sidecar's, say)
	// before the hash lookup.
	if (!sock->sk_user_data)
		return 0;
	__u64 key = (__u64)sock;
	struct conn *c = bpf_map_lookup_elem(&rd_conns, &key);
	if (!c || !live(c, key))
		return 0;
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
	struct iov_ctx x = {.c = c, .s = s, .sk = sk, .buf = buf, .iovcnt = OPQ(iovcnt), .left = OPQ(ret),
			    .ts = bpf_ktime_get_ns()};
	bpf_loop(4, iov_cb, &x, 0);
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

static __noinline __u32 request_lines(struct text *t, struct req *r, struct call_ids *ci, struct hinfo *hi)
{
	__u8 *trace = ci->trace;
	__u64 span = ci->span, parent = ci->parent;
	__u8 sampled = ci->sampled;
	int instrumented = hi->has & (HD_TRACEPARENT | HD_B3 | HD_B3TRACE | HD_B3SPAN);
	if (!instrumented) {
		__u8 smp = sampled ? '1' : '0';
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
		PUT(t, "\r\nx-b3-traceid: ");
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
	if (!(hi->has & HD_RID)) {
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
	if (hi->has & (HD_BAD | HD_CL_BAD)) {
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
	request_lines(&t, r, ci, hi);
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
		emit(ev, c);
	}
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
	if (hi->has & (HD_BAD | HD_CL_BAD)) {
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
	c->rsp_status = hi->status;
	dbg("response head req=%x queued=%d brk=%d", c->req, c->rq_next - c->rq_first, brk);
	__u64 span = c->req;
	struct req *r = span ? bpf_map_lookup_elem(&rd_reqs, &span) : 0;
	if (r) {
		touch(r);
		unbind_request(r);
		if (!(hi->has & (HD_SERVERTIME | HD_WAIT))) {
			__u64 now = bpf_ktime_get_ns();
			struct text t = {.b = s->text};
			PUT(&t, "rootline-server-time: ");
			put_num(&t, now > r->start ? (now - r->start) / 1000 : 0);
			PUT(&t, "\r\nrootline-wait: ");
			put_num(&t, r->local_ns / 1000);
			PUT(&t, ";kind=local, ");
			put_num(&t, r->max_net / 1000);
			PUT(&t, ";kind=net, ");
			put_num(&t, r->max_remote / 1000);
			PUT(&t, ";kind=remote\r\n");
			if (brk < 0)
				skip(c, sk, RD_SKIP_SPLIT);
			else if (!room_for(c, brk + t.n))
				skip(c, sk, RD_SKIP_SNDBUF);
			else if (insert(msg, brk, s->text, t.n) < 0)
				skip(c, sk, RD_SKIP_PUSH);
			else
				stat(c->slot, RD_STAT_INJECT);
		}
	}
	if (head_req || hi->status == 204 || hi->status == 304) {
		end_request(c, sk, 0, s);
	} else if (hi->has & HD_CHUNKED) {
		chunk_start(&c->wr);
	} else if (hi->has & HD_CL) {
		if (hi->cl == 0) {
			end_request(c, sk, 0, s);
		} else {
			c->wr.state = H_BODY;
			c->wr.body = hi->cl;
		}
	} else {
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
	if (bpf_msg_pull_data(msg, x->off, x->off + m, 0) < 0)
		return 1;
	__u8 *d = msg->data, *e = msg->data_end;
	__u64 avail = (__u64)(e - d);
	if (avail < m)
		m = avail;
	__u64 sz = copy_len(m, SCR_MASK, SCR);
	if (sz == 0 || bpf_probe_read_kernel(s->data, sz, d) < 0)
		return 1;
	m = sz;
	__u32 p = 0;
	if (h->state == H_IDLE) {
		int b = head_begin(c, h, sk, s, c->dir == DIR_OUT, m, x->ts);
		if (b < 0)
			return 1;
		if ((__u32)b >= m) {
			x->off += m;
			return 0;
		}
		p = b;
	}
	__u32 end = head_feed(c, 1, s, p, m);
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
	// What was inserted shifts the rest of the message.
	__u32 grown = msg->size - x->size;
	x->size = msg->size;
	x->off += end + grown;
	return 0;
}

SEC("sk_msg")
int rd_msg(struct sk_msg_md *msg)
{
	__u64 sk = (__u64)msg->sk;
	struct conn *c = bpf_map_lookup_elem(&rd_conns, &sk);
	if (!c || c->wr.state == H_OPAQUE || !live(c, sk))
		return SK_PASS;
	sk = c->addr; // the same value, as a number the verifier lets functions take
	struct scratch *s = scratch();
	if (!s)
		return SK_PASS;
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
	if (msg->size != size && msg->size <= PULL_MAX)
		bpf_msg_pull_data(msg, 0, msg->size, 0);
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
