package anomaly

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// detectors lists the implementations that must behave identically, so that
// the semantic tests pin down Naive as well and the oracle is itself checked.
var detectors = []struct {
	name string
	new  func(Config, func() int64) (Detector, error)
}{
	{"median", func(c Config, now func() int64) (Detector, error) { return NewMedian(c, now) }},
	{"naive", func(c Config, now func() int64) (Detector, error) { return NewNaive(c, now) }},
}

// counterClock returns a fake clock that ticks by one on every reading, so
// LastSeen is deterministic and equal across detectors fed the same calls.
func counterClock() func() int64 {
	var t int64
	return func() int64 { t++; return t }
}

func mustNew(t testing.TB, newDet func(Config, func() int64) (Detector, error), cfg Config) Detector {
	t.Helper()
	d, err := newDet(cfg, counterClock())
	if err != nil {
		t.Fatalf("new detector: %v", err)
	}
	return d
}

// TestFigure53 replays the example of Protractor's Figure 5.3 (the
// Protractor thesis, §5.2.3): window 5, threshold 3. The window first holds
// 62 5 12 34 8 (oldest first, median 12); 43 > 3×12 is anomalous and pushes
// out 62. The sequence then continues until the median is 34, as in the
// figure's second panel, where 90 ≤ 3×34 = 102 is normal and 103 > 102 is
// anomalous.
func TestFigure53(t *testing.T) {
	cfg := Config{Window: 5, Threshold: 3, MinFill: 5, MaxKeys: 10}
	steps := []struct {
		name      string
		d         int64
		ready     bool
		anomalous bool
		baseline  int64 // median compared to; 0 when not ready
		after     int64 // median once d entered; comments show the window, oldest first
	}{
		{"fill 62", 62, false, false, 0, 62},
		{"fill 5", 5, false, false, 0, 5},    // [62 5]: lower middle of 5 62
		{"fill 12", 12, false, false, 0, 12}, // 5 12 62
		{"fill 34", 34, false, false, 0, 12}, // 5 12 34 62: lower middle
		{"fill 8", 8, false, false, 0, 12},   // 5 8 12 34 62: window full
		// Figure 5.3, top: 43 > 36, and 62 leaves: [5 12 34 8 43], median
		// 12. Had 5 left instead, the median after would be 34.
		{"43 > 3×12 anomalous, pushes out 62", 43, true, true, 12, 12},
		{"30 ≤ 3×12 normal", 30, true, false, 12, 30},           // [12 34 8 43 30]
		{"34 ≤ 3×30 normal", 34, true, false, 30, 34},           // [34 8 43 30 34]
		{"20 ≤ 3×34 normal", 20, true, false, 34, 30},           // [8 43 30 34 20]
		{"36 ≤ 3×30 normal", 36, true, false, 30, 34},           // [43 30 34 20 36]
		{"90 ≤ 3×34 = 102 normal", 90, true, false, 34, 34},     // [30 34 20 36 90]
		{"103 > 3×34 = 102 anomalous", 103, true, true, 34, 36}, // [34 20 36 90 103]
		{"108 = 3×36 is not strictly greater", 108, true, false, 36, 90},
	}
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			d := mustNew(t, det.new, cfg)
			var anomalies uint64
			for i, st := range steps {
				got := d.Observe("frontend GET /", st.d)
				want := Verdict{Ready: st.ready, Anomalous: st.anomalous, Baseline: st.baseline, Threshold: 3}
				if got != want {
					t.Fatalf("step %d %q: Observe(%d) = %+v, want %+v", i, st.name, st.d, got, want)
				}
				if st.anomalous {
					anomalies++
				}
				s, ok := d.State("frontend GET /")
				if !ok {
					t.Fatalf("step %d %q: State: key not found", i, st.name)
				}
				wantState := KeyState{
					Key: "frontend GET /", Fill: min(i+1, 5), Window: 5, Baseline: st.after,
					Threshold: 3, Observed: uint64(i + 1), Anomalies: anomalies, LastSeen: int64(i + 1),
				}
				if s != wantState {
					t.Fatalf("step %d %q: State = %+v, want %+v", i, st.name, s, wantState)
				}
			}
		})
	}
}

// TestMinFill checks that nothing is judged, however extreme, until the window
// holds MinFill durations.
func TestMinFill(t *testing.T) {
	durations := []int64{1, 100, 10_000, 1_000_000, 100_000_000, 1}
	for _, tc := range []struct {
		name      string
		minFill   int
		ready     []bool
		anomalous []bool
		baseline  []int64
	}{
		{
			name:      "min fill 1",
			minFill:   1,
			ready:     []bool{false, true, true, true, true, true},
			anomalous: []bool{false, true, true, true, true, false},
			baseline:  []int64{0, 1, 1, 100, 100, 10_000},
		},
		{
			name:      "min fill 3",
			minFill:   3,
			ready:     []bool{false, false, false, true, true, true},
			anomalous: []bool{false, false, false, true, true, false},
			baseline:  []int64{0, 0, 0, 100, 100, 10_000},
		},
		{
			name:      "min fill equals window",
			minFill:   5,
			ready:     []bool{false, false, false, false, false, true},
			anomalous: []bool{false, false, false, false, false, false},
			baseline:  []int64{0, 0, 0, 0, 0, 10_000},
		},
	} {
		for _, det := range detectors {
			t.Run(tc.name+"/"+det.name, func(t *testing.T) {
				d := mustNew(t, det.new, Config{Window: 5, Threshold: 3, MinFill: tc.minFill, MaxKeys: 1})
				for i, dur := range durations {
					got := d.Observe("k", dur)
					want := Verdict{Ready: tc.ready[i], Anomalous: tc.anomalous[i], Baseline: tc.baseline[i], Threshold: 3}
					if got != want {
						t.Errorf("step %d: Observe(%d) = %+v, want %+v", i, dur, got, want)
					}
				}
			})
		}
	}
}

// TestEquivalence feeds Median and Naive the same random stream and requires
// identical verdicts and states. Durations come from a small range so that
// duplicates (and ties with the median) are frequent, with spikes and extreme
// values mixed in; keys are skewed and some configs evict keys constantly.
func TestEquivalence(t *testing.T) {
	const total = 100_000
	ops := total
	if testing.Short() {
		ops = total / 10
	}
	for _, window := range []int{1, 2, 3, 5, 500} {
		for _, tc := range []struct {
			name      string
			threshold float64
			minFill   func(w int) int
			maxKeys   int
		}{
			{"minfill 1", 3, func(int) int { return 1 }, 100},
			{"minfill half", 1.5, func(w int) int { return w/2 + 1 }, 100},
			{"minfill full, evicting", 1, func(w int) int { return w }, 6},
		} {
			cfg := Config{Window: window, Threshold: tc.threshold, MinFill: tc.minFill(window), MaxKeys: tc.maxKeys}
			t.Run(fmt.Sprintf("W=%d/%s", window, tc.name), func(t *testing.T) {
				m := mustNew(t, detectors[0].new, cfg)
				n := mustNew(t, detectors[1].new, cfg)
				rng := rand.New(rand.NewPCG(uint64(window), uint64(tc.maxKeys)))
				keys := []string{"a", "b", "c", "d", "e", "f", "g"}
				var ready, anomalous int
				for i := range ops / 3 {
					// Skewed: low-numbered keys are observed far more often.
					key := keys[min(rng.IntN(len(keys)), rng.IntN(len(keys)))]
					d := randomDuration(rng)
					vm, vn := m.Observe(key, d), n.Observe(key, d)
					if vm.Ready {
						ready++
					}
					if vm.Anomalous {
						anomalous++
					}
					if vm != vn {
						t.Fatalf("op %d: Observe(%q, %d): median %+v, naive %+v", i, key, d, vm, vn)
					}
					if i%997 == 0 {
						compareStates(t, m, n)
					}
				}
				compareStates(t, m, n)
				// Agreeing on nothing but "not ready" would prove little. A short
				// run is too short to fill a window of 500 under eviction.
				if !testing.Short() && (ready == 0 || anomalous == 0 || anomalous == ready) {
					t.Errorf("weak stream: %d ready verdicts, %d anomalous", ready, anomalous)
				}
				t.Logf("%d ready verdicts, %d anomalous", ready, anomalous)
			})
		}
	}
}

func randomDuration(rng *rand.Rand) int64 {
	switch r := rng.IntN(100); {
	case r < 80:
		return int64(rng.IntN(20)) // many duplicates and exact ties
	case r < 95:
		return int64(rng.IntN(200)) // spikes
	case r < 98:
		return rng.Int64N(1 << 40)
	case r < 99:
		return -int64(rng.IntN(5)) // clock skew can give negative durations
	default:
		return []int64{0, math.MaxInt64, math.MinInt64}[rng.IntN(3)]
	}
}

func compareStates(t *testing.T, m, n Detector) {
	t.Helper()
	sm, sn := m.States(), n.States()
	if !slices.Equal(sm, sn) {
		t.Fatalf("States differ:\nmedian %+v\nnaive  %+v", sm, sn)
	}
	if med, ok := m.(*Median); ok {
		med.mu.Lock()
		defer med.mu.Unlock()
		for _, w := range med.keys {
			if err := w.check(); err != nil {
				t.Fatalf("key %q: %v", w.key, err)
			}
		}
	}
}

// check verifies the window's heap invariants, so that a broken heap is caught
// where it breaks rather than by a median that happens to differ later.
func (w *window) check() error {
	if len(w.lo)+len(w.hi) != len(w.pos) {
		return fmt.Errorf("sizes: lo %d hi %d pos %d", len(w.lo), len(w.hi), len(w.pos))
	}
	if len(w.lo) < len(w.hi) || len(w.lo) > len(w.hi)+1 {
		return fmt.Errorf("unbalanced: lo %d hi %d", len(w.lo), len(w.hi))
	}
	for i, e := range w.lo {
		if w.pos[e.slot] != int32(i)<<1|sideLo {
			return fmt.Errorf("lo[%d] holds slot %d, but pos says %d", i, e.slot, w.pos[e.slot])
		}
		if i > 0 && w.lo[(i-1)/2].v < e.v {
			return fmt.Errorf("lo is not a max-heap at %d", i)
		}
	}
	for i, e := range w.hi {
		if w.pos[e.slot] != int32(i)<<1|sideHi {
			return fmt.Errorf("hi[%d] holds slot %d, but pos says %d", i, e.slot, w.pos[e.slot])
		}
		if i > 0 && w.hi[(i-1)/2].v > e.v {
			return fmt.Errorf("hi is not a min-heap at %d", i)
		}
	}
	if len(w.hi) > 0 && w.lo[0].v > w.hi[0].v {
		return fmt.Errorf("lo top %d > hi top %d", w.lo[0].v, w.hi[0].v)
	}
	return nil
}

// TestMaxKeys checks that the least recently observed key is forgotten, that
// reading a key's state does not count as observing it, and that a forgotten
// key starts afresh.
func TestMaxKeys(t *testing.T) {
	cfg := Config{Window: 3, Threshold: 3, MinFill: 1, MaxKeys: 2}
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			d := mustNew(t, det.new, cfg)
			for _, st := range []struct {
				observe string // "" only reads state
				read    string
				want    []string // tracked keys after the step, sorted
			}{
				{observe: "a", want: []string{"a"}},
				{observe: "b", want: []string{"a", "b"}},
				{observe: "a", want: []string{"a", "b"}},
				{observe: "c", want: []string{"a", "c"}}, // b is least recent
				{read: "a", want: []string{"a", "c"}},    // reading does not refresh a
				{observe: "b", want: []string{"b", "c"}}, // so a goes
				{observe: "b", want: []string{"b", "c"}},
				{observe: "d", want: []string{"b", "d"}},
			} {
				if st.observe != "" {
					d.Observe(st.observe, 10)
				} else {
					d.State(st.read)
				}
				var got []string
				for _, s := range d.States() {
					got = append(got, s.Key)
				}
				if !slices.Equal(got, st.want) {
					t.Fatalf("after observe %q / read %q: keys %v, want %v", st.observe, st.read, got, st.want)
				}
			}
			// b was observed twice since it came back; its first life is gone.
			if s, _ := d.State("b"); s.Observed != 2 || s.Fill != 2 {
				t.Errorf("State(b) = %+v, want Observed 2, Fill 2", s)
			}
			if s, _ := d.State("d"); s.Observed != 1 || s.Fill != 1 || s.Anomalies != 0 {
				t.Errorf("State(d) = %+v, want a fresh key", s)
			}
		})
	}
}

func TestStates(t *testing.T) {
	cfg := Config{Window: 4, Threshold: 2, MinFill: 2, MaxKeys: 100}
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			d := mustNew(t, det.new, cfg)
			if got := d.States(); len(got) != 0 {
				t.Errorf("States of an empty detector = %v, want none", got)
			}
			keys := []string{"svc-b op", "svc-a op", "svc-c", "svc-a", "Svc-z"}
			for i, k := range keys {
				for j := range i + 1 {
					d.Observe(k, int64(10*(j+1)))
				}
			}
			states := d.States()
			if len(states) != len(keys) {
				t.Fatalf("States returned %d keys, want %d", len(states), len(keys))
			}
			if !slices.IsSortedFunc(states, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) }) {
				t.Errorf("States not sorted by key: %+v", states)
			}
			for _, s := range states {
				one, ok := d.State(s.Key)
				if !ok || one != s {
					t.Errorf("State(%q) = %+v, %v; States has %+v", s.Key, one, ok, s)
				}
			}
			// "svc-c" saw 10 20 30: 30 > 2×10, the lower median of 10 20,
			// and the median is now 20.
			if s, _ := d.State("svc-c"); s.Baseline != 20 || s.Fill != 3 || s.Window != 4 || s.Observed != 3 || s.Anomalies != 1 {
				t.Errorf("State(svc-c) = %+v", s)
			}
			if s, ok := d.State("unknown"); ok || s != (KeyState{}) {
				t.Errorf("State(unknown) = %+v, %v; want zero, false", s, ok)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(*Config)) Config { c := def; f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none means valid
	}{
		{"default", def, nil},
		{"smallest", Config{Window: 1, Threshold: 0.001, MinFill: 1, MaxKeys: 1}, nil},
		{"zero window", with(func(c *Config) { c.Window, c.MinFill = 0, 0 }), []string{"window must be between 1 and", "got 0"}},
		{"huge window", with(func(c *Config) { c.Window = maxWindow + 1 }), []string{"window must be between 1 and"}},
		{"zero threshold", with(func(c *Config) { c.Threshold = 0 }), []string{"threshold must be a finite number > 0, got 0"}},
		{"negative threshold", with(func(c *Config) { c.Threshold = -3 }), []string{"threshold", "got -3"}},
		{"NaN threshold", with(func(c *Config) { c.Threshold = math.NaN() }), []string{"threshold", "NaN"}},
		{"infinite threshold", with(func(c *Config) { c.Threshold = math.Inf(1) }), []string{"threshold", "+Inf"}},
		{"zero min fill", with(func(c *Config) { c.MinFill = 0 }), []string{"min_fill must be between 1 and window (500), got 0"}},
		{"min fill above window", with(func(c *Config) { c.MinFill = 501 }), []string{"min_fill", "got 501"}},
		{"zero max keys", with(func(c *Config) { c.MaxKeys = 0 }), []string{"max_keys must be ≥ 1, got 0"}},
		{"all wrong at once", Config{}, []string{"window", "threshold", "min_fill", "max_keys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			for _, det := range detectors {
				if _, err := det.new(tc.cfg, nil); err == nil {
					t.Errorf("%s: constructor accepted an invalid config", det.name)
				}
			}
		})
	}
}

// TestWallClock checks that a nil clock falls back to the wall clock.
func TestWallClock(t *testing.T) {
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			d, err := det.new(DefaultConfig(), nil)
			if err != nil {
				t.Fatal(err)
			}
			before := wallClock()
			d.Observe("k", 1)
			if s, _ := d.State("k"); s.LastSeen < before || s.LastSeen > wallClock() {
				t.Errorf("LastSeen = %d, want between %d and now", s.LastSeen, before)
			}
		})
	}
}

// TestSteadyStateAllocs holds Median to zero allocations per Observe once the
// keys' windows are full, including when keys churn through MaxKeys, since the
// pipeline calls it for every span.
func TestSteadyStateAllocs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    int
		maxKeys int
	}{
		{"one key", 1, 10},
		{"many keys", 50, 100},
		{"keys churning", 20, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Window: 64, Threshold: 3, MinFill: 8, MaxKeys: tc.maxKeys}
			m, err := NewMedian(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, tc.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%d", i)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			i := 0
			observe := func() {
				m.Observe(keys[i%len(keys)], randomDuration(rng))
				i++
			}
			// Fill every window, and let any map growth happen, first.
			for range 4 * cfg.Window * tc.keys {
				observe()
			}
			if a := testing.AllocsPerRun(10_000, observe); a != 0 {
				t.Errorf("Observe allocates %v times per call, want 0", a)
			}
		})
	}
}

// TestConcurrent lets the race detector check the locking: one goroutine
// observes, as the pipeline does, while others read as the API does.
func TestConcurrent(t *testing.T) {
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			d := mustNew(t, det.new, Config{Window: 50, Threshold: 3, MinFill: 5, MaxKeys: 8})
			var wg sync.WaitGroup
			done := make(chan struct{})
			for range 2 {
				wg.Go(func() {
					for {
						select {
						case <-done:
							return
						default:
						}
						for _, s := range d.States() {
							d.State(s.Key)
						}
					}
				})
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range 20_000 {
				d.Observe(fmt.Sprintf("k%d", i%10), randomDuration(rng))
			}
			close(done)
			wg.Wait()
		})
	}
}

func TestObserveAtRecordsGivenTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(Config) (Detector, error)
	}{
		{"median", func(c Config) (Detector, error) { return NewMedian(c, func() int64 { return -1 }) }},
		{"naive", func(c Config) (Detector, error) { return NewNaive(c, func() int64 { return -1 }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			det, err := tc.new(Config{Window: 5, Threshold: 3, MinFill: 2, MaxKeys: 4})
			if err != nil {
				t.Fatal(err)
			}
			det.ObserveAt("k", 10, 100)
			det.ObserveAt("k", 10, 200)
			v := det.ObserveAt("k", 31, 300)
			st, _ := det.State("k")
			if !v.Anomalous || v.Baseline != 10 || st.LastSeen != 300 || st.Observed != 3 {
				t.Fatalf("verdict %+v state %+v", v, st)
			}
		})
	}
}

// TestCheck: Check gives the verdict ObserveAt would give and changes
// nothing — the window, the counters, LastSeen and the keys' recency (the
// key evicted next stays the same).
func TestCheck(t *testing.T) {
	for _, det := range detectors {
		t.Run(det.name, func(t *testing.T) {
			cfg := Config{Window: 5, Threshold: 3, MinFill: 3, MaxKeys: 2}
			d := mustNew(t, det.new, cfg)
			c, ok := d.(Checker)
			if !ok {
				t.Fatalf("%s does not implement Checker", det.name)
			}
			if v := c.Check("new", 1e9); v.Ready || v.Anomalous {
				t.Fatalf("Check of an unknown key = %+v, want not ready", v)
			}
			if _, ok := d.State("new"); ok {
				t.Fatal("Check registered a key")
			}
			for _, ms := range []int64{10, 12, 11} {
				d.Observe("old", ms*1e6)
			}
			d.Observe("young", 5e6)
			before := d.States()
			for _, tc := range []struct {
				d    int64
				want bool
			}{{33e6, false}, {34e6, true}, {1e6, false}} {
				v := c.Check("old", tc.d)
				if !v.Ready || v.Anomalous != tc.want || v.Baseline != 11e6 || v.Threshold != 3 {
					t.Errorf("Check(old, %d) = %+v, want ready, anomalous %v, baseline 11 ms", tc.d, v, tc.want)
				}
			}
			if after := d.States(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("Check changed the state:\n before %+v\n after  %+v", before, after)
			}
			// "old" is still the least recently observed key: a third key evicts it.
			d.Observe("third", 1e6)
			if _, ok := d.State("old"); ok {
				t.Error("Check made its key recent: the third key evicted another")
			}
			if _, ok := d.State("young"); !ok {
				t.Error("the third key evicted the recently observed one")
			}
		})
	}
}
