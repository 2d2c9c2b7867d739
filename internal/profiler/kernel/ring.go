package kernel

import (
	"sort"
	"sync"
	"unsafe"
)

// chunkLen is the number of events per chunk of the ring: eviction drops a
// whole chunk (≈ 200 KiB), so the ring holds between max−1 and max chunks.
const chunkLen = 4096

// eventBytes is the memory one buffered event costs.
const eventBytes = int64(unsafe.Sizeof(Event{}))

// ring is the bounded in-memory recording: the most recent events of every
// target, oldest chunk dropped first when it exceeds its byte budget or
// holds only events older than the retention. Comms are kept per thread
// beside it. Safe for concurrent use.
type ring struct {
	mu        sync.Mutex
	chunks    [][]Event
	spans     []span // spans[i]: the TS range of chunks[i]
	maxChunks int
	evicted   uint64
	total     uint64
	comms     map[uint32]*commEntry
}

// span is the range of TS in a chunk: records of different CPUs' ring
// buffers arrive out of order (a reader drains one ring, then the next).
type span struct{ lo, hi int64 }

type commEntry struct {
	comm Comm
	seen int64 // TS of the last event naming the thread
}

func newRing(maxBytes int64) *ring {
	n := int(maxBytes / (eventBytes * chunkLen))
	return &ring{maxChunks: max(n, 2), comms: map[uint32]*commEntry{}}
}

// add appends ev and remembers the comms of its threads (nil comm: none).
func (r *ring) add(ev *Event, comm, comm2 *Comm) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := len(r.chunks) - 1
	if last < 0 || len(r.chunks[last]) == chunkLen {
		var c []Event
		if len(r.chunks) >= r.maxChunks {
			// Full: the oldest chunk's memory becomes the newest chunk.
			c = r.chunks[0][:0]
			r.evicted += uint64(len(r.chunks[0]))
			r.chunks[0] = nil
			r.chunks, r.spans = r.chunks[1:], r.spans[1:]
		} else {
			c = make([]Event, 0, chunkLen)
		}
		r.chunks = append(r.chunks, c)
		r.spans = append(r.spans, span{ev.TS, ev.TS})
		last = len(r.chunks) - 1
	}
	r.chunks[last] = append(r.chunks[last], *ev)
	sp := &r.spans[last]
	sp.lo, sp.hi = min(sp.lo, ev.TS), max(sp.hi, ev.TS)
	r.total++
	if comm != nil && ev.TID != 0 {
		r.setComm(ev.TID, comm, ev.TS)
	}
	if t2 := ev.task2(); comm2 != nil && t2 != 0 {
		r.setComm(t2, comm2, ev.TS)
	}
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
	for len(r.chunks) > 1 {
		if r.spans[0].hi >= before {
			break
		}
		r.evicted += uint64(len(r.chunks[0]))
		r.chunks[0] = nil
		r.chunks, r.spans = r.chunks[1:], r.spans[1:]
	}
	for tid, e := range r.comms {
		if e.seen < before {
			delete(r.comms, tid)
		}
	}
}

// window copies the events with from ≤ TS ≤ to, sorted by TS.
func (r *ring) window(from, to int64) []Event {
	out, _ := r.windowOf(from, to, nil, false)
	return out
}

// windowOf copies the events with from ≤ TS ≤ to that a snapshot of the
// processes procs needs, sorted by TS, and counts all events in the range.
// Needed are the events that name a thread of procs or a thread that woke
// one of them (as TID, or as TID2 of a switch, fork or waking): a thread's
// intervals depend only on those, so build gives the same snapshot as from
// every event of the window, while a dump of one service among many copies
// and replays only its share. With follow, children forked by procs in the
// range join procs (procs is updated). nil procs: every event.
func (r *ring) windowOf(from, to int64, procs map[uint32]bool, follow bool) ([]Event, int) {
	r.mu.Lock()
	var chunks [][]Event
	for i, c := range r.chunks {
		if sp := r.spans[i]; sp.hi >= from && sp.lo <= to {
			chunks = append(chunks, c)
		}
	}
	inRange := func(ev *Event) bool { return ev.TS >= from && ev.TS <= to }
	total := 0
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
		for _, c := range chunks {
			for i := range c {
				ev := &c[i]
				if !inRange(ev) {
					continue
				}
				if procs[ev.TGID] {
					tids[ev.TID] = true
					if ev.Type == EvWaking && ev.Ctx == CtxThread && ev.TID2 != 0 {
						tids[ev.TID2] = true // the waker
					}
				}
				if t2 := ev.task2(); t2 != 0 && procs[ev.TGID2] {
					tids[t2] = true
				}
			}
		}
	}
	var out []Event
	for _, c := range chunks {
		for i := range c {
			ev := &c[i]
			if !inRange(ev) {
				continue
			}
			total++
			if t2 := ev.task2(); tids == nil || tids[ev.TID] || t2 != 0 && tids[t2] {
				out = append(out, *ev)
			}
		}
	}
	r.mu.Unlock()
	// Records of different CPUs arrive out of order.
	sort.SliceStable(out, func(i, j int) bool { return out[i].TS < out[j].TS })
	return out, total
}

func (r *ring) comm(tid uint32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.comms[tid]
	if e == nil {
		return ""
	}
	c := e.comm[:]
	for i, b := range c {
		if b == 0 {
			return string(c[:i])
		}
	}
	return string(c)
}

// stats returns the buffered bytes, events evicted and events added.
func (r *ring) stats() (bytes int64, evicted, total uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.chunks)) * chunkLen * eventBytes, r.evicted, r.total
}
