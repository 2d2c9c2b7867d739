package kernel

import "context"

// Event types; they MUST match the SR_EV_* defines of bpf/sched_recorder.h.
const (
	EvSwitch    = 1 // TID=prev, TID2=next; Arg=raw prev __state
	EvWaking    = 2 // TID=wakee, TID2=current (the waker when Ctx==CtxThread)
	EvWakeup    = 3 // TID=wakee, enqueued on a run queue
	EvWakeupNew = 4 // TID=new task, first enqueue
	EvFork      = 5 // TID=child, TID2=parent
	EvExec      = 6 // TID=task; Comm=new comm
	EvExit      = 7 // TID=task; Flags&1: the whole process exited
	EvBlockRq   = 8 // TID=issuer; Arg=issue ts; TS=completion; Detail=bytes
	// EvClock is a CPU's clock pair (TS=monotonic, Arg=run-queue clock);
	// the source consumes it (see clockPairs), sinks never see it.
	EvClock = 9
	// EvUnthrottle: TID, throttled by its cgroup's CPU quota (a switch with
	// FlagThrottled), was put back on a run queue at TS by the unthrottle
	// of its cfs_rq.
	EvUnthrottle = 10
	// EvUnfollow (made by the source, not BPF): TID, a followed waker, is
	// no longer followed from TS on; its states after TS are unknown until
	// a wakeup follows it again (FlagWakerNew).
	EvUnfollow = 11
)

// Wakeup contexts (SR_CTX_*).
const (
	CtxThread   = 0
	CtxHardirq  = 1 // Detail = irq number
	CtxSoftirq  = 2 // Detail = softirq vector
	CtxHrtimer  = 3
	CtxBlockIRQ = 4 // an irq that completed a block request
)

// Switch flags (SR_F_*).
const (
	FlagPreempt = 1
	FlagKthread = 2
	// FlagRQClock: TS is the CPU's run-queue clock (mapped and cleared by
	// the source before the event reaches a sink).
	FlagRQClock = 4
	// FlagThrottled: prev is runnable but was taken off the CPU because its
	// cgroup's CFS quota ran out.
	FlagThrottled = 8
	// FlagIOWait: prev blocks in io_schedule (block I/O, a page read in).
	FlagIOWait = 16
	// FlagMemStall: prev blocks in a memory stall (reclaim, compaction,
	// thrashing, memory.high).
	FlagMemStall = 32
	// FlagPrevUntracked, FlagNextUntracked: that side of a switch is neither
	// a target nor followed (its state is unknown: the record is there for
	// the other side).
	FlagPrevUntracked = 64
	FlagNextUntracked = 128
	// FlagStolen: Arg's high 32 bits are the low 32 bits of the CPU's
	// stolen time so far (its run-queue clock minus the tasks' clock: steal
	// time under a hypervisor, interrupt time where the kernel accounts it);
	// the low 32 bits are prev's raw state. See stolenTime.
	FlagStolen = 0x100
	// FlagFollowed (any type): the record concerns followed wakers only.
	FlagFollowed = 0x8000
)

// Waking flags (SR_WF_*).
const (
	// FlagRaiser: a network softirq run in the context of the thread that
	// raised it (a local send): that thread caused the wakeup.
	FlagRaiser = 0x100
	// FlagWakerFollowed: the waker (TID2) is followed.
	FlagWakerFollowed = 0x200
	// FlagWakerNew: this wakeup started following the waker.
	FlagWakerNew = 0x400
	// FlagCutDepth, FlagCutCount: the waker was not followed: it was beyond
	// the follow depth, or the followed-thread map was full.
	FlagCutDepth = 0x800
	FlagCutCount = 0x1000
	// FlagWakerKthread: the waker is a kernel thread.
	FlagWakerKthread = 0x2000
	// FlagWakeThrottled: the wakee joins a throttled cfs_rq and waits for
	// its unthrottle (kernels before task-based throttling).
	FlagWakeThrottled = 0x4000
)

// Syscall values that are not syscall numbers (SR_SYS_*).
const (
	SysNone    = -1 // a user task known not to be in a syscall
	SysUnknown = -2
)

// Event is one decoded kernel record (struct sr_event without the comms,
// which the recorder keeps per thread). TS is CLOCK_MONOTONIC nanoseconds.
type Event struct {
	TS        int64
	Arg       uint64
	TID, TGID uint32
	// TID2/TGID2 are the secondary task (next, waker, parent).
	TID2, TGID2 uint32
	Syscall     int32
	Detail      uint32
	// Dev is a kernel dev_t (major<<20 | minor), 0 if none: the filesystem
	// a blocked thread's file is on (switch), the device whose request
	// completion woke a thread (waking), a block request's device.
	Dev         uint32
	TargetCPU   uint16
	CPU         uint16
	Flags       uint16
	Type        uint8
	Ctx         uint8
	Prio, Prio2 int16
}

// task2 returns the event's secondary task when it names a thread (next,
// parent or waker — the current task of a waking, the waker when Ctx is
// CtxThread), else 0.
func (ev *Event) task2() uint32 {
	if ev.Type == EvSwitch || ev.Type == EvFork || ev.Type == EvWaking {
		return ev.TID2
	}
	return 0
}

// Comm is a thread's command name as the kernel reports it (≤ 15 bytes).
type Comm = [16]byte

// Sink receives the events of a Source. Its methods are called from one
// goroutine; comm pointers are only valid during the call.
type Sink interface {
	// Event is called for each record in arrival order (roughly time order:
	// records of different CPUs may be out of order by a few microseconds).
	Event(ev *Event, comm, comm2 *Comm)
}

// Source is where kernel events come from: the BPF programs
// (bpfSource, root only) or a synthetic sequence in tests. Implementations
// MUST be safe for concurrent calls of their target methods while Run runs.
type Source interface {
	// Run delivers events to sink until Close; it returns nil after Close.
	Run(sink Sink) error
	// Drain makes Run deliver every event recorded before the call, waiting
	// at most until ctx is done.
	Drain(ctx context.Context)
	// SetTarget adds (on) or removes a process (tgid) from the recorded set.
	SetTarget(tgid uint32, on bool) error
	// SetCgroup adds or removes a cgroup v2 id from the recorded set.
	SetCgroup(id uint64, on bool) error
	// Lost is the number of records dropped in the kernel so far.
	Lost() uint64
	// Stats reports the source's own counters (BPF run time…).
	Stats() map[string]float64
	// Close detaches from the kernel and ends Run.
	Close() error
}
