// Per-container kernel metrics (ViperProbe, Brown 2020, §4, Table 2,
// Algorithm 1): tp_btf programs on scheduler, page-fault, block, socket, TCP,
// skb and TLB tracepoints that add each event to a log2 histogram or counter
// keyed by (container, metric). Every program first looks up the config of
// the event's container (its cgroup) and returns unless the metric is enabled
// there, then samples 1 event in rate. internal/kmetrics loads the programs
// and attaches each one only while some container wants one of its metrics.
//
// Build: go generate ./internal/kmetrics/ (bpf2go).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "kmetrics.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Kernel types read through CO-RE: only the fields used here, relocated
// against the running kernel's BTF.
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup_subsys_state *subsys[16];
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

enum cgroup_subsys_id {
	cpu_cgrp_id = 1,
};

struct sock_cgroup_data {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));

struct sock_common {
	__be16 skc_dport;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	__u16 sk_type;
	struct sock_cgroup_data sk_cgrp_data;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct sock *sk;
} __attribute__((preserve_access_index));

struct request {
	unsigned int __data_len;
} __attribute__((preserve_access_index));

struct request_sock;

#define TASK_DEAD 0x80
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define SOCK_STREAM 1
#define SKB_CONSUMED 1
#define SCHED_MASK ((1u << KM_ONCPU) | (1u << KM_OFFCPU) | (1u << KM_RUNQ))

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kmetrics_globals);
} km_globals SEC(".maps");

// km_config: container key -> its config.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct kmetrics_config);
} km_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct kmetrics_key);
	__type(value, struct kmetrics_hist);
} km_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct kmetrics_drop_key);
	__type(value, __u64);
} km_drops SEC(".maps");

// km_zero: a zeroed histogram to insert from (too big for the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kmetrics_hist);
} km_zero SEC(".maps");

// task_state: the open intervals of one thread of a watched container.
struct task_state {
	__u64 on_ts;  // switched in (on-CPU interval open)
	__u64 off_ts; // switched out blocked
	__u64 rq_ts;  // woken or preempted (runnable, waiting)
	__u64 key;    // container key when the interval opened
	__u64 gen;
};

// km_tasks: task local storage (a slot in the task itself: no hashing, freed
// with the task, so a reused tid never sees a dead task's intervals).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} km_tasks SEC(".maps");

// start: an open interval keyed by a kernel object (request, socket).
struct start {
	__u64 ts;
	__u64 key;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct start);
} km_rq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct start);
} km_dns SEC(".maps");

// rq_owner: who submitted a request that went through the I/O scheduler
// or a plug. Such a request is issued to the device later, by whichever
// task dispatches the queue (a kblockd worker, or another application
// whose own request runs the queue), which must not be charged for it.
// Made at the request's first insertion, in the submitter's context; kept
// until it completes, so that a request the driver hands back (inserted
// again, by the task that dispatched it) keeps its owner and is not
// charged twice. A request issued directly, without insertion, is issued
// by its submitter.
struct rq_owner {
	__u64 key;
	__u32 want;    // 1: disk_io_bytes, 2: disk_io_latency (sampled at insertion)
	__u32 charged; // its bytes were counted at an earlier issue
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct rq_owner);
} km_rqowner SEC(".maps");

// Force bpf2go to emit Go types for the shared structs.
const struct kmetrics_config *unused_config __attribute__((unused));
const struct kmetrics_key *unused_key __attribute__((unused));
const struct kmetrics_hist *unused_hist __attribute__((unused));
const struct kmetrics_drop_key *unused_drop_key __attribute__((unused));
const struct kmetrics_globals *unused_globals __attribute__((unused));

static __always_inline struct kmetrics_globals *globals(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&km_globals, &zero);
}

static __always_inline __u64 v1_key(struct task_struct *t)
{
	return t->cgroups->subsys[bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id)]->cgroup->kn->id | KM_V1_BIT;
}

// configured reports whether id may have an entry in km_config: a scan of
// the few known keys instead of a hash lookup. A listed key without an entry
// (during an update) falls back to the default, as does an entry whose key
// is not listed yet: one event at most goes to the default.
static __always_inline int configured(struct kmetrics_globals *g, __u64 id)
{
	__u32 n = g->nkeys;
	if (n > KM_FAST_KEYS)
		return 1;
#pragma unroll
	for (int i = 0; i < KM_FAST_KEYS; i++) {
		if (i >= n)
			return 0;
		if (g->keys[i] == id)
			return 1;
	}
	return 0;
}

// config_of returns the config of the container with v2 id id (task t,
// whose v1 cpu cgroup is tried next when v1 keys exist),
// setting *key to the container key; the default when it has no entry.
static __always_inline struct kmetrics_config *config_of(struct kmetrics_globals *g, __u64 id, struct task_struct *t, __u64 *key)
{
	struct kmetrics_config *c;
	*key = id;
	if (configured(g, id) && (c = bpf_map_lookup_elem(&km_config, &id)))
		return c;
	if (g->v1 && t) {
		__u64 k1 = v1_key(t);
		if (configured(g, k1) && (c = bpf_map_lookup_elem(&km_config, &k1))) {
			*key = k1;
			return c;
		}
	}
	return &g->dflt;
}

static __always_inline struct kmetrics_config *config_current(struct kmetrics_globals *g, __u64 *key)
{
	return config_of(g, bpf_get_current_cgroup_id(), g->v1 ? bpf_get_current_task_btf() : 0, key);
}

static __always_inline struct kmetrics_config *config_task(struct kmetrics_globals *g, struct task_struct *t, __u64 *key)
{
	return config_of(g, t->cgroups->dfl_cgrp->kn->id, t, key);
}

// config_sock: sockets carry their creator's cgroup v2 only.
static __always_inline struct kmetrics_config *config_sock(struct kmetrics_globals *g, const struct sock *sk, __u64 *key)
{
	if (!sk) {
		*key = 0;
		return &g->dflt;
	}
	return config_of(g, sk->sk_cgrp_data.cgroup->kn->id, 0, key);
}

// want implements Algorithm 1: enabled, then sample 1 in rate.
static __always_inline int want(struct kmetrics_config *c, __u32 m)
{
	if (!(c->enabled & (1u << m)))
		return 0;
	__u32 r = c->rate[m & (KM_MAX_METRICS - 1)];
	return r <= 1 || bpf_get_prandom_u32() % r == 0;
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0;
	if (v >= 1ULL << 32) { v >>= 32; r += 32; }
	if (v >= 1ULL << 16) { v >>= 16; r += 16; }
	if (v >= 1ULL << 8) { v >>= 8; r += 8; }
	if (v >= 1ULL << 4) { v >>= 4; r += 4; }
	if (v >= 1ULL << 2) { v >>= 2; r += 2; }
	if (v >= 1ULL << 1) { r += 1; }
	return r;
}

static __always_inline struct kmetrics_hist *hist(__u64 cg, __u32 m)
{
	struct kmetrics_key k = {.cgroup = cg, .metric = m};
	struct kmetrics_hist *h = bpf_map_lookup_elem(&km_hist, &k);
	if (h)
		return h;
	__u32 zero = 0;
	struct kmetrics_hist *z = bpf_map_lookup_elem(&km_zero, &zero);
	if (!z)
		return 0;
	bpf_map_update_elem(&km_hist, &k, z, BPF_NOEXIST);
	return bpf_map_lookup_elem(&km_hist, &k);
}

// observe adds value v to the histogram (the map is per-CPU: no atomics).
static __always_inline void observe(__u64 cg, __u32 m, __u64 v)
{
	struct kmetrics_hist *h = hist(cg, m);
	if (!h)
		return;
	h->count++;
	h->sum += v;
	h->buckets[log2_bucket(v) & (KM_BUCKETS - 1)]++;
}

// count adds one event carrying n (pages, …) to a counter.
static __always_inline void count(__u64 cg, __u32 m, __u64 n)
{
	struct kmetrics_hist *h = hist(cg, m);
	if (!h)
		return;
	h->count++;
	h->sum += n;
}

static __always_inline struct task_state *task_state(struct task_struct *t, __u64 gen)
{
	struct task_state *st = bpf_task_storage_get(&km_tasks, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (st && st->gen != gen) {
		st->on_ts = 0;
		st->off_ts = 0;
		st->rq_ts = 0;
		st->gen = gen;
	}
	return st;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(km_sched_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 now = 0; // read only for watched containers
	__u64 key;
	struct kmetrics_config *c;
	struct task_state *st;

	if (prev->pid) { // not the idle task
		c = config_current(g, &key);
		if ((c->enabled & SCHED_MASK) && (st = task_state(prev, g->gen))) {
			now = bpf_ktime_get_ns();
			if (st->on_ts) {
				observe(st->key, KM_ONCPU, now - st->on_ts);
				st->on_ts = 0;
			}
			// A preempted task stays runnable whatever state it was
			// setting (prev_state is the raw __state here); a dead one
			// never comes back.
			int runnable = preempt || prev_state == 0;
			st->key = key;
			st->rq_ts = runnable && want(c, KM_RUNQ) ? now : 0;
			st->off_ts = !runnable && !(prev_state & TASK_DEAD) && want(c, KM_OFFCPU) ? now : 0;
		}
	}
	if (next->pid) {
		c = config_task(g, next, &key);
		if ((c->enabled & SCHED_MASK) && (st = task_state(next, g->gen))) {
			if (!now)
				now = bpf_ktime_get_ns();
			if (st->rq_ts) {
				observe(st->key, KM_RUNQ, now - st->rq_ts);
				st->rq_ts = 0;
			}
			if (st->off_ts) {
				observe(st->key, KM_OFFCPU, now - st->off_ts);
				st->off_ts = 0;
			}
			st->key = key;
			st->on_ts = want(c, KM_ONCPU) ? now : 0;
		}
	}
	return 0;
}

static __always_inline int on_wakeup(struct task_struct *p)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key;
	struct kmetrics_config *c = config_task(g, p, &key);
	if (!want(c, KM_RUNQ))
		return 0;
	struct task_state *st = task_state(p, g->gen);
	if (st) {
		st->rq_ts = bpf_ktime_get_ns();
		st->key = key;
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(km_sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(km_sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

static __always_inline int count_current(__u32 m, __u64 n)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key;
	struct kmetrics_config *c = config_current(g, &key);
	if (want(c, m))
		count(key, m, n);
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(km_page_fault_user)
{
	return count_current(KM_PF_USER, 1);
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(km_page_fault_kernel)
{
	return count_current(KM_PF_KERNEL, 1);
}

SEC("tp_btf/tlb_flush")
int BPF_PROG(km_tlb_flush, int reason, unsigned long pages)
{
	// TLB_FLUSH_ALL (-1) flushes everything: counted, no pages added.
	return count_current(KM_TLB_FLUSH, pages == ~0UL ? 0 : pages);
}

// Block requests are charged to the task that submitted them (direct I/O
// and synchronous writes: the application, even when another task issues
// the request to the device; page-cache writeback: the flusher's cgroup).
static __always_inline __u32 disk_want(struct kmetrics_config *c)
{
	return (want(c, KM_DISK_BYTES) ? 1 : 0) | (want(c, KM_DISK_LAT) ? 2 : 0);
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(km_block_rq_insert, struct request *rq)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	struct rq_owner o = {};
	o.want = disk_want(config_current(g, &o.key));
	__u64 id = (__u64)rq;
	// The first insertion wins (see rq_owner); the entry goes when the
	// request completes or is merged into another.
	bpf_map_update_elem(&km_rqowner, &id, &o, BPF_NOEXIST);
	return 0;
}

// A request merged into another (by the I/O scheduler) is freed without
// completing: its owner goes with it, or the next use of the request struct
// would inherit it.
SEC("tp_btf/block_rq_merge")
int BPF_PROG(km_block_rq_merge, struct request *rq)
{
	__u64 id = (__u64)rq;
	bpf_map_delete_elem(&km_rqowner, &id);
	bpf_map_delete_elem(&km_rq, &id);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(km_block_rq_issue, struct request *rq)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key, id = (__u64)rq;
	__u32 w;
	struct rq_owner *o = bpf_map_lookup_elem(&km_rqowner, &id);
	if (o) {
		key = o->key;
		w = o->charged ? o->want & ~1u : o->want;
		o->charged = 1;
	} else {
		w = disk_want(config_current(g, &key));
	}
	if (w & 1)
		observe(key, KM_DISK_BYTES, rq->__data_len);
	if (w & 2) {
		struct start s = {.ts = bpf_ktime_get_ns(), .key = key};
		// From the first issue: one the driver hands back and that is
		// issued again keeps its start, as the device's own accounting does.
		bpf_map_update_elem(&km_rq, &id, &s, BPF_NOEXIST);
	}
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(km_block_rq_complete, struct request *rq)
{
	__u64 id = (__u64)rq;
	bpf_map_delete_elem(&km_rqowner, &id);
	struct start *s = bpf_map_lookup_elem(&km_rq, &id);
	if (!s)
		return 0;
	observe(s->key, KM_DISK_LAT, bpf_ktime_get_ns() - s->ts);
	bpf_map_delete_elem(&km_rq, &id);
	return 0;
}

// sock_send_length / sock_recv_length fire at the end of sock_sendmsg and
// sock_recvmsg in the caller's context, with the byte count as ret.
SEC("tp_btf/sock_send_length")
int BPF_PROG(km_sock_send, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key;
	__u16 proto = sk->sk_protocol;
	if (proto == IPPROTO_TCP) {
		struct kmetrics_config *c = config_current(g, &key);
		if (sk->sk_type == SOCK_STREAM && want(c, KM_TCP_SEND))
			observe(key, KM_TCP_SEND, ret);
	} else if (proto == IPPROTO_UDP && sk->__sk_common.skc_dport == bpf_htons(53)) {
		struct kmetrics_config *c = config_current(g, &key);
		if (want(c, KM_DNS_LAT)) {
			__u64 id = (__u64)sk;
			struct start s = {.ts = bpf_ktime_get_ns(), .key = key};
			// The first query of a burst (A and AAAA) starts the clock.
			bpf_map_update_elem(&km_dns, &id, &s, BPF_NOEXIST);
		}
	}
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(km_sock_recv, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	__u16 proto = sk->sk_protocol;
	if (proto == IPPROTO_TCP) {
		struct kmetrics_globals *g = globals();
		if (!g)
			return 0;
		__u64 key;
		struct kmetrics_config *c = config_current(g, &key);
		if (sk->sk_type == SOCK_STREAM && want(c, KM_TCP_RECV))
			observe(key, KM_TCP_RECV, ret);
	} else if (proto == IPPROTO_UDP) {
		__u64 id = (__u64)sk;
		struct start *s = bpf_map_lookup_elem(&km_dns, &id);
		if (!s)
			return 0;
		observe(s->key, KM_DNS_LAT, bpf_ktime_get_ns() - s->ts);
		bpf_map_delete_elem(&km_dns, &id);
	}
	return 0;
}

// TCP retransmissions run in timer or softirq context: charged to the
// socket's cgroup (v2), not to the current task.
SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(km_tcp_retransmit_skb, const struct sock *sk)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key;
	struct kmetrics_config *c = config_sock(g, sk, &key);
	if (want(c, KM_TCP_RETRANS))
		count(key, KM_TCP_RETRANS, 1);
	return 0;
}

SEC("tp_btf/tcp_retransmit_synack")
int BPF_PROG(km_tcp_retransmit_synack, const struct sock *sk)
{
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	__u64 key;
	struct kmetrics_config *c = config_sock(g, sk, &key); // the listener
	if (want(c, KM_TCP_SYNACK))
		count(key, KM_TCP_SYNACK, 1);
	return 0;
}

// Drops: skbs freed with a reason other than "consumed", charged to the
// owning or receiving socket's cgroup, else to container key 0 under the
// default config.
SEC("tp_btf/kfree_skb")
int BPF_PROG(km_kfree_skb, struct sk_buff *skb, void *location, int reason, struct sock *rx_sk)
{
	if (reason <= SKB_CONSUMED)
		return 0;
	struct kmetrics_globals *g = globals();
	if (!g)
		return 0;
	struct sock *sk = skb->sk;
	if (!sk)
		sk = rx_sk;
	__u64 key;
	struct kmetrics_config *c = config_sock(g, sk, &key);
	if (!want(c, KM_DROPS))
		return 0;
	struct kmetrics_drop_key k = {.cgroup = key, .reason = reason < KM_DROP_REASONS ? reason : 0};
	__u64 *n = bpf_map_lookup_elem(&km_drops, &k);
	if (n) {
		(*n)++;
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&km_drops, &k, &one, BPF_NOEXIST);
	}
	count(key, KM_DROPS, 1);
	return 0;
}
