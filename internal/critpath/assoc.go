package critpath

import (
	"cmp"
	"slices"

	"github.com/rootline/rootline/internal/model"
)

// association is Algorithm 1 of "Combining distributed and kernel tracing"
// (Gelle et al.): per thread, the stack of requests it handles, the one that
// started most recently being the active one. It is precomputed as, per
// thread, the pieces of time with a constant active request, so that a
// lookup is a binary search.
type association struct {
	reqs    []Request
	byID    map[spanKey]int
	pieces  map[uint32][]activePiece
	lroot   []int // each request's local root (see localRoot)
	parents []int // each request's parent among reqs, -1 if not known
}

type spanKey struct {
	trace model.TraceID
	span  model.SpanID
}

// activePiece: from Start until the next piece of the thread (or End), the
// request with index Req (-1: none) is active.
type activePiece struct {
	start, end int64
	req        int32
}

func newAssociation(reqs []Request) *association {
	a := &association{reqs: reqs, byID: make(map[spanKey]int, len(reqs)), pieces: map[uint32][]activePiece{}}
	for i := range reqs {
		a.byID[spanKey{reqs[i].TraceID, reqs[i].SpanID}] = i
	}
	a.parents = make([]int, len(reqs))
	for i := range reqs {
		a.parents[i] = -1
		if p, ok := a.byID[spanKey{reqs[i].TraceID, reqs[i].Parent}]; ok && !reqs[i].Parent.IsZero() && p != i {
			a.parents[i] = p
		}
	}
	a.lroot = make([]int, len(reqs))
	for i := range reqs {
		a.lroot[i] = a.localRoot(i)
	}
	// Per thread: push at an activity's start, pop at its end. Activities
	// are ordered by start, ties by their order in reqs, so that the top
	// of the stack is the most recently started (the later one in a tie).
	type ev struct {
		t     int64
		req   int32
		order int32
		start bool
	}
	byThread := map[uint32][]ev{}
	order := int32(0)
	for i := range reqs {
		for _, act := range reqs[i].Threads {
			order++
			if act.End <= act.Start {
				continue
			}
			byThread[act.TID] = append(byThread[act.TID],
				ev{t: act.Start, req: int32(i), order: order, start: true},
				ev{t: act.End, req: int32(i), order: order})
		}
	}
	for tid, evs := range byThread {
		slices.SortFunc(evs, func(x, y ev) int {
			if c := cmp.Compare(x.t, y.t); c != 0 {
				return c
			}
			if x.start != y.start { // ends first: intervals are half-open
				if x.start {
					return 1
				}
				return -1
			}
			return cmp.Compare(x.order, y.order)
		})
		type entry struct{ req, order int32 }
		var stack []entry
		var ps []activePiece
		cur, curStart := int32(-1), int64(0)
		for k := 0; k < len(evs); {
			t := evs[k].t
			for ; k < len(evs) && evs[k].t == t; k++ {
				e := evs[k]
				if e.start {
					stack = append(stack, entry{e.req, e.order})
					continue
				}
				for j := len(stack) - 1; j >= 0; j-- {
					if stack[j].order == e.order {
						stack = append(stack[:j], stack[j+1:]...)
						break
					}
				}
			}
			active := int32(-1)
			if len(stack) > 0 {
				active = stack[len(stack)-1].req
			}
			if active == cur {
				continue
			}
			if cur >= 0 && t > curStart {
				ps = append(ps, activePiece{start: curStart, end: t, req: cur})
			}
			cur, curStart = active, t
		}
		a.pieces[tid] = ps
	}
	return a
}

// at returns the index of the request active on tid at t (-1: none) and
// until when that holds.
func (a *association) at(tid uint32, t int64) (req int, until int64) {
	ps := a.pieces[tid]
	// The first piece that ends after t.
	i, _ := slices.BinarySearchFunc(ps, t, func(p activePiece, t int64) int {
		if p.end <= t {
			return -1
		}
		return 1
	})
	if i == len(ps) {
		return -1, maxTime
	}
	if ps[i].start <= t {
		return int(ps[i].req), ps[i].end
	}
	return -1, ps[i].start
}

const maxTime = int64(1<<63 - 1)

// related reports whether q is r, one of its ancestors or one of its
// descendants among the known requests: time spent on q's threads is r's
// own, not a wait for another request.
func (a *association) related(r, q int) bool {
	if r == q {
		return true
	}
	if a.reqs[r].TraceID != a.reqs[q].TraceID {
		return false
	}
	for p := a.parents[r]; p >= 0; p = a.parents[p] {
		if p == q {
			return true
		}
	}
	for p := a.parents[q]; p >= 0; p = a.parents[p] {
		if p == r {
			return true
		}
	}
	return false
}

// localRoot is the outermost span of q's request in q's service: its
// ancestors are followed while they are of the same service and process. A
// request blocked by another is blocked by that request as a whole (its
// SERVER span), not by the CLIENT call its thread happened to be making.
func (a *association) localRoot(q int) int {
	seen := 0
	for {
		p := a.parents[q]
		if p < 0 || a.reqs[p].Service != a.reqs[q].Service || a.reqs[p].PID != a.reqs[q].PID || seen > len(a.reqs) {
			return q
		}
		q = p
		seen++
	}
}
