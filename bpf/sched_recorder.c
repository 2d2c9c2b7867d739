// Scheduler flight recorder: thread states and wakeups of target processes
// (internal/profiler/kernel loads it). tp_btf programs on the sched
// tracepoints emit struct sr_event records into per-CPU ring buffers for
// tasks whose process (tgid) is in sr_targets or whose cgroup v2 id is in
// sr_cgroups, or for every task when sr_config.all is set, and for the
// threads that woke them (followed wakers, below).
//
// Cost model: nothing is emitted for untracked tasks; what runs for them is
// two or three bitmap loads per context switch and wakeup (plus a hash lookup
// of the cgroup id while cgroups are targeted), and a per-CPU array write per
// irq/softirq/hrtimer entry and exit.
//
// Followed wakers: the path of a blocked target leads to whoever woke it —
// another process (a database, a sidecar) or a kernel thread (a journal
// commit, a worker). When a thread wakes a target from its own context, or
// from a network softirq it raised itself (a local send), it becomes
// followed: its tid goes into sr_follow (with its distance from the targets)
// and the sr_follow_bits bitmap, and from then on its own switches and
// wakeups are recorded like a target's (flagged SR_F_FOLLOWED when no target
// is involved), so that its states can be followed back in turn; a waker of
// a followed thread is followed one hop further, up to
// sr_config.follow_depth hops. sr_follow's size bounds how many are followed
// at once (a full map is reported as SR_WF_CUT_COUNT on the wakeup). User
// space stops following a thread that has woken no tracked thread for a
// while; an exiting thread stops being followed here, since tids are reused.
// A followed thread's history starts when it is first followed.
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

struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
	__u32 i_rdev;
	struct super_block *i_sb;
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
	__u64 clock_task;
	int cpu;
} __attribute__((preserve_access_index));

struct cfs_rq {
	struct rq *rq; // CONFIG_FAIR_GROUP_SCHED
	// CONFIG_CFS_BANDWIDTH: how many levels of the hierarchy above (and at)
	// this cfs_rq are throttled; throttled_clock_self is the run-queue clock
	// when the current throttling began (0 when not throttled) and
	// throttled_clock_self_time the total throttled time so far (6.5+,
	// cpu.stat.local).
	int throttle_count;
	__u64 throttled_clock_self;
	__u64 throttled_clock_self_time;
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
	unsigned int in_iowait : 1;
	unsigned int in_memstall : 1;
	_Bool throttled; // task-based CFS throttling (6.18+): dequeued at return to user
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long r11;
	unsigned long cx;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long flags;
} __attribute__((preserve_access_index));

struct block_device {
	__u32 bd_dev;
} __attribute__((preserve_access_index));

struct request {
	unsigned int __data_len;
	struct block_device *part;
} __attribute__((preserve_access_index));

#define PF_MEMALLOC 0x00000800
#define PF_KTHREAD 0x00200000
#define TASK_REPORT 0x7f
#define TASK_DEAD 0x80
#define TASK_RTLOCK_WAIT 0x1000
#define NET_TX_SOFTIRQ 2
#define NET_RX_SOFTIRQ 3

// sr_targets: tgid -> 1 (registered by user space) or 2 (followed child);
// sr_target_bits below is what the programs test per event.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} sr_targets SEC(".maps");

// sr_target_bits mirrors sr_targets as a bitmap, two bits per tgid in word
// tgid / 32: bit 2*(tgid % 32) is set while tgid is a target
// (TGID_TARGET), the next one once a thread of tgid has been followed
// (TGID_FOLLOWED; cleared when the process exits). Every context switch and
// wakeup asks "is this tracked?" of two tasks, most of them not: one array
// load answers it for both bits, where a hash lookup cost a helper call and
// a hash, and where a lookup in the tid-indexed sr_follow_bits for every
// task cost a cache miss. User space maps it (mmapable) and sets and clears
// target bits with atomic operations, as the programs do for the children
// they follow.
#define SR_TGID_WORDS (1 << 17) // 2 bits for each of 2^22 tgids: PID_MAX_LIMIT on 64-bit
#define SR_TID_WORDS (1 << 16)  // 1 bit for each of 2^22 tids
#define TGID_TARGET(tgid) (1ULL << (((tgid) & 31) * 2))
#define TGID_FOLLOWED(tgid) (2ULL << (((tgid) & 31) * 2))
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SR_TGID_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} sr_target_bits SEC(".maps");

// sr_follow: tid of a followed waker -> its distance from the targets (1: it
// woke a target). User space sizes it (Config.FollowThreads): the bound on
// how many threads are followed at once.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} sr_follow SEC(".maps");

// sr_follow_bits mirrors sr_follow as a bitmap of tids (bit tid % 64 of word
// tid / 64), tested for the tasks of processes whose TGID_FOLLOWED bit is
// set; user space clears the bits of the threads it stops following.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SR_TID_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} sr_follow_bits SEC(".maps");

// struct sr_thr is a tracked thread throttled by its cgroup's CPU quota,
// waiting to be switched in again: the throttling of its cfs_rq then, so
// that the switch-in can tell when the unthrottle happened.
struct sr_thr {
	__u64 cfs_rq; // address of the cfs_rq it was dequeued from
	__u64 out;    // run-queue clock of its switch-out
	__u64 start;  // cfs_rq->throttled_clock_self at the switch-out
	__u64 total;  // cfs_rq->throttled_clock_self_time at the switch-out
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct sr_thr);
} sr_throttled SEC(".maps");

// struct sr_glob is machine-wide state (element 0 of sr_globs).
struct sr_glob {
	__s64 throttled; // entries in sr_throttled: switch-ins look them up only then
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sr_glob);
} sr_globs SEC(".maps");

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
	__u32 blockdev; // device of the block request the current irq/softirq completed
	__u32 raiser;   // thread that raised NET_RX/NET_TX from its own context, until
	                // the softirq runs
	__u32 netowner; // while a NET softirq runs in the context of the thread that
	                // raised it (a local send): that thread
	__u32 _pad;
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

// struct sr_inflight is a block request submitted by a tracked thread.
struct sr_inflight {
	__u64 ts;      // issue to the device (0: inserted, not issued yet)
	__u32 tid;     // the submitter
	__u32 tgid;
	__u32 bytes;
	__u32 dev;
	__u16 flags;   // SR_F_FOLLOWED
	__u16 _pad[3];
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
	__u32 w = tgid >> 5;
	return bpf_map_lookup_elem(&sr_target_bits, &w);
}

static __always_inline int is_followed(__u32 tid)
{
	__u32 w = tid >> 6;
	__u64 *p = bpf_map_lookup_elem(&sr_follow_bits, &w);
	return p && (*p >> (tid & 63)) & 1;
}

// Tracking of a task: what its events are recorded for.
#define TR_NONE 0
#define TR_TARGET 1
#define TR_FOLLOWED 2

static __always_inline int track(struct task_struct *t, struct sr_config *cfg)
{
	__u32 tgid = t->tgid;
	if (tgid == 0 || tgid == cfg->self_tgid) // idle, the agent
		return TR_NONE;
	if (cfg->all)
		return TR_TARGET;
	__u64 *w = tgid_word(tgid);
	__u64 bits = w ? *w : 0;
	if (bits & TGID_TARGET(tgid))
		return TR_TARGET;
	if (cfg->cgroups) {
		__u64 id = t->cgroups->dfl_cgrp->kn->id;
		if (bpf_map_lookup_elem(&sr_cgroups, &id))
			return TR_TARGET;
	}
	__u32 tid = t->pid;
	if ((bits & TGID_FOLLOWED(tgid)) && is_followed(tid))
		return TR_FOLLOWED;
	return TR_NONE;
}

static __always_inline int is_target(struct task_struct *t, struct sr_config *cfg)
{
	return track(t, cfg) == TR_TARGET;
}

static __always_inline struct sr_glob *glob(void)
{
	return bpf_map_lookup_elem(&sr_globs, &zero);
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
	e->dev = 0;
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

// fd_kind returns S_IFMT >> 12 of fd in the current task, 0 if unknown, and
// sets *dev to the device of the filesystem the file is on (of the device
// itself for a block device file).
static __always_inline __u32 fd_kind(struct task_struct *t, __u64 fd, __u32 *dev)
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
	struct inode *ino = f->f_inode;
	__u32 kind = (ino->i_mode & 0170000) >> 12;
	if (kind == 0x6) // S_IFBLK
		*dev = ino->i_rdev;
	else if (kind == 0x8 || kind == 0x4) // S_IFREG, S_IFDIR
		*dev = ino->i_sb->s_dev;
	return kind;
}

// x86-64 syscalls whose first argument is an fd worth classifying (by its
// type, and for files by their device).
static __always_inline int fd_syscall(__s32 nr)
{
	switch (nr) {
	case 0:   // read
	case 1:   // write
	case 17:  // pread64
	case 18:  // pwrite64
	case 19:  // readv
	case 20:  // writev
	case 74:  // fsync
	case 75:  // fdatasync
	case 77:  // ftruncate
	case 277: // sync_file_range
	case 285: // fallocate
	case 295: // preadv
	case 296: // pwritev
	case 306: // syncfs
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
//
// *stolen is set to the low 32 bits of rq->clock - rq->clock_task, the time
// the run-queue clock advanced that the scheduler did not give to tasks
// (steal time, interrupts where the kernel accounts them), when a run-queue
// clock is returned: the tasks' own clock (sum_exec_runtime, what the CFS
// quota and schedstat count) is clock_task, so a running interval's wall
// time minus its stolen time is the CPU time the thread got.
static __always_inline __u64 switch_clock(struct task_struct *prev, struct sr_cpuctx *c, __u32 *stolen)
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
	*stolen = (__u32)(clock - rq->clock_task);
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

// throttled reports whether prev, switched out while runnable, leaves the
// CPU because its cgroup's CFS quota ran out (CONFIG_CFS_BANDWIDTH). With
// task-based throttling (6.18+) a throttled task dequeues itself on its way
// back to user space and is marked throttled; before that, a throttled
// cfs_rq is taken off the CPU whole, its throttle_count set.
static __always_inline int throttled(struct task_struct *prev)
{
	if (bpf_core_field_exists(prev->throttled))
		return prev->throttled;
	if (!bpf_core_field_exists(struct cfs_rq, throttle_count) || !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	struct cfs_rq *cr = prev->se.cfs_rq;
	return cr && cr->throttle_count > 0;
}

// note_throttled remembers the throttling of prev's cfs_rq at its
// switch-out at run-queue clock out.
static __always_inline void note_throttled(struct task_struct *prev, __u64 out)
{
	if (!out || !bpf_core_field_exists(struct cfs_rq, throttled_clock_self_time))
		return;
	struct cfs_rq *cr = prev->se.cfs_rq;
	if (!cr)
		return;
	struct sr_thr th = {.cfs_rq = (__u64)cr, .out = out, .start = cr->throttled_clock_self,
			    .total = cr->throttled_clock_self_time};
	__u32 tid = prev->pid;
	struct sr_glob *g = glob();
	if (!g || !th.start)
		return;
	if (bpf_map_update_elem(&sr_throttled, &tid, &th, BPF_NOEXIST) == 0)
		__sync_fetch_and_add(&g->throttled, 1);
	else
		bpf_map_update_elem(&sr_throttled, &tid, &th, BPF_EXIST);
}

// forget_throttled drops tid's sr_throttled entry.
static __always_inline void forget_throttled(__u32 tid, struct sr_glob *g)
{
	if (bpf_map_delete_elem(&sr_throttled, &tid) == 0)
		__sync_fetch_and_add(&g->throttled, -1);
}

// unthrottled emits, for next (being switched in at run-queue clock now)
// after a throttled switch-out, when its cfs_rq was unthrottled: the
// throttling began at throttled_clock_self and lasted what
// throttled_clock_self_time grew by since. The rest of the wait, from the
// unthrottle to now, was for a CPU.
static __always_inline void unthrottled(struct task_struct *next, __u64 now, __u16 flags)
{
	struct sr_glob *g = glob();
	if (!g || g->throttled <= 0)
		return;
	__u32 tid = next->pid;
	struct sr_thr *th = bpf_map_lookup_elem(&sr_throttled, &tid);
	if (!th)
		return;
	// The cfs_rq it was throttled on (another CPU's, had it migrated
	// since): read through an untrusted pointer, since it may be gone.
	struct cfs_rq *cr = bpf_rdonly_cast((void *)th->cfs_rq, bpf_core_type_id_kernel(struct cfs_rq));
	__u64 u = th->start + (cr->throttled_clock_self_time - th->total);
	__u32 cpu = cr->rq->cpu;
	__u64 out = th->out;
	forget_throttled(tid, g);
	// Unthrottled after the switch-out and, on this CPU, before now.
	if (u < out || (cpu == bpf_get_smp_processor_id() && u > now))
		return;
	struct sr_event *e = reserve();
	if (!e)
		return;
	e->ts = u;
	e->cpu = cpu; // a run-queue clock time of that CPU
	e->type = SR_EV_UNTHROTTLE;
	e->flags = SR_F_RQCLOCK | flags;
	e->tid = tid;
	e->tgid = next->tgid;
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sr_switch, _Bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	int tprev = track(prev, cfg);
	int tnext = track(next, cfg);
	if (!tprev && !tnext)
		return 0;
	// Records that concern followed wakers only go to their own share of
	// user space's memory (Config.FollowShare).
	__u16 followed = tprev != TR_TARGET && tnext != TR_TARGET ? SR_F_FOLLOWED : 0;

	struct sr_cpuctx *c = cpuctx();
	__u32 stolen = 0;
	__u64 rqclock = switch_clock(prev, c, &stolen);
	if (tnext && rqclock)
		unthrottled(next, rqclock, followed);
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->flags = followed;
	e->arg = prev_state;
	if (rqclock) {
		e->ts = rqclock;
		e->flags |= SR_F_RQCLOCK;
		if (bpf_core_field_exists(struct rq, clock_task)) {
			e->arg |= (__u64)stolen << 32;
			e->flags |= SR_F_STOLEN;
		}
	} else {
		e->ts = bpf_ktime_get_ns();
	}
	e->type = SR_EV_SWITCH;
	e->tid = prev->pid; // prev is current
	e->tgid = prev->tgid;
	copy_comm(e->comm, prev);
	task_ids(next, &e->tid2, &e->tgid2, e->comm2);
	e->prio = prev->prio;
	e->prio2 = next->prio;
	if (preempt)
		e->flags |= SR_F_PREEMPT;
	if (!tprev)
		e->flags |= SR_F_PREV_UNTRACKED;
	if (!tnext)
		e->flags |= SR_F_NEXT_UNTRACKED;
	e->syscall = SR_SYS_UNKNOWN;
	int blocks = !preempt && (prev_state & (TASK_REPORT | TASK_DEAD | TASK_RTLOCK_WAIT));
	if (tprev && blocks) {
		// Blocked in io_schedule (block I/O, a page being read in) or in
		// a memory stall (reclaim, compaction, refaults, memory.high).
		if (BPF_CORE_READ_BITFIELD(prev, in_iowait))
			e->flags |= SR_F_IOWAIT;
		if (BPF_CORE_READ_BITFIELD(prev, in_memstall) || (prev->flags & PF_MEMALLOC))
			e->flags |= SR_F_MEMSTALL;
	} else if (tprev && !blocks && throttled(prev)) {
		e->flags |= SR_F_THROTTLED;
		note_throttled(prev, rqclock);
	}
	if (prev->flags & PF_KTHREAD) {
		e->flags |= SR_F_KTHREAD;
	} else if (tprev && blocks && (prev_state & TASK_REPORT)) {
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
		if (fd_syscall(e->syscall)) {
			e->detail = fd_kind(cur, arg0, &e->dev);
		} else if (e->syscall == SR_NR_FUTEX || e->syscall == SR_NR_FUTEX_WAIT) {
			// The futex word's address: user space tells a language
			// runtime's interpreter lock from the program's own.
			e->detail = (__u32)arg0;
			e->dev = (__u32)(arg0 >> 32);
		}
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

// follow makes cur, which woke p (tracked as tp) from its own context, a
// followed thread one hop further from the targets than p, unless it is
// tracked already or the bounds say no; it sets the SR_WF_* flags of e.
static __always_inline void follow(struct task_struct *cur, struct task_struct *p, int tp, struct sr_config *cfg,
				   struct sr_event *e)
{
	__u32 wt = cur->pid;
	if (!wt || cur->tgid == cfg->self_tgid || is_target(cur, cfg))
		return;
	__u32 depth = 1;
	if (tp == TR_FOLLOWED) {
		__u32 tid = p->pid;
		__u32 *pd = bpf_map_lookup_elem(&sr_follow, &tid);
		depth = pd ? *pd + 1 : cfg->follow_depth + 1;
	}
	__u32 *wd = bpf_map_lookup_elem(&sr_follow, &wt);
	if (wd) {
		if (*wd > depth)
			*wd = depth;
		e->flags |= SR_WF_FOLLOWED;
		return;
	}
	if (depth > cfg->follow_depth) {
		e->flags |= SR_WF_CUT_DEPTH;
		return;
	}
	long err = bpf_map_update_elem(&sr_follow, &wt, &depth, BPF_NOEXIST);
	if (err && err != -17) { // -EEXIST: another CPU followed it meanwhile
		e->flags |= SR_WF_CUT_COUNT;
		return;
	}
	__u32 w = wt >> 6;
	__u64 *word = bpf_map_lookup_elem(&sr_follow_bits, &w);
	if (word)
		__sync_fetch_and_or(word, 1ULL << (wt & 63));
	__u32 tgid = cur->tgid;
	word = tgid_word(tgid);
	if (word && !(*word & TGID_FOLLOWED(tgid)))
		__sync_fetch_and_or(word, TGID_FOLLOWED(tgid));
	e->flags |= SR_WF_FOLLOWED | (err ? 0 : SR_WF_NEW);
}

static __always_inline int wake(struct task_struct *p, __u32 type)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	int tp = track(p, cfg);
	if (!tp)
		return 0;
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = type;
	e->flags = tp == TR_FOLLOWED ? SR_F_FOLLOWED : 0;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	e->prio = p->prio;
	if (type == SR_EV_WAKING) {
		struct task_struct *cur = bpf_get_current_task_btf();
		task_ids(cur, &e->tid2, &e->tgid2, e->comm2);
		if (cur->flags & PF_KTHREAD)
			e->flags |= SR_WF_KTHREAD;
		int causal = 1; // woken from cur's own context
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
			if (e->ctx != SR_CTX_THREAD) {
				causal = 0;
				if (c->block)
					e->dev = c->blockdev;
				if (e->ctx == SR_CTX_SOFTIRQ && c->netowner && c->netowner == (__u32)cur->pid) {
					e->flags |= SR_WF_RAISER;
					causal = 1;
				}
			}
		}
		if (causal && cfg->follow_depth)
			follow(cur, p, tp, cfg, e);
		// Before task-based throttling, a task woken into a throttled
		// cfs_rq waits there for the unthrottle.
		if (!bpf_core_field_exists(p->throttled) && bpf_core_field_exists(struct cfs_rq, throttle_count) &&
		    bpf_core_field_exists(struct cfs_rq, rq)) {
			struct cfs_rq *cr = p->se.cfs_rq;
			if (cr && cr->throttle_count > 0)
				e->flags |= SR_WF_THROTTLED;
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
				__sync_fetch_and_or(w, TGID_TARGET(ctgid));
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
	if (!cfg)
		return 0;
	int tp = track(p, cfg);
	if (!tp)
		return 0;
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = SR_EV_EXEC;
	e->flags = tp == TR_FOLLOWED ? SR_F_FOLLOWED : 0;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	submit(e, cfg);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sr_exit, struct task_struct *p, _Bool group_dead)
{
	struct sr_config *cfg = config();
	if (!cfg)
		return 0;
	int tp = track(p, cfg);
	if (!tp)
		return 0;
	__u32 tid = p->pid;
	struct sr_glob *g = glob();
	if (g && g->throttled > 0)
		forget_throttled(tid, g);
	if (tp == TR_FOLLOWED) {
		// Its tid will be reused: stop following it now.
		bpf_map_delete_elem(&sr_follow, &tid);
		__u32 w = tid >> 6;
		__u64 *word = bpf_map_lookup_elem(&sr_follow_bits, &w);
		if (word)
			__sync_fetch_and_and(word, ~(1ULL << (tid & 63)));
	}
	__u32 tgid = p->tgid;
	if (group_dead) {
		__u64 *w = tgid_word(tgid);
		if (w && (*w & TGID_FOLLOWED(tgid)))
			__sync_fetch_and_and(w, ~TGID_FOLLOWED(tgid));
		__u8 *v = bpf_map_lookup_elem(&sr_targets, &tgid);
		if (v && *v == 2) {
			bpf_map_delete_elem(&sr_targets, &tgid);
			if (w)
				__sync_fetch_and_and(w, ~TGID_TARGET(tgid));
		}
	}
	struct sr_event *e = reserve();
	if (!e)
		return 0;
	e->ts = bpf_ktime_get_ns();
	e->type = SR_EV_EXIT;
	task_ids(p, &e->tid, &e->tgid, e->comm);
	e->flags = (group_dead ? 1 : 0) | (tp == TR_FOLLOWED ? SR_F_FOLLOWED : 0);
	__builtin_memset(e->comm2, 0, sizeof(e->comm2));
	submit(e, cfg);
	return 0;
}

// A block request is the submitter's: a request that went through the I/O
// scheduler or a plug is issued to the device later by whichever task runs
// the queue (a kblockd worker, another application), so the submitter is
// taken at its first insertion, in its context, and kept until it
// completes; a request issued without insertion is issued by its submitter.
static __always_inline int rq_owner(struct request *rq, struct sr_config *cfg, struct sr_inflight *in)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	int tc = track(cur, cfg);
	if (!tc)
		return 0;
	in->tid = cur->pid;
	in->tgid = cur->tgid;
	in->bytes = rq->__data_len;
	struct block_device *part = rq->part;
	in->dev = part ? part->bd_dev : 0;
	in->flags = tc == TR_FOLLOWED ? SR_F_FOLLOWED : 0;
	copy_comm(in->comm, cur);
	return 1;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(sr_rq_insert, struct request *rq)
{
	struct sr_config *cfg = config();
	struct sr_inflight in = {};
	if (!cfg || !rq_owner(rq, cfg, &in))
		return 0;
	__u64 key = (__u64)rq;
	bpf_map_update_elem(&sr_rqs, &key, &in, BPF_NOEXIST);
	return 0;
}

// A request merged into another is freed without completing.
SEC("tp_btf/block_rq_merge")
int BPF_PROG(sr_rq_merge, struct request *rq)
{
	__u64 key = (__u64)rq;
	bpf_map_delete_elem(&sr_rqs, &key);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(sr_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct sr_inflight *owned = bpf_map_lookup_elem(&sr_rqs, &key);
	if (owned) {
		if (!owned->ts) // a request the driver hands back keeps its first issue
			owned->ts = bpf_ktime_get_ns();
		owned->bytes = rq->__data_len;
		return 0;
	}
	struct sr_config *cfg = config();
	struct sr_inflight in = {};
	if (!cfg || !rq_owner(rq, cfg, &in))
		return 0;
	in.ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&sr_rqs, &key, &in, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(sr_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->block = 1;
		struct block_device *part = rq->part;
		c->blockdev = part ? part->bd_dev : 0;
	}
	__u64 key = (__u64)rq;
	struct sr_inflight *in = bpf_map_lookup_elem(&sr_rqs, &key);
	if (!in)
		return 0;
	struct sr_config *cfg = config();
	struct sr_event *e = cfg && in->ts ? reserve() : 0;
	if (e) {
		e->ts = bpf_ktime_get_ns();
		e->type = SR_EV_BLOCK_RQ;
		e->flags = in->flags;
		e->tid = in->tid;
		e->tgid = in->tgid;
		e->arg = in->ts;
		e->detail = in->bytes;
		e->dev = in->dev;
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

// A thread that sends on a local socket (loopback, a veth pair) raises
// NET_RX itself, and the softirq then runs in its context when it re-enables
// bottom halves: that thread caused the wakeups the softirq does. The same
// softirq run from an irq's exit or by ksoftirqd interrupts a thread that
// did not raise it.
SEC("tp_btf/softirq_raise")
int BPF_PROG(sr_softirq_raise, unsigned int vec)
{
	if (vec != NET_RX_SOFTIRQ && vec != NET_TX_SOFTIRQ)
		return 0;
	struct sr_cpuctx *c = cpuctx();
	if (c && !c->hardirq && !c->softirq)
		c->raiser = (__u32)bpf_get_current_pid_tgid();
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(sr_softirq_entry, unsigned int vec)
{
	struct sr_cpuctx *c = cpuctx();
	if (c) {
		c->softirq = vec + 1;
		c->block = 0;
		c->netowner = 0;
		if ((vec == NET_RX_SOFTIRQ || vec == NET_TX_SOFTIRQ) && c->raiser &&
		    c->raiser == (__u32)bpf_get_current_pid_tgid())
			c->netowner = c->raiser;
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
		c->netowner = 0;
		if (vec == NET_RX_SOFTIRQ)
			c->raiser = 0;
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
