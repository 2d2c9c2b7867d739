package anomaly

// window is one key's sliding window of durations with its running median.
//
// The durations are split between two binary heaps: lo, a max-heap holding the
// smaller half, and hi, a min-heap holding the larger half, with every value in
// lo ≤ every value in hi and len(hi) ≤ len(lo) ≤ len(hi)+1. The median is then
// lo's top. The window's order lives in a ring of slots: each heap entry
// carries its slot, and pos records where each slot's entry sits. Unlike the
// usual two-heap median with lazy deletion, this lets the new duration
// overwrite the oldest one in place once the window is full: the heaps never
// hold stale entries and never grow past W, which keeps memory bounded and the
// cost per Observe O(log W) in the worst case (at most two sifts), not just
// amortized.
//
// Entries hold their value rather than pointing into a value array so that a
// sift compares values next to each other in memory instead of chasing an
// index per comparison. Slots are int32 to keep an entry at 16 bytes;
// Config.Validate caps W at maxWindow so that index<<1 in pos cannot overflow.
type window struct {
	key string

	pos  []int32 // pos[slot] = index<<1 | side; len(pos) is the fill
	lo   []entry // max-heap
	hi   []entry // min-heap
	head int32   // once the ring is full, the slot of the oldest duration

	observed  uint64
	anomalies uint64
	lastSeen  int64

	// prev and next link the windows in least-recently-observed order; they
	// are intrusive so that moving a key to the front allocates nothing.
	prev, next *window
}

type entry struct {
	v    int64 // duration
	slot int32 // position in the ring
}

// Sides of pos.
const (
	sideLo = 0
	sideHi = 1
)

// reset empties w for reuse by another key, keeping its buffers so that a key
// churning under MaxKeys allocates nothing.
func (w *window) reset(key string) {
	w.key = key
	w.pos = w.pos[:0]
	w.lo = w.lo[:0]
	w.hi = w.hi[:0]
	w.head = 0
	w.observed, w.anomalies, w.lastSeen = 0, 0, 0
}

// fill returns how many durations the window holds.
func (w *window) fill() int { return len(w.pos) }

// median returns the lower median of the window (the element of rank
// ⌈n/2⌉ in ascending order), or 0 when the window is empty.
func (w *window) median() int64 {
	if len(w.lo) == 0 {
		return 0
	}
	return w.lo[0].v
}

// add enters d into a window of capacity size, evicting the oldest duration
// when the window is full.
func (w *window) add(d int64, size int) {
	if len(w.pos) < size {
		slot := int32(len(w.pos))
		w.pos = append(w.pos, 0)
		w.insert(entry{d, slot})
		return
	}
	slot := w.head
	if w.head++; int(w.head) == size {
		w.head = 0
	}
	w.replace(slot, d)
}

// replace gives slot the value d in place of the oldest one it held. It keeps
// the halves' sizes, so it never needs balance: two sifts at most.
func (w *window) replace(slot int32, d int64) {
	p := w.pos[slot]
	i := int(p >> 1)
	if p&1 == sideLo {
		if len(w.hi) == 0 || d <= w.hi[0].v {
			// d belongs in lo, where the old value was: one sift.
			w.lo[i].v = d
			w.fixLo(i)
			return
		}
		// d belongs in hi. hi's smallest value takes the vacated place in lo
		// (it is ≥ all of lo, so it can only rise) and d takes its place at
		// hi's root (it is > that value, so it can only sink).
		w.lo[i] = w.hi[0]
		w.upLo(i)
		w.hi[0] = entry{d, slot}
		w.downHi(0)
		return
	}
	// lo is never empty while hi is not.
	if d >= w.lo[0].v {
		w.hi[i].v = d
		w.fixHi(i)
		return
	}
	// The mirror image: lo's largest value moves to the vacated place in hi,
	// and d takes its place at lo's root.
	w.hi[i] = w.lo[0]
	w.upHi(i)
	w.lo[0] = entry{d, slot}
	w.downLo(0)
}

// insert adds e to the heaps while the window is filling.
func (w *window) insert(e entry) {
	if len(w.lo) == 0 || e.v <= w.lo[0].v {
		w.lo = append(w.lo, e)
		w.upLo(len(w.lo) - 1)
	} else {
		w.hi = append(w.hi, e)
		w.upHi(len(w.hi) - 1)
	}
	// Restore len(hi) ≤ len(lo) ≤ len(hi)+1 by moving a top across, which
	// keeps every value in lo ≤ every value in hi.
	if len(w.lo) > len(w.hi)+1 {
		w.hi = append(w.hi, w.popLo())
		w.upHi(len(w.hi) - 1)
	} else if len(w.hi) > len(w.lo) {
		w.lo = append(w.lo, w.popHi())
		w.upLo(len(w.lo) - 1)
	}
}

// The heap primitives below are written out once per heap rather than shared
// behind a comparison flag or interface: they are most of the cost of Observe,
// and the duplication keeps the hot loops free of indirect calls and extra
// branches. Each sifts the entry at i into place, holding it aside and moving
// the others over it, and records every moved entry's new index in pos.
//
// The sifts down pick the child with b2i rather than an if: which child wins
// is a coin flip for random durations, and the compiler turns b2i into a flag
// set instead of a branch, which nearly halved the mispredicted branches of a
// window update (5.3 to 2.9 per update in cachegrind, W = 500).

// upLo reports whether the entry moved; so does upHi.
func (w *window) upLo(i int) bool {
	lo, pos := w.lo, w.pos
	e := lo[i]
	start := i
	for i > 0 {
		parent := (i - 1) >> 1
		pe := lo[parent]
		if pe.v >= e.v {
			break
		}
		lo[i] = pe
		pos[pe.slot] = int32(i)<<1 | sideLo
		i = parent
	}
	lo[i] = e
	pos[e.slot] = int32(i)<<1 | sideLo
	return i != start
}

func (w *window) downLo(i int) {
	lo, pos := w.lo, w.pos
	e := lo[i]
	for {
		c := 2*i + 1
		if c >= len(lo) {
			break
		}
		if r := c + 1; r < len(lo) {
			c += b2i(lo[r].v > lo[c].v)
		}
		ce := lo[c]
		if ce.v <= e.v {
			break
		}
		lo[i] = ce
		pos[ce.slot] = int32(i)<<1 | sideLo
		i = c
	}
	lo[i] = e
	pos[e.slot] = int32(i)<<1 | sideLo
}

func (w *window) fixLo(i int) {
	if !w.upLo(i) {
		w.downLo(i)
	}
}

func (w *window) popLo() entry {
	top := w.lo[0]
	last := len(w.lo) - 1
	w.lo[0] = w.lo[last]
	w.lo = w.lo[:last]
	if last > 0 {
		w.downLo(0)
	}
	return top
}

func (w *window) upHi(i int) bool {
	hi, pos := w.hi, w.pos
	e := hi[i]
	start := i
	for i > 0 {
		parent := (i - 1) >> 1
		pe := hi[parent]
		if pe.v <= e.v {
			break
		}
		hi[i] = pe
		pos[pe.slot] = int32(i)<<1 | sideHi
		i = parent
	}
	hi[i] = e
	pos[e.slot] = int32(i)<<1 | sideHi
	return i != start
}

func (w *window) downHi(i int) {
	hi, pos := w.hi, w.pos
	e := hi[i]
	for {
		c := 2*i + 1
		if c >= len(hi) {
			break
		}
		if r := c + 1; r < len(hi) {
			c += b2i(hi[r].v < hi[c].v)
		}
		ce := hi[c]
		if ce.v >= e.v {
			break
		}
		hi[i] = ce
		pos[ce.slot] = int32(i)<<1 | sideHi
		i = c
	}
	hi[i] = e
	pos[e.slot] = int32(i)<<1 | sideHi
}

func (w *window) fixHi(i int) {
	if !w.upHi(i) {
		w.downHi(i)
	}
}

func (w *window) popHi() entry {
	top := w.hi[0]
	last := len(w.hi) - 1
	w.hi[0] = w.hi[last]
	w.hi = w.hi[:last]
	if last > 0 {
		w.downHi(0)
	}
	return top
}

// b2i converts without a branch; see the sifts down.
func b2i(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}
