package critpath

import (
	"slices"

	"github.com/rootline/rootline/internal/profiler/goroutine"
)

// NaivePath is a reference implementation of Analysis.Path with the same
// semantics, written from the definitions instead of for speed: the
// request's window is cut at every instant anything changes (any interval,
// wakeup, activity or pause boundary), and for each piece the state on the
// path is found by following wakeups from the anchor thread with linear
// scans, one instant at a time. TestEquivalence checks that both agree; it
// costs O(boundaries × intervals) and is only for tests.
func (a *Analysis) NaivePath(i int) Path {
	r := &a.assoc.reqs[i]
	var bounds []int64
	add := func(t int64) {
		if t > r.Start && t < r.End {
			bounds = append(bounds, t)
		}
	}
	add(r.Start)
	for ti := range a.tl.threads {
		for _, j := range a.tl.threads[ti].ivs {
			add(j.start)
			add(j.end)
		}
	}
	for _, w := range a.tl.wakeups {
		add(w.ts)
	}
	for _, q := range a.assoc.reqs {
		for _, act := range q.Threads {
			add(act.Start)
			add(act.End)
		}
	}
	for _, ps := range a.pauses {
		for _, p := range ps {
			add(p.Start)
			add(p.End)
		}
	}
	for _, an := range anchors(r) {
		add(an.lo)
		add(an.hi)
	}
	// A request whose goroutine's events cover it follows the goroutine.
	var gevs []goroutine.Event
	gp, g := a.goroutineOf(r)
	if g != 0 {
		gevs = gp.byG[g]
		// Every goroutine of the process: the path may follow one that
		// readied another.
		for _, evs := range gp.byG {
			for _, e := range evs {
				add(e.TS)
			}
		}
		for _, w := range a.socketWaits(r) {
			add(w.lo)
			add(w.hi)
		}
	}
	bounds = append(bounds, r.Start, r.End)
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)

	n := &naive{a: a, arrows: map[Arrow]bool{}}
	ans := anchors(r)
	var segs []seg
	for k := 0; k+1 < len(bounds); k++ {
		t0, t1 := bounds[k], bounds[k+1]
		var an anchor
		for _, x := range ans {
			if x.lo <= t0 && t0 < x.hi {
				an = x
			}
		}
		s := seg{start: t0, end: t1, active: -1}
		if gevs != nil && gevs[0].TS <= t0 {
			s = n.goroutineAt(gp, g, t0, t1, r.Start, r.End, a.socketWaits(r), 0)
		} else {
			if gevs != nil {
				// Before the goroutine's first event: the threads' path up
				// to it.
				an.hi = min(an.hi, gevs[0].TS)
			}
			ti, ok := n.thread(an.tid)
			if !ok {
				s.tid, s.attr, s.st, s.wait = an.tid, an.tid, stUnknown, noWait
			} else {
				s.tid, s.attr, s.st, s.wait, s.detail = n.at(ti, t0, an.lo, an.hi, 0, gap{tid: an.tid, st: stUnknown, wait: noWait}, noWait)
			}
		}
		if n.in(n.a.pauses, s.tid, t0) {
			s.st = stGC
		}
		own := r.UserScheduled && n.pid(s.tid) == r.PID
		if s.goroutine {
			s.active = int32(i)
		} else {
			q := n.active(s.attr, t0)
			s.active = int32(q)
			if q >= 0 {
				s.blocking = !a.assoc.related(i, q) && !a.assoc.related(i, a.assoc.lroot[q])
			}
			// A user-scheduled request's own process's threads say nothing
			// of it where they work for another request or none.
			if own && (q < 0 || s.blocking) {
				s.st, s.blocking = stUnknown, false
			}
		}
		// Where it is unknown (or its goroutine waits for a thread), the
		// process held off by its quota holds it off too.
		if (own && s.st == stUnknown || s.parked && s.st == stRunqueue) && n.in(n.a.frozen, s.tid, t0) {
			s.st = stThrottled
		}
		segs = appendSeg(segs, s)
	}
	var arrows []Arrow
	for ar := range n.arrows {
		arrows = append(arrows, ar)
	}
	return a.summarize(i, segs, arrows)
}

// goroutineAt is the state on the path over [t0, t1) of goroutine g of
// process p followed over the window [wlo, whi): its events scanned from
// the start; a wait another goroutine ended, that goroutine's state then
// (readier), recursively. waits: the request's socket waits (its own
// goroutine only).
func (n *naive) goroutineAt(p *goProc, g uint64, t0, t1, wlo, whi int64, waits []socketWait, depth int) seg {
	evs := p.byG[g]
	i := 0
	var lastTID uint32
	for k := range evs {
		if evs[k].TS > t0 {
			break
		}
		i = k
	}
	for _, e := range evs[:i+1] {
		if onThread(e.New) {
			lastTID = e.TID
		}
	}
	e := &evs[i]
	next := whi
	if i+1 < len(evs) {
		next = min(next, evs[i+1].TS)
	}
	s := seg{start: t0, end: t1, active: -1, wait: noWait}
	if onThread(e.New) {
		lo, hi := max(e.TS, wlo), next
		ti, ok := n.thread(e.TID)
		if !ok {
			s.tid, s.attr, s.st = e.TID, e.TID, stUnknown
		} else {
			s.tid, s.attr, s.st, s.wait, s.detail = n.at(ti, t0, lo, hi, 0, gap{tid: e.TID, st: stUnknown, wait: noWait}, noWait)
		}
		s.goroutine = s.tid == e.TID
		return s
	}
	s.tid = lastTID
	if s.tid == 0 {
		s.tid = e.TID
	}
	lo := max(e.TS, wlo)
	if rg, _, ok := n.a.readier(p, g, i, lo, next, depth); ok {
		n.arrows[Arrow{From: evs[i+1].TID, To: s.tid, TS: next}] = true
		return n.goroutineAt(p, rg, t0, t1, lo, next, nil, depth+1)
	}
	what, _ := inSocket(waits, t0)
	s.st, s.note = parkedState(e, what)
	s.attr, s.goroutine, s.parked = s.tid, true, true
	return s
}

type naive struct {
	a      *Analysis
	arrows map[Arrow]bool
}

func (n *naive) thread(tid uint32) (int, bool) {
	for i := range n.a.tl.threads {
		if n.a.tl.threads[i].tid == tid {
			return i, true
		}
	}
	return 0, false
}

// at is the state on the path at instant t of a walk over thread ti's window
// [wlo, whi): g where the thread has no interval.
func (n *naive) at(ti int, t, wlo, whi int64, depth int, g gap, wait state) (tid, attr uint32, st, w state, detail uint16) {
	th := &n.a.tl.threads[ti]
	for k := range th.ivs {
		j := &th.ivs[k]
		if j.start > t || t >= j.end {
			continue
		}
		lo, hi := max(j.start, wlo), min(j.end, whi)
		st, wake, follow := n.a.classify(int32(ti), j)
		if !follow {
			return th.tid, th.tid, st, wait, j.detail
		}
		wk := n.a.tl.wakeups[wake]
		wi, ok := n.thread(wk.waker)
		if !ok {
			return th.tid, wk.waker, st, wait, j.detail
		}
		if depth >= n.a.cfg.MaxDepth || depth > 0 && lo == wlo && hi == whi {
			return th.tid, th.tid, st, wait, j.detail
		}
		top := min(hi, wk.ts)
		if t >= top {
			return th.tid, th.tid, st, wait, j.detail
		}
		outer := wait
		if wait == noWait {
			wait = st
		}
		tid, attr, st2, w2, d2 := n.at(wi, t, lo, top, depth+1, gap{tid: th.tid, st: st, wait: outer, detail: j.detail}, wait)
		if tid != th.tid && wk.ts > lo && wk.ts <= hi {
			n.arrows[Arrow{From: wk.waker, To: th.tid, TS: wk.ts}] = true
		}
		return tid, attr, st2, w2, d2
	}
	// Before the thread's creation: its creator's state.
	if len(th.ivs) > 0 && t < th.ivs[0].start && depth < n.a.cfg.MaxDepth {
		if w, _, ok := n.a.creator(int32(ti)); ok {
			ci, _ := n.thread(w.waker)
			tid, attr, st2, w2, d2 := n.at(ci, t, wlo, min(whi, th.ivs[0].start), depth+1, g, wait)
			if tid != th.tid && w.ts > wlo && w.ts <= whi {
				n.arrows[Arrow{From: w.waker, To: th.tid, TS: w.ts}] = true
			}
			return tid, attr, st2, w2, d2
		}
	}
	return g.tid, th.tid, g.st, g.wait, g.detail
}

func (n *naive) pid(tid uint32) uint32 {
	if i, ok := n.thread(tid); ok {
		return n.a.tl.threads[i].pid
	}
	return 0
}

// in reports whether t is in one of the intervals of tid's process in ivs
// (Analysis.pauses or frozen).
func (n *naive) in(ivs map[uint32][]Pause, tid uint32, t int64) bool {
	for _, p := range ivs[n.pid(tid)] {
		if p.Start <= t && t < p.End {
			return true
		}
	}
	return false
}

// active is Algorithm 1 at one instant: of the requests active on tid at t,
// the one that started last (the later one in Requests' order on a tie).
func (n *naive) active(tid uint32, t int64) int {
	best, bestStart := -1, int64(0)
	for q, r := range n.a.assoc.reqs {
		for _, act := range r.Threads {
			if act.TID == tid && act.Start <= t && t < act.End && (best < 0 || act.Start >= bestStart) {
				best, bestStart = q, act.Start
			}
		}
	}
	return best
}
