package analysis

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// shiftTraces builds n traces of an entry a that calls b then j, one every
// 50 ms from start: b's own time is 3 ms (+bExtra), j's 9 ms, each with
// noise; spike[i] adds 40 ms to j's in trace i and flags it anomalous, as
// the detector flags a request far over its operation's median.
func shiftTraces(rng *rand.Rand, first byte, n int, start time.Time, bExtra float64, spike map[int]bool) [][]*model.Span {
	ms := func(x float64) int64 { return int64(x * float64(time.Millisecond)) }
	var out [][]*model.Span
	for i := range n {
		id := model.TraceID{0: first, 14: byte(i >> 8), 15: byte(i)}
		t0 := start.Add(time.Duration(i) * 50 * time.Millisecond).UnixNano()
		b := 3 + bExtra + rng.NormFloat64()*0.5
		j := 9 + rng.NormFloat64()*1.5
		if spike[i] {
			j += 40
		}
		mk := func(sp, parent byte, svc string, kind model.SpanKind, at, dur int64) *model.Span {
			return &model.Span{TraceID: id, SpanID: sid(sp), ParentSpanID: sid(parent), Service: svc, Kind: kind, Start: t0 + at, Duration: dur}
		}
		bEnd := ms(2) + ms(b) + ms(1)
		root := mk(1, 0, "a", model.KindServer, 0, bEnd+ms(j)+ms(4))
		spans := []*model.Span{root,
			mk(2, 1, "a", model.KindClient, ms(1), ms(b)+ms(1)),
			mk(3, 2, "b", model.KindServer, ms(1.5), ms(b)),
			mk(4, 1, "a", model.KindClient, bEnd, ms(j)+ms(1)),
			mk(5, 4, "j", model.KindServer, bEnd+ms(0.5), ms(j)),
		}
		if spike[i] {
			spans[4].SetAttr(model.Bool(model.AttrAnomaly, true))
			root.SetAttr(model.Bool(model.AttrAnomaly, true))
		}
		out = append(out, spans)
	}
	return out
}

// A service whose latency moved as a whole by less than the detector's
// threshold is named by the comparison of every trace since the onset with
// every trace before it, whatever a few anomalous traces say; a slowdown of
// a few requests is left to the anomalous traces.
func TestShiftComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	onset := time.Unix(1_800_000_000, 0)
	before := shiftTraces(rng, 1, 200, onset.Add(-10*time.Second), 0, nil)
	// After the onset b takes 8 ms more in every request; three requests
	// (j's noise) are flagged anomalous.
	after := shiftTraces(rng, 2, 400, onset, 8, map[int]bool{5: true, 50: true, 120: true})
	w := &Window{From: onset.Add(-10 * time.Second), To: onset.Add(22 * time.Second), Entry: "a", Traces: append(before, after...)}

	v := Analyze(context.Background(), w, nil)
	if v.Service != "j" {
		t.Fatalf("without an onset the anomalous traces name %q, want j (this test's premise)", v.Service)
	}

	w.Onset = onset
	v = Analyze(context.Background(), w, nil)
	if v.Service != "b" || v.Ranking[0].SelfDeltaMs < 7 || v.Ranking[0].SelfDeltaMs > 9 {
		t.Fatalf("with the onset: %s %+v, want b grown by about 8 ms\n%s", v.Service, v.Ranking[:2], strings.Join(v.Evidence, "\n"))
	}
	if !strings.Contains(v.Evidence[0], "first 15s (") || !strings.Contains(v.Evidence[0], "would name j") {
		t.Errorf("evidence %q: want the comparison described and the anomalous traces' other culprit", v.Evidence[0])
	}
	// Only the traces of the first ShiftSpan count, and only those whose
	// root span ended shiftSettle before To.
	shift := compareShift(built(w), w)
	if got, want := len(shift.after), int(ShiftSpan/(50*time.Millisecond)); got != want {
		t.Errorf("%d traces after the onset compared, want %d (the first %s)", got, want, ShiftSpan)
	}
	w.To = onset.Add(5 * time.Second)
	if shift = compareShift(built(w), w); len(shift.after) > int((5*time.Second-shiftSettle)/(50*time.Millisecond)) {
		t.Errorf("%d traces compared with To 5 s after the onset: the last %s of them may lack spans", len(shift.after), shiftSettle)
	}

	// Three requests 40 ms slower in j and nothing else: no significant
	// shift of the means, so the anomalous traces are compared.
	rng = rand.New(rand.NewPCG(3, 4))
	w = &Window{From: onset.Add(-10 * time.Second), To: onset.Add(20 * time.Second), Entry: "a", Onset: onset,
		Traces: append(shiftTraces(rng, 1, 200, onset.Add(-10*time.Second), 0, nil), shiftTraces(rng, 2, 200, onset, 0, map[int]bool{5: true, 50: true, 120: true})...)}
	if shift := compareShift(built(w), w); shift != nil {
		t.Errorf("three slow requests made a significant shift: %+v (t %.1f)", shift.ranking[0], shift.t)
	}
	if v := Analyze(context.Background(), w, nil); v.Service != "j" || strings.Contains(strings.Join(v.Evidence, "\n"), "first 15s") {
		t.Errorf("three slow requests in j: %s, evidence %q", v.Service, v.Evidence)
	}
}

// built is w's traces as Analyze builds them.
func built(w *Window) []*trace {
	var out []*trace
	for _, spans := range w.Traces {
		out = append(out, newTrace(spans))
	}
	sortByStart(out)
	return out
}

// traceSource is a Source over traces held in memory (no artifacts, no
// capture log).
type traceSource [][]*model.Span

func (s traceSource) ArtifactContent(context.Context, string) (io.ReadCloser, error) {
	return nil, store.ErrNotFound
}

func (s traceSource) Anomalies(_ context.Context, since time.Time, limit int) ([]Anomaly, error) {
	var out []Anomaly
	for _, t := range s {
		for _, sp := range t {
			if sp.IsAnomalous() && sp.Start >= since.UnixNano() {
				out = append(out, Anomaly{Span: sp})
			}
		}
	}
	slices.SortFunc(out, func(x, y Anomaly) int { return cmp.Compare(y.Span.Start, x.Span.Start) })
	return out[:min(len(out), limit)], nil
}

func (s traceSource) Trace(_ context.Context, id model.TraceID) ([]*model.Span, error) {
	for _, t := range s {
		if t[0].TraceID == id {
			return t, nil
		}
	}
	return nil, fmt.Errorf("trace %s: %w", id, store.ErrNotFound)
}

func (s traceSource) Services(context.Context) ([]string, error) { return []string{"a", "b", "j"}, nil }

func (s traceSource) SearchTraces(_ context.Context, service string, from, to time.Time, limit int) ([][]*model.Span, error) {
	var out [][]*model.Span
	for i := len(s) - 1; i >= 0 && len(out) < limit; i-- {
		if st := s[i][0].Start; st >= from.UnixNano() && st <= to.UnixNano() {
			out = append(out, s[i])
		}
	}
	return out, nil
}

func (s traceSource) Captures(context.Context, int) ([]Capture, error) { return nil, nil }

// DiagnoseSince, given when the slowdown began, ranks the traces since it
// against those before it, as an incident's verdict does.
func TestDiagnoseSince(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// Collect reads no further than now.
	onset := time.Now().Add(-time.Minute).Truncate(time.Second)
	src := traceSource(append(shiftTraces(rng, 1, 200, onset.Add(-10*time.Second), 0, nil),
		shiftTraces(rng, 2, 400, onset, 8, map[int]bool{5: true, 50: true, 120: true})...))
	from, to := onset.Add(-10*time.Second), onset.Add(22*time.Second)
	if v, err := Diagnose(context.Background(), src, from, to); err != nil || v.Service != "j" {
		t.Fatalf("Diagnose: %s, %v; want j from the anomalous traces (this test's premise)", v.Service, err)
	}
	v, err := DiagnoseSince(context.Background(), src, from, onset, to)
	if err != nil || v.Service != "b" {
		t.Fatalf("DiagnoseSince: %s, %v, want b\n%s", v.Service, err, strings.Join(v.Evidence, "\n"))
	}
}

// fanTraces builds n traces of an entry a that calls s0, s1, … in turn,
// one every 50 ms from start: each callee's own time is 3 ms + extra[i],
// with noise.
func fanTraces(rng *rand.Rand, first byte, n int, start time.Time, extra []float64) [][]*model.Span {
	ms := func(x float64) int64 { return int64(x * float64(time.Millisecond)) }
	var out [][]*model.Span
	for i := range n {
		id := model.TraceID{0: first, 14: byte(i >> 8), 15: byte(i)}
		t0 := start.Add(time.Duration(i) * 50 * time.Millisecond).UnixNano()
		root := &model.Span{TraceID: id, SpanID: sid(1), Service: "a", Kind: model.KindServer, Start: t0}
		spans := []*model.Span{root}
		at := ms(1)
		for k, x := range extra {
			d := ms(3 + x + rng.NormFloat64()*0.3)
			cl := &model.Span{TraceID: id, SpanID: sid(byte(2 + 2*k)), ParentSpanID: sid(1), Service: "a", Kind: model.KindClient, Start: t0 + at, Duration: d + ms(1)}
			sv := &model.Span{TraceID: id, SpanID: sid(byte(3 + 2*k)), ParentSpanID: cl.SpanID, Service: fmt.Sprintf("s%d", k), Kind: model.KindServer, Start: t0 + at + ms(0.5), Duration: d}
			spans = append(spans, cl, sv)
			at += d + ms(1.5)
		}
		root.Duration = at + ms(1)
		out = append(out, spans)
	}
	return out
}

// TestShiftComparisonSpread: a slowdown spread over many services, none of
// which holds a quarter of the growth, localises nothing however
// significant each growth is; one that holds most of it stands.
func TestShiftComparisonSpread(t *testing.T) {
	onset := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name  string
		extra []float64
		want  string // "" for no comparison
	}{
		{"spread over six services", []float64{1.2, 1, 1, 1, 1, 1}, ""},
		{"one service's", []float64{3, 0.3, 0.3, 0.3, 0.3, 0.3}, "s0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			w := &Window{From: onset.Add(-10 * time.Second), To: onset.Add(20 * time.Second), Entry: "a", Onset: onset,
				Traces: append(fanTraces(rng, 1, 200, onset.Add(-10*time.Second), make([]float64, len(tc.extra))), fanTraces(rng, 2, 300, onset, tc.extra)...)}
			shift := compareShift(built(w), w)
			switch {
			case tc.want == "" && shift != nil:
				t.Errorf("compared: %s +%.2f ms of %+v (t %.1f), want no comparison", shift.ranking[0].Service, shift.ranking[0].Score, shift.ranking, shift.t)
			case tc.want != "" && (shift == nil || shift.ranking[0].Service != tc.want):
				t.Errorf("comparison %+v, want %s", shift, tc.want)
			case shift != nil && shift.t < shiftMinT:
				t.Errorf("t %.1f", shift.t)
			}
		})
	}
}

// ServiceGrowth measures what a change at the onset added to one service's
// time per request against every trace before it, whatever the anomalies
// say: b's 8 ms is found and significant; j, unchanged but for three
// anomalous spikes, grew within the traces' spread; too few traces on one
// side is an error.
func TestServiceGrowth(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	onset := time.Now().Add(-time.Minute).Truncate(time.Second)
	src := traceSource(append(shiftTraces(rng, 1, 200, onset.Add(-10*time.Second), 0, nil),
		shiftTraces(rng, 2, 400, onset, 8, map[int]bool{5: true, 50: true, 120: true})...))
	from, to := onset.Add(-10*time.Second), onset.Add(22*time.Second)
	g, err := ServiceGrowth(context.Background(), src, "b", from, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	if g.Entry != "a" || g.Before < 190 || g.After < 390 || g.Score < 7.5 || g.Score > 8.5 || g.T < 20 {
		t.Errorf("b: %+v; want entry a, 200 traces before, ~400 after, +8 ms, significant", g)
	}
	// The entry's median: 2 + 3 + 1 + 9 + 4 ms before, 8 ms more after.
	if g.EntryBaseMs < 18 || g.EntryBaseMs > 20 || g.EntryAfterMs < 26 || g.EntryAfterMs > 28 {
		t.Errorf("entry medians %.1f → %.1f ms, want ~19 → ~27", g.EntryBaseMs, g.EntryAfterMs)
	}
	j, err := ServiceGrowth(context.Background(), src, "j", from, onset, to)
	if err != nil {
		t.Fatal(err)
	}
	if j.Score > 1 || j.T > 3 {
		t.Errorf("j: %+v; want under 1 ms (three 40-ms spikes over ~400 traces) and within the spread", j)
	}
	if _, err := ServiceGrowth(context.Background(), src, "b", from, onset.Add(-9500*time.Millisecond), to); err == nil ||
		!strings.Contains(err.Error(), "20 needed on each side") {
		t.Errorf("too few traces before the onset: %v", err)
	}
}
