package critpath

import (
	"cmp"
	"slices"
)

// Holder is a process whose threads ran on the CPU a thread waited for in
// its run queue, and for how long of that wait.
type Holder struct {
	PID      uint32
	Comm     string
	Duration int64 // ns
	// Target: one of the snapshot's own processes. Otherwise a process
	// the recorder follows as a waker, or one it only saw hold the CPU
	// (kernel.HolderDepth): another program of the node.
	Target bool
	// Observer: one of Rootline's own processes (kernel.Thread.Observer):
	// the wait is what observing cost.
	Observer bool
}

// maxHolders bounds a segment's and a path's Holder lists.
const maxHolders = 3

// indexRuns indexes every thread's running intervals by CPU: the snapshot's
// processes', their wakers', and the tasks it only saw hold a CPU.
func (a *Analysis) indexRuns() {
	a.ranOn = map[uint8][]onCPU{}
	for i := range a.tl.threads {
		th := &a.tl.threads[i]
		for _, j := range th.ivs {
			if j.kind == kRunning && j.cpu1 != 0 {
				a.ranOn[j.cpu1] = append(a.ranOn[j.cpu1], onCPU{tid: th.tid, start: j.start, end: j.end})
			}
		}
	}
	for _, l := range a.ranOn {
		slices.SortFunc(l, func(x, y onCPU) int { return cmp.Compare(x.start, y.start) })
	}
}

// heldBy is who ran on the CPU thread tid waited for during its run-queue
// time in [lo, hi) (the CPU it ran on when the wait ended, as ownQueue),
// by process, longest first, at most maxHolders; the rest of the wait, if
// any, the snapshot does not say.
func (a *Analysis) heldBy(tid uint32, lo, hi int64) []Holder {
	i, ok := a.tl.byTID[tid]
	if !ok {
		return nil
	}
	by := map[uint32]int64{}
	a.eachQueueRun(&a.tl.threads[i], lo, hi, func(cpu1 uint8) []onCPU { return a.ranOn[cpu1] }, func(r *onCPU, d int64) {
		by[r.tid] += d
	})
	return a.holders(by)
}

// holders turns time by thread into time by process, longest first, at
// most maxHolders.
func (a *Analysis) holders(byTID map[uint32]int64) []Holder {
	if len(byTID) == 0 {
		return nil
	}
	byPID := map[uint32]*Holder{}
	// The process is named by its main thread when the timeline has it,
	// else by its thread that held the CPU longest (the lowest tid of
	// equals).
	namer := map[uint32]uint32{}
	for tid, d := range byTID {
		t, _ := a.tl.Thread(tid)
		h := byPID[t.PID]
		if h == nil {
			h = &Holder{PID: t.PID, Target: t.Target, Observer: t.Observer}
			byPID[t.PID] = h
		}
		h.Duration += d
		if n, ok := namer[t.PID]; !ok || d > byTID[n] || d == byTID[n] && tid < n {
			namer[t.PID] = tid
		}
	}
	for pid, h := range byPID {
		if m, ok := a.tl.Thread(pid); ok && m.Comm != "" {
			h.Comm = m.Comm
		} else {
			t, _ := a.tl.Thread(namer[pid])
			h.Comm = t.Comm
		}
	}
	return topHolders(byPID)
}

// topHolders sorts hs longest first and keeps maxHolders.
func topHolders(hs map[uint32]*Holder) []Holder {
	out := make([]Holder, 0, len(hs))
	for _, h := range hs {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(x, y Holder) int { return cmp.Or(cmp.Compare(y.Duration, x.Duration), cmp.Compare(x.PID, y.PID)) })
	return out[:min(len(out), maxHolders)]
}

// addHolders adds a segment's holders to a path's (by process).
func addHolders(into map[uint32]*Holder, hs []Holder) {
	for _, h := range hs {
		if c := into[h.PID]; c != nil {
			c.Duration += h.Duration
		} else {
			h := h
			into[h.PID] = &h
		}
	}
}
