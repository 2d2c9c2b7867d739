package anomaly

import (
	"slices"
	"strings"
	"sync"
)

var (
	_ Detector = (*Naive)(nil)
	_ Checker  = (*Naive)(nil)
)

// Naive is a reference detector with exactly Median's semantics (verdicts,
// lower median, MaxKeys eviction, counters), computed the obvious way: each
// Observe sorts a copy of the window, O(W log W), and evicting a key scans all
// keys. It exists so tests can check Median against an implementation simple
// enough to be right by inspection, and so benchmarks have a baseline; do not
// use it in the pipeline.
type Naive struct {
	cfg Config
	now func() int64

	mu      sync.Mutex
	keys    map[string]*naiveKey
	seq     uint64  // Observe counter, orders keys by recency
	scratch []int64 // the sorted copy, reused across calls
}

type naiveKey struct {
	ring      []int64 // oldest first
	observed  uint64
	anomalies uint64
	lastSeen  int64
	lastSeq   uint64
}

// NewNaive returns a Naive detector; its arguments mean what they mean for
// NewMedian.
func NewNaive(cfg Config, now func() int64) (*Naive, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = wallClock
	}
	return &Naive{cfg: cfg, now: now, keys: make(map[string]*naiveKey)}, nil
}

// Observe implements Detector.
func (n *Naive) Observe(key string, d int64) Verdict { return n.ObserveAt(key, d, n.now()) }

// Check implements Checker.
func (n *Naive) Check(key string, d int64) Verdict {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := Verdict{Threshold: n.cfg.Threshold}
	if k := n.keys[key]; k != nil && len(k.ring) >= n.cfg.MinFill {
		v.Ready = true
		v.Baseline = n.median(k.ring)
		v.Anomalous = float64(d) > n.cfg.Threshold*float64(v.Baseline)
	}
	return v
}

// ObserveAt implements Detector.
func (n *Naive) ObserveAt(key string, d, now int64) Verdict {
	n.mu.Lock()
	defer n.mu.Unlock()

	k := n.keys[key]
	if k == nil {
		if len(n.keys) >= n.cfg.MaxKeys {
			n.evictOldest()
		}
		k = &naiveKey{}
		n.keys[key] = k
	}
	n.seq++
	k.lastSeq = n.seq

	v := Verdict{Threshold: n.cfg.Threshold}
	if len(k.ring) >= n.cfg.MinFill {
		v.Ready = true
		v.Baseline = n.median(k.ring)
		v.Anomalous = float64(d) > n.cfg.Threshold*float64(v.Baseline)
	}
	if len(k.ring) == n.cfg.Window {
		k.ring = append(k.ring[:0], k.ring[1:]...)
	}
	k.ring = append(k.ring, d)
	k.observed++
	if v.Anomalous {
		k.anomalies++
	}
	k.lastSeen = now
	return v
}

func (n *Naive) evictOldest() {
	var oldest string
	var oldestSeq uint64
	first := true
	for key, k := range n.keys {
		if first || k.lastSeq < oldestSeq {
			oldest, oldestSeq, first = key, k.lastSeq, false
		}
	}
	delete(n.keys, oldest)
}

// median returns the lower median of ring, or 0 when it is empty.
func (n *Naive) median(ring []int64) int64 {
	if len(ring) == 0 {
		return 0
	}
	n.scratch = append(n.scratch[:0], ring...)
	slices.Sort(n.scratch)
	return n.scratch[(len(n.scratch)-1)/2]
}

// State implements Detector.
func (n *Naive) State(key string) (KeyState, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[key]
	if k == nil {
		return KeyState{}, false
	}
	return n.state(key, k), true
}

// States implements Detector.
func (n *Naive) States() []KeyState {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]KeyState, 0, len(n.keys))
	for key, k := range n.keys {
		out = append(out, n.state(key, k))
	}
	slices.SortFunc(out, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (n *Naive) state(key string, k *naiveKey) KeyState {
	return KeyState{
		Key:       key,
		Fill:      len(k.ring),
		Window:    n.cfg.Window,
		Baseline:  n.median(k.ring),
		Threshold: n.cfg.Threshold,
		Observed:  k.observed,
		Anomalies: k.anomalies,
		LastSeen:  k.lastSeen,
	}
}
