package kernel

import (
	"cmp"
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
	state   string // "" unknown, StateRunning/Runqueue/Blocked, "dead"
	reason  string
	syscall string
	since   int64
	cpu     int
	wake    int // index in builder.wakeups of the current interval's wakeup
}

// builder turns a time-ordered event sequence into intervals. Times stay
// CLOCK_MONOTONIC until build converts them.
type builder struct {
	start, end int64 // window, monotonic ns
	threads    map[uint32]*thread
	ivs        []Interval // every thread's, in the order they end
	wakeups    []Wakeup
	pendingEnq map[uint32]int
	disk       []DiskIO
}

func (b *builder) get(tid, tgid uint32) *thread {
	t := b.threads[tid]
	if t == nil {
		t = &thread{tgid: tgid, cpu: -1, wake: -1}
		b.threads[tid] = t
	}
	if tgid != 0 {
		t.tgid = tgid
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
	b.ivs = append(b.ivs, Interval{TID: tid, State: t.state, Reason: t.reason, Syscall: t.syscall,
		Start: s, End: e, CPU: cpu, Wakeup: wake})
}

func (t *thread) set(state, reason, syscall string, ts int64, wake int) {
	t.state, t.reason, t.syscall, t.since, t.wake = state, reason, syscall, ts, wake
}

func (b *builder) event(ev *Event) {
	switch ev.Type {
	case EvSwitch:
		if ev.TID != 0 {
			p := b.get(ev.TID, ev.TGID)
			if p.state == StateRunning {
				b.close(ev.TID, p, ev.TS, -1)
			}
			switch {
			case p.state == "dead":
			case runnable(ev):
				p.set(StateRunqueue, ReasonPreempted, "", ev.TS, -1)
			case ev.Arg&taskDead != 0:
				p.set("dead", "", "", ev.TS, -1)
			default:
				r, sc := blockReason(ev)
				p.set(StateBlocked, r, sc, ev.TS, -1)
			}
		}
		if ev.TID2 != 0 {
			n := b.get(ev.TID2, ev.TGID2)
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
		idx := len(b.wakeups)
		b.wakeups = append(b.wakeups, Wakeup{TS: ev.TS, Wakee: ev.TID, Waker: ev.TID2, Context: ctx,
			Detail: detail, CPU: int(ev.CPU)})
		b.pendingEnq[ev.TID] = idx
		w := b.get(ev.TID, ev.TGID)
		switch w.state {
		case StateBlocked:
			b.close(ev.TID, w, ev.TS, idx)
			w.set(StateRunqueue, ReasonWakeup, "", ev.TS, idx)
		case "":
			w.set(StateRunqueue, ReasonWakeup, "", ev.TS, idx)
		}
	case EvWakeup:
		if idx, ok := b.pendingEnq[ev.TID]; ok {
			b.wakeups[idx].Enqueued = ev.TS
			delete(b.pendingEnq, ev.TID)
		}
	case EvWakeupNew:
		t := b.get(ev.TID, ev.TGID)
		if t.state == "" {
			t.set(StateRunqueue, ReasonNew, "", ev.TS, -1)
		}
	case EvFork:
		t := b.get(ev.TID, ev.TGID)
		if t.state == "" || t.state == "dead" {
			t.set(StateRunqueue, ReasonNew, "", ev.TS, -1)
		}
		b.get(ev.TID2, ev.TGID2)
	case EvExit:
		t := b.get(ev.TID, ev.TGID)
		b.close(ev.TID, t, ev.TS, -1)
		t.set("dead", "", "", ev.TS, -1)
	case EvBlockRq:
		b.get(ev.TID, ev.TGID)
		if ev.TS >= b.start && int64(ev.Arg) <= b.end {
			b.disk = append(b.disk, DiskIO{TID: ev.TID, Issue: int64(ev.Arg), Complete: ev.TS, Bytes: ev.Detail})
		}
	}
}

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
}

// build derives the snapshot of in.pid from events, which MUST be sorted by
// TS and SHOULD start some time before in.start (so the states at the
// window's start are known). It also returns the raw events of the
// snapshot's threads inside the window (for the CTF export).
func build(events []Event, in buildInput) (*Snapshot, []Event) {
	// One interval slice for all threads, sized once: a switch ends at most
	// two intervals, and dumps of busy processes hold millions of them.
	b := &builder{start: in.start, end: in.end, threads: map[uint32]*thread{}, pendingEnq: map[uint32]int{},
		ivs: make([]Interval, 0, 2*len(events)+16)}
	for i := range events {
		if events[i].TS > in.end {
			break
		}
		b.event(&events[i])
	}
	for tid, t := range b.threads {
		b.close(tid, t, in.end, -1)
	}

	// The snapshot's threads: the process's, then those that woke them.
	set := map[uint32]bool{}
	for tid, t := range b.threads {
		if t.tgid == in.pid && in.pids == nil || in.pids[t.tgid] {
			set[tid] = true
		}
	}
	used := make([]bool, len(b.wakeups))
	for i, w := range b.wakeups {
		if set[w.Wakee] && w.TS >= in.start && w.TS <= in.end {
			used[i] = true
		}
	}
	for _, iv := range b.ivs {
		if iv.Wakeup >= 0 && set[iv.TID] {
			used[iv.Wakeup] = true
		}
	}
	wakers := map[uint32]bool{}
	for i, w := range b.wakeups {
		if used[i] && w.Context == "thread" && w.Waker != 0 && !set[w.Waker] {
			wakers[w.Waker] = true
		}
	}
	remap := make([]int, len(b.wakeups))
	s := &Snapshot{Version: SnapshotVersion, PID: in.pid, Start: in.start + in.offset, End: in.end + in.offset,
		Threads: []Thread{}, Intervals: []Interval{}, Wakeups: []Wakeup{}}
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
	for tid := range set {
		s.Threads = append(s.Threads, Thread{TID: tid, PID: b.threads[tid].tgid, Comm: in.comm(tid), Target: true})
	}
	for tid := range wakers {
		tg := uint32(0)
		if t := b.threads[tid]; t != nil {
			tg = t.tgid
		}
		s.Threads = append(s.Threads, Thread{TID: tid, PID: tg, Comm: in.comm(tid)})
	}
	slices.SortFunc(s.Threads, func(a, c Thread) int {
		if a.Target != c.Target {
			if a.Target {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.TID, c.TID)
	})
	// Keep the intervals of the snapshot's threads, in place, grouped by
	// thread in s.Threads' order, each thread's in time order.
	rank := make(map[uint32]int, len(s.Threads))
	for i, th := range s.Threads {
		rank[th.TID] = i
	}
	kept := b.ivs[:0]
	for _, iv := range b.ivs {
		if _, ok := rank[iv.TID]; !ok {
			continue
		}
		iv.Start += in.offset
		iv.End += in.offset
		if iv.Wakeup >= 0 {
			iv.Wakeup = remap[iv.Wakeup]
		}
		kept = append(kept, iv)
	}
	slices.SortStableFunc(kept, func(a, c Interval) int {
		if r := cmp.Compare(rank[a.TID], rank[c.TID]); r != 0 {
			return r
		}
		return cmp.Compare(a.Start, c.Start)
	})
	s.Intervals = kept
	b.ivs = nil
	for _, d := range b.disk {
		if set[d.TID] {
			d.Issue += in.offset
			d.Complete += in.offset
			s.DiskIOs = append(s.DiskIOs, d)
		}
	}
	s.Events = len(events)

	in2 := func(tid uint32) bool { return tid != 0 && (set[tid] || wakers[tid]) }
	raw := make([]Event, 0, len(events))
	for i := range events {
		ev := &events[i]
		if ev.TS < in.start || ev.TS > in.end {
			continue
		}
		if in2(ev.TID) || (ev.Type == EvSwitch || ev.Type == EvFork) && in2(ev.TID2) {
			raw = append(raw, *ev)
		}
	}
	return s, raw
}
