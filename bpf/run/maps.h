// The datapath's maps, its per-CPU scratch space and the helpers that use
// them (counters, the ring buffer, the verifier's opaque values).
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "run/kernel.h"
#include "run/state.h"

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
// of the node (see internal/run/datapath): each reads its own ring.
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
#define RD_STAT_H2 8       // of the opaque connections, those that began as HTTP/2
#define RD_STAT_N 9
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RD_SLOTS * RD_STAT_N);
	__type(key, __u32);
	__type(value, __u64);
} rd_stats SEC(".maps");

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
	if (c->h2) {
		stat(c->slot, RD_STAT_H2);
		s->ev.flags |= RD_F_H2;
	}
	emit(&s->ev, c);
}
