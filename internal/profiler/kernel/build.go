package kernel

import (
	"cmp"
	"maps"
	"slices"
)

// Raw prev __state bits (include/linux/sched.h) the builder needs.
const (
	taskReport   = 0x7f   // TASK_REPORT: the states tracepoints report
	taskDead     = 0x80   // TASK_DEAD
	taskRTLock   = 0x1000 // TASK_RTLOCK_WAIT (PREEMPT_RT sleeping locks)
	taskIdle     = 0x402  // TASK_IDLE = TASK_UNINTERRUPTIBLE | TASK_NOLOAD
	taskReportMx = 0x100  // TASK_REPORT_MAX on 6.x: what a preempted task reports
)

// runnable reports whether the task a switch record switches out is still
// runnable (it goes to the run queue, not to sleep). The tp_btf tracepoint
// passes the raw __state and the preempt flag; the formatted tracepoint's
// prev_state is derived from them (reportedState).
func runnable(ev *Event) bool {
	return ev.Flags&FlagPreempt != 0 || prevState(ev)&(taskReport|taskDead|taskRTLock) == 0
}

// prevState is the raw prev __state of a switch record.
func prevState(ev *Event) uint64 { return ev.Arg & 0xffffffff }

// stolenTime is the CPU's stolen-time counter a switch record carries (its
// low 32 bits, in ns), and whether it carries one. The difference of two
// readings on one CPU, modulo 2³², is the time stolen between them: exact
// unless more than 4.29 s were stolen in between.
func stolenTime(ev *Event) (uint32, bool) {
	return uint32(ev.Arg >> 32), ev.Flags&FlagStolen != 0
}

// reportedState is the prev_state the sched_switch tracepoint would print
// for a switch record (__trace_sched_switch_state): TASK_REPORT_MAX for a
// preempted task, else the highest TASK_REPORT bit of the state.
func reportedState(ev *Event) int64 {
	if ev.Flags&FlagPreempt != 0 {
		return taskReportMx
	}
	if prevState(ev) == taskIdle {
		return 0x80 // TASK_REPORT_IDLE
	}
	if prevState(ev)&taskDead != 0 {
		return 0x10 // EXIT_DEAD ("X")
	}
	s := prevState(ev) & taskReport
	if s == 0 {
		return 0
	}
	var hi uint64 = 1
	for s > 1 {
		s >>= 1
		hi <<= 1
	}
	return int64(hi)
}

// States and reasons inside the builder, as small codes: its intervals and
// wakeups hold no strings (no pointers for the garbage collector to scan,
// a third of the memory); build names them once, for the snapshot.
const (
	stUnknown uint8 = iota
	stRunning
	stRunqueue
	stBlocked
	stDead
)

var stateNames = [...]string{stUnknown: "", stRunning: StateRunning, stRunqueue: StateRunqueue, stBlocked: StateBlocked, stDead: "dead"}

const (
	rNone uint8 = iota
	rPreempted
	rWakeup
	rNew
	rThrottled
	rLock
	rNetwork
	rDisk
	rTimer
	rSyscall
	rPageFault
	rMemory
	rKernel
	rUnknown
	rSteal
	rGIL
)

var reasonNames = [...]string{rNone: "", rPreempted: ReasonPreempted, rWakeup: ReasonWakeup, rNew: ReasonNew,
	rThrottled: ReasonThrottled, rLock: ReasonLock, rNetwork: ReasonNetwork, rDisk: ReasonDisk, rTimer: ReasonTimer,
	rSyscall: ReasonSyscall, rPageFault: ReasonPageFault, rMemory: ReasonMemory, rKernel: ReasonKernel, rUnknown: ReasonUnknown,
	rSteal: ReasonSteal, rGIL: ReasonGIL}

// noSyscall is ival.sys outside a syscall.
const noSyscall = -1

// ival is an interval inside the builder (Interval without strings).
type ival struct {
	start, end int64
	th         int32 // the thread: index in builder.tl
	wake       int32
	sys        int32  // syscall number, noSyscall
	dev        uint32 // kernel dev_t of a disk wait, 0
	cpu        int16
	state      uint8
	reason     uint8
	held       bool // a holder's interval (see holder)
}

// ctxUnthrottle is wake.ctx of an unthrottle, ctxFork of a thread's
// creation (beside the CtxThread… codes).
const (
	ctxUnthrottle = 0xff
	ctxFork       = 0xfe
)

// wake is a wakeup inside the builder.
type wake struct {
	ts, enq      int64
	wakee, waker uint32
	dev, detail  uint32
	cpu          uint16
	ctx          uint8
	causal       bool
}

// thread is the builder's state of one thread.
type thread struct {
	since   int64
	tid     uint32
	idx     int32 // in builder.tl
	rank    int32 // in the snapshot's threads given intervals, -1: none
	tgid    uint32
	wake    int32 // index in builder.wakeups of the current interval's wakeup
	pendEnq int32 // index of its last waking, until its sched_wakeup (-1: none)
	sys     int32
	dev     uint32
	cpu     int16
	state   uint8
	reason  uint8
	// stolen is the CPU's stolen-time counter when the thread's current run
	// began (hasStolen: the switch-in record carried one).
	stolen    uint32
	hasStolen bool
	proc      bool // one of the snapshot's processes (a target thread)
	kernel    bool
	// unfollowed: an EvUnfollow said the recorder stopped following it;
	// records naming it are ignored until a wakeup follows it again.
	unfollowed bool
	// cut is why the recorder declined to follow it (UnrecordedDepth or
	// UnrecordedCount), from the last wakeup it did that said so.
	cut string
	// holder: an untracked task given RUNNING intervals because it held a
	// CPU between two switches of tracked threads there (see holder).
	holder bool
	// slept: a target thread whose first record was a wakeup (its current
	// RUNQUEUE interval's); it was blocked since before builder.known, in
	// a syscall not seen. Said by an interval only once a switch-in shows
	// it was off the CPU until then (see sleptBefore).
	slept bool
}

// builder turns a time-ordered event sequence into intervals. Times stay
// CLOCK_MONOTONIC until build converts them.
type builder struct {
	start, end int64 // window, monotonic ns
	// known is the time from which the records of the snapshot's
	// processes are complete: the first record replayed, or later if the
	// ring evicted records after it.
	known   int64
	threads map[uint32]*thread
	tl      []*thread // by thread.idx
	// The two threads looked up last: consecutive records often name the
	// same threads (a switch-in, then its switch-out; two threads handing
	// work to each other).
	lastTID [2]uint32
	last    [2]*thread
	ivs     []ival // every thread's, in the order they end
	wakeups []wake
	disk    []DiskIO
	diskDev []uint32 // dev of each of disk
	in      *buildInput
	// onCPU[cpu] is the untracked task a record put on the CPU (the next
	// task of a switch that took a tracked thread off it), while no later
	// record of that CPU said otherwise (see holder).
	onCPU map[int32]heldCPU
}

// heldCPU is an untracked task on a CPU since a switch record.
type heldCPU struct {
	tid, tgid uint32
	since     int64
}

func (b *builder) get(tid, tgid uint32) *thread {
	var t *thread
	switch {
	case tid == b.lastTID[0] && b.last[0] != nil:
		t = b.last[0]
	case tid == b.lastTID[1] && b.last[1] != nil:
		t = b.last[1]
		b.lastTID[0], b.lastTID[1], b.last[0], b.last[1] = tid, b.lastTID[0], t, b.last[0]
	default:
		t = b.threads[tid]
		if t == nil {
			t = &thread{tid: tid, idx: int32(len(b.tl)), rank: -1, tgid: tgid, cpu: -1, wake: -1, pendEnq: -1, sys: noSyscall}
			t.proc = tgid != 0 && b.in.isProc(tgid)
			b.threads[tid] = t
			b.tl = append(b.tl, t)
		}
		b.lastTID[1], b.last[1], b.lastTID[0], b.last[0] = b.lastTID[0], b.last[0], tid, t
	}
	if tgid != 0 && t.tgid != tgid {
		t.tgid = tgid
		t.proc = b.in.isProc(tgid)
	}
	return t
}

// side returns the state of tid for a record at ts that tracks it, or nil
// when the record says nothing of its state: untracked (neither a target
// nor followed), no longer followed, or a thread outside the snapshot's
// processes before the time from which every list of the ring is complete.
func (b *builder) side(tid, tgid uint32, ts int64, untracked bool) *thread {
	if tid == 0 || untracked {
		return nil
	}
	t := b.get(tid, tgid)
	if t.unfollowed || !t.proc && ts <= b.in.complete {
		return nil
	}
	return t
}

// close ends t's current interval at ts, clipped to the window.
func (b *builder) close(t *thread, ts int64, wake int32) {
	if t.state < stRunning || t.state > stBlocked {
		return
	}
	s, e := max(t.since, b.start), min(ts, b.end)
	if e <= s {
		return
	}
	cpu := int16(-1)
	if t.state == stRunning {
		cpu = t.cpu
	}
	b.ivs = append(b.ivs, ival{start: s, end: e, th: t.idx, wake: wake, sys: t.sys, dev: t.dev, cpu: cpu,
		state: t.state, reason: t.reason})
}

// closeRun ends t's run at switch record ev. The time stolen from the run
// (the CPU's stolen-time counter at ev minus at the switch-in, on the same
// CPU) ends it as a RUNQUEUE "steal" interval: the run's RUNNING time is then
// the CPU time the thread got, as the kernel's own accounting (schedstat,
// cpu.stat, the CFS quota) counts it.
func (b *builder) closeRun(t *thread, ev *Event) {
	now, ok := stolenTime(ev)
	if ok && t.hasStolen && int(ev.CPU) == int(t.cpu) {
		if d := int64(now - t.stolen); d > 0 && d < ev.TS-t.since {
			b.close(t, ev.TS-d, -1)
			t.set(stRunqueue, rSteal, ev.TS-d, -1)
		}
	}
	b.close(t, ev.TS, -1)
}

// holder follows, per CPU, the untracked tasks that switch records of
// tracked threads name: the next task of a switch that took a tracked
// thread off a CPU held it from then, and when the next record of that CPU
// switches from that same task to a tracked thread, it held the CPU all
// along (the recorder sees no switch between two untracked tasks, so a
// record whose previous task is another leaves the time between unknown:
// nothing is given). Such a task gets a RUNNING interval on that CPU: what
// a tracked thread waiting in that CPU's run queue waited behind — another
// program of the node, or a service's own process the recorder does not
// follow.
func (b *builder) holder(ev *Event) {
	if b.onCPU == nil {
		b.onCPU = map[int32]heldCPU{}
	}
	cpu := int32(ev.CPU)
	if h, ok := b.onCPU[cpu]; ok && ev.Flags&FlagPrevUntracked != 0 && ev.TID == h.tid {
		if s, e := max(h.since, b.start), min(ev.TS, b.end); e > s {
			t := b.get(h.tid, h.tgid)
			if !t.proc {
				t.holder = true
				if ev.Flags&FlagKthread != 0 {
					t.kernel = true
				}
				b.ivs = append(b.ivs, ival{start: s, end: e, th: t.idx, wake: -1, sys: noSyscall, cpu: int16(ev.CPU),
					state: stRunning, reason: rNone, held: true})
			}
		}
	}
	delete(b.onCPU, cpu)
	if ev.Flags&FlagNextUntracked != 0 && ev.TID2 != 0 {
		b.onCPU[cpu] = heldCPU{tid: ev.TID2, tgid: ev.TGID2, since: ev.TS}
	}
}

func (t *thread) set(state, reason uint8, ts int64, wake int32) {
	t.state, t.reason, t.sys, t.dev, t.since, t.wake = state, reason, noSyscall, 0, ts, wake
	t.slept = false
}

// sleptBefore adds the wait that ended with the wakeup of t's current
// RUNQUEUE interval, for a target thread whose first record was that
// wakeup, now that it is switched in: t was off the CPU (no switch record
// since b.known) and asleep when woken (the kernel wakes only a sleeping
// task), so it was blocked from before b.known until the wakeup, in a
// syscall the records do not name (reason unknown). A thread that sits in
// a pool between requests, longer than the recorder's preroll, is first
// seen so; without this wait the time until it was woken had no interval,
// and a path through it could not follow its waker.
func (b *builder) sleptBefore(t *thread) {
	if !t.slept {
		return
	}
	t.slept = false
	s, e := max(b.known, b.start), min(t.since, b.end)
	if e <= s {
		return
	}
	b.ivs = append(b.ivs, ival{start: s, end: e, th: t.idx, wake: t.wake, sys: noSyscall, cpu: -1,
		state: stBlocked, reason: rUnknown})
}

func (b *builder) event(ev *Event) {
	switch ev.Type {
	case EvSwitch:
		if p := b.side(ev.TID, ev.TGID, ev.TS, ev.Flags&FlagPrevUntracked != 0); p != nil {
			if ev.Flags&FlagKthread != 0 {
				p.kernel = true
			}
			if p.state == stRunning {
				b.closeRun(p, ev)
			}
			switch {
			case p.state == stDead:
			case runnable(ev):
				r := rPreempted
				if ev.Flags&FlagThrottled != 0 {
					r = rThrottled
				}
				p.set(stRunqueue, r, ev.TS, -1)
			case prevState(ev)&taskDead != 0:
				p.set(stDead, rNone, ev.TS, -1)
			default:
				r, sys := blockReason(ev)
				if r == rLock && (sys == sysFutex || sys == sysFutexWait) && len(b.in.gil) > 0 &&
					inRanges(b.in.gil[ev.TGID], uint64(ev.Dev)<<32|uint64(ev.Detail)) {
					r = rGIL
				}
				p.set(stBlocked, r, ev.TS, -1)
				p.sys = sys
				if r == rDisk {
					p.dev = ev.Dev
				}
			}
		}
		if n := b.side(ev.TID2, ev.TGID2, ev.TS, ev.Flags&FlagNextUntracked != 0); n != nil {
			if n.state == stRunqueue {
				b.sleptBefore(n)
				b.close(n, ev.TS, n.wake)
			}
			n.set(stRunning, rNone, ev.TS, -1)
			n.cpu = int16(ev.CPU)
			n.stolen, n.hasStolen = stolenTime(ev)
		}
		b.holder(ev)
	case EvWaking:
		if ev.TID == 0 {
			return
		}
		isCausal := causal(ev)
		idx := int32(len(b.wakeups))
		b.wakeups = append(b.wakeups, wake{ts: ev.TS, wakee: ev.TID, waker: ev.TID2, dev: ev.Dev, detail: ev.Detail,
			cpu: ev.CPU, ctx: ev.Ctx, causal: isCausal})
		if ev.TID2 != 0 {
			b.waker(ev, isCausal)
		}
		w := b.side(ev.TID, ev.TGID, ev.TS, false)
		if w == nil {
			return
		}
		w.pendEnq = idx
		r := rWakeup
		if ev.Flags&FlagWakeThrottled != 0 {
			r = rThrottled
		}
		switch w.state {
		case stBlocked:
			b.close(w, ev.TS, idx)
			w.set(stRunqueue, r, ev.TS, idx)
		case stUnknown:
			w.set(stRunqueue, r, ev.TS, idx)
			// Not before b.known: the thread may have had records before it.
			w.slept = w.proc && ev.TS > b.known
		}
	case EvWakeup:
		if t := b.threads[ev.TID]; t != nil && t.pendEnq >= 0 {
			b.wakeups[t.pendEnq].enq = ev.TS
			t.pendEnq = -1
		}
	case EvUnthrottle:
		t := b.side(ev.TID, ev.TGID, ev.TS, false)
		if t == nil || t.state != stRunqueue || t.reason != rThrottled {
			return
		}
		idx := int32(len(b.wakeups))
		b.wakeups = append(b.wakeups, wake{ts: ev.TS, wakee: ev.TID, cpu: ev.CPU, ctx: ctxUnthrottle})
		b.close(t, ev.TS, idx)
		t.set(stRunqueue, rWakeup, ev.TS, idx)
	case EvUnfollow:
		if t := b.threads[ev.TID]; t != nil && !t.proc {
			b.close(t, ev.TS, -1)
			t.set(stUnknown, rNone, ev.TS, -1)
			t.unfollowed = true
		}
	case EvWakeupNew:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil && t.state == stUnknown {
			t.set(stRunqueue, rNew, ev.TS, -1)
		}
	case EvFork:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil && (t.state == stUnknown || t.state == stDead) {
			// The creator is the new thread's first waker: what a path
			// finds before a thread existed is what its creator did (a
			// server's dispatcher starting a pool thread for a request).
			idx := int32(-1)
			if ev.TID2 != 0 && ev.TID2 != ev.TID {
				idx = int32(len(b.wakeups))
				b.wakeups = append(b.wakeups, wake{ts: ev.TS, wakee: ev.TID, waker: ev.TID2, cpu: ev.CPU, ctx: ctxFork, causal: true})
			}
			t.set(stRunqueue, rNew, ev.TS, idx)
		}
		b.get(ev.TID2, ev.TGID2)
	case EvExit:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil {
			b.close(t, ev.TS, -1)
			t.set(stDead, rNone, ev.TS, -1)
		}
	case EvBlockRq:
		b.get(ev.TID, ev.TGID)
		if ev.TS >= b.start && int64(ev.Arg) <= b.end {
			b.disk = append(b.disk, DiskIO{TID: ev.TID, Issue: int64(ev.Arg), Complete: ev.TS, Bytes: ev.Detail})
			b.diskDev = append(b.diskDev, ev.Dev)
		}
	}
}

// waker notes what a waking record says of its waker (TID2).
func (b *builder) waker(ev *Event, isCausal bool) {
	w := b.get(ev.TID2, ev.TGID2)
	if ev.Flags&FlagWakerKthread != 0 {
		w.kernel = true
	}
	switch {
	case ev.Flags&FlagCutDepth != 0:
		w.cut = UnrecordedDepth
	case ev.Flags&FlagCutCount != 0:
		w.cut = UnrecordedCount
	}
	// From this wakeup on the waker is followed, and it is running: it is
	// doing the wakeup, from its own context.
	if ev.Flags&FlagWakerNew != 0 && isCausal && (w.proc || ev.TS > b.in.complete) {
		w.unfollowed = false
		if w.state == stUnknown {
			w.set(stRunning, rNone, ev.TS, -1)
			w.cpu = int16(ev.CPU)
		}
	}
}

// Defaults of the snapshot's bounds on wakers (Config.FollowDepth and
// Config.FollowThreads).
const (
	defaultFollowDepth   = 3
	defaultFollowThreads = 512
)

// buildInput is what build needs besides the events.
type buildInput struct {
	pid uint32
	// pids, if set, are the snapshot's processes instead of pid alone (a
	// cgroup's; Snapshot.PID stays pid).
	pids       map[uint32]bool
	start, end int64 // window, CLOCK_MONOTONIC ns
	// offset turns CLOCK_MONOTONIC into Unix ns.
	offset int64
	// comm returns the last known comm of tid.
	comm func(tid uint32) string
	// devName names a kernel dev_t (nil: "major:minor").
	devName func(dev uint32) string
	// complete: records of threads outside the snapshot's processes at or
	// before it are ignored (see windowEvents.complete).
	complete int64
	// maxDepth and maxThreads bound the wakers given intervals (0: the
	// defaults); recording says whether the recorder followed wakers.
	maxDepth, maxThreads int
	recording            bool
	// gil: where processes keep their interpreter lock (interp.go): a
	// futex wait there is ReasonGIL.
	gil map[uint32][]addrRange
}

func (in *buildInput) isProc(tgid uint32) bool {
	if in.pids != nil {
		return in.pids[tgid]
	}
	return tgid == in.pid
}

// devNumber formats a kernel dev_t as "major:minor".
func devNumber(dev uint32) string {
	return itoa(int64(dev>>20)) + ":" + itoa(int64(dev&0xfffff))
}

// build derives the snapshot of in.pid from events, which MUST be sorted by
// TS and SHOULD start some time before in.start (so the states at the
// window's start are known). Which raw events the CTF export carries is
// rawFilter's business.
func build(events []Event, in buildInput) *Snapshot {
	s, ivs := replay(events, in).snapshot(len(events))
	s.Intervals = make([]Interval, ivs.Len())
	for k := range s.Intervals {
		s.Intervals[k] = ivs.At(k)
	}
	return s
}

// replay builds the threads' timelines: every thread's intervals and the
// wakeups, in the builder's compact form.
func replay(events []Event, in buildInput) *builder {
	if in.devName == nil {
		in.devName = devNumber
	}
	if in.maxDepth <= 0 {
		in.maxDepth = defaultFollowDepth
	}
	if in.maxThreads <= 0 {
		in.maxThreads = defaultFollowThreads
	}
	// About one interval per record: a switch ends at most two, a waking
	// one, the rest none. A wakeup per waking or unthrottle record.
	nWake := 0
	for i := range events {
		if t := events[i].Type; t == EvWaking || t == EvUnthrottle {
			nWake++
		}
	}
	b := &builder{start: in.start, end: in.end, threads: map[uint32]*thread{}, in: &in,
		ivs: make([]ival, 0, len(events)+16), wakeups: make([]wake, 0, nWake)}
	if len(events) > 0 {
		b.known = max(events[0].TS, in.complete)
	}
	for i := range events {
		if events[i].TS > in.end {
			break
		}
		b.event(&events[i])
	}
	for _, t := range b.tl {
		b.close(t, in.end, t.wake) // a RUNQUEUE "wakeup" keeps its wakeup
	}
	return b
}

// snapshot chooses the snapshot's threads and names what the builder
// holds as codes, except for the intervals: the snapshot's Intervals stay
// nil, and ivs serves them from the builder, one at a time (Encode and the
// CTF export take them from there: a dump of millions of intervals does not
// hold them all as Interval values). events is the number of records
// replayed.
func (b *builder) snapshot(events int) (*Snapshot, *builtIntervals) {
	in := b.in
	b.dropHeldOverlaps()
	sel := b.selectThreads()
	s := &Snapshot{Version: SnapshotVersion, PID: in.pid, Start: in.start + in.offset, End: in.end + in.offset,
		Threads: []Thread{}, Intervals: []Interval{}, Wakeups: []Wakeup{}, Events: events,
		Follow: &Follow{MaxDepth: in.maxDepth, MaxThreads: in.maxThreads, Recording: in.recording}}
	if sel.cutDepth > 0 || sel.cutCount > 0 {
		s.Truncated = &Truncation{Depth: sel.cutDepth, Count: sel.cutCount}
	}
	names := newNamer(in.devName)

	// Intervals of the threads given them, grouped by thread in the order
	// of sel.order, each thread's in time order: a stable counting sort
	// (b.ivs holds each thread's intervals in time order already).
	for i, tid := range sel.order {
		b.threads[tid].rank = int32(i)
	}
	counts := make([]int, len(sel.order)+1)
	for i := range b.ivs {
		if r := b.tl[b.ivs[i].th].rank; r >= 0 {
			counts[r+1]++
		}
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	kept := counts[len(counts)-1]

	// Wakeups: of the given threads in the window, and those their
	// intervals refer to.
	used := make([]bool, len(b.wakeups))
	for i := range b.wakeups {
		w := &b.wakeups[i]
		if t := b.threads[w.wakee]; t != nil && t.rank >= 0 && w.ts >= in.start && w.ts <= in.end {
			used[i] = true
		}
	}
	for i := range b.ivs {
		if w := b.ivs[i].wake; w >= 0 && b.tl[b.ivs[i].th].rank >= 0 {
			used[w] = true
		}
	}
	remap := make([]int32, len(b.wakeups))
	nUsed := 0
	for _, u := range used {
		if u {
			nUsed++
		}
	}
	s.Wakeups = make([]Wakeup, 0, nUsed)
	for i := range b.wakeups {
		remap[i] = -1
		if used[i] {
			remap[i] = int32(len(s.Wakeups))
			s.Wakeups = append(s.Wakeups, names.wakeup(&b.wakeups[i], in.offset))
		}
	}
	used = nil

	// Place the intervals (their indexes in b.ivs).
	hasIvs := make([]bool, len(sel.order))
	first := make([]int64, len(sel.order))
	order := make([]int32, kept)
	for i := range b.ivs {
		iv := &b.ivs[i]
		r := b.tl[iv.th].rank
		if r < 0 {
			continue
		}
		if !hasIvs[r] {
			hasIvs[r], first[r] = true, iv.start
		}
		order[counts[r]] = int32(i)
		counts[r]++
	}
	ivs := &builtIntervals{b: b, order: order, remap: remap, names: names}

	for _, tid := range sel.all {
		t := b.threads[tid]
		th := Thread{TID: tid, Comm: in.comm(tid), Depth: sel.depth[tid]}
		if t != nil {
			th.PID, th.Kernel, th.Target = t.tgid, t.kernel, t.proc
		}
		switch {
		case t != nil && t.rank >= 0 && hasIvs[t.rank]:
			r := t.rank
			th.Recorded, th.Since = true, first[r]+in.offset
		case th.Target:
			th.Recorded = true
		case sel.cut[tid] != "":
			th.Unrecorded = sel.cut[tid]
		case t != nil && t.cut != "":
			th.Unrecorded = t.cut
		default:
			th.Unrecorded = UnrecordedNotFollowed
		}
		s.Threads = append(s.Threads, th)
	}
	for i, d := range b.disk {
		if t := b.threads[d.TID]; t != nil && t.rank >= 0 {
			d.Issue += in.offset
			d.Complete += in.offset
			if dev := b.diskDev[i]; dev != 0 {
				d.Device = names.dev(dev)
			}
			s.DiskIOs = append(s.DiskIOs, d)
		}
	}
	return s, ivs
}

// dropHeldOverlaps drops the holder intervals that overlap another interval
// of their thread: what holder infers is a guess where the recorder saw
// none of the task's own switches (it may have left the CPU and come back
// between two records, or run elsewhere meanwhile), so the thread's own
// records (a waker followed) win, and of two guesses the earlier stands. A
// thread's intervals stay in time order (each is appended at its end).
func (b *builder) dropHeldOverlaps() {
	if !slices.ContainsFunc(b.ivs, func(iv ival) bool { return iv.held }) {
		return
	}
	var own map[int32][]ival // the non-holder intervals of holder threads
	for i := range b.ivs {
		if iv := &b.ivs[i]; !iv.held && b.tl[iv.th].holder {
			if own == nil {
				own = map[int32][]ival{}
			}
			own[iv.th] = append(own[iv.th], *iv)
		}
	}
	for _, ivs := range own {
		slices.SortFunc(ivs, func(x, y ival) int { return cmp.Compare(x.start, y.start) })
	}
	lastEnd := map[int32]int64{}
	out := b.ivs[:0]
	for _, iv := range b.ivs {
		if iv.held {
			if iv.start < lastEnd[iv.th] || overlapsAny(own[iv.th], iv.start, iv.end) {
				continue
			}
			lastEnd[iv.th] = iv.end
		}
		out = append(out, iv)
	}
	b.ivs = out
}

// overlapsAny reports whether [start, end) overlaps one of ivs (sorted by
// start, not overlapping each other).
func overlapsAny(ivs []ival, start, end int64) bool {
	i, _ := slices.BinarySearchFunc(ivs, end, func(iv ival, t int64) int { return cmp.Compare(iv.start, t) })
	// ivs[i-1] is the last one starting before end.
	return i > 0 && ivs[i-1].end > start
}

// intervalSource is a snapshot's intervals, in its order.
type intervalSource interface {
	Len() int
	At(k int) Interval
}

// sliceIntervals serves a snapshot's Intervals.
type sliceIntervals []Interval

func (s sliceIntervals) Len() int          { return len(s) }
func (s sliceIntervals) At(k int) Interval { return s[k] }

// builtIntervals serves the intervals a builder kept, named one at a time.
type builtIntervals struct {
	b     *builder
	order []int32 // indexes in b.ivs, in the snapshot's order
	remap []int32 // b.wakeups index → snapshot wakeup index
	names *namer
}

func (v *builtIntervals) Len() int { return len(v.order) }

func (v *builtIntervals) At(k int) Interval {
	iv := &v.b.ivs[v.order[k]]
	off := v.b.in.offset
	out := Interval{TID: v.b.tl[iv.th].tid, State: stateNames[iv.state], Reason: reasonNames[iv.reason],
		Start: iv.start + off, End: iv.end + off, CPU: int(iv.cpu), Wakeup: -1}
	if iv.sys != noSyscall {
		out.Syscall = syscallName(iv.sys)
	}
	if iv.dev != 0 {
		out.Device = v.names.dev(iv.dev)
	}
	if iv.wake >= 0 {
		out.Wakeup = int(v.remap[iv.wake])
	}
	return out
}

// rawFilter selects the raw events the CTF export carries: those of the
// snapshot's threads inside its window (CLOCK_MONOTONIC start and end).
func rawFilter(s *Snapshot, start, end int64) func(ev *Event) bool {
	listed := make(map[uint32]bool, len(s.Threads))
	for _, th := range s.Threads {
		listed[th.TID] = true
	}
	in := func(tid uint32) bool { return tid != 0 && listed[tid] }
	return func(ev *Event) bool {
		if ev.TS < start || ev.TS > end {
			return false
		}
		return in(ev.TID) || (ev.Type == EvSwitch || ev.Type == EvFork) && in(ev.TID2)
	}
}

// namer turns the builder's codes into the snapshot's strings, with a
// cache of device names.
type namer struct {
	devName func(uint32) string
	devs    map[uint32]string
}

func newNamer(devName func(uint32) string) *namer {
	return &namer{devName: devName, devs: map[uint32]string{}}
}

func (n *namer) dev(d uint32) string {
	s, ok := n.devs[d]
	if !ok {
		s = n.devName(d)
		n.devs[d] = s
	}
	return s
}

func (n *namer) wakeup(w *wake, offset int64) Wakeup {
	out := Wakeup{TS: w.ts + offset, Wakee: w.wakee, Waker: w.waker, Causal: w.causal, CPU: int(w.cpu)}
	switch w.ctx {
	case ctxUnthrottle:
		out.Context, out.Detail = CtxNameUnthrottle, "cfs bandwidth"
	case ctxFork:
		out.Context = CtxNameFork
	default:
		out.Context, out.Detail = wakeContext(w.ctx, w.detail)
	}
	if w.dev != 0 {
		out.Device = n.dev(w.dev)
	}
	if w.enq != 0 {
		out.Enqueued = w.enq + offset
	}
	return out
}

// selection is which threads a snapshot lists.
type selection struct {
	order    []uint32          // threads given intervals: targets, then wakers by depth
	all      []uint32          // order, then the wakers listed without intervals
	depth    map[uint32]int    // of every listed thread
	listed   map[uint32]bool   // every listed thread
	cut      map[uint32]string // listed without intervals because of the bounds
	cutDepth int
	cutCount int
}

// selectThreads chooses the snapshot's threads: those of its processes,
// then, breadth first, the threads that caused a wakeup of a chosen thread
// in the window (Wakeup.Causal; and its last one before the window), up to
// in.maxDepth hops and in.maxThreads of them; the next hop's wakers, and
// those beyond the count, are listed without intervals. Within a hop,
// wakers come in the order of their first wakeup.
func (b *builder) selectThreads() selection {
	in := b.in
	sel := selection{depth: map[uint32]int{}, listed: map[uint32]bool{}, cut: map[uint32]string{}}
	var frontier []uint32
	for tid, t := range b.threads {
		if t.proc {
			frontier = append(frontier, tid)
		}
	}
	slices.Sort(frontier)
	for _, tid := range frontier {
		sel.depth[tid] = 0
		sel.listed[tid] = true
	}
	sel.order = append(sel.order, frontier...)
	// The causal wakers of each thread in the window, and the one of its
	// last wakeup before it (an interval that began before the window, and
	// is clipped to it, refers to that one).
	wakersOf := map[uint32][]uint32{}
	before := map[uint32]uint32{}
	for i := range b.wakeups {
		w := &b.wakeups[i]
		if !w.causal || w.waker == 0 || w.ts > in.end {
			continue
		}
		if w.ts < in.start {
			before[w.wakee] = w.waker
			continue
		}
		wakersOf[w.wakee] = append(wakersOf[w.wakee], w.waker)
	}
	for wakee, waker := range before {
		wakersOf[wakee] = append([]uint32{waker}, wakersOf[wakee]...)
	}
	var cutOrder []uint32
	others := 0
	for d := 1; len(frontier) > 0; d++ {
		var next []uint32
		for _, tid := range frontier {
			for _, wk := range wakersOf[tid] {
				if sel.listed[wk] {
					continue
				}
				sel.listed[wk] = true
				sel.depth[wk] = d
				switch {
				case d > in.maxDepth:
					sel.cut[wk] = UnrecordedDepth
					sel.cutDepth++
					cutOrder = append(cutOrder, wk)
				case others >= in.maxThreads:
					sel.cut[wk] = UnrecordedCount
					sel.cutCount++
					cutOrder = append(cutOrder, wk)
				default:
					others++
					next = append(next, wk)
				}
			}
		}
		sel.order = append(sel.order, next...)
		frontier = next
	}
	// The tasks that held the CPUs the tracked threads waited for, at most
	// maxThreads, those that held them longest first.
	held := map[uint32]int64{}
	for i := range b.ivs {
		if t := b.tl[b.ivs[i].th]; t.holder && !sel.listed[t.tid] {
			held[t.tid] += b.ivs[i].end - b.ivs[i].start
		}
	}
	holders := slices.Collect(maps.Keys(held))
	slices.SortFunc(holders, func(x, y uint32) int { return cmp.Or(cmp.Compare(held[y], held[x]), cmp.Compare(x, y)) })
	for _, tid := range holders[:min(len(holders), in.maxThreads)] {
		sel.listed[tid] = true
		sel.depth[tid] = HolderDepth
		sel.order = append(sel.order, tid)
	}
	sel.all = append(append([]uint32(nil), sel.order...), cutOrder...)
	return sel
}
