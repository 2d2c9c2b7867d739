package critpath

import (
	"cmp"
	"slices"
)

// Shared is where several requests' critical paths ran through the same
// thread in the same state at the same time: the point they contended at
// (the holder of a mutex that several of them waited for, a saturated
// worker). It is a node of the merged graph of "Combining distributed and
// kernel tracing" §3.3 (Figure 6) that more than one path goes through.
type Shared struct {
	TID        uint32
	Start, End int64
	State      string
	// Requests are the indexes of the requests whose paths share it, in
	// increasing order.
	Requests []int
}

// Merge finds the pieces of time that two or more of the paths share.
func Merge(paths []Path) []Shared {
	type mark struct {
		t     int64
		req   int
		st    string
		start bool
	}
	byThread := map[uint32][]mark{}
	for _, p := range paths {
		for _, s := range p.Segments {
			byThread[s.TID] = append(byThread[s.TID], mark{s.Start, p.Request, s.State, true}, mark{s.End, p.Request, s.State, false})
		}
	}
	var out []Shared
	for tid, ms := range byThread {
		slices.SortFunc(ms, func(x, y mark) int { return cmp.Compare(x.t, y.t) })
		type key struct {
			req int
			st  string
		}
		open := map[key]int{}
		var prev int64
		for k := 0; k < len(ms); {
			t := ms[k].t
			if t > prev && len(open) > 1 {
				byState := map[string][]int{}
				for kk := range open {
					byState[kk.st] = append(byState[kk.st], kk.req)
				}
				for st, reqs := range byState {
					if len(reqs) < 2 {
						continue
					}
					slices.Sort(reqs)
					reqs = slices.Compact(reqs)
					if len(reqs) < 2 {
						continue
					}
					out = appendShared(out, Shared{TID: tid, Start: prev, End: t, State: st, Requests: reqs})
				}
			}
			for ; k < len(ms) && ms[k].t == t; k++ {
				kk := key{ms[k].req, ms[k].st}
				if ms[k].start {
					open[kk]++
				} else if open[kk]--; open[kk] <= 0 {
					delete(open, kk)
				}
			}
			prev = t
		}
	}
	slices.SortFunc(out, func(x, y Shared) int {
		if c := cmp.Compare(x.Start, y.Start); c != 0 {
			return c
		}
		if c := cmp.Compare(x.TID, y.TID); c != 0 {
			return c
		}
		return cmp.Compare(x.State, y.State)
	})
	return out
}

// appendShared extends the last node of the same thread when s continues it.
func appendShared(out []Shared, s Shared) []Shared {
	for i := len(out) - 1; i >= 0 && i >= len(out)-int(numStates); i-- {
		l := &out[i]
		if l.TID == s.TID && l.End == s.Start && l.State == s.State && slices.Equal(l.Requests, s.Requests) {
			l.End = s.End
			return out
		}
	}
	return append(out, s)
}
