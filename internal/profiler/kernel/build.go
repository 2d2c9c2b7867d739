package kernel

import (
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
	return ev.Flags&FlagPreempt != 0 || ev.Arg&(taskReport|taskDead|taskRTLock) == 0
}

// reportedState is the prev_state the sched_switch tracepoint would print
// for a switch record (__trace_sched_switch_state): TASK_REPORT_MAX for a
// preempted task, else the highest TASK_REPORT bit of the state.
func reportedState(ev *Event) int64 {
	if ev.Flags&FlagPreempt != 0 {
		return taskReportMx
	}
	if ev.Arg == taskIdle {
		return 0x80 // TASK_REPORT_IDLE
	}
	if ev.Arg&taskDead != 0 {
		return 0x10 // EXIT_DEAD ("X")
	}
	s := ev.Arg & taskReport
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

// thread is the builder's state of one thread.
type thread struct {
	tgid    uint32
	proc    bool   // one of the snapshot's processes (a target thread)
	state   string // "" unknown, StateRunning/Runqueue/Blocked, "dead"
	reason  string
	syscall string
	device  string
	since   int64
	cpu     int
	wake    int // index in builder.wakeups of the current interval's wakeup
	pendEnq int // index of its last waking, until its sched_wakeup (-1: none)
	kernel  bool
	// unfollowed: an EvUnfollow said the recorder stopped following it;
	// records naming it are ignored until a wakeup follows it again.
	unfollowed bool
	// cut is why the recorder declined to follow it (UnrecordedDepth or
	// UnrecordedCount), from the last wakeup it did that said so.
	cut string
}

// builder turns a time-ordered event sequence into intervals. Times stay
// CLOCK_MONOTONIC until build converts them.
type builder struct {
	start, end int64 // window, monotonic ns
	threads    map[uint32]*thread
	ivs        []Interval // every thread's, in the order they end
	wakeups    []Wakeup
	disk       []DiskIO
	in         *buildInput
}

func (b *builder) get(tid, tgid uint32) *thread {
	t := b.threads[tid]
	if t == nil {
		t = &thread{tgid: tgid, cpu: -1, wake: -1, pendEnq: -1}
		t.proc = tgid != 0 && b.in.isProc(tgid)
		b.threads[tid] = t
	} else if tgid != 0 && t.tgid != tgid {
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
func (b *builder) close(tid uint32, t *thread, ts int64, wake int) {
	switch t.state {
	case StateRunning, StateRunqueue, StateBlocked:
	default:
		return
	}
	s, e := max(t.since, b.start), min(ts, b.end)
	if e <= s {
		return
	}
	cpu := -1
	if t.state == StateRunning {
		cpu = t.cpu
	}
	b.ivs = append(b.ivs, Interval{TID: tid, State: t.state, Reason: t.reason, Syscall: t.syscall, Device: t.device,
		Start: s, End: e, CPU: cpu, Wakeup: wake})
}

func (t *thread) set(state, reason, syscall string, ts int64, wake int) {
	t.state, t.reason, t.syscall, t.device, t.since, t.wake = state, reason, syscall, "", ts, wake
}

func (b *builder) event(ev *Event) {
	switch ev.Type {
	case EvSwitch:
		if p := b.side(ev.TID, ev.TGID, ev.TS, ev.Flags&FlagPrevUntracked != 0); p != nil {
			if ev.Flags&FlagKthread != 0 {
				p.kernel = true
			}
			if p.state == StateRunning {
				b.close(ev.TID, p, ev.TS, -1)
			}
			switch {
			case p.state == "dead":
			case runnable(ev):
				r := ReasonPreempted
				if ev.Flags&FlagThrottled != 0 {
					r = ReasonThrottled
				}
				p.set(StateRunqueue, r, "", ev.TS, -1)
			case ev.Arg&taskDead != 0:
				p.set("dead", "", "", ev.TS, -1)
			default:
				r, sc := blockReason(ev)
				p.set(StateBlocked, r, sc, ev.TS, -1)
				if r == ReasonDisk && ev.Dev != 0 {
					p.device = b.in.devName(ev.Dev)
				}
			}
		}
		if n := b.side(ev.TID2, ev.TGID2, ev.TS, ev.Flags&FlagNextUntracked != 0); n != nil {
			if n.state == StateRunqueue {
				b.close(ev.TID2, n, ev.TS, n.wake)
			}
			n.set(StateRunning, "", "", ev.TS, -1)
			n.cpu = int(ev.CPU)
		}
	case EvWaking:
		if ev.TID == 0 {
			return
		}
		ctx, detail := wakeContext(ev)
		isCausal := causal(ev)
		wk := Wakeup{TS: ev.TS, Wakee: ev.TID, Waker: ev.TID2, Context: ctx, Detail: detail, CPU: int(ev.CPU), Causal: isCausal}
		if ev.Dev != 0 {
			wk.Device = b.in.devName(ev.Dev)
		}
		idx := len(b.wakeups)
		b.wakeups = append(b.wakeups, wk)
		if ev.TID2 != 0 {
			b.waker(ev, isCausal)
		}
		w := b.side(ev.TID, ev.TGID, ev.TS, false)
		if w == nil {
			return
		}
		w.pendEnq = idx
		r := ReasonWakeup
		if ev.Flags&FlagWakeThrottled != 0 {
			r = ReasonThrottled
		}
		switch w.state {
		case StateBlocked:
			b.close(ev.TID, w, ev.TS, idx)
			w.set(StateRunqueue, r, "", ev.TS, idx)
		case "":
			w.set(StateRunqueue, r, "", ev.TS, idx)
		}
	case EvWakeup:
		if t := b.threads[ev.TID]; t != nil && t.pendEnq >= 0 {
			b.wakeups[t.pendEnq].Enqueued = ev.TS
			t.pendEnq = -1
		}
	case EvUnthrottle:
		t := b.side(ev.TID, ev.TGID, ev.TS, false)
		if t == nil || t.state != StateRunqueue || t.reason != ReasonThrottled {
			return
		}
		idx := len(b.wakeups)
		b.wakeups = append(b.wakeups, Wakeup{TS: ev.TS, Wakee: ev.TID, Context: CtxNameUnthrottle, Detail: "cfs bandwidth", CPU: int(ev.CPU)})
		b.close(ev.TID, t, ev.TS, idx)
		t.set(StateRunqueue, ReasonWakeup, "", ev.TS, idx)
	case EvUnfollow:
		if t := b.threads[ev.TID]; t != nil && !t.proc {
			b.close(ev.TID, t, ev.TS, -1)
			t.set("", "", "", ev.TS, -1)
			t.unfollowed = true
		}
	case EvWakeupNew:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil && t.state == "" {
			t.set(StateRunqueue, ReasonNew, "", ev.TS, -1)
		}
	case EvFork:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil && (t.state == "" || t.state == "dead") {
			t.set(StateRunqueue, ReasonNew, "", ev.TS, -1)
		}
		b.get(ev.TID2, ev.TGID2)
	case EvExit:
		if t := b.side(ev.TID, ev.TGID, ev.TS, false); t != nil {
			b.close(ev.TID, t, ev.TS, -1)
			t.set("dead", "", "", ev.TS, -1)
		}
	case EvBlockRq:
		b.get(ev.TID, ev.TGID)
		if ev.TS >= b.start && int64(ev.Arg) <= b.end {
			d := DiskIO{TID: ev.TID, Issue: int64(ev.Arg), Complete: ev.TS, Bytes: ev.Detail}
			if ev.Dev != 0 {
				d.Device = b.in.devName(ev.Dev)
			}
			b.disk = append(b.disk, d)
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
		if w.state == "" {
			w.set(StateRunning, "", "", ev.TS, -1)
			w.cpu = int(ev.CPU)
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
// window's start are known). It also returns the raw events of the
// snapshot's threads inside the window (for the CTF export).
func build(events []Event, in buildInput) (*Snapshot, []Event) {
	if in.devName == nil {
		in.devName = devNumber
	}
	if in.maxDepth <= 0 {
		in.maxDepth = defaultFollowDepth
	}
	if in.maxThreads <= 0 {
		in.maxThreads = defaultFollowThreads
	}
	// One interval slice for all threads, sized once: a switch ends at most
	// two intervals, and dumps of busy processes hold millions of them.
	b := &builder{start: in.start, end: in.end, threads: map[uint32]*thread{}, in: &in,
		ivs: make([]Interval, 0, 2*len(events)+16)}
	for i := range events {
		if events[i].TS > in.end {
			break
		}
		b.event(&events[i])
	}
	for tid, t := range b.threads {
		b.close(tid, t, in.end, t.wake) // a RUNQUEUE "wakeup" keeps its wakeup
	}

	sel := b.selectThreads()
	s := &Snapshot{Version: SnapshotVersion, PID: in.pid, Start: in.start + in.offset, End: in.end + in.offset,
		Threads: []Thread{}, Intervals: []Interval{}, Wakeups: []Wakeup{},
		Follow: &Follow{MaxDepth: in.maxDepth, MaxThreads: in.maxThreads, Recording: in.recording}}
	if sel.cutDepth > 0 || sel.cutCount > 0 {
		s.Truncated = &Truncation{Depth: sel.cutDepth, Count: sel.cutCount}
	}

	// Intervals of the threads given them, grouped by thread in the order
	// of s.Threads, each thread's in time order: a stable counting sort
	// (b.ivs holds each thread's intervals in time order already).
	rank := make(map[uint32]int, len(sel.order))
	for i, tid := range sel.order {
		rank[tid] = i
	}
	counts := make([]int, len(sel.order)+1)
	kept := 0
	for _, iv := range b.ivs {
		if r, ok := rank[iv.TID]; ok {
			counts[r+1]++
			kept++
		}
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	ivs := make([]Interval, kept)
	for _, iv := range b.ivs {
		if r, ok := rank[iv.TID]; ok {
			ivs[counts[r]] = iv
			counts[r]++
		}
	}
	b.ivs = nil

	// Wakeups: of the given threads in the window, and those their
	// intervals refer to.
	used := make([]bool, len(b.wakeups))
	for i, w := range b.wakeups {
		if _, ok := rank[w.Wakee]; ok && w.TS >= in.start && w.TS <= in.end {
			used[i] = true
		}
	}
	for _, iv := range ivs {
		if iv.Wakeup >= 0 {
			used[iv.Wakeup] = true
		}
	}
	remap := make([]int, len(b.wakeups))
	for i, w := range b.wakeups {
		remap[i] = -1
		if !used[i] {
			continue
		}
		remap[i] = len(s.Wakeups)
		w.TS += in.offset
		if w.Enqueued != 0 {
			w.Enqueued += in.offset
		}
		s.Wakeups = append(s.Wakeups, w)
	}
	hasIvs := make([]bool, len(sel.order))
	first := make([]int64, len(sel.order))
	for i := range ivs {
		iv := &ivs[i]
		if i == 0 || ivs[i-1].TID != iv.TID {
			r := rank[iv.TID]
			hasIvs[r], first[r] = true, iv.Start
		}
		iv.Start += in.offset
		iv.End += in.offset
		if iv.Wakeup >= 0 {
			iv.Wakeup = remap[iv.Wakeup]
		}
	}
	s.Intervals = ivs

	for _, tid := range sel.all {
		t := b.threads[tid]
		th := Thread{TID: tid, Comm: in.comm(tid), Depth: sel.depth[tid]}
		if t != nil {
			th.PID, th.Kernel, th.Target = t.tgid, t.kernel, t.proc
		}
		r, given := rank[tid]
		switch {
		case given && hasIvs[r]:
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
	for _, d := range b.disk {
		if _, ok := rank[d.TID]; ok {
			d.Issue += in.offset
			d.Complete += in.offset
			s.DiskIOs = append(s.DiskIOs, d)
		}
	}
	s.Events = len(events)

	listed := func(tid uint32) bool { return tid != 0 && sel.listed[tid] }
	raw := make([]Event, 0, len(events))
	for i := range events {
		ev := &events[i]
		if ev.TS < in.start || ev.TS > in.end {
			continue
		}
		if listed(ev.TID) || (ev.Type == EvSwitch || ev.Type == EvFork) && listed(ev.TID2) {
			raw = append(raw, *ev)
		}
	}
	return s, raw
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
// in the window (Wakeup.Causal), up to in.maxDepth hops and in.maxThreads
// of them; the next hop's wakers, and those beyond the count, are listed
// without intervals. Within a hop, wakers come in the order of their first
// wakeup.
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
	wakersOf := map[uint32][]uint32{}
	for _, w := range b.wakeups {
		if w.Causal && w.Waker != 0 && w.TS >= in.start && w.TS <= in.end {
			wakersOf[w.Wakee] = append(wakersOf[w.Wakee], w.Waker)
		}
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
	sel.all = append(append([]uint32(nil), sel.order...), cutOrder...)
	return sel
}
