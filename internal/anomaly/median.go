package anomaly

import (
	"slices"
	"strings"
	"sync"
	"time"
)

var (
	_ Detector = (*Median)(nil)
	_ Checker  = (*Median)(nil)
)

// Median is Protractor's sliding-window median detector (its thesis, §5.2.3,
// Figure 5.3): a duration is anomalous when it exceeds Threshold × the median
// of its key's last Window durations, taken before the duration enters.
//
// The median of an even-sized window is its lower middle element, not the
// mean of the two middle ones: it is then always a duration that was actually
// observed, so the Baseline reported with a verdict can be found among the
// key's spans, and no averaging (with its rounding of odd sums) is involved.
//
// Each Observe costs O(log W) and, once a key's window is full, allocates
// nothing. Median is safe for concurrent use; a single mutex guards it because
// the pipeline observes from one goroutine and the API reads rarely.
type Median struct {
	cfg Config
	now func() int64

	mu   sync.Mutex
	keys map[string]*window
	// lru is the sentinel of a circular list of windows: lru.next is the
	// most recently observed key, lru.prev the least recently observed one.
	lru window
}

// NewMedian returns a Median detector. now gives the Unix time in ns recorded
// as a key's LastSeen; nil means the wall clock. Tests pass a fake clock.
func NewMedian(cfg Config, now func() int64) (*Median, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = wallClock
	}
	m := &Median{cfg: cfg, now: now, keys: make(map[string]*window)}
	m.lru.next, m.lru.prev = &m.lru, &m.lru
	return m, nil
}

func wallClock() int64 { return time.Now().UnixNano() }

// Observe implements Detector. The key is retained while it is tracked.
func (m *Median) Observe(key string, d int64) Verdict {
	// Read the clock outside the lock to keep the critical section short.
	return m.ObserveAt(key, d, m.now())
}

// ObserveAt implements Detector.
func (m *Median) ObserveAt(key string, d, now int64) Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()

	w := m.keys[key]
	switch {
	case w == nil:
		w = m.newWindow(key)
		m.pushFront(w)
	case m.lru.next != w: // a hot key is usually at the front already
		m.unlink(w)
		m.pushFront(w)
	}

	v := m.judge(w, d)
	w.add(d, m.cfg.Window)
	w.observed++
	if v.Anomalous {
		w.anomalies++
	}
	w.lastSeen = now
	return v
}

// Check implements Checker.
func (m *Median) Check(key string, d int64) Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.judge(m.keys[key], d)
}

// judge is the verdict on d against window w (nil: an unknown key), before
// d enters it.
func (m *Median) judge(w *window, d int64) Verdict {
	v := Verdict{Threshold: m.cfg.Threshold}
	if w != nil && w.fill() >= m.cfg.MinFill {
		v.Ready = true
		v.Baseline = w.median()
		v.Anomalous = float64(d) > m.cfg.Threshold*float64(v.Baseline)
	}
	return v
}

// newWindow registers a window for key, which is not tracked yet. When MaxKeys
// are tracked it forgets the least recently observed key and reuses its
// window, so that churning keys do not allocate. The caller links the window.
func (m *Median) newWindow(key string) *window {
	var w *window
	if len(m.keys) >= m.cfg.MaxKeys {
		w = m.lru.prev
		m.unlink(w)
		delete(m.keys, w.key)
		w.reset(key)
	} else {
		// Buffers grow with the window rather than being sized to W up
		// front, so that rare keys cost memory in proportion to their use.
		w = &window{key: key}
	}
	m.keys[key] = w
	return w
}

func (m *Median) unlink(w *window) {
	w.prev.next = w.next
	w.next.prev = w.prev
	w.prev, w.next = nil, nil
}

func (m *Median) pushFront(w *window) {
	w.prev = &m.lru
	w.next = m.lru.next
	m.lru.next.prev = w
	m.lru.next = w
}

// State implements Detector.
func (m *Median) State(key string) (KeyState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.keys[key]
	if w == nil {
		return KeyState{}, false
	}
	return m.state(w), true
}

// States implements Detector. The slice is newly allocated and owned by the
// caller.
func (m *Median) States() []KeyState {
	m.mu.Lock()
	out := make([]KeyState, 0, len(m.keys))
	for _, w := range m.keys {
		out = append(out, m.state(w))
	}
	m.mu.Unlock()
	// Sorting outside the lock keeps the pipeline from waiting on the API.
	slices.SortFunc(out, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (m *Median) state(w *window) KeyState {
	return KeyState{
		Key:       w.key,
		Fill:      w.fill(),
		Window:    m.cfg.Window,
		Baseline:  w.median(),
		Threshold: m.cfg.Threshold,
		Observed:  w.observed,
		Anomalies: w.anomalies,
		LastSeen:  w.lastSeen,
	}
}
