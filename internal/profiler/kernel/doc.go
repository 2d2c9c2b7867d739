// Package kernel is Rootline's scheduler flight recorder, the "kernel"
// profiler: it records, for target processes and the threads that wake
// them, when each thread runs, waits for a CPU (or for its cgroup's CPU
// quota) or blocks, why it blocked and who woke it, and dumps a window of it
// as a snapshot and as a CTF trace.
//
// # Kernel side
//
// bpf/sched_recorder.c attaches tp_btf programs (BTF-typed raw tracepoints:
// no argument copying, CO-RE field access) to sched_switch, sched_waking,
// sched_wakeup_new, sched_process_fork/exec/exit,
// block_rq_insert/merge/issue/complete, irq_handler_entry/exit,
// softirq_raise/entry/exit and hrtimer_expire_entry/exit (and optionally
// sched_wakeup and raw_syscalls sys_enter/sys_exit, below).
// kprobes and fentry are not used (not available on every kernel Rootline
// runs on). A record (struct sr_event, 96 bytes) goes to the BPF ring buffer
// of the CPU it happens on (one per CPU, in the array of maps sr_rings:
// CPUs do not contend for one ring's lock) only when it concerns a target: a process registered with Start (its tgid
// is in the sr_targets map, mirrored in the mmapable bitmap sr_target_bits
// that the programs test per event), a child it forks afterwards (followed from BPF
// unless Config.NoFollowForks), a cgroup v2 registered with StartCgroup, or
// every task with Config.All (the "everything" switch; the agent itself is
// never recorded). Records dropped because the ring buffer was full are
// counted per CPU in BPF and reported as "lost" in Stats and in both
// artifacts' attributes. The programs are attached only while there is a
// target (or Config.All): an agent with nothing to record costs nothing.
//
// Timestamps are CLOCK_MONOTONIC (bpf_ktime_get_ns), except for context
// switches: the clock helper costs ~80 ns per call on a CPU with
// retpolines and safe-RET mitigations, so sched_switch takes the time from
// the CPU's run-queue clock (rq->clock, sched_clock_cpu, which __schedule
// updates just before the tracepoint: the time the kernel accounts the
// switch at), reached as prev->se.cfs_rq->rq. Every 20 ms of that clock a
// CPU also emits a clock pair (rq clock and bpf_ktime_get_ns read
// together); the reader maps switch times through the smallest offset of
// the CPU's last 8 pairs (clockPairs). Without CONFIG_FAIR_GROUP_SCHED the
// switch reads the helper.
//
// Syscalls produce no records and, by default, run no program: when a target
// thread blocks, sched_switch reads the syscall it is in from the user
// registers the kernel saved at syscall entry (at the top of the task's
// kernel stack, checked once per CPU against bpf_task_pt_regs; on x86-64
// orig_ax is the syscall number, and cx == ip && r11 == flags tells a
// SYSCALL entry from an exception frame, whose orig_ax is an error code),
// and, for read/write-like calls, the type of the file behind the fd
// (socket, regular file, pipe…). A user thread that blocks outside a
// syscall is in a page fault; this replaces a hook on
// exceptions:page_fault_user, which would cost on every fault.
// Config.SyscallHooks instead attaches raw_syscalls sys_enter/sys_exit,
// which keep the current syscall of target threads in BPF task storage: it
// works where the saved registers do not tell (arm64, x86-64 with FRED),
// but every syscall of every process then pays for a program run and the
// tracing slow path (bench/RESULTS.md: +7 % CPU on an untargeted
// `perf bench sched pipe`, against +4 % without). Config.Enqueue also
// records sched_wakeup (the enqueue time of each wakeup).
//
// irq, softirq and hrtimer entry/exit keep a per-CPU interrupt context;
// sched_waking (which runs in the waker's context, unlike sched_wakeup) records
// it, so a wakeup done from interrupt context is attributed to the interrupt
// kind (hrtimer → timer, NET_RX/NET_TX → network, BLOCK or an irq that
// completed a block request → disk) rather than to the thread it interrupted.
//
// # Followed wakers
//
// The critical path of a blocked target thread leads to whoever woke it: a
// thread of another process (a database, a sidecar), a kernel worker (a
// journal commit), and from there to whoever woke that one. When a thread
// wakes a tracked thread from its own context — or from a NET_RX/NET_TX
// softirq it raised itself, which is how a send on a loopback or veth
// socket wakes its reader (softirq_raise outside interrupt context, then the
// softirq run in the raiser's context) — sched_waking makes it a followed
// thread: its tid goes into the sr_follow hash (with its distance from the
// targets) and the mmapable bitmap sr_follow_bits, which every program tests
// beside the target bitmap (one more load per event), and from then on its
// switches, wakings, exit and block requests are recorded like a target's.
// A waker of a followed thread is followed one hop further, up to
// Config.FollowDepth hops (default 3); sr_follow holds at most
// Config.FollowThreads threads (default 512). A waker that could not be
// followed is flagged on the wakeup (beyond the depth, or the map full). A
// followed thread is followed until it has woken no tracked thread for
// Config.FollowTTL (the reader removes it and tells the builder, EvUnfollow)
// or exits (BPF removes it: tids are reused). Each switch record says which
// of its sides is tracked, so the builder never gives an untracked thread
// made-up intervals. A followed thread's history starts when it is first
// followed: the first wait of a target on a new waker finds the waker with
// no intervals before that wakeup (Thread.Since says from when). Records that
// involve no target go to their own share of the memory
// (Config.FollowShare of MaxBytes, default a quarter), so that a busy waker
// cannot push the targets' history out; Stats reports that share
// (followed_bytes_buffered, followed_events). Config.All records every task
// instead (no following needed), at the cost of a record per context switch
// of the machine (bench/RESULTS.md compares the two).
//
// # CPU quota throttling
//
// A thread whose cgroup ran out of its CFS quota (cpu.max, or v1's
// cpu.cfs_quota_us) is not waiting for a CPU but for the next period: its
// run-queue time is "throttled", not contention. On kernels with task-based
// throttling (6.18+: a throttled task dequeues itself on its way back to user
// space and is marked task_struct.throttled) the switch-out says so; on older
// kernels the task's cfs_rq->throttle_count does (and a wakeup into a
// throttled cfs_rq is flagged). The switch-out also notes its cfs_rq's
// throttled_clock_self (when the throttling began, run-queue clock) and
// throttled_clock_self_time (total throttled time so far, the cpu.stat.local
// accounting); at the thread's next switch-in the total has grown by the
// throttling's length, which gives the unthrottle's time: an EvUnthrottle
// record, after which the wait is for a CPU again (RUNQUEUE "wakeup" with an
// "unthrottle" wakeup). The accuracy test finds the throttled time within
// 0.1 % of the cgroup's cpu.stat.
//
// # Why a wait ended on a device or in memory
//
// A blocked switch also records task_struct.in_iowait (io_schedule: block
// I/O, a page being read in) and in_memstall or PF_MEMALLOC (a memory stall:
// direct reclaim, compaction, thrashing, memory.high): "memory" whatever the
// syscall, "disk" where the syscall says no better, and for kernel threads
// "disk"/"memory" instead of "kernel". For a file syscall (read/write-like,
// fsync, fdatasync, sync_file_range, ftruncate, fallocate, syncfs) the file's
// filesystem device (i_sb->s_dev) is recorded: Interval.Device. Block
// requests are charged to the thread that submitted them (taken at their
// first insertion, block_rq_insert), with their device; the completion of a
// request records its device on the wakeups it does.
//
// # prev_state
//
// The tp_btf sched_switch passes the raw __state and a preempt flag, not the
// formatted tracepoint's prev_state. A switched-out task is runnable (it goes
// to RUNQUEUE, sub-state "preempted") when preempt is set — the formatted
// tracepoint reports it as TASK_REPORT_MAX (0x100 on 6.x, printed "R+") — or
// when its state is TASK_RUNNING (0: it yielded, or was woken before it
// slept). Otherwise it is BLOCKED. The CTF export re-derives the formatted
// prev_state (TASK_REPORT_MAX for preemptions) so that tools reading LTTng
// traces see the usual values.
//
// # User side
//
// A reader goroutine drains the ring buffers (Config.RingBufferBytes split
// among the CPUs) into a bounded in-memory ring
// (Config.MaxBytes, default 128 MiB of 56-byte events, ≈ 2.3 M events;
// Config.Retention, default 60 s) plus the last comm of each thread. The
// kernel is hidden behind Source, so the interval builder, the snapshot and
// the CTF writer are tested on synthetic event sequences without root.
//
// Dump replays the ring from Config.Preroll (5 s) before the window, so the
// states at the window's start are known, and builds per-thread intervals:
//
//   - RUNNING (with the CPU),
//   - RUNQUEUE, reason "preempted", "wakeup" (waking or unthrottle →
//     switch-in), "new" or "throttled" (CPU quota),
//   - BLOCKED, reason "lock" (futex, flock, semaphores), "gil" (a futex of
//     the process's interpreter lock: CPython's GIL, interp.go), "network" (sockets,
//     poll/select/epoll), "disk" (file I/O, fsync, io_schedule; with the
//     device), "timer" (sleeps), "syscall" (another syscall: wait4, pipes,
//     ttys…), "pagefault", "memory" (memory stalls), "kernel" (kernel
//     threads) or "unknown" (the thread was first seen inside its syscall),
//
// and wakeup edges: the waker thread (context "thread"), or the interrupt
// context ("timer", "network", "disk", "hardirq", "softirq", "unthrottle"),
// Causal when the waker caused it (its own context, or a softirq it raised);
// a thread created in the window has its creator as its first waker
// (context "fork", on its RUNQUEUE "new" interval). Time before a thread's
// first record, and while it was not followed, is unknown and has no
// interval, with one exception: a target thread whose first record is its
// wakeup, followed by its switch-in, was asleep (only a sleeping task is
// woken) and off the CPU (no switch record) since the records of its
// process are complete (the replay's first record, or the newest the ring
// evicted): BLOCKED "unknown" from then until that wakeup, whose waker ended
// it. A server's pool thread idle longer than the preroll is first seen so. Syscall numbers are classified with the
// x86-64 table (syscalls.go).
//
// The builder keeps intervals and wakeups as small codes (no strings) while
// it replays the records (replay: ~11 M records per CPU second,
// bench/RESULTS.md), then chooses the snapshot's threads (the target's, and
// breadth first the causal wakers of chosen threads in the window, bounded
// by FollowDepth and FollowThreads) and names what it keeps.
//
// Runtimes that wait in user space hide it from the kernel: a goroutine
// parked on a sync.Mutex or a channel while its thread runs other
// goroutines, a Java virtual thread, a task of an event loop. The recorder
// sees the thread running (or waiting in epoll/futex for whatever comes
// next), not the request's wait: an analysis of such a wait must say
// unknown, or take it from the runtime (JFR's park and monitor events) or
// the spans.
//
// # Artifacts
//
// Dump returns two artifacts for the window:
//
//   - kind "kernel", media type application/vnd.rootline.kernel-snapshot+zstd
//     (MediaType, file kernel-<service>-<pid>.rlks.zst): a Snapshot in the
//     binary format (version 3, see snapbin.go and docs/agent.md; versions
//     1 and 2, gzipped JSON, are still read by DecodeSnapshot) of
//     the process's threads and, transitively, of the threads that woke
//     them (with their intervals where they were followed): threads,
//     intervals, wakeups (with the sched_wakeup enqueue time), the block
//     requests they submitted, the bounds and what they cut. Times are Unix
//     nanoseconds.
//   - kind "kernel-ctf", media type application/gzip: a tar.gz of one
//     directory holding a CTF 1.8 trace (TSDL `metadata` plus stream files)
//     that babeltrace2 and Trace Compass open. Stream class 0 holds the raw
//     sched_* events of the snapshot's threads with LTTng's kernel event and
//     field names, one stream per CPU with cpu_id in the packet context and
//     env domain "kernel"; stream class 1 holds rootline_thread_state (one
//     event per interval, at its start, with its duration),
//     rootline_wakeup and rootline_disk_io. Try it with
//     `tar xzf kernel-ctf.tar.gz && babeltrace2 kernel-ctf-<pid>`.
//
// # Containers
//
// StartCgroup(id) records a cgroup v2 (a container) from BPF: every task
// whose own cgroup has that id (the inode of its directory; not the tasks of
// descendant cgroups). The records carry no cgroup id, so DumpCgroup
// selects the container's processes at dump time: those listed in its
// cgroup.procs, plus those they forked in the window and its preroll
// (children start in their parent's cgroup). Their threads are the
// snapshot's targets (Thread.PID is each one's own process; the file names
// are kernel-<service>-cgroup-<id>.*, the "kernel" artifact has cgroup,
// cgroup_id and processes attributes). A process of the cgroup that exited
// before the dump, and was not forked by one of those in that time, is
// missing from the snapshot even though its records were taken. The agent
// registers containers with POST /api/v1/containers or --kernel.cgroup
// (docs/api.md) and dumps them with DumpCgroup.
//
// # Regenerating the BPF object
//
//	go generate ./internal/profiler/kernel/
//
// runs bpf2go (pinned in go.mod's tool block) on bpf/sched_recorder.c; it
// needs clang, llvm and libbpf-dev (scripts/deps.sh). The generated
// schedrecorder_bpfel.go and schedrecorder_bpfel.o are committed.
//
// # Requirements
//
// Root (or CAP_BPF + CAP_PERFMON), a kernel with BTF, tp_btf programs, BPF
// ring buffers and task storage (5.11+). New returns an error wrapping
// ErrUnavailable otherwise.
package kernel
