// Shared layout of the scheduler flight recorder (bpf/sched_recorder.c).
// Every struct here is mirrored in Go by bpf2go
// (internal/profiler/kernel/schedrecorder_bpfel.go) and decoded by
// internal/profiler/kernel/source_linux.go: it MUST match the Go side. Change
// both together and run `go generate ./internal/profiler/kernel/`. See
// bpf/README.md for the layout rules.
#pragma once

#include <linux/types.h>

#define SR_COMM_LEN 16

// Event types (struct sr_event.type). The Go side has the same constants
// (internal/profiler/kernel/event.go).
#define SR_EV_SWITCH 1     // tid=prev tid2=next; arg=raw prev __state (low 32 bits),
                           // with SR_F_STOLEN the CPU's stolen time (high 32 bits);
                           // flags SR_F_*
#define SR_EV_WAKING 2     // tid=wakee tid2=current (waker if ctx==SR_CTX_THREAD)
#define SR_EV_WAKEUP 3     // tid=wakee (enqueued)
#define SR_EV_WAKEUP_NEW 4 // tid=new task (first enqueue)
#define SR_EV_FORK 5       // tid=child tid2=parent
#define SR_EV_EXEC 6       // tid=task, comm=new comm
#define SR_EV_EXIT 7       // tid=task; flags bit0: group dead
#define SR_EV_BLOCK_RQ 8   // tid=issuer; arg=issue ktime; detail=bytes; ts=completion
#define SR_EV_CLOCK 9      // clock pair of cpu: ts=bpf_ktime_get_ns, arg=the run queue's
                           // clock read just before (see SR_F_RQCLOCK)
#define SR_EV_UNTHROTTLE 10 // tid=task whose cgroup's CPU quota throttled it; ts=when
                            // its cfs_rq was unthrottled (run-queue clock of cpu,
                            // SR_F_RQCLOCK), emitted at its next switch-in

// Context of a wakeup (sr_event.ctx for SR_EV_WAKING).
#define SR_CTX_THREAD 0
#define SR_CTX_HARDIRQ 1  // detail = irq number
#define SR_CTX_SOFTIRQ 2  // detail = softirq vector (TIMER=1, NET_RX=3, BLOCK=4, HRTIMER=8…)
#define SR_CTX_HRTIMER 3  // an hrtimer callback (timer expiry, sleeps)
#define SR_CTX_BLOCKIRQ 4 // an irq that completed a block request; detail = irq number

// SR_EV_SWITCH flags.
#define SR_F_PREEMPT 1   // the switch was an involuntary preemption
#define SR_F_KTHREAD 2   // prev is a kernel thread
#define SR_F_RQCLOCK 4   // ts is the CPU's run-queue clock (sched_clock_cpu, read at
                         // the switch), not bpf_ktime_get_ns: user space maps it with
                         // the SR_EV_CLOCK pairs of that CPU (emitted first)
#define SR_F_THROTTLED 8 // prev is runnable but its cgroup's CFS quota ran out:
                         // dequeued until the period timer unthrottles it
#define SR_F_IOWAIT 16   // prev blocks in io_schedule (task_struct.in_iowait)
#define SR_F_MEMSTALL 32 // prev blocks in a memory stall: reclaim, compaction,
                         // thrashing, memory.high (in_memstall or PF_MEMALLOC)
#define SR_F_PREV_UNTRACKED 64  // prev is neither a target nor followed: the record
#define SR_F_NEXT_UNTRACKED 128 // says nothing of its state (next: the same)
#define SR_F_STOLEN 0x100 // arg's high 32 bits hold the low 32 bits of the CPU's
                          // stolen time so far, rq->clock - rq->clock_task: the
                          // time its run-queue clock advanced that no task ran
                          // for (steal time under a hypervisor with
                          // CONFIG_PARAVIRT_TIME_ACCOUNTING, interrupts with
                          // CONFIG_IRQ_TIME_ACCOUNTING). Its difference between
                          // a thread's switch-in and switch-out on one CPU is
                          // the part of that run it did not get.

// Flags of every record type.
#define SR_F_FOLLOWED 0x8000 // the record concerns followed wakers only, no target

// SR_EV_WAKING flags.
#define SR_WF_RAISER 0x100    // softirq context (NET_RX/NET_TX) that the interrupted
                              // thread raised itself (a local send: loopback): that
                              // thread caused the wakeup
#define SR_WF_FOLLOWED 0x200  // the waker (tid2) is followed (now or already)
#define SR_WF_NEW 0x400       // ... and this wakeup started following it
#define SR_WF_CUT_DEPTH 0x800 // the waker was not followed: beyond follow_depth
#define SR_WF_CUT_COUNT 0x1000 // the waker was not followed: sr_follow was full
#define SR_WF_KTHREAD 0x2000  // the waker (tid2) is a kernel thread
#define SR_WF_THROTTLED 0x4000 // the wakee joins a throttled cfs_rq and waits for its
                               // unthrottle (kernels that throttle whole cfs_rqs,
                               // before task-based throttling)

// A CPU's clock pair is renewed when its run-queue clock has advanced this
// much since the last one.
#define SR_CLOCK_PAIR_NS 20000000ULL

// Syscall of a task at switch time (sr_event.syscall) when not a syscall number.
#define SR_SYS_NONE -1    // a user task known not to be in a syscall (fault/exception)
#define SR_SYS_UNKNOWN -2 // not known (thread first seen in a syscall, kernel thread)
// x86-64 syscalls whose first argument is a futex word's address.
#define SR_NR_FUTEX 202
#define SR_NR_FUTEX_WAIT 455

// struct sr_config is element 0 of the sr_cfg array.
struct sr_config {
	__u32 all;            // non-zero: record every task, not only targets
	__u32 cgroups;        // non-zero: sr_cgroups holds entries (check it)
	__u32 follow_forks;   // non-zero: children of a target process become targets
	__u32 wakeup_bytes;   // wake the reader only once this much is pending
	__u32 self_tgid;      // never record this process (the agent), even with all
	__u32 syscall_hooks;  // non-zero: sys_enter/sys_exit track syscalls in task
	                      // storage (else: read from the saved user registers)
	__u32 follow_depth;   // follow the wakers of targets up to this many hops
	                      // (0: do not follow)
	__u32 _pad;
};

// struct sr_event is one record of a CPU's ring buffer (sr_rings; 96 bytes).
// 8-byte fields first, explicit padding, no holes.
struct sr_event {
	__u64 ts;      // bpf_ktime_get_ns (CLOCK_MONOTONIC), or see SR_F_RQCLOCK
	__u64 arg;     // SWITCH: raw prev __state; BLOCK_RQ: issue ts; CLOCK: rq clock
	__u32 type;    // SR_EV_*
	__u32 cpu;     // CPU the event ran on
	__u32 tid;     // primary task (see SR_EV_*)
	__u32 tgid;
	__u32 tid2;    // secondary task (see SR_EV_*)
	__u32 tgid2;
	__s32 syscall; // SWITCH: prev's syscall number or SR_SYS_*
	__u32 detail;  // SWITCH: S_IFMT>>12 of the fd of a read/write-like call (0: n/a),
	               // of futex/futex_wait the futex word's address's low half (dev: high);
	               // WAKING: irq number / softirq vector; BLOCK_RQ: bytes
	__u16 flags;   // SR_F_* (SWITCH), SR_WF_* (WAKING), group_dead (EXIT);
	               // SR_F_FOLLOWED (any)
	__u16 ctx;     // SR_CTX_* (WAKING)
	__s16 prio;    // tid's prio (SWITCH/WAKING)
	__s16 prio2;   // tid2's prio (SWITCH)
	__u32 target_cpu; // WAKING: CPU the wakee will run on
	__u32 dev;        // kernel dev_t (major << 20 | minor), 0 if none. SWITCH: the
	                  // filesystem of the fd a blocked prev waits on; WAKING: the
	                  // device whose request completion did the wakeup; BLOCK_RQ:
	                  // the request's device
	char comm[SR_COMM_LEN];  // tid's comm
	char comm2[SR_COMM_LEN]; // tid2's comm
};
