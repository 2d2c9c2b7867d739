package critpath

import (
	"math"
	"slices"
	"sort"

	"github.com/rootline/rootline/internal/profiler/goroutine"
)

// A Go program's request is a goroutine, which the runtime runs on whichever
// of its threads is free and parks in user space (a sync.Mutex, a channel,
// the network poller) where the kernel sees only an idle thread. With the
// goroutine tracker's events of the process (Input.Goroutines, the
// "goroutines" artifact of the same capture), the path follows the request's
// goroutine instead of the threads its span names: on a thread while it runs
// or is in a syscall (that thread's kernel states), runnable while it waits
// for the runtime to give it a thread (the process's own demand: runqueue,
// all of it behind its own goroutines), and parked for the reason the runtime
// gives (goroutineWaitState).

// goroutineWaitState is the state of a goroutine parked for reason (the Go
// runtime's waitReason strings). A reason that names no resource (a channel,
// a select, a condition variable: waits for another goroutine) is unknown:
// the path follows the goroutine that woke it where it can (readier).
func goroutineWaitState(reason string) state {
	switch reason {
	case "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "semacquire":
		return stLock
	case "IO wait":
		return stNetwork
	case "sleep":
		return stSleep
	case "GC assist marking", "GC assist wait", "garbage collection", "garbage collection scan",
		"wait for GC cycle", "GC mark termination", "stopping the world":
		return stGC
	case "preempted":
		return stRunqueue
	}
	return stUnknown
}

// goRun is a goroutine starting (goid) or ceasing (0) to run on a thread.
type goRun struct {
	ts   int64
	goid uint64
}

// goProc indexes one process's goroutine events.
type goProc struct {
	from  int64              // the first event's time
	byTID map[uint32][]goRun // per thread, in time order
	byG   map[uint64][]goroutine.Event
}

func onThread(st uint32) bool { return st == goroutine.Running || st == goroutine.Syscall }

// indexGoroutines groups events (in time order per process) by process.
func indexGoroutines(events []goroutine.Event) map[uint32]*goProc {
	out := map[uint32]*goProc{}
	for _, e := range events {
		p := out[e.PID]
		if p == nil {
			p = &goProc{from: e.TS, byTID: map[uint32][]goRun{}, byG: map[uint64][]goroutine.Event{}}
			out[e.PID] = p
		}
		p.from = min(p.from, e.TS)
		p.byG[e.Goid] = append(p.byG[e.Goid], e)
		switch {
		case onThread(e.New):
			p.byTID[e.TID] = append(p.byTID[e.TID], goRun{ts: e.TS, goid: e.Goid})
		case onThread(e.Old):
			p.byTID[e.TID] = append(p.byTID[e.TID], goRun{ts: e.TS})
		}
	}
	for _, p := range out {
		for _, l := range p.byTID {
			slices.SortStableFunc(l, func(x, y goRun) int { return compareInt64(x.ts, y.ts) })
		}
		for _, l := range p.byG {
			slices.SortStableFunc(l, func(x, y goroutine.Event) int { return compareInt64(x.TS, y.TS) })
		}
	}
	return out
}

// at returns the goroutine on thread tid at ts (0: none known).
func (p *goProc) at(tid uint32, ts int64) uint64 {
	l := p.byTID[tid]
	k := sort.Search(len(l), func(k int) bool { return l[k].ts > ts }) - 1
	if k < 0 {
		return 0
	}
	return l[k].goid
}

// goroutineOf returns the goroutine that served request r, and its
// process's events: the one on r's first thread when that thread read r
// (readAt). The events must begin before (a capture's goroutine artifact
// covers its window and a second before); after the last one, a
// goroutine's state held.
func (a *Analysis) goroutineOf(r *Request) (*goProc, uint64) {
	p := a.goroutines[r.PID]
	if p == nil || !r.UserScheduled || len(r.Threads) == 0 {
		return nil, 0
	}
	t := readAt(r)
	if p.from > t {
		return nil, 0
	}
	g := p.at(r.Threads[0].TID, t)
	if g == 0 || len(p.byG[g]) == 0 || p.byG[g][0].TS >= r.End {
		return nil, 0
	}
	return p, g
}

// readAt is when r's first thread read it: the start of its activity there
// (rootline.thread.intervals), or the span's start plus the time its first
// byte waited in the socket, whichever is later.
func readAt(r *Request) int64 {
	return max(r.Start, r.Read, r.Threads[0].Start)
}

// socketWait is when bytes for a request waited in its process's socket:
// the request's own before the service read it, or a response to one of its
// calls before it was read (what names which).
type socketWait struct {
	lo, hi int64
	what   string
}

// socketWaits lists, in time order, when bytes for request r waited in a
// socket of its process: from its start to when it was read, and from when
// each of its calls' responses came (Request.Answered) to the call's end.
func (a *Analysis) socketWaits(r *Request) []socketWait {
	var out []socketWait
	if read := readAt(r); read > r.Start {
		out = append(out, socketWait{r.Start, read, "request"})
	}
	return append(out, a.answered[reqKey{r.TraceID, r.SpanID}]...)
}

// inSocket says what waited in a socket for r at t ("" : nothing), from
// waits (socketWaits), and until when that holds (or the next wait starts).
func inSocket(waits []socketWait, t int64) (what string, until int64) {
	until = math.MaxInt64
	for _, w := range waits {
		switch {
		case w.lo <= t && t < w.hi:
			return w.what, w.hi
		case t < w.lo:
			until = min(until, w.lo)
		}
	}
	return "", until
}

// goroutinePath builds request r's path from its goroutine g's events over
// [r.Start, r.End), in time order. Before g's first event (a goroutine
// created for the request's connection after its first byte arrived) the
// path is the request's threads', as without goroutine events.
func (b *builder) goroutinePath(r *Request, p *goProc, g uint64) (segs []seg) {
	evs := p.byG[g]
	// The last change at or before the start says its state then.
	k := sort.Search(len(evs), func(k int) bool { return evs[k].TS > r.Start }) - 1
	if k < 0 {
		segs = b.anchorsPath(r, r.Start, evs[0].TS)
		k = 0
	}
	return b.goroutineSegs(segs, p, g, k, r.Start, r.End, b.a.socketWaits(r), 0)
}

// goroutineSegs appends goroutine g's path over [lo, hi) to segs, from its
// event k (the last at or before lo, or its first). waits are when bytes
// for its request waited in a socket (the request's own goroutine; nil for
// one that readied it).
func (b *builder) goroutineSegs(segs []seg, p *goProc, g uint64, k int, lo, hi int64, waits []socketWait, depth int) []seg {
	evs := p.byG[g]
	var lastTID uint32 // the thread it last ran on: where its parked time is shown
	for _, e := range evs[:k] {
		if onThread(e.New) {
			lastTID = e.TID
		}
	}
	for i := k; i < len(evs) && evs[i].TS < hi; i++ {
		e := &evs[i]
		elo, ehi := max(e.TS, lo), hi
		if i+1 < len(evs) {
			ehi = min(ehi, evs[i+1].TS)
		}
		if onThread(e.New) {
			lastTID = e.TID
		}
		if ehi <= elo {
			continue
		}
		if onThread(e.New) {
			b.out = b.out[:0]
			b.threadPath(e.TID, elo, ehi)
			slices.Reverse(b.out)
			for _, s := range b.out {
				if s.tid == e.TID {
					s.goroutine = true
				}
				segs = appendSeg(segs, s)
			}
			continue
		}
		tid := lastTID
		if tid == 0 {
			tid = e.TID
		}
		if rg, rk, ok := b.a.readier(p, g, i, elo, ehi, depth); ok {
			// Another goroutine ended the wait: what it did meanwhile is
			// the path.
			b.arrows = append(b.arrows, Arrow{From: evs[i+1].TID, To: tid, TS: ehi})
			segs = b.goroutineSegs(segs, p, rg, rk, elo, ehi, nil, depth+1)
			continue
		}
		// Split where bytes for the request waited in a socket: a poller
		// wait then is not the network's (parkedState).
		for at := elo; at < ehi; {
			what, until := inSocket(waits, at)
			end := min(ehi, until)
			st, note := parkedState(e, what)
			segs = appendSeg(segs, seg{tid: tid, attr: tid, start: at, end: end, st: st, wait: noWait, active: -1,
				goroutine: true, parked: true, note: note})
			at = end
		}
	}
	return segs
}

// readier returns the goroutine that ended goroutine g's wait after its
// event i, when the path follows it over the wait's piece [lo, hi):
// a wait whose reason names no resource (a channel, a select, a condition
// variable, a WaitGroup: goroutineWaitState's unknown) that another
// goroutine ended — the one running on the thread that made g runnable, at
// that moment, so it ends at hi (not cut by the request's end) — with
// events at or before lo (k: the last of them), within MaxDepth. A wait ended by the runtime itself (a timer, the poller: no
// goroutine on the thread) keeps its reason.
func (a *Analysis) readier(p *goProc, g uint64, i int, lo, hi int64, depth int) (uint64, int, bool) {
	evs := p.byG[g]
	e := &evs[i]
	if e.New != goroutine.Waiting || goroutineWaitState(e.Reason) != stUnknown || depth >= a.cfg.MaxDepth ||
		i+1 >= len(evs) || evs[i+1].TS != hi || evs[i+1].New != goroutine.Runnable {
		return 0, 0, false
	}
	rg := p.at(evs[i+1].TID, hi)
	if rg == 0 || rg == g {
		return 0, 0, false
	}
	revs := p.byG[rg]
	k := sort.Search(len(revs), func(k int) bool { return revs[k].TS > lo }) - 1
	if k < 0 {
		return 0, 0, false
	}
	return rg, k, true
}

// parkedState is the state of a goroutine off any thread after event e,
// and the note the segment shows: runnable, it waits for a thread (behind
// its own goroutines); parked, for what its reason names. A goroutine in
// the network poller while bytes it waits for are in its socket already
// (inSocket names them: its request before it was read,
// rootline.wait.socket_ms, or a response to one of its calls,
// rootline.wait.response_socket_ms) waits for its runtime to poll, not for
// the network: runnable too.
func parkedState(e *goroutine.Event, inSocket string) (state, string) {
	switch e.New {
	case goroutine.Runnable:
		return stRunqueue, "goroutine runnable"
	case goroutine.Waiting:
		if inSocket != "" && e.Reason == "IO wait" {
			return stRunqueue, "IO wait, the " + inSocket + " in its socket"
		}
		return goroutineWaitState(e.Reason), e.Reason
	}
	return stUnknown, ""
}

// anchorsPath is the path of r's threads (anchors) over [lo, hi).
func (b *builder) anchorsPath(r *Request, lo, hi int64) []seg {
	var segs []seg
	for _, an := range anchors(r) {
		an.lo, an.hi = max(an.lo, lo), min(an.hi, hi)
		if an.hi <= an.lo {
			continue
		}
		b.out = b.out[:0]
		b.threadPath(an.tid, an.lo, an.hi)
		slices.Reverse(b.out)
		for _, s := range b.out {
			segs = appendSeg(segs, s)
		}
	}
	return segs
}
