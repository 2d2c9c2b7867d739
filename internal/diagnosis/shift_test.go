package diagnosis

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// TestQuantile: the log-binned quantiles are within a bin's width (9 %) of
// the exact ones, over latencies from 0.2 ms to 20 s.
func TestQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, median := range []float64{0.2e6, 3e6, 50e6, 800e6, 20e9} {
		var h hist
		var xs []float64
		for range 5000 {
			x := median * math.Exp(0.4*rng.NormFloat64())
			h.add(int64(x))
			xs = append(xs, x)
		}
		slices.Sort(xs)
		w := func(i int) float64 { return float64(h[i]) }
		for _, p := range []float64{0.5, 0.9} {
			got, want := quantile(w, float64(len(xs)), p), xs[int(p*float64(len(xs)))]
			if math.Abs(got/want-1) > 0.09 {
				t.Errorf("median %.0f ns: p%.0f %.0f, exact %.0f", median, 100*p, got, want)
			}
		}
	}
	if b := binOf(1); b != 0 {
		t.Errorf("1 ns in bin %d", b)
	}
	if b := binOf(math.MaxInt64); b != histBins-1 {
		t.Errorf("MaxInt64 in bin %d", b)
	}
}

// shiftFeed drives a tracker with one entry point's root spans, rate a
// second, none flagged, each second's latencies drawn around median(sec)
// (lognormal, σ 0.15: a healthy service's spread); it steps the rule every
// second as Run would and stores what changed.
type shiftFeed struct {
	t    *testing.T
	tr   *Tracker
	st   store.IncidentStore
	now  time.Time
	n    int
	rng  *rand.Rand
	rate int
}

func newShiftFeed(t *testing.T, cfg Config, rate int) *shiftFeed {
	st := openStore(t)
	tr, err := NewTracker(cfg, st, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &shiftFeed{t: t, tr: tr, st: st, now: t0, rng: rand.New(rand.NewPCG(3, 4)), rate: rate}
	tr.now = func() time.Time { return f.now }
	return f
}

// checkoutRoot is request n's root span of "frontend GET /checkout",
// ending at end (Unix ns), its latency drawn around median ns (lognormal,
// σ 0.15).
func checkoutRoot(n int, end int64, median float64, rng *rand.Rand) *model.Span {
	d := int64(median * math.Exp(0.15*rng.NormFloat64()))
	return &model.Span{TraceID: tid(n), SpanID: sid(n, 0), Service: "frontend", Name: "GET /checkout",
		Kind: model.KindServer, Start: end - d, Duration: d}
}

func (f *shiftFeed) run(seconds int, median func(i int) time.Duration) {
	for i := range seconds {
		var spans []*model.Span
		m := float64(median(i))
		for range f.rate {
			spans = append(spans, checkoutRoot(f.n, f.now.UnixNano(), m, f.rng))
			f.n++
		}
		f.tr.OnCommitted(spans)
		for _, inc := range f.tr.step(f.now) {
			f.tr.put(context.Background(), inc)
		}
		f.now = f.now.Add(time.Second)
	}
}

func (f *shiftFeed) incidents() []Incident {
	l, err := f.st.FindIncidents(context.Background(), store.IncidentQuery{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []Incident
	for _, s := range l {
		inc, err := FromStored(s)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, inc)
	}
	return out
}

func constant(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// TestShiftRule: a sustained slowdown the detector flags nothing of opens an
// incident when the entry's latency moved by MinShift, not when it moved
// less or drifted slowly; it closes once the latency is back.
func TestShiftRule(t *testing.T) {
	cfg := DefaultConfig()
	f := newShiftFeed(t, cfg, 20)
	f.run(120, constant(50*time.Millisecond))
	// +15 %: under MinShift, no incident.
	f.run(60, constant(57500*time.Microsecond))
	f.run(60, constant(50*time.Millisecond))
	// A drift of +40 % over 5 minutes: the baseline follows it.
	f.run(300, func(i int) time.Duration { return time.Duration(50e6 * (1 + 0.4*float64(i)/300)) })
	f.run(120, constant(70*time.Millisecond))
	if l := f.incidents(); len(l) != 0 {
		t.Fatalf("incidents without a shift of %.0f%%: %+v", 100*cfg.MinShift, l)
	}
	// +50 % at once.
	onset := f.now
	f.run(15, constant(105*time.Millisecond))
	l := f.incidents()
	if len(l) != 1 {
		t.Fatalf("%d incidents after a 50 %% shift, want 1", len(l))
	}
	inc := l[0]
	if inc.Trigger != TriggerShift || inc.Shift == nil || inc.State != StateOpen {
		t.Fatalf("incident %+v", inc)
	}
	if opened := time.Unix(0, inc.Opened); opened.Sub(onset) > cfg.ShiftFor+3*time.Second {
		t.Errorf("opened %v after the onset", opened.Sub(onset))
	}
	if d := time.Duration(inc.Start - onset.UnixNano()); d < -time.Second || d > time.Second {
		t.Errorf("start %v from the onset", d)
	}
	// The window that opened it holds ShiftFor of the new latency and the
	// old before it: its 90th percentile has moved, its median less.
	if inc.Shift.BaseP50Ms < 65 || inc.Shift.BaseP50Ms > 75 || inc.Shift.P90Ms < 95 || inc.Shift.P90Ms > 125 || inc.Shift.P50Ms < inc.Shift.BaseP50Ms {
		t.Errorf("shift %+v, want a baseline median near 70 ms and a window's 90th percentile near 105 ms", *inc.Shift)
	}
	if inc.SlowAboveMs != inc.Shift.BaseP90Ms || inc.SlowAboveMs < 70 || inc.SlowAboveMs > 95 {
		t.Errorf("slow above %.1f ms, baseline p90 %.1f ms", inc.SlowAboveMs, inc.Shift.BaseP90Ms)
	}
	// It stays open while the shift lasts, its requests slower than
	// SlowAbove anomalous (all but the opening window's older ones and a
	// few of the new ones); and closes once the latency is back.
	f.run(60, constant(105*time.Millisecond))
	if l = f.incidents(); len(l) != 1 || l[0].State != StateOpen || l[0].Anomalous < l[0].Requests*8/10 {
		t.Fatalf("during the shift: %+v", l)
	}
	f.run(int((cfg.Window+cfg.Quiet)/time.Second)+2, constant(70*time.Millisecond))
	if l = f.incidents(); len(l) != 1 || l[0].State != StateClosed {
		t.Fatalf("after the shift: %+v, want it closed", l)
	}
}

// TestShiftRelearn: a lasting shift (a release that made the entry slower)
// becomes the baseline after relearnBaselines × ShiftBaseline, and its
// incident closes; an entry of too few requests is never judged by it.
func TestShiftRelearn(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ShiftBaseline = 10 * time.Second
	f := newShiftFeed(t, cfg, 10)
	f.run(60, constant(20*time.Millisecond))
	f.run(30, constant(40*time.Millisecond))
	if l := f.incidents(); len(l) != 1 || l[0].State != StateOpen {
		t.Fatalf("after a doubling: %+v, want one open incident", l)
	}
	f.run(int(relearnBaselines*cfg.ShiftBaseline/time.Second)+5*int(cfg.ShiftBaseline/time.Second)+int((cfg.Quiet+cfg.Window)/time.Second), constant(40*time.Millisecond))
	if l := f.incidents(); len(l) != 1 || l[0].State != StateClosed {
		t.Fatalf("after the new latency lasted: %+v, want the incident closed and no other", l)
	}

	few := newShiftFeed(t, cfg, 2) // 20 requests a window: under minShiftRequests
	few.run(120, constant(20*time.Millisecond))
	few.run(60, constant(60*time.Millisecond))
	if l := few.incidents(); len(l) != 0 {
		t.Fatalf("%d incidents at 2 requests a second", len(l))
	}
}

// TestSlowAbove: for an incident a shift opened, the traces slower than its
// SlowAboveMs are the slow ones though the detector flagged none, and the
// ranking names the service whose time grew.
func TestSlowAbove(t *testing.T) {
	var traces [][]*model.Span
	onset := t0.Add(time.Minute)
	for i := range 60 {
		traces = append(traces, shopTrace(i, t0.Add(time.Duration(i)*time.Second), 10, 20, 15, false))
	}
	for i := range 40 {
		cart := 20.0
		if i%4 != 0 {
			cart = 40 // three requests in four through a slower cart
		}
		traces = append(traces, shopTrace(100+i, onset.Add(time.Duration(i)*250*time.Millisecond), 10, cart, 15, false))
	}
	if got := slowTraces(traces, onset.UnixNano(), 0); len(got) != 0 {
		t.Errorf("%d slow traces by flags alone, want 0", len(got))
	}
	if got := slowTraces(traces, onset.UnixNano(), 50*time.Millisecond); len(got) != 30 {
		t.Errorf("%d slow traces over 50 ms, want 30", len(got))
	}
	w := &analysis.Window{From: t0, To: onset.Add(time.Minute), Entry: "frontend", Traces: traces, SlowAbove: 50 * time.Millisecond}
	v := analysis.Analyze(context.Background(), w, nil)
	if v.Service != "cart" || v.SlowTraces != 30 || v.BaseTraces != 61 {
		t.Errorf("verdict %s from %d slow and %d baseline traces, want cart from 30 and 61 (the normal ones before the onset, at the second trace of the shift); evidence %q", v.Service, v.SlowTraces, v.BaseTraces, v.Evidence)
	}
}

// TestShiftVerdictAsksCaptures: the verdict of an open incident a shift
// opened, whose requests the detector flagged none of, compares the traces
// slower than SlowAboveMs with those before, names the service whose time
// grew, and — without kernel paths — lists the culprit's recent slow spans
// for the tracker to ask captures of; the tracker hands them over.
func TestShiftVerdictAsksCaptures(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	byTrace, _, end := shopIncident(t, st, 14, 3, false)
	onset := t0.Add(60 * time.Second)
	now := time.Unix(0, end).Add(time.Second)
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(), Now: func() time.Time { return now },
		Paths: &fakePaths{spans: byTrace, path: func(*model.Span) *critpath.SpanPath { return nil }}}
	inc := &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(),
		Trigger: TriggerShift, SlowAboveMs: 12}
	v, err := d.Diagnose(ctx, inc)
	if err != nil {
		t.Fatal(err)
	}
	if v.Service != "cart" || v.SlowTraces != 30 {
		t.Fatalf("verdict %s from %d slow traces, want cart from 30; evidence %q", v.Service, v.SlowTraces, v.Evidence)
	}
	if len(v.capture) != maxCapture {
		t.Fatalf("%d spans to capture, want %d", len(v.capture), maxCapture)
	}
	for i, s := range v.capture {
		if s.Service != "cart" || s.Kind == model.KindClient || s.IsAnomalous() || (i > 0 && s.Start > v.capture[i-1].Start) {
			t.Fatalf("span %d to capture: %s %s %v (want cart's, unflagged, newest first)", i, s.Service, s.Kind, s.IsAnomalous())
		}
	}
	// Once it closed, nothing to capture.
	closed := *inc
	closed.End = end
	if v, err := d.Diagnose(ctx, &closed); err != nil || len(v.capture) != 0 {
		t.Fatalf("closed incident: %d spans to capture (%v)", len(v.capture), err)
	}

	tr, err := NewTracker(DefaultConfig(), st, d, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var asked []*model.Span
	tr.SetCapture(func(s []*model.Span) int { asked = append(asked, s...); return len(s) })
	tr.verdict(ctx, &tracked{inc: *inc}, now)
	if len(asked) != maxCapture {
		t.Fatalf("the tracker asked captures of %d spans, want %d", len(asked), maxCapture)
	}
}

// TestVerdictRemembersPathTraces: the traces whose paths gave a verdict its
// culprit's are read again by the incident's next verdicts once newer slow
// traces pushed them out of the sample (the newest MaxTraces): the spans a
// verdict asked captures of are no anomalies the stored paths are found
// through, and the cause must not fall back to unknown.
func TestVerdictRemembersPathTraces(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	byTrace, slowCart, end := shopIncident(t, st, 50, 3, false)
	captured := map[model.TraceID]bool{}
	for _, s := range slowCart[:8] { // the oldest slow requests
		captured[s.TraceID] = true
	}
	onset := t0.Add(60 * time.Second)
	d := &Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st}, Config: DefaultConfig(),
		Now: func() time.Time { return time.Unix(0, end).Add(time.Second) },
		Paths: &fakePaths{spans: byTrace, path: func(s *model.Span) *critpath.SpanPath {
			if s.Service == "cart" && s.Kind == model.KindServer && captured[s.TraceID] {
				return segmentsPath(s, critpath.Running, "", 49.0, critpath.Runqueue, "", 1.0, critpath.Network, "", 3.0)
			}
			return nil
		}}}
	inc := &Incident{ID: "x", Entry: "frontend GET /checkout", EntryService: "frontend", Start: onset.UnixNano(),
		Trigger: TriggerShift, SlowAboveMs: 12}
	var vs VerdictState
	for i, tc := range []struct {
		maxTraces int
		state     *VerdictState
		want      string
		paths     int
	}{
		{40, &vs, CauseCPU, 8},     // the sample holds the captured traces
		{10, &vs, CauseCPU, 8},     // it no longer does: remembered
		{10, nil, CauseUnknown, 0}, // without the state
	} {
		d.Config.MaxTraces = tc.maxTraces
		v, err := d.DiagnoseWith(ctx, inc, tc.state)
		if err != nil {
			t.Fatal(err)
		}
		if v.Service != "cart" || v.Cause != tc.want || v.PathSpans != tc.paths {
			t.Fatalf("verdict %d: %s/%s from %d paths, want cart/%s from %d\nevidence: %s\nmissing: %s", i, v.Service, v.Cause, v.PathSpans,
				tc.want, tc.paths, strings.Join(v.Evidence, "\n  "), strings.Join(v.Missing, "\n  "))
		}
	}
}

// TestShiftWindowSooner: a shift of +35 % at 15 requests a second opens its
// incident sooner when the rule judges the window's newest ShiftWindow as
// well (its median moves once most of those seconds are slow, the whole
// window's once most of ten are), and a shift under MinShift opens none
// either way.
func TestShiftWindowSooner(t *testing.T) {
	opensAfter := func(shiftWindow time.Duration, factor float64) time.Duration {
		cfg := DefaultConfig()
		cfg.ShiftWindow = shiftWindow
		f := newShiftFeed(t, cfg, 15)
		f.run(180, constant(60*time.Millisecond))
		onset := f.now
		for range 30 {
			f.run(1, constant(time.Duration(factor*60e6)))
			if l := f.incidents(); len(l) > 0 {
				return time.Unix(0, l[0].Opened).Sub(onset)
			}
		}
		return -1
	}
	whole, short := opensAfter(0, 1.35), opensAfter(5*time.Second, 1.35)
	t.Logf("+35 %%: opened %v after the onset judging the window alone, %v with its newest 5 s", whole, short)
	if whole < 0 || short < 0 || short > whole-time.Second {
		t.Errorf("+35 %%: opened %v after the onset with the newest 5 s, %v without: want at least 1 s sooner", short, whole)
	}
	for _, w := range []time.Duration{0, 5 * time.Second} {
		if d := opensAfter(w, 1.12); d >= 0 {
			t.Errorf("+12 %% (shift window %v): an incident opened %v after the onset", w, d)
		}
	}
}

// TestBinomTail: exact binomial tails, and the edges.
func TestBinomTail(t *testing.T) {
	for _, c := range []struct {
		n, k int
		p    float64
		want float64
	}{
		{10, 8, 0.5, 56.0 / 1024},
		{10, 0, 0.3, 1},
		{10, 11, 0.3, 0},
		{75, 1, 0.1, 1 - math.Pow(0.9, 75)},
		{20, 20, 0.1, 1e-20},
	} {
		if got := binomTail(c.n, c.k, c.p); math.Abs(got-c.want) > 1e-9*max(c.want, 1e-12) && math.Abs(got-c.want) > 1e-15 {
			t.Errorf("P(Bin(%d, %.1f) ≥ %d) = %g, want %g", c.n, c.p, c.k, got, c.want)
		}
	}
}

// TestShiftSure: a window whose 90th percentile sits just over the bar on a
// few slow requests is not a sure shift; one with many requests over it is;
// the bin holding the bar counts in part.
func TestShiftSure(t *testing.T) {
	base := shift{baseP50: 50e6, baseP90: 80e6}
	window := func(n, slow int) *hist {
		var h hist
		for i := range n {
			ns := int64(50e6)
			if i < slow {
				ns = 110e6 // over 1.25 × 80 ms
			}
			h.add(ns)
		}
		return &h
	}
	for _, c := range []struct {
		n, slow int
		want    bool
	}{
		{75, 9, false}, // 12 %: the p90 moved, by chance as likely as not
		{75, 16, true}, // 21 %: P(Bin(75, 0.1) ≥ 16) < 1 %
		{40, 6, false},
		{40, 10, true},
		{300, 45, true}, // 15 % of a larger window
	} {
		s := base
		s.n = c.n
		if got := s.sure(window(c.n, c.slow), 1.25, 0.99); got != c.want {
			t.Errorf("%d of %d requests over the bar: sure %v, want %v", c.slow, c.n, got, c.want)
		}
		if !s.sure(window(c.n, c.slow), 1.25, 0) {
			t.Errorf("confidence 0: not sure")
		}
	}
	var h hist
	for range 10 {
		h.add(100e6)
	}
	lo := binLow(binOf(100e6))
	if got := h.above(lo * 0.99); got != 10 {
		t.Errorf("above a bin's lower edge: %v, want 10", got)
	}
	if got := h.above(lo * math.Exp2(0.5/histPerOctave)); math.Abs(got-5) > 1e-9 {
		t.Errorf("above the middle of their bin: %v, want 5", got)
	}
	if got := h.above(lo * math.Exp2(1.0/histPerOctave)); got != 0 {
		t.Errorf("above their bin: %v, want 0", got)
	}
}

// TestShiftConfidenceNoise: a steady entry with a second of slow requests
// now and then (what a noisy host does) opens incidents on the quantiles
// alone and none with the binomial test, and a +40 % shift still opens one
// within a few seconds of when it would have.
func TestShiftConfidenceNoise(t *testing.T) {
	feed := func(conf float64) *shiftFeed {
		cfg := DefaultConfig()
		cfg.ShiftConfidence = conf
		f := newShiftFeed(t, cfg, 8)
		f.run(120, constant(60*time.Millisecond))
		return f
	}
	bursts := func(conf float64) int {
		f := feed(conf)
		// Ten minutes, every 10 s one second whose latencies are ×1.6:
		// 8 slow requests of a 5-s window's 40, its 90th percentile
		// theirs.
		for i := range 600 {
			m := 60 * time.Millisecond
			if i%10 == 0 {
				m = 96 * time.Millisecond
			}
			f.run(1, constant(m))
		}
		return len(f.incidents())
	}
	opensAfter := func(conf float64) time.Duration {
		f := feed(conf)
		onset := f.now
		for range 20 {
			f.run(1, constant(84*time.Millisecond))
			if l := f.incidents(); len(l) > 0 {
				return time.Unix(0, l[0].Opened).Sub(onset)
			}
		}
		return -1
	}
	n0, n1 := bursts(0), bursts(0.99)
	d0, d1 := opensAfter(0), opensAfter(0.99)
	t.Logf("bursts: %d incidents without the test, %d with it; +40 %%: opened %v and %v after the onset", n0, n1, d0, d1)
	if n0 == 0 || n1 != 0 {
		t.Errorf("bursts: %d incidents without the binomial test, %d with it: want some, then none", n0, n1)
	}
	if d0 < 0 || d1 < 0 || d1 > d0+3*time.Second {
		t.Errorf("+40 %%: opened %v after the onset with the test, %v without", d1, d0)
	}
}
