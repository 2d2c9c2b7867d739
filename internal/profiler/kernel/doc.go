// Package kernel is Rootline's scheduler flight recorder, the "kernel"
// profiler: it records, for target processes only, when each thread runs,
// waits for a CPU or blocks, why it blocked and who woke it, and dumps a
// window of it as a snapshot and as a CTF trace.
//
// # Kernel side
//
// bpf/sched_recorder.c attaches tp_btf programs (BTF-typed raw tracepoints:
// no argument copying, CO-RE field access) to sched_switch, sched_waking,
// sched_wakeup_new, sched_process_fork/exec/exit, block_rq_issue/complete,
// irq_handler_entry/exit, softirq_entry/exit and hrtimer_expire_entry/exit
// (and optionally sched_wakeup and raw_syscalls sys_enter/sys_exit, below).
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
//   - RUNQUEUE, reason "preempted", "wakeup" (waking → switch-in) or "new",
//   - BLOCKED, reason "lock" (futex), "network" (sockets, poll/select/epoll),
//     "disk" (file I/O, fsync…), "timer" (sleeps), "syscall" (another
//     syscall: wait4, pipes, ttys…), "pagefault", "kernel" (kernel threads)
//     or "unknown" (the thread was first seen inside its syscall),
//
// and wakeup edges: the waker thread (context "thread"), or the interrupt
// context ("timer", "network", "disk", "hardirq", "softirq"). Time before a
// thread's first record is unknown and has no interval. Syscall numbers are
// classified with the x86-64 table (syscalls.go).
//
// # Artifacts
//
// Dump returns two artifacts for the window:
//
//   - kind "kernel", media type application/vnd.rootline.kernel-snapshot+json+gzip:
//     a gzipped JSON Snapshot (version 1) of the process's threads and of the
//     threads that woke them (by tid and comm, even outside the process):
//     threads, intervals, wakeups (with the sched_wakeup enqueue time) and
//     the block requests the process issued. Times are Unix nanoseconds.
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
