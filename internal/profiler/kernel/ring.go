package kernel

import (
	"cmp"
	"slices"
	"sync"
	"unsafe"
)

// chunkLen is the number of events per chunk of the ring: eviction drops a
// whole chunk (≈ 200 KiB), so a list holds between max−1 and max chunks.
const chunkLen = 4096

// eventBytes is the memory one buffered event costs.
const eventBytes = int64(unsafe.Sizeof(Event{}))

// EventBytes is the memory one buffered record costs (Config.MaxBytes
// holds MaxBytes/EventBytes records).
const EventBytes = eventBytes

// Lists of the ring: the records that concern a target, and those that
// concern followed wakers only (FlagFollowed). Each has its own byte
// budget, so that a busy waker (a database, a sidecar) cannot push the
// targets' own history out.
const (
	listTargets = iota
	listFollowed
	nLists
)

// ring is the bounded in-memory recording: the most recent events, oldest
// chunk of a list dropped first when the list exceeds its byte budget or
// holds only events older than the retention. Comms are kept per thread
// beside it. Safe for concurrent use.
type ring struct {
	mu    sync.Mutex
	lists [nLists]chunkList
	comms map[uint32]*commEntry
}

// chunkList is one list of the ring.
type chunkList struct {
	chunks    [][]Event
	spans     []span // spans[i]: the TS range of chunks[i]
	maxChunks int
	evicted   uint64
	total     uint64
	// evictedHi is the newest TS of an evicted chunk: the list's records
	// are complete only after it.
	evictedHi int64
}

// span is the range of TS in a chunk: records of different CPUs' ring
// buffers arrive out of order (a reader drains one ring, then the next).
type span struct{ lo, hi int64 }

type commEntry struct {
	comm Comm
	seen int64 // TS of the last event naming the thread
}

// newRing returns a ring of maxBytes in all, followBytes of which hold the
// followed wakers' records (0: they share the targets' list).
func newRing(maxBytes, followBytes int64) *ring {
	r := &ring{comms: map[uint32]*commEntry{}}
	chunks := func(b int64) int { return max(int(b/(eventBytes*chunkLen)), 2) }
	if followBytes > 0 {
		r.lists[listFollowed].maxChunks = chunks(followBytes)
		maxBytes -= followBytes
	}
	r.lists[listTargets].maxChunks = chunks(maxBytes)
	return r
}

// add appends ev and remembers the comms of its threads (nil comm: none).
func (r *ring) add(ev *Event, comm, comm2 *Comm) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.lists[listTargets]
	if ev.Flags&FlagFollowed != 0 && r.lists[listFollowed].maxChunks > 0 {
		l = &r.lists[listFollowed]
	}
	l.add(ev)
	if comm != nil && ev.TID != 0 {
		r.setComm(ev.TID, comm, ev.TS)
	}
	if t2 := ev.task2(); comm2 != nil && t2 != 0 {
		r.setComm(t2, comm2, ev.TS)
	}
}

func (l *chunkList) add(ev *Event) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last]) == chunkLen {
		var c []Event
		if len(l.chunks) >= l.maxChunks {
			// Full: the oldest chunk's memory becomes the newest chunk.
			c = l.chunks[0][:0]
			l.dropOldest()
		} else {
			c = make([]Event, 0, chunkLen)
		}
		l.chunks = append(l.chunks, c)
		l.spans = append(l.spans, span{ev.TS, ev.TS})
		last = len(l.chunks) - 1
	}
	l.chunks[last] = append(l.chunks[last], *ev)
	sp := &l.spans[last]
	sp.lo, sp.hi = min(sp.lo, ev.TS), max(sp.hi, ev.TS)
	l.total++
}

func (l *chunkList) dropOldest() {
	l.evicted += uint64(len(l.chunks[0]))
	l.evictedHi = max(l.evictedHi, l.spans[0].hi)
	l.chunks[0] = nil
	l.chunks, l.spans = l.chunks[1:], l.spans[1:]
}

func (r *ring) setComm(tid uint32, c *Comm, ts int64) {
	if e := r.comms[tid]; e != nil {
		e.comm, e.seen = *c, ts // in place: one hash per event
		return
	}
	r.comms[tid] = &commEntry{comm: *c, seen: ts}
}

// expire drops chunks whose events are all older than before, and comms
// not seen since then.
func (r *ring) expire(before int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.lists {
		l := &r.lists[i]
		for len(l.chunks) > 1 && l.spans[0].hi < before {
			l.dropOldest()
		}
	}
	for tid, e := range r.comms {
		if e.seen < before {
			delete(r.comms, tid)
		}
	}
}

// window copies the events with from ≤ TS ≤ to, sorted by TS.
func (r *ring) window(from, to int64) []Event {
	w := r.windowOf(from, to, nil, false, 0)
	return w.events
}

// windowEvents is what windowOf returns.
type windowEvents struct {
	events []Event // sorted by TS
	total  int     // events of every process in the range
	// complete is the time after which every list's records are complete
	// (none evicted): a thread outside the snapshot's processes is known
	// only after it, since its records may sit in either list.
	complete int64
}

// windowOf copies the events with from ≤ TS ≤ to that a snapshot of the
// processes procs needs, sorted by TS, and counts all events in the range.
// Needed are the events that name a thread of procs or a thread that woke
// one of them, directly or through up to depth other wakers (as TID, or as
// TID2 of a switch, fork or waking): a thread's intervals depend only on
// those, so build gives the same snapshot as from every event of the
// window, while a dump of one service among many copies and replays only
// its share. With follow, children forked by procs in the range join procs
// (procs is updated). nil procs: every event.
func (r *ring) windowOf(from, to int64, procs map[uint32]bool, follow bool, depth int) windowEvents {
	w := r.copyWindow(from, to, procs, follow, depth)
	// Records of different CPUs, and of the two lists, arrive out of order.
	// Sorted once copied, so that the reader is not held up meanwhile.
	w.events = sortByTS(w.events)
	return w
}

// copyWindow is windowOf's copy, in the order the records arrived.
func (r *ring) copyWindow(from, to int64, procs map[uint32]bool, follow bool, depth int) windowEvents {
	r.mu.Lock()
	defer r.mu.Unlock()
	var chunks [][]Event
	var w windowEvents
	for i := range r.lists {
		l := &r.lists[i]
		w.complete = max(w.complete, l.evictedHi)
		for j, c := range l.chunks {
			if sp := l.spans[j]; sp.hi >= from && sp.lo <= to {
				chunks = append(chunks, c)
			}
		}
	}
	inRange := func(ev *Event) bool { return ev.TS >= from && ev.TS <= to }
	var tids map[uint32]bool
	if procs != nil {
		if follow {
			for _, c := range chunks {
				for i := range c {
					if ev := &c[i]; ev.Type == EvFork && inRange(ev) && procs[ev.TGID2] && ev.TGID != 0 {
						procs[ev.TGID] = true
					}
				}
			}
		}
		tids = map[uint32]bool{}
		var edges []wakeEdge // wakee → causal waker, for the wakers' wakers
		for _, c := range chunks {
			for i := range c {
				ev := &c[i]
				if !inRange(ev) {
					continue
				}
				if procs[ev.TGID] {
					tids[ev.TID] = true
				}
				if t2 := ev.task2(); t2 != 0 && procs[ev.TGID2] {
					tids[t2] = true
				}
				if ev.Type == EvWaking && ev.TID2 != 0 && causal(ev) {
					edges = append(edges, wakeEdge{ev.TID, ev.TID2})
				}
			}
		}
		// Each pass adds the wakers of the threads found so far: depth+1
		// passes reach the wakers one hop beyond the bound, whose records
		// say what they are (a kernel thread) although they get no
		// intervals.
		for range depth + 1 {
			grown := false
			for _, e := range edges {
				if tids[e.wakee] && !tids[e.waker] {
					tids[e.waker] = true
					grown = true
				}
			}
			if !grown {
				break
			}
		}
	}
	for _, c := range chunks {
		for i := range c {
			ev := &c[i]
			if !inRange(ev) {
				continue
			}
			w.total++
			if t2 := ev.task2(); tids == nil || tids[ev.TID] || t2 != 0 && tids[t2] {
				w.events = append(w.events, *ev)
			}
		}
	}
	return w
}

// sortByTS sorts events by TS, those with the same TS in the order given,
// and returns them (the slice given or a new one). It sorts 16-byte keys
// rather than the records: a stable sort of the records themselves moved
// them around by rotations, the dump's largest cost after compression on a
// busy node (bench/RESULTS.md, "Dumps that keep their window").
func sortByTS(evs []Event) []Event {
	if slices.IsSortedFunc(evs, func(a, b Event) int { return cmp.Compare(a.TS, b.TS) }) {
		return evs
	}
	type key struct {
		ts int64
		i  int
	}
	keys := make([]key, len(evs))
	for i := range evs {
		keys[i] = key{evs[i].TS, i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.ts, b.ts); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	out := make([]Event, len(evs))
	for j, k := range keys {
		out[j] = evs[k.i]
	}
	return out
}

// wakeEdge is a causal wakeup: waker woke wakee.
type wakeEdge struct{ wakee, waker uint32 }

// causal reports whether a waking record's current task (TID2) caused the
// wakeup: it woke the wakee from its own context, or from a network softirq
// it raised itself.
func causal(ev *Event) bool {
	return ev.Ctx == CtxThread || ev.Ctx == CtxSoftirq && ev.Flags&FlagRaiser != 0
}

func (r *ring) comm(tid uint32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.comms[tid]
	if e == nil {
		return ""
	}
	return commString(&e.comm)
}

// ringStats are a ring's counters.
type ringStats struct {
	bytes, followedBytes     int64  // buffered (all lists; the followed list's)
	evicted, total           uint64 // events (all lists)
	followedEvents, followed uint64 // events buffered, added to the followed list
}

func (r *ring) stats() ringStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s ringStats
	for i := range r.lists {
		l := &r.lists[i]
		b := int64(len(l.chunks)) * chunkLen * eventBytes
		s.bytes += b
		s.evicted += l.evicted
		s.total += l.total
		if i == listFollowed {
			s.followedBytes = b
			s.followed = l.total
			for _, c := range l.chunks {
				s.followedEvents += uint64(len(c))
			}
		}
	}
	return s
}
