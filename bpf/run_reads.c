// Inbound bytes of `rootline run` without ptrace stops: tracepoints on
// read(2) and recvfrom(2) copy what a supervised process reads from a
// watched socket into a ring buffer. internal/run watches the sockets
// it has classified (accepted or connected) and drains the ring buffer at
// its next ptrace stop, before it acts on any later call of the process:
// a record is submitted at the read's exit, so it is in the ring buffer
// before the thread can make another system call. The seccomp filter then
// leaves read and recvfrom untraced; writes still stop, as only ptrace can
// rewrite them.
//
// Build: go generate ./internal/run/readtap/ (bpf2go).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "run_reads.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct sched_info {
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	struct sched_info sched_info;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long r14;
} __attribute__((preserve_access_index));

#define MSG_PEEK 2

// The layouts of the syscalls:sys_{enter,exit}_* tracepoint records.
struct sys_enter_ctx {
	__u64 _common;
	__s32 nr;
	__u32 _pad;
	__u64 args[6];
};

struct sys_exit_ctx {
	__u64 _common;
	__s32 nr;
	__u32 _pad;
	__s64 ret;
};

// rr_watched: the sockets to copy, set by user space.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rr_key);
	__type(value, struct rr_watch);
} rr_watched SEC(".maps");

// rr_inflight: per thread, a read on a watched socket between its entry
// and exit.
struct inflight {
	__u64 buf;
	__u64 g;
	__s32 fd;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct inflight);
} rr_inflight SEC(".maps");

// rr_reads: user space sizes it before load.
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 23);
} rr_reads SEC(".maps");

// rr_lost counts chunks dropped because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rr_lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rr_read);
} rr_scratch SEC(".maps");

// Force bpf2go to emit Go types for the shared structs.
const struct rr_read *_rr_read __attribute__((unused));
const struct rr_key *_rr_key __attribute__((unused));
const struct rr_watch *_rr_watch __attribute__((unused));

static __always_inline int enter(__s32 fd, __u64 buf)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct rr_key k = {.tgid = id >> 32, .fd = fd};
	if (!bpf_map_lookup_elem(&rr_watched, &k))
		return 0;
	struct inflight in = {.buf = buf, .fd = fd};
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	in.g = BPF_CORE_READ(regs, r14);
	bpf_map_update_elem(&rr_inflight, &id, &in, BPF_ANY);
	return 0;
}

static __always_inline int leave(__s64 ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct inflight *in = bpf_map_lookup_elem(&rr_inflight, &id);
	if (!in)
		return 0;
	struct inflight c = *in;
	bpf_map_delete_elem(&rr_inflight, &id);
	if (ret <= 0)
		return 0;
	struct rr_key k = {.tgid = id >> 32, .fd = c.fd};
	struct rr_watch *w = bpf_map_lookup_elem(&rr_watched, &k);
	if (!w)
		return 0; // closed meanwhile
	__u32 zero = 0;
	struct rr_read *e = bpf_map_lookup_elem(&rr_scratch, &zero);
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->g = c.g;
	e->run_delay = BPF_CORE_READ(bpf_get_current_task_btf(), sched_info.run_delay);
	e->tgid = id >> 32;
	e->tid = (__u32)id;
	e->fd = c.fd;
	// Threads reading one socket at once are not ordered by this (nor is
	// the data they get): the reader then sees a gap and stops parsing.
	e->seq = w->seq;
	w->seq = e->seq + 1;
	e->total = ret;
	__u32 total = ret;
	for (__u32 i = 0; i < RR_MAX_CHUNKS; i++) {
		__u32 off = i * RR_CHUNK;
		if (off >= total)
			break;
		__u32 n = total - off;
		e->flags = 0;
		if (n <= RR_CHUNK)
			e->flags = RR_F_LAST;
		else if (i == RR_MAX_CHUNKS - 1)
			e->flags = RR_F_LAST | RR_F_TRUNC;
		if (n > RR_CHUNK)
			n = RR_CHUNK;
		// Hide the bound from clang, which would drop the mask as
		// redundant; the verifier needs it to see a bounded copy.
		__u64 sz = n;
		asm volatile("" : "+r"(sz));
		sz &= 2 * RR_CHUNK - 1;
		e->off = off;
		e->len = n;
		if (bpf_probe_read_user(e->data, sz, (void *)(c.buf + off)) < 0)
			e->len = 0, e->flags = RR_F_LAST | RR_F_TRUNC;
		// No wake-up: the reader drains at its own ptrace stops.
		if (bpf_ringbuf_output(&rr_reads, e, __builtin_offsetof(struct rr_read, data) + sz, BPF_RB_NO_WAKEUP) < 0) {
			__u64 *lost = bpf_map_lookup_elem(&rr_lost, &zero);
			if (lost)
				__sync_fetch_and_add(lost, 1);
			return 0;
		}
		if (e->flags & RR_F_LAST)
			break;
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_read")
int rr_enter_read(struct sys_enter_ctx *ctx)
{
	return enter((__s32)ctx->args[0], ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_exit_read")
int rr_exit_read(struct sys_exit_ctx *ctx)
{
	return leave(ctx->ret);
}

SEC("tracepoint/syscalls/sys_enter_recvfrom")
int rr_enter_recvfrom(struct sys_enter_ctx *ctx)
{
	if (ctx->args[3] & MSG_PEEK)
		return 0; // the bytes will be read again
	return enter((__s32)ctx->args[0], ctx->args[1]);
}

SEC("tracepoint/syscalls/sys_exit_recvfrom")
int rr_exit_recvfrom(struct sys_exit_ctx *ctx)
{
	return leave(ctx->ret);
}
