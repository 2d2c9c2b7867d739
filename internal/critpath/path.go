package critpath

import (
	"cmp"
	"slices"
	"sort"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/goroutine"
)

// Config tunes the analysis. Zero fields take DefaultConfig's values.
type Config struct {
	// MaxDepth bounds how many wakeups deep a path is followed (a thread
	// woken by a thread woken by …); past it a blocked interval keeps its
	// own state.
	MaxDepth int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{MaxDepth: 32} }

// Pause is an interval during which every thread of a process was stopped by
// its runtime (a JVM's garbage-collection pause).
type Pause struct {
	PID        uint32
	Start, End int64 // Unix ns
}

// Input is what an analysis reads.
type Input struct {
	Timeline *Timeline
	// Requests are every span known to have run on the timeline's threads
	// in its window (not only those whose paths are wanted): Algorithm 1
	// needs all of them to tell whose work a thread was doing.
	Requests []Request
	// Pauses are runtime pauses laid over the paths (state gc).
	Pauses []Pause
	// Goroutines are the goroutine status changes of Go processes (the
	// goroutine tracker's), in time order per process: a user-scheduled
	// request's path follows its goroutine where they cover it.
	Goroutines []goroutine.Event
}

// Analysis computes critical paths over one timeline. It is read-only after
// New and safe for concurrent use (each Path call has its own scratch).
type Analysis struct {
	cfg    Config
	tl     *Timeline
	assoc  *association
	pauses map[uint32][]Pause
	// user[i]: thread i belongs to a process that schedules in user space.
	user []bool
	// frozen[pid]: when a thread of pid, a process that schedules in user
	// space, was held off by its cgroup's CPU quota (see overlayFrozen).
	frozen map[uint32][]Pause
	// starved[pid]: when a thread of pid, a process that schedules in user
	// space, waited in the kernel's run queue while none of its threads
	// ran: its runtime's threads wanted CPUs others held (see
	// goroutineQueue).
	starved map[uint32][]Pause
	// oncpu[pid][cpu1]: when pid's threads ran on a CPU (iv.cpu1), in time
	// order (one thread at a time on a CPU: they do not overlap).
	oncpu map[uint32]map[uint8][]onCPU
	// ranOn[cpu1]: every thread's running intervals on a CPU, in time
	// order (heldBy).
	ranOn map[uint8][]onCPU
	// goroutines indexes Input.Goroutines by process.
	goroutines map[uint32]*goProc
	// answered[request] are when the responses to its calls waited in its
	// socket (socketWaits).
	answered map[reqKey][]socketWait
}

// reqKey names a request by its span.
type reqKey struct {
	trace model.TraceID
	span  model.SpanID
}

// onCPU is a thread's running interval.
type onCPU struct {
	tid        uint32
	start, end int64
	// collector: the thread is its runtime's garbage collector
	// (CollectorThread).
	collector bool
}

// New prepares the analysis of in.
func New(in Input, cfg Config) *Analysis {
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = DefaultConfig().MaxDepth
	}
	a := &Analysis{cfg: cfg, tl: in.Timeline, assoc: newAssociation(in.Requests), pauses: mergePauses(in.Pauses),
		goroutines: indexGoroutines(in.Goroutines), answered: map[reqKey][]socketWait{}}
	userPID := map[uint32]bool{}
	for i := range in.Requests {
		r := &in.Requests[i]
		if r.UserScheduled {
			userPID[r.PID] = true
		}
		if r.Client && r.Answered > 0 {
			k := reqKey{r.TraceID, r.Parent}
			a.answered[k] = append(a.answered[k], socketWait{r.Answered, r.End, "response"})
		}
	}
	for _, l := range a.answered {
		slices.SortFunc(l, func(x, y socketWait) int { return cmp.Compare(x.lo, y.lo) })
	}
	a.user = make([]bool, len(a.tl.threads))
	a.oncpu = map[uint32]map[uint8][]onCPU{}
	var frozen, queued, running []Pause
	for i := range a.tl.threads {
		th := &a.tl.threads[i]
		a.user[i] = userPID[th.pid]
		a.addOnCPU(th)
		if !a.user[i] {
			continue
		}
		for _, j := range th.ivs {
			switch j.kind {
			case kThrottled:
				frozen = append(frozen, Pause{PID: th.pid, Start: j.start, End: j.end})
			case kRunqueue:
				queued = append(queued, Pause{PID: th.pid, Start: j.start, End: j.end})
			case kRunning:
				running = append(running, Pause{PID: th.pid, Start: j.start, End: j.end})
			}
		}
	}
	a.frozen = mergePauses(frozen)
	a.starved = map[uint32][]Pause{}
	ran := mergePauses(running)
	for pid, q := range mergePauses(queued) {
		if s := subtractPauses(q, ran[pid]); len(s) > 0 {
			a.starved[pid] = s
		}
	}
	for _, byCPU := range a.oncpu {
		for _, l := range byCPU {
			slices.SortFunc(l, func(x, y onCPU) int { return cmp.Compare(x.start, y.start) })
		}
	}
	a.indexRuns()
	return a
}

// addOnCPU indexes th's running intervals by process and CPU.
func (a *Analysis) addOnCPU(th *thread) {
	if th.pid == 0 || !th.target {
		return
	}
	byCPU := a.oncpu[th.pid]
	for _, j := range th.ivs {
		if j.kind != kRunning || j.cpu1 == 0 {
			continue
		}
		if byCPU == nil {
			byCPU = map[uint8][]onCPU{}
			a.oncpu[th.pid] = byCPU
		}
		byCPU[j.cpu1] = append(byCPU[j.cpu1], onCPU{tid: th.tid, start: j.start, end: j.end, collector: CollectorThread(th.comm)})
	}
}

// ownQueue is how much of thread tid's run-queue time in [lo, hi) the CPU
// it waited for ran other threads of its own process (own): the process's
// own demand held it off, not another program; and of that, how much ran
// the process's garbage-collector threads (gc, CollectorThread). The CPU
// waited for is the one the thread ran on when its wait ended (a thread
// that moved to another CPU's queue meanwhile is counted against the last).
func (a *Analysis) ownQueue(tid uint32, lo, hi int64) (own, gc int64) {
	i, ok := a.tl.byTID[tid]
	if !ok {
		return 0, 0
	}
	th := &a.tl.threads[i]
	byCPU := a.oncpu[th.pid]
	if len(byCPU) == 0 {
		return 0, 0
	}
	a.eachQueueRun(th, lo, hi, func(cpu1 uint8) []onCPU { return byCPU[cpu1] }, func(r *onCPU, d int64) {
		own += d
		if r.collector {
			gc += d
		}
	})
	return own, gc
}

// eachQueueRun calls visit with each run of another thread, among runs
// (a CPU's, in time order), on the CPU that th waited for during its
// run-queue time in [lo, hi) — the one it ran on when each wait ended —
// and how much of that wait the run covered.
func (a *Analysis) eachQueueRun(th *thread, lo, hi int64, runs func(cpu1 uint8) []onCPU, visit func(r *onCPU, d int64)) {
	k := sort.Search(len(th.ivs), func(k int) bool { return th.ivs[k].end > lo })
	for ; k < len(th.ivs) && th.ivs[k].start < hi; k++ {
		j := &th.ivs[k]
		if j.kind != kRunqueue || k+1 >= len(th.ivs) || th.ivs[k+1].kind != kRunning || th.ivs[k+1].cpu1 == 0 {
			continue
		}
		s, e := max(lo, j.start), min(hi, j.end)
		on := runs(th.ivs[k+1].cpu1)
		m := sort.Search(len(on), func(m int) bool { return on[m].end > s })
		for ; m < len(on) && on[m].start < e; m++ {
			if on[m].tid != th.tid {
				visit(&on[m], min(e, on[m].end)-max(s, on[m].start))
			}
		}
	}
}

// subtractPauses is q (sorted, merged) less the time in r (sorted,
// merged): sorted, merged.
func subtractPauses(q, r []Pause) []Pause {
	var out []Pause
	k := 0
	for _, p := range q {
		start := p.Start
		for k < len(r) && r[k].End <= start {
			k++
		}
		for j := k; j < len(r) && r[j].Start < p.End; j++ {
			if r[j].Start > start {
				out = append(out, Pause{PID: p.PID, Start: start, End: r[j].Start})
			}
			start = max(start, r[j].End)
		}
		if start < p.End {
			out = append(out, Pause{PID: p.PID, Start: start, End: p.End})
		}
	}
	return out
}

// overlapPauses is how much of [lo, hi) the pauses ps (sorted, merged)
// cover.
func overlapPauses(ps []Pause, lo, hi int64) int64 {
	var ns int64
	k := sort.Search(len(ps), func(k int) bool { return ps[k].End > lo })
	for ; k < len(ps) && ps[k].Start < hi; k++ {
		ns += min(hi, ps[k].End) - max(lo, ps[k].Start)
	}
	return ns
}

// mergePauses sorts each process's pauses and merges those that overlap.
func mergePauses(ps []Pause) map[uint32][]Pause {
	out := map[uint32][]Pause{}
	for _, p := range ps {
		if p.End > p.Start {
			out[p.PID] = append(out[p.PID], p)
		}
	}
	for pid, l := range out {
		slices.SortFunc(l, func(a, b Pause) int { return cmp.Compare(a.Start, b.Start) })
		m := l[:1]
		for _, p := range l[1:] {
			if last := &m[len(m)-1]; p.Start <= last.End {
				last.End = max(last.End, p.End)
				continue
			}
			m = append(m, p)
		}
		out[pid] = m
	}
	return out
}

// Requests returns the analysis's requests (index i is the i of Path).
func (a *Analysis) Requests() []Request { return a.assoc.reqs }

// Timeline returns the timeline the analysis reads.
func (a *Analysis) Timeline() *Timeline { return a.tl }

// Segment is a piece of a critical path: a thread in one state.
type Segment struct {
	TID        uint32
	Start, End int64 // Unix ns
	State      string
	// Wait is the state of the request's own thread that the path
	// followed to get here (lock, network…: the thread was blocked and this
	// thread woke it); empty on the request's own thread's own states.
	Wait string
	// Active is the index (in Requests) of the request active on TID then,
	// -1 when none; Blocking says it is another request's work: the
	// request was blocked by Active's request (BlockedBy names its local
	// root).
	Active   int
	Blocking bool
	// Syscall and Device qualify a blocked state of the thread's own (the
	// syscall it waited in, the block device of a disk wait), when known.
	Syscall, Device string
	// OwnQueue is, of a runqueue segment, the time the CPU the thread
	// waited for ran other threads of its own process (ns): the process's
	// own demand held it off rather than another program. GCQueue is the
	// part of it the CPU ran the process's garbage-collector threads
	// (CollectorThread).
	OwnQueue, GCQueue int64
	// HeldBy: of a runqueue segment, the processes whose threads the
	// snapshot saw run on that CPU meanwhile, longest first (heldBy).
	HeldBy []Holder
}

// Arrow is a wakeup the path followed: From woke To at TS.
type Arrow struct {
	From, To uint32
	TS       int64
}

// Blocker is a request another one waited for, and for how long.
type Blocker struct {
	Request  int // index in Requests (a local root: see BlockedBy)
	Duration int64
	// Wait is what the request's own thread was blocked on while the path
	// went through the other request (lock, network…; the state it spent
	// most of that time in), empty when it was its own thread that worked
	// for the other request (two requests on one thread).
	Wait string
}

// ThreadTime is the time a path spent on one thread.
type ThreadTime struct {
	TID      uint32
	Duration int64
}

// Path is a request's critical path and its summary.
type Path struct {
	Request int // index in Requests
	// States is the time on the path per state (index: the state's
	// position in States), the state of whichever thread the path is on;
	// they add up to the request's duration.
	States [numStates]int64
	// Waits is the same time by what the request's own threads waited for:
	// where the path left them (a lock wait resolved through the holder, a
	// network wait through the local sender), that wait's state instead of
	// the other thread's; GC pauses stay gc. They add up to the duration
	// too.
	Waits [numStates]int64
	// BlockedBy are the other requests the path ran through, longest
	// first. Their time is also counted in States (by what their threads
	// were doing).
	BlockedBy []Blocker
	// Threads is the time on the path per thread, longest first.
	Threads  []ThreadTime
	Segments []Segment
	Arrows   []Arrow
	// OwnQueue is the segments' OwnQueue added up: of the runqueue time in
	// States, how much was spent behind the same process's threads.
	// GCQueue is the segments' GCQueue added up: of that, behind its
	// garbage-collector threads.
	OwnQueue, GCQueue int64
	// HeldBy is the segments' HeldBy added up by process, longest first
	// (at most maxHolders).
	HeldBy []Holder
}

// StateDurations returns the time per state name (States).
func (p *Path) StateDurations() map[string]int64 { return byName(&p.States) }

// WaitDurations returns the time per state name of the request's own waits
// (Waits).
func (p *Path) WaitDurations() map[string]int64 { return byName(&p.Waits) }

func byName(d *[numStates]int64) map[string]int64 {
	m := make(map[string]int64, numStates)
	for i, v := range d {
		m[States[i]] = v
	}
	return m
}

// seg is a segment while the path is built.
type seg struct {
	tid uint32
	// attr is the thread whose active request the segment belongs to:
	// tid, except where the path could not follow a waker's intervals and
	// the time stays on the blocked thread, when it is the waker's.
	attr       uint32
	start, end int64
	st, wait   state  // wait == numStates: none
	detail     uint16 // the interval's details (reason, syscall, device) when st is the thread's own
	active     int32
	blocking   bool
	// goroutine: the request's own goroutine's time (goroutinePath), its
	// own whatever the thread's association says; parked: off any thread
	// (runnable or waiting in the runtime), note the runtime's reason.
	goroutine, parked bool
	note              string
}

// gap is what a walk emits where its thread has no interval: the thread the
// resolution started from, in the state it was blocked in.
type gap struct {
	tid      uint32
	st, wait state
	detail   uint16
}

const noWait = numStates

// builder holds one path computation's scratch.
type builder struct {
	a      *Analysis
	out    []seg // reverse time order while walking
	arrows []Arrow
}

// Path computes the critical path of request i.
func (a *Analysis) Path(i int) Path {
	r := &a.assoc.reqs[i]
	b := &builder{a: a}
	var segs []seg
	if p, g := a.goroutineOf(r); g != 0 {
		segs = b.goroutinePath(r, p, g)
	} else {
		segs = b.anchorsPath(r, r.Start, r.End)
	}
	segs = overlay(segs, a.pauses, a.pidOf, stGC, nil)
	segs = a.attribute(i, segs)
	segs = overlay(segs, a.frozen, a.pidOf, stThrottled, func(s seg) bool {
		return s.st == stUnknown && a.userSched(i, s.tid) || s.parked && s.st == stRunqueue
	})
	return a.summarize(i, segs, b.arrows)
}

// appendSeg appends s in time order, merging it into the last segment when
// they continue each other.
func appendSeg(segs []seg, s seg) []seg {
	if s.end <= s.start {
		return segs
	}
	if n := len(segs); n > 0 {
		l := &segs[n-1]
		if l.end == s.start && l.tid == s.tid && l.attr == s.attr && l.st == s.st && l.wait == s.wait && l.detail == s.detail &&
			l.active == s.active && l.blocking == s.blocking && l.goroutine == s.goroutine && l.parked == s.parked && l.note == s.note {
			l.end = s.end
			return segs
		}
	}
	return append(segs, s)
}

// emit prepends [lo, hi) to the reversed path under construction.
func (b *builder) emit(tid, attr uint32, lo, hi int64, st, wait state, detail uint16) {
	if hi <= lo {
		return
	}
	if n := len(b.out); n > 0 {
		l := &b.out[n-1]
		if l.start == hi && l.tid == tid && l.attr == attr && l.st == st && l.wait == wait && l.detail == detail {
			l.start = lo
			return
		}
	}
	b.out = append(b.out, seg{tid: tid, attr: attr, start: lo, end: hi, st: st, wait: wait, detail: detail, active: -1})
}

// threadPath builds the critical path of thread tid over [lo, hi) (reversed,
// into b.out). Time the thread has no interval for is unknown.
func (b *builder) threadPath(tid uint32, lo, hi int64) {
	ti, ok := b.a.tl.byTID[tid]
	if !ok {
		b.emit(tid, tid, lo, hi, stUnknown, noWait, 0)
		return
	}
	b.walk(ti, lo, hi, 0, gap{tid: tid, st: stUnknown, wait: noWait}, noWait)
}

// walk covers [lo, hi) with thread ti's intervals, backwards from hi. Where
// the thread has no interval, the time is emitted as g: the thread a
// resolution started from, in the state it was blocked in (or, on the
// request's own thread, unknown), attributed to thread ti's request.
func (b *builder) walk(ti int32, lo, hi int64, depth int, g gap, wait state) {
	ivs := b.a.tl.threads[ti].ivs
	attr := b.a.tl.threads[ti].tid
	// The last interval starting before hi.
	i := sort.Search(len(ivs), func(k int) bool { return ivs[k].start >= hi }) - 1
	cur := hi
	for cur > lo {
		if i < 0 {
			b.beforeCreation(ti, lo, cur, hi, depth, g, wait)
			return
		}
		if ivs[i].end <= lo {
			b.emit(g.tid, attr, lo, cur, g.st, g.wait, g.detail)
			return
		}
		j := &ivs[i]
		if j.end < cur {
			b.emit(g.tid, attr, j.end, cur, g.st, g.wait, g.detail)
			cur = j.end
		}
		pLo := max(j.start, lo)
		b.interval(ti, j, pLo, cur, depth, wait, lo, hi)
		cur = pLo
		i--
	}
}

// beforeCreation covers [lo, cur), the time of a walk over thread ti's
// window [lo, hi) before ti's first interval: where ti was created in the
// snapshot, what its creator did until then (the thread did not exist yet;
// its creator was the one doing the work, as a server's dispatcher starting
// a pool thread for a request); else g, as any time without an interval.
func (b *builder) beforeCreation(ti int32, lo, cur, hi int64, depth int, g gap, wait state) {
	th := &b.a.tl.threads[ti]
	w, ci, ok := b.a.creator(ti)
	if !ok || depth >= b.a.cfg.MaxDepth {
		b.emit(g.tid, th.tid, lo, cur, g.st, g.wait, g.detail)
		return
	}
	n := len(b.out)
	var prev seg
	if n > 0 {
		prev = b.out[n-1]
	}
	b.walk(ci, lo, cur, depth+1, g, wait)
	went := slices.ContainsFunc(b.out[n:], func(s seg) bool { return s.tid != th.tid }) ||
		n > 0 && b.out[n-1].start != prev.start && prev.tid != th.tid
	if w.ts > lo && w.ts <= hi && went {
		b.arrows = append(b.arrows, Arrow{From: w.waker, To: th.tid, TS: w.ts})
	}
}

// creator returns the creation of thread ti when the snapshot has it (its
// first interval starts with it, a "fork" wakeup by another thread) and
// the creator's index in the timeline.
func (a *Analysis) creator(ti int32) (*wake, int32, bool) {
	th := &a.tl.threads[ti]
	if len(th.ivs) == 0 || th.ivs[0].wake < 0 {
		return nil, 0, false
	}
	w := &a.tl.wakeups[th.ivs[0].wake]
	if w.ctx != cFork || !w.causal || w.waker == 0 || w.waker == th.tid || w.ts > th.ivs[0].start {
		return nil, 0, false
	}
	ci, ok := a.tl.byTID[w.waker]
	return w, ci, ok
}

// interval emits the piece [lo, hi) of thread ti's interval j: its own state,
// or, when a thread woke it, what the waker did meanwhile (Resolve in
// CRITICAL-PATH.md). [wlo, whi) is the window of the walk it belongs to.
func (b *builder) interval(ti int32, j *iv, lo, hi int64, depth int, wait state, wlo, whi int64) {
	th := &b.a.tl.threads[ti]
	st, wi, follow := b.a.classify(ti, j)
	if !follow {
		b.emit(th.tid, th.tid, lo, hi, st, wait, j.detail)
		return
	}
	w := &b.a.tl.wakeups[wi]
	wk, ok := b.a.tl.byTID[w.waker]
	if !ok {
		// A waker the snapshot has no intervals of: the time stays a wait
		// of this thread, for whatever request the waker was serving.
		b.emit(th.tid, w.waker, lo, hi, st, wait, j.detail)
		return
	}
	// A resolution must narrow its window: a piece as wide as the window
	// it came from means the data describe a waker blocked when it woke
	// someone (a cycle), and following it would not end.
	if depth >= b.a.cfg.MaxDepth || (depth > 0 && lo == wlo && hi == whi) {
		b.emit(th.tid, th.tid, lo, hi, st, wait, j.detail)
		return
	}
	top := min(hi, w.ts)
	if top < hi {
		b.emit(th.tid, th.tid, max(top, lo), hi, st, wait, j.detail)
	}
	if top <= lo {
		return
	}
	outer := wait
	if wait == noWait {
		wait = st
	}
	n := len(b.out)
	var prev seg
	if n > 0 {
		prev = b.out[n-1]
	}
	b.walk(wk, lo, top, depth+1, gap{tid: th.tid, st: st, wait: outer, detail: j.detail}, wait)
	// An arrow only where the path did go to another thread (a waker
	// without intervals leaves the time on the blocked thread). The walk
	// may have extended the last segment instead of adding one.
	went := slices.ContainsFunc(b.out[n:], func(s seg) bool { return s.tid != th.tid }) ||
		n > 0 && b.out[n-1].start != prev.start && prev.tid != th.tid
	if w.ts > lo && w.ts <= hi && went {
		b.arrows = append(b.arrows, Arrow{From: w.waker, To: th.tid, TS: w.ts})
	}
}

// classify gives an interval's state and, when the path follows it to the
// thread that woke it (a thread caused the end of the wait — it released a
// lock, or sent on a local socket: what that thread did until then is the
// path), the wakeup to follow (an index in tl.wakeups). Other waits keep the
// reason the thread blocked for; for a reason that does not tell (another
// syscall, a kernel thread's wait), the interrupt that ended the wait
// (timer, network, disk) does.
func (a *Analysis) classify(ti int32, j *iv) (state, int32, bool) {
	switch j.kind {
	case kRunning:
		return stRunning, -1, false
	case kRunqueue:
		return stRunqueue, -1, false
	case kThrottled:
		return stThrottled, -1, false
	case kSteal:
		return stSteal, -1, false
	}
	rs := a.tl.details.st[j.detail]
	// A page fault or a memory stall is memory, whoever ends it.
	if rs == stMemory {
		return stMemory, -1, false
	}
	// In a process that schedules in user space (Go), a thread blocked
	// on a futex or in the network poller is the runtime parking an idle
	// thread; the request's goroutine waits in user space where the kernel
	// does not see it: unknown, not the wait of whoever woke the thread.
	if a.user[ti] && (rs == stLock || rs == stNetwork) {
		return stUnknown, -1, false
	}
	if a.causalWake(ti, j) {
		if rs == stLock && a.collectorWake(ti, j) {
			return stGC, -1, false
		}
		return rs, j.wake, true
	}
	if rs == stGIL {
		if w := a.gilHandover(ti, j); w >= 0 {
			return rs, w, true
		}
	}
	if j.wake < 0 {
		return rs, -1, false
	}
	// The syscall says what the thread waited for (a lock wait that timed
	// out to re-check the lock, as a JVM's monitor does, is still a lock
	// wait); the interrupt that ended the wait says it for a syscall that
	// does not tell.
	if rs != stUnknown {
		return rs, -1, false
	}
	switch a.tl.wakeups[j.wake].ctx {
	case cTimer:
		return stSleep, -1, false
	case cNetwork:
		return stNetwork, -1, false
	case cDisk:
		return stDisk, -1, false
	}
	return rs, -1, false
}

// causalWake reports whether another thread ended thread ti's wait j.
func (a *Analysis) causalWake(ti int32, j *iv) bool {
	if j.wake < 0 {
		return false
	}
	w := &a.tl.wakeups[j.wake]
	return w.causal && w.waker != 0 && w.waker != a.tl.threads[ti].tid
}

// collectorWake reports whether the thread that ended thread ti's wait j is
// a garbage-collector thread of its own process (CollectorThread). A
// HotSpot JVM stops its threads for a collection at a safepoint, where
// each blocks on a futex until the VM thread, which ran the collection's
// operation, ends the safepoint and wakes it; a thread that asked for a
// collection (an allocation failed) waits for the VM thread too. Such a
// wait is the collector's pause, whatever the VM thread did meanwhile
// (waiting for its worker threads, or running): gc, as the JVM's recording
// says where there is one (its pause events, overlaid on the path), read
// here from the kernel alone. The VM thread ends other safepoints too
// (deoptimization, a thread dump); those are short and rare next to a
// collection's.
func (a *Analysis) collectorWake(ti int32, j *iv) bool {
	wk, ok := a.tl.byTID[a.tl.wakeups[j.wake].waker]
	if !ok {
		return false
	}
	w := &a.tl.threads[wk]
	return w.pid == a.tl.threads[ti].pid && CollectorThread(w.comm)
}

// gilHandoverRun bounds the time a thread may run between a GIL wait that
// timed out and the next one for the two to be one wait (gilHandover).
const gilHandoverRun = 200_000 // ns

// gilHandover is, for a wait on the interpreter lock that no thread ended
// (j, of thread ti), the wakeup that ended the thread's wait for the lock
// all the same, -1 when there is none. CPython's waiter waits out the
// switch interval (5 ms), then asks the holder to let go, and waits again
// until the holder hands the lock over and wakes it: both waits are for
// that holder. They are one when, between them, the thread only re-checked
// the lock (it ran at most gilHandoverRun in all).
func (a *Analysis) gilHandover(ti int32, j *iv) int32 {
	ivs := a.tl.threads[ti].ivs
	k := sort.Search(len(ivs), func(k int) bool { return ivs[k].start >= j.end })
	var ran int64
	for ; k < len(ivs); k++ {
		n := &ivs[k]
		switch n.kind {
		case kRunning:
			if ran += n.end - n.start; ran > gilHandoverRun {
				return -1
			}
			continue
		case kRunqueue, kThrottled, kSteal:
			continue
		}
		if a.tl.details.st[n.detail] == stGIL && a.causalWake(ti, n) {
			return n.wake
		}
		if a.tl.details.st[n.detail] != stGIL || n.wake >= 0 && a.tl.wakeups[n.wake].ctx != cTimer {
			return -1
		}
		// Another wait that timed out: the holder kept the lock.
	}
	return -1
}

// overlay turns the time of segments inside the intervals of their
// thread's process (ivs, by pid; merged, in time order) into state st; only
// the segments that only accepts (nil: all).
//
// Two overlays: a paused process's threads are in gc (JFR's pauses: the
// JVM stopped them all), and a process that schedules in user space (Go)
// was held off by its cgroup's CPU quota whenever one of its threads was
// (frozen): the quota is the cgroup's, spent for all its CPUs at once, so
// then no goroutine of the process ran, and a request's goroutine the
// kernel cannot see (a segment unknown for it) waited for the quota too.
func overlay(segs []seg, ivs map[uint32][]Pause, pidOf func(uint32) uint32, st state, only func(seg) bool) []seg {
	if len(ivs) == 0 {
		return segs
	}
	var out []seg
	for _, s := range segs {
		ps := ivs[pidOf(s.tid)]
		if len(ps) == 0 || only != nil && !only(s) {
			out = appendSeg(out, s)
			continue
		}
		// The first interval ending after s starts.
		k := sort.Search(len(ps), func(k int) bool { return ps[k].End > s.start })
		cur := s.start
		for ; k < len(ps) && ps[k].Start < s.end; k++ {
			if ps[k].Start > cur {
				piece := s
				piece.start, piece.end = cur, ps[k].Start
				out = appendSeg(out, piece)
				cur = ps[k].Start
			}
			piece := s
			piece.start, piece.end, piece.st = cur, min(s.end, ps[k].End), st
			out = appendSeg(out, piece)
			cur = piece.end
		}
		if cur < s.end {
			piece := s
			piece.start = cur
			out = appendSeg(out, piece)
		}
	}
	return out
}

func (a *Analysis) pidOf(tid uint32) uint32 {
	if i, ok := a.tl.byTID[tid]; ok {
		return a.tl.threads[i].pid
	}
	return 0
}

// attribute splits segments where the request active on their thread
// changes (Algorithm 1) and marks the pieces spent on another request's
// work.
func (a *Analysis) attribute(r int, segs []seg) []seg {
	var out []seg
	for _, s := range segs {
		if s.goroutine {
			// The request's own goroutine: its time whoever the thread's
			// association names.
			s.active = int32(r)
			out = appendSeg(out, s)
			continue
		}
		cur := s.start
		for cur < s.end {
			q, until := a.assoc.at(s.attr, cur)
			piece := s
			piece.start, piece.end = cur, min(s.end, until)
			piece.active = int32(q)
			piece.blocking = a.blocking(r, q, piece.tid)
			if a.unseen(r, q, piece.tid) {
				piece.st = stUnknown
			}
			out = appendSeg(out, piece)
			cur = piece.end
		}
	}
	return out
}

// blocking reports whether time on thread tid while request q is active
// there is request r waiting for q.
func (a *Analysis) blocking(r, q int, tid uint32) bool {
	if q < 0 || a.assoc.related(r, q) || a.assoc.related(r, a.assoc.lroot[q]) {
		return false
	}
	// In a process that schedules in user space, a thread working for
	// another request says nothing of where r's goroutine was (see unseen).
	return !a.userSched(r, tid)
}

// unseen reports whether the time on thread tid is unknown for request r:
// r's process schedules in user space (Go) and tid is one of its threads,
// working then for another request or for none. r's goroutine waited
// somewhere the kernel does not see; the thread's own state is not r's.
func (a *Analysis) unseen(r, q int, tid uint32) bool {
	if !a.userSched(r, tid) {
		return false
	}
	return q < 0 || !a.assoc.related(r, q) && !a.assoc.related(r, a.assoc.lroot[q])
}

func (a *Analysis) userSched(r int, tid uint32) bool {
	req := &a.assoc.reqs[r]
	return req.UserScheduled && a.pidOf(tid) == req.PID
}

// summarize adds up a request's segments.
func (a *Analysis) summarize(r int, segs []seg, arrows []Arrow) Path {
	p := Path{Request: r, Segments: make([]Segment, 0, len(segs))}
	blocked := map[int]int64{}
	blockedWait := map[int]*[numStates + 1]int64{}
	threads := map[uint32]int64{}
	pathHeld := map[uint32]*Holder{}
	for _, s := range segs {
		d := s.end - s.start
		p.States[s.st] += d
		switch {
		case s.st == stGC || s.wait == noWait:
			p.Waits[s.st] += d
		default:
			p.Waits[s.wait] += d
		}
		threads[s.tid] += d
		wait := ""
		if s.wait != noWait {
			wait = States[s.wait]
		}
		if s.blocking {
			q := a.assoc.lroot[s.active]
			blocked[q] += d
			if blockedWait[q] == nil {
				blockedWait[q] = new([numStates + 1]int64)
			}
			w := s.wait
			if w == noWait && s.attr != s.tid {
				// The thread's own wait, attributed through its waker.
				w = s.st
			}
			blockedWait[q][w] += d
		}
		var own, gc int64
		var held []Holder
		switch {
		case s.st == stRunqueue && s.parked:
			// A runnable goroutine waits for the runtime to give it a
			// thread: behind its own process's goroutines, unless the
			// runtime's threads themselves waited for a CPU then.
			own = d - overlapPauses(a.starved[a.pidOf(s.tid)], s.start, s.end)
		case s.st == stRunqueue:
			own, gc = a.ownQueue(s.tid, s.start, s.end)
			held = a.heldBy(s.tid, s.start, s.end)
			addHolders(pathHeld, held)
		}
		p.OwnQueue += own
		p.GCQueue += gc
		sc, dev := a.tl.details.syscall[s.detail], a.tl.details.device[s.detail]
		if s.parked {
			sc, dev = s.note, ""
		}
		p.Segments = append(p.Segments, Segment{TID: s.tid, Start: s.start, End: s.end, State: States[s.st],
			Wait: wait, Active: int(s.active), Blocking: s.blocking, Syscall: sc, Device: dev, OwnQueue: own, GCQueue: gc, HeldBy: held})
	}
	if len(pathHeld) > 0 {
		p.HeldBy = topHolders(pathHeld)
	}
	for q, d := range blocked {
		b := Blocker{Request: q, Duration: d}
		best := noWait
		for w, dw := range blockedWait[q] {
			if dw > blockedWait[q][best] {
				best = state(w)
			}
		}
		if best != noWait {
			b.Wait = States[best]
		}
		p.BlockedBy = append(p.BlockedBy, b)
	}
	slices.SortFunc(p.BlockedBy, func(x, y Blocker) int {
		if c := cmp.Compare(y.Duration, x.Duration); c != 0 {
			return c
		}
		return cmp.Compare(x.Request, y.Request)
	})
	for tid, d := range threads {
		p.Threads = append(p.Threads, ThreadTime{TID: tid, Duration: d})
	}
	slices.SortFunc(p.Threads, func(x, y ThreadTime) int {
		if c := cmp.Compare(y.Duration, x.Duration); c != 0 {
			return c
		}
		return cmp.Compare(x.TID, y.TID)
	})
	slices.SortFunc(arrows, func(x, y Arrow) int {
		if c := cmp.Compare(x.TS, y.TS); c != 0 {
			return c
		}
		if c := cmp.Compare(x.From, y.From); c != 0 {
			return c
		}
		return cmp.Compare(x.To, y.To)
	})
	p.Arrows = slices.Compact(arrows)
	return p
}
