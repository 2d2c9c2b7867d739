// Scheduler flight recorder: thread states and wakeups of target processes
// (internal/profiler/kernel loads it). tp_btf programs on the sched
// tracepoints emit struct sr_event records into per-CPU ring buffers for
// tasks whose process (tgid) is in sr_targets or whose cgroup v2 id is in
// sr_cgroups, or for every task when sr_config.all is set.
//
// Cost model: nothing is emitted for untargeted tasks; what runs for them is
// one or two bitmap loads per context switch and wakeup (plus a hash lookup
// of the cgroup id while cgroups are targeted), and a per-CPU array write per
// irq/softirq/hrtimer entry and exit.
//
// Why a blocked task blocks: syscalls produce no records. When a target
// blocks, sched_switch reads the syscall it is in from the user registers
// the kernel saved at entry (bpf_task_pt_regs: orig_ax holds the syscall
// number; cx == ip and r11 == flags tell a SYSCALL-instruction entry from an
// exception, whose orig_ax is an error code) and, for read/write-like calls,
// resolves the fd's file type (socket, regular file, pipe…). A user task
// that blocks outside a syscall is in a page fault. This costs nothing per
// syscall. With sr_config.syscall_hooks set instead (user space then also
// attaches sys_enter/sys_exit), the syscall is tracked in task storage of
// target threads: portable to kernels without FRED-less x86-64 entry frames,
// but every syscall of every task then takes the tracing slow path. User
// space maps the syscall to a reason (lock, network, disk, timer, other).
//
// Why a wakeup happened: irq/softirq/hrtimer entry and exit maintain a per-CPU
// context; sched_waking records it, so a wakeup from interrupt context is
// attributed to that kind instead of to the interrupted thread.
//
// Build: go generate ./internal/profiler/kernel/ (bpf2go).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sched_recorder.h"

// A kfunc (Linux 6.2+): obj as a read-only pointer of the BTF type btf_id.
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Minimal kernel types: CO-RE relocates each field against the running
// kernel's BTF (/sys/kernel/btf/vmlinux), so only the fields used appear.
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct kiocb {
	struct file *ki_filp;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct rq {
	__u64 clock;
	int cpu;
} __attribute__((preserve_access_index));

struct cfs_rq {
	struct rq *rq; // CONFIG_FAIR_GROUP_SCHED
} __attribute__((preserve_access_index));

struct sched_entity {
	struct cfs_rq *cfs_rq;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	int prio;
	int pid;
	int tgid;
	char comm[SR_COMM_LEN];
	struct files_struct *files;
	struct css_set *cgroups;
	struct sched_entity se;
	void *stack;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long r11;
	unsigned long cx;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long flags;
} __attribute__((preserve_access_index));

struct request {
	unsigned int __data_len;
} __attribute__((preserve_access_index));

#define PF_KTHREAD 0x00200000
#define TASK_REPORT 0x7f

// sr_targets: tgid -> 1 (registered by user space) or 2 (followed child);
// sr_target_bits below is what the programs test per event.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} sr_targets SEC(".maps");

// sr_target_bits mirrors sr_targets as a bitmap: bit tgid % 64 of word
// tgid / 64 is set while tgid is a target. Every context switch and wakeup
// asks "is this a target?" of two tasks, most of them not: one array load
// answers it, where a hash lookup cost a helper call and a hash. User space
// maps it (mmapable) and sets and clears bits with atomic operations, as the
// programs do for the children they follow.
#define SR_TGID_WORDS (1 << 16) // 2^22 tgids: PID_MAX_LIMIT on 64-bit
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SR_TGID_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} sr_target_bits SEC(".maps");

// sr_cgroups: cgroup v2 id -> 1.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} sr_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sr_config);
} sr_cfg SEC(".maps");

// sr_rings holds one ring buffer per CPU (index: CPU number); user space
// sizes the outer map to the possible CPUs and the rings to share
// Config.RingBufferBytes, then inserts them. A CPU writes only to its own
// ring: with one shared ring every record takes the ring's lock and its
// producer position's cache line from the CPU that wrote last, a cost that
// grows with the number of CPUs recording (on 2 vCPUs the two layouts
// measured alike, bench/RESULTS.md).
struct sr_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct sr_ring);
} sr_rings SEC(".maps");

// sr_lost counts records dropped because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sr_lost SEC(".maps");

// struct sr_cpuctx is the interrupt context of one CPU.
struct sr_cpuctx {
	__u32 hardirq; // irq number + 1 while in a hardirq handler
	__u32 softirq; // vector + 1 while in a softirq
	__u32 hrtimer; // non-zero while an hrtimer callback runs
	__u32 block;   // non-zero once the current irq/softirq completed a block request
	__u64 paired;  // run-queue clock of this CPU's last SR_EV_CLOCK pair
	__u32 regs;    // how to find a task's user registers (REGS_*)
	__u32 unread;  // bytes written to this CPU's ring since the reader was woken
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sr_cpuctx);
} sr_ctx SEC(".maps");

// struct sr_task is the syscall a target thread is in.
struct sr_task {
	__s32 nr;    // syscall number, or SR_SYS_NONE outside syscalls
	__u32 known; // non-zero once an entry or exit was seen
	__u64 arg0;  // first syscall argument (the fd of read/write-like calls)
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sr_task);
} sr_tasks SEC(".maps");

// struct sr_inflight is a block request issued by a target thread.
struct sr_inflight {
	__u64 ts;
	__u32 tid;
	__u32 tgid;
	__u32 bytes;
	__u32 _pad;
	char comm[SR_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct sr_inflight);
} sr_rqs SEC(".maps");

// Force bpf2go to emit Go types for the shared structs.
const struct sr_event *unused_event __attribute__((unused));
const struct sr_config *unused_config __attribute__((unused));

static const __u32 zero = 0;

static __always_inline struct sr_config *config(void)
{
	return bpf_map_lookup_elem(&sr_cfg, &zero);
}

// cpuctx is this CPU's interrupt context and recorder state.
static __always_inline struct sr_cpuctx *cpuctx(void)
{
	return bpf_map_lookup_elem(&sr_ctx, &zero);
}

static __always_inline __u64 *tgid_word(__u32 tgid)
{
	__u32 w = tgid >> 6;
	return bpf_map_lookup_elem(&sr_target_bits, &w);
}

static __always_inline int is_target(struct task_struct *t, struct sr_config *cfg)
{
	__u32 tgid = t->tgid;
	if (tgid == 0 || tgid == cfg->self_tgid) // idle, the agent
		return 0;
	if (cfg->all)
		return 1;
	__u64 *w = tgid_word(tgid);
	if (w && (*w >> (tgid & 63)) & 1)
		return 1;
	if (cfg->cgroups) {
		__u64 id = t->cgroups->dfl_cgrp->kn->id;
		if (bpf_map_lookup_elem(&sr_cgroups, &id))
			return 1;
	}
	return 0;
}

// reserve reserves a record in this CPU's ring, or counts it lost.
static __always_inline struct sr_event *reserve(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	void *rb = bpf_map_lookup_elem(&sr_rings, &cpu);
	struct sr_event *e = rb ? bpf_ringbuf_reserve(rb, sizeof(*e), 0) : 0;
	if (!e) {
		__u64 *lost = bpf_map_lookup_elem(&sr_lost, &zero);
		if (lost)
			*lost += 1; // per-CPU slot: no atomic needed
		return 0;
	}
	e->cpu = cpu;
	e->arg = 0;
	e->syscall = 0;
	e->detail = 0;
	e->flags = 0;
	e->ctx = 0;
	e->prio = 0;
	e->prio2 = 0;
	e->target_cpu = 0;
	e->_pad = 0;
	e->tid2 = 0;
	e->tgid2 = 0;
	return e;
}

// submit batches reader wake-ups: waking the reader per event costs more
// than the event. Each CPU counts the bytes it wrote to its ring since it
// last woke the reader and wakes it once they reach wakeup_bytes (a count,
// not a bpf_ringbuf_query call: one helper call less per record; the
// reader also drains on a timer, so the count may run ahead of what is
// pending and wake it a little early, never late).
static __always_inline void submit(struct sr_event *e, struct sr_config *cfg)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	struct sr_cpuctx *c = cpuctx();
	if (c && cfg->wakeup_bytes) {
		c->unread += sizeof(*e);
		if (c->unread >= cfg->wakeup_bytes) {
			c->unread = 0;
			flags = BPF_RB_FORCE_WAKEUP;
		}
	}
	bpf_ringbuf_submit(e, flags);
}

// copy_comm copies a task's comm with two loads through its BTF pointer
// (no helper call).
static __always_inline void copy_comm(char *dst, struct task_struct *t)
{
	((__u64 *)dst)[0] = *(__u64 *)&t->comm[0];
	((__u64 *)dst)[1] = *(__u64 *)&t->comm[8];
}

static __always_inline void task_ids(struct task_struct *t, __u32 *tid, __u32 *tgid, char *comm)
{
	*tid = t->pid;
	*tgid = t->tgid;
	copy_comm(comm, t);
}

// fd_kind returns S_IFMT >> 12 of fd in the current task, 0 if unknown.
static __always_inline __u32 fd_kind(struct task_struct *t, __u64 fd)
{
	struct fdtable *fdt = t->files->fdt;
	if (fd >= fdt->max_fds)
		return 0;
	struct file **fds = fdt->fd;
	struct file *f = 0;
	if (bpf_core_field_offset(struct kiocb, ki_filp) == 0) {
		// The slot read as a kiocb, whose first field is a struct file
		// pointer: a typed (untrusted, fault-safe) load, no helper call.
		struct kiocb *slot = bpf_rdonly_cast(&fds[fd & 0xffffff], bpf_core_type_id_kernel(struct kiocb));
		f = slot->ki_filp;
	} else if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd & 0xffffff])) {
		return 0;
	}
	if (!f)
		return 0;
	f = bpf_rdonly_cast(f, bpf_core_type_id_kernel(struct file));
	return (f->f_inode->i_mode & 0170000) >> 12;
}

// x86-64 syscalls whose first argument is an fd worth classifying.
static __always_inline int fd_syscall(__s32 nr)
{
	switch (nr) {
	case 0:   // read
	case 1:   // write
	case 17:  // pread64
	case 18:  // pwrite64
	case 19:  // readv
	case 20:  // writev
	case 295: // preadv
	case 296: // pwritev
	case 327: // preadv2
	case 328: // pwritev2
		return 1;
	}
	return 0;
}

// Where a task's saved user registers are: at the top of its kernel stack
// (task_pt_regs: stack + THREAD_SIZE - sizeof(struct pt_regs) on x86-64
// without FRED), found with two loads instead of the bpf_task_pt_regs
// helper call (~30 ns here). Each CPU checks the computed address against
// the helper once, for each stack size in turn, and keeps the helper if none
// matches (another layout, e.g. FRED's padding).
#define REGS_UNKNOWN 0
#define REGS_HELPER 1
#define REGS_16K 2 // THREAD_SIZE 16 KiB
#define REGS_32K 3 // 32 KiB (KASAN)

static __always_inline struct pt_regs *user_regs(struct task_struct *cur, struct sr_cpuctx *c)
{
	__u64 top = (__u64)cur->stack - bpf_core_type_size(struct pt_regs);
	if (c && c->regs == REGS_16K)
		return bpf_rdonly_cast((void *)(top + 16384), bpf_core_type_id_kernel(struct pt_regs));
	if (c && c->regs == REGS_32K)
		return bpf_rdonly_cast((void *)(top + 32768), bpf_core_type_id_kernel(struct pt_regs));
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	if (c && c->regs == REGS_UNKNOWN)
		c->regs = (__u64)regs == top + 16384 ? REGS_16K :
			  (__u64)regs == top + 32768 ? REGS_32K :
							REGS_HELPER;
	return regs;
}

// switch_clock returns the time of a context switch on this CPU from its
// run queue's clock, or 0 when user space cannot map it (then the caller
// reads bpf_ktime_get_ns). __schedule updates rq->clock (sched_clock_cpu)
// just before the tracepoint, under the run-queue lock, so it is fresh —
// the time the kernel itself accounts the switch at — and reading it is a
// few loads, where the clock helper costs ~80 ns on a mitigated CPU
// (retpolines, safe RET): the largest part of a recorded switch. Every
// SR_CLOCK_PAIR_NS of run-queue clock it emits an SR_EV_CLOCK pair (the rq
// clock and bpf_ktime_get_ns read together) before the switch, so user
// space maps the CPU's rq clock onto CLOCK_MONOTONIC (the offset is constant
// while sched_clock is stable; pairs follow any drift).
static __always_inline __u64 switch_clock(struct task_struct *prev, struct sr_cpuctx *c)
{
	if (!bpf_core_field_exists(struct cfs_rq, rq))
		return 0; // no CONFIG_FAIR_GROUP_SCHED: no way to the run queue
	// prev is current: its sched entity is queued on this CPU's run queue.
	struct rq *rq = prev->se.cfs_rq->rq;
	__u32 cpu = bpf_get_smp_processor_id();
	if (!rq || rq->cpu != cpu)
		return 0;
	__u64 clock = rq->clock;
	if (!c || !clock)
		return 0;
	if (c->paired && clock - c->paired < SR_CLOCK_PAIR_NS)
		return clock;
	struct sr_event *e = reserve();
	if (!e)
		return 0; // full: the switch record will not fit either
	e->ts = bpf_ktime_get_ns();
	e->arg = clock;
	e->type = SR_EV_CLOCK;
	e->tid = 0;
	e->tgid = 0;
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	c->paired = clock;
	return clock;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sr_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	int tprev = is_target(prev, cfg);
	int tnext = is_target(next, cfg);
	if (!tprev && !tnext)
		return 0;

	struct sr_cpuctx *c = cpuctx();
	__u64 rqclock = switch_clock(prev, c);
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	if (rqclock) {
		e->ts = rqclock;
		e->flags = SR_F_RQCLOCK;
	} else {
		e->ts = bpf_ktime_get_ns();
	}
	e->type = SR_EV_SWITCH;
	e->arg = prev_state;
	e->tid = prev->pid; // prev is current
	e->tgid = prev->tgid;
	copy_comm(e->comm, prev);
	task_ids(next, &e->tid2, &e->tgid2, e->comm2);
	e->prio = prev->prio;
	e->prio2 = next->prio;
	if (preempt)
		e->flags |= SR_F_PREEMPT;
	e->syscall = SR_SYS_UNKNOWN;
	if (prev->flags & PF_KTHREAD) {
		e->flags |= SR_F_KTHREAD;
	} else if (tprev && !preempt && (prev_state & TASK_REPORT)) {
		// prev (current) blocks: which syscall is it in?
		struct task_struct *cur = bpf_get_current_task_btf();
		__u64 arg0 = 0;
		if (cfg->syscall_hooks) {
			struct sr_task *st = bpf_task_storage_get(&sr_tasks, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (st && st->known) {
				e->syscall = st->nr;
				arg0 = st->arg0;
			}
		} else {
			struct pt_regs *regs = user_regs(cur, c);
			if (regs->cx == regs->ip && regs->r11 == regs->flags)
				e->syscall = regs->orig_ax;
			else
				e->syscall = SR_SYS_NONE; // an exception: a page fault
			arg0 = regs->di;
		}
		if (fd_syscall(e->syscall))
			e->detail = fd_kind(cur, arg0);
	}
	// With syscall hooks, track a target's syscalls from its first
	// switch-in on (task storage exists for targets only).
	if (cfg->syscall_hooks && tnext && !(next->flags & PF_KTHREAD))
		bpf_task_storage_get(&sr_tasks, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sr_sys_enter, struct pt_regs *regs, long id)
{
	struct sr_task *st = bpf_task_storage_get(&sr_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!st)
		return 0; // not a target thread (storage is created for targets only)
	st->nr = id;
	st->arg0 = regs->di;
	st->known = 1;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sr_sys_exit, struct pt_regs *regs, long ret)
{
	struct sr_task *st = bpf_task_storage_get(&sr_tasks, bpf_get_current_task_btf(), 0, 0);
	if (!st)
		return 0;
	st->nr = SR_SYS_NONE;
	st->known = 1;
	return 0;
}

static __always_inline int wake(struct task_struct *p, __u32 type)
{
	struct sr_config *cfg = config();
	if (!cfg || !is_target(p, cfg))
		return 0;
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = type;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	e->prio = p->prio;
	if (type == SR_EV_WAKING) {
		task_ids(bpf_get_current_task_btf(), &e->tid2, &e->tgid2, e->comm2);
		struct sr_cpuctx *c = cpuctx();
		if (c) {
			if (c->hrtimer) {
				e->ctx = SR_CTX_HRTIMER;
			} else if (c->hardirq) {
				e->ctx = c->block ? SR_CTX_BLOCKIRQ : SR_CTX_HARDIRQ;
				e->detail = c->hardirq - 1;
			} else if (c->softirq) {
				e->ctx = SR_CTX_SOFTIRQ;
				e->detail = c->softirq - 1;
			}
		}
	} else {
		__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	}
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sr_waking, struct task_struct *p)
{
	return wake(p, SR_EV_WAKING);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sr_wakeup, struct task_struct *p)
{
	return wake(p, SR_EV_WAKEUP);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sr_wakeup_new, struct task_struct *p)
{
	return wake(p, SR_EV_WAKEUP_NEW);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sr_fork, struct task_struct *parent, struct task_struct *child)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	int tparent = is_target(parent, cfg);
	__u32 ctgid = child->tgid;
	if (tparent && cfg->follow_forks && ctgid != parent->tgid) {
		__u8 followed = 2;
		if (bpf_map_update_elem(&sr_targets, &ctgid, &followed, BPF_NOEXIST) == 0) {
			__u64 *w = tgid_word(ctgid);
			if (w)
				__sync_fetch_and_or(w, 1ULL << (ctgid & 63));
		}
	}
	if (!tparent && !is_target(child, cfg))
		return 0;
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = SR_EV_FORK;
	task_ids(child, &e->tid, &e->tgid, e->comm);
	task_ids(parent, &e->tid2, &e->tgid2, e->comm2);
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sr_exec, struct task_struct *p)
{
	struct sr_config *cfg = config();
	if (!cfg || !is_target(p, cfg))
		return 0;
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = SR_EV_EXEC;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sr_exit, struct task_struct *p, _Bool group_dead)
{
	struct sr_config *cfg = config();
	if (!cfg || !is_target(p, cfg))
		return 0;
	__u32 tgid = p->tgid;
	if (group_dead) {
		__u8 *v = bpf_map_lookup_elem(&sr_targets, &tgid);
		if (v && *v == 2) {
			bpf_map_delete_elem(&sr_targets, &tgid);
			__u64 *w = tgid_word(tgid);
			if (w)
				__sync_fetch_and_and(w, ~(1ULL << (tgid & 63)));
		}
	}
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = SR_EV_EXIT;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	e->flags = group_dead ? 1 : 0;
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(sr_rq_issue, struct request *rq)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	struct task_struct *cur = bpf_get_current_task_btf();
	if (!is_target(cur, cfg))
		return 0;
	struct sr_inflight in = {};
	in.ts = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	in.tid = (__u32)id;
	in.tgid = id >> 32;
	in.bytes = rq->__data_len;
	bpf_get_current_comm(in.comm, sizeof(in.comm));
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&sr_rqs, &key, &in, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(sr_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	struct sr_cpuctx *c = cpuctx();
	if (c)
		c->block = 1;
	__u64 key = (__u64)rq;
	struct sr_inflight *in = bpf_map_lookup_elem(&sr_rqs, &key);
	if (!in)
		return 0;
	struct sr_config *cfg = config();
	struct sr_event *e = cfg ? reserve() : 0;
	if (e) {
		e->ts = bpf_ktime_get_ns();
		e->type = SR_EV_BLOCK_RQ;
		e->tid = in->tid;
		e->tgid = in->tgid;
		e->arg = in->ts;
		e->detail = in->bytes;
		__builtin_memcpy(e->comm, in->comm, sizeof(e->comm));
		__builtin_memset(e->comm2, 0, sizeof(e->comm2));
		submit(e, cfg);
	}
	bpf_map_delete_elem(&sr_rqs, &key);
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(sr_irq_entry, int irq)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->hardirq = irq + 1;
		c->block = 0;
	}
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(sr_irq_exit, int irq)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->hardirq = 0;
		c->block = 0;
	}
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(sr_softirq_entry, unsigned int vec)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->softirq = vec + 1;
		c->block = 0;
	}
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(sr_softirq_exit, unsigned int vec)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->softirq = 0;
		c->block = 0;
	}
	return 0;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(sr_hrtimer_entry)
{
	struct sr_cpuctx *c = cpuctx();
	if (c)
		c->hrtimer = 1;
	return 0;
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(sr_hrtimer_exit)
{
	struct sr_cpuctx *c = cpuctx();
	if (c)
		c->hrtimer = 0;
	return 0;
}
