package analysis

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// Analyze diagnoses the window w. With w.Onset set (an incident's start),
// every trace since the onset is compared with every trace before it, when
// that comparison names a service significantly (compareShift). Otherwise
// slow traces are the anomalous ones after the onset of the slowdown — the
// point after which the share of traces with an anomalous span
// (rootline.anomaly) rises most — and baseline traces the normal ones before
// it (all normal ones if too few); when the detector flagged fewer than three
// traces, the slowest tenth stands in for the slow ones. Each service's
// exclusive time per trace (span durations minus their children's), the time
// calls into it spent outside it (rootline.wait.net_ms) and its run-queue
// wait (rootline.wait.local_ms) are compared between the two sets; the
// service whose time grew most is the culprit. The cause comes
// from which of those grew, and for a growth of exclusive time from what ex
// measured of the culprit's slow spans (nil: nothing measured).
func Analyze(ctx context.Context, w *Window, ex Explainer) Verdict {
	v := Verdict{Cause: CauseNone}
	if w.Entry == "" && len(w.Traces) == 0 {
		v.Evidence = append(v.Evidence, "no traces between "+w.From.Format(time.RFC3339)+" and "+w.To.Format(time.RFC3339))
		return v
	}
	all := make([]*trace, 0, len(w.Traces))
	for _, spans := range w.Traces {
		t := newTrace(spans)
		t.over = w.SlowAbove > 0 && t.duration() > int64(w.SlowAbove)
		all = append(all, t)
	}
	sortByStart(all)
	anoms := w.Anomalies

	slow, base, onset, fallback := split(all)
	v.SlowTraces, v.BaseTraces = len(slow), len(base)
	shift := compareShift(all, w)
	if shift == nil && (len(slow) == 0 || len(base) == 0) {
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d slow and %d baseline traces among %d: nothing to compare", len(slow), len(base), len(all)))
		return v
	}

	if shift != nil {
		v.Ranking = shift.ranking
		if len(slow) > 0 && len(base) > 0 {
			if a := rank(slow, base)[0]; a.Service != v.Ranking[0].Service && a.Score > 0 {
				shift.anomalous, shift.anomalousScore = a.Service, a.Score
			}
		}
	} else {
		v.Ranking = rank(slow, base)
	}
	top := v.Ranking[0]
	switch {
	case shift != nil:
		v.Evidence = append(v.Evidence, shift.describe(len(anoms)))
	case fallback:
		v.Evidence = append(v.Evidence, fmt.Sprintf("the detector flagged %d anomalous spans: comparing the slowest %d of %d traces with the others", len(anoms), len(slow), len(all)))
	case onset > 0:
		v.Evidence = append(v.Evidence, fmt.Sprintf("anomalies surge from %s: %d anomalous traces since then compared with %d normal traces before (of %d sampled; %d anomalous spans in the window)",
			time.Unix(0, onset).UTC().Format("15:04:05.000"), len(slow), len(base), len(all), len(anoms)))
	default:
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d anomalous traces compared with %d normal ones (of %d sampled; %d anomalous spans in the window)", len(slow), len(base), len(all), len(anoms)))
	}
	if w.SlowAbove > 0 {
		v.Evidence = append(v.Evidence, fmt.Sprintf("a trace counts as anomalous also when its root span took more than %.1f ms (the entry point's 90th percentile before its latency shifted)", ms(float64(w.SlowAbove))))
	}
	clamped := 0
	for _, t := range all {
		clamped += t.clamped
	}
	if clamped > 0 {
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d server spans outlasted the call that made them and were cut to it", clamped))
	}

	if top.Score <= 0 {
		v.Evidence = append(v.Evidence, "no service spent more time in slow traces than in baseline ones")
		return v
	}
	v.Service = top.Service
	second := 0.0
	if len(v.Ranking) > 1 {
		second = max(v.Ranking[1].Score, 0)
	}
	margin := (top.Score - second) / top.Score
	switch {
	case shift != nil:
		v.Confidence = margin * math.Min(1, float64(len(shift.after))/minShiftTraces) * math.Min(1, float64(len(shift.before))/minShiftTraces)
	default:
		v.Confidence = margin * math.Min(1, float64(len(slow))/5) * math.Min(1, float64(len(base))/20)
		if fallback {
			v.Confidence *= 0.7
		}
	}
	v.Confidence = round2(v.Confidence)

	v.Evidence = append(v.Evidence, fmt.Sprintf("%s: exclusive time %+.1f ms per trace (%.1f → %.1f ms), calls into it %+.1f ms outside it, run-queue wait %+.1f ms, %d anomalous spans",
		top.Service, top.SelfDeltaMs, top.SelfBaseMs, top.SelfSlowMs, top.NetDeltaMs, top.LocalDeltaMs, top.Anomalies))
	if len(v.Ranking) > 1 {
		n := v.Ranking[1]
		v.Evidence = append(v.Evidence, fmt.Sprintf("next suspect %s: %+.1f ms per trace (exclusive %+.1f, calls into it %+.1f)", n.Service, n.Score, n.SelfDeltaMs, n.NetDeltaMs))
	}
	for _, t := range slow {
		if t.visits(top.Service) {
			v.ExampleTraceID = t.id.String()
			break
		}
	}
	if v.ExampleTraceID == "" && shift != nil {
		// No anomalous trace through the culprit: its slowest trace since
		// the onset.
		var ex *trace
		for _, t := range shift.after {
			if t.visits(top.Service) && (ex == nil || t.duration() > ex.duration()) {
				ex = t
			}
		}
		if ex != nil {
			v.ExampleTraceID = ex.id.String()
		}
	}

	v.Cause, v.Evidence = nameCause(top, v.Evidence, func() (Breakdown, error) {
		if ex == nil {
			return Breakdown{}, nil
		}
		return ex.Explain(ctx, slowSpans(slow, top.Service, anoms))
	})
	var ev string
	if v.Artifacts, ev = linkedEvidence(top.Service, anoms); ev != "" {
		v.Evidence = append(v.Evidence, ev)
	}
	if w.CapturesErr != nil {
		v.Evidence = append(v.Evidence, "captures unreadable: "+w.CapturesErr.Error())
	} else if note := CaptureTrouble(w.Captures, top.Service, w.From); note != "" {
		v.Evidence = append(v.Evidence, note)
	}
	return v
}

// knownServices are the services with a span in a trace of either set.
func knownServices(a, b []*trace) map[string]bool {
	known := map[string]bool{}
	for _, set := range [][]*trace{a, b} {
		for _, t := range set {
			for _, s := range t.spans {
				known[s.service] = true
			}
		}
	}
	return known
}

// rank scores every service seen in slow or base traces, most suspect first.
func rank(slow, base []*trace) []ServiceScore {
	known := knownServices(slow, base)
	slowM, baseM := meanTimes(slow, known), meanTimes(base, known)
	anomsBy := map[string]int{}
	for _, t := range slow {
		for _, s := range t.spans {
			if s.anomaly {
				anomsBy[s.service]++
			}
		}
	}
	var out []ServiceScore
	for svc := range known {
		sm, bm := slowM[svc], baseM[svc]
		sc := ServiceScore{
			Service:      svc,
			SelfSlowMs:   ms(sm.self),
			SelfBaseMs:   ms(bm.self),
			SelfDeltaMs:  ms(sm.self - bm.self),
			NetDeltaMs:   ms(sm.net - bm.net),
			LocalDeltaMs: ms(sm.local - bm.local),
			Anomalies:    anomsBy[svc],
		}
		sc.Score = sc.SelfDeltaMs + sc.NetDeltaMs
		out = append(out, sc)
	}
	slices.SortFunc(out, func(x, y ServiceScore) int {
		if d := cmp.Compare(y.Score, x.Score); d != 0 {
			return d
		}
		return strings.Compare(x.Service, y.Service)
	})
	for i := range out {
		r := &out[i]
		r.Score, r.SelfDeltaMs, r.SelfSlowMs, r.SelfBaseMs = round2(r.Score), round2(r.SelfDeltaMs), round2(r.SelfSlowMs), round2(r.SelfBaseMs)
		r.NetDeltaMs, r.LocalDeltaMs = round2(r.NetDeltaMs), round2(r.LocalDeltaMs)
	}
	return out
}

// The shift comparison's bounds: the traces it needs on each side of the
// onset; how long after its root span ended a trace counts as complete (the
// services' spans arrive in their own batches: a trace read sooner may lack
// a child, whose time its parent's exclusive time would then hold); and the
// Welch t statistic the culprit's growth must reach for the comparison to
// stand (else the anomalous traces are compared, as without an onset); and
// the share of every service's growth per trace it must hold: a top
// service with less localises nothing (ten services each +0.5…1.4 ms
// over a 5 % quota's slowdown of one of them, which its few slow requests
// showed: bench/RESULTS.md), however significant.
const (
	minShiftTraces = 20
	shiftSettle    = 2 * time.Second
	shiftMinT      = 4.0
	shiftMinShare  = 0.25
)

// ShiftSpan is how much of a slowdown's beginning the shift comparison
// reads: the traces that started in the first ShiftSpan after the onset.
// There the culprit's own growth shows before the queues and the contention
// it causes spread the slowdown to other services (a noisy neighbour that
// takes one of two CPUs slows every service within seconds; compared over
// the newest traces of a 30-s fault, the service it shares a CPU with fell
// behind one that queued behind the others, over its first 15 s it led by
// 2.3×: bench/RESULTS.md).
const ShiftSpan = 15 * time.Second

// shiftComparison is every trace since an onset compared with every trace
// before it.
type shiftComparison struct {
	ranking       []ServiceScore
	after, before []*trace
	// t is the Welch t statistic of the culprit's growth per trace.
	t float64
	// anomalous is the culprit the anomalous traces alone name ("" when
	// they are too few to compare, or name the same).
	anomalous      string
	anomalousScore float64
}

// compareShift ranks the services by how much their mean time per trace
// grew from the traces before w.Onset to the traces since it: an
// estimate of each service's part of the slowdown that selects no trace by
// its outcome. The anomalous traces (rootline.anomaly, or a root over
// w.SlowAbove) are picked for being slow, so any service whose noise made
// a trace slow is over-represented in them: when a service's latency moved
// as a whole, by less than the detector's threshold (a lock that adds 8 ms
// to every request of a 60 ms entry point), a handful of anomalous traces
// named whichever service's noise made them, while the means over every
// trace named the service at once (bench/RESULTS.md). nil when w has no
// onset, either side has fewer than minShiftTraces traces, or the top
// service's growth is not significant (Welch's t below shiftMinT: a
// slowdown of a few requests, which the anomalous traces show better) or
// is under shiftMinShare of every service's growth.
func compareShift(all []*trace, w *Window) *shiftComparison {
	if w.Onset.IsZero() {
		return nil
	}
	onset, settled := w.Onset.UnixNano(), w.To.Add(-shiftSettle).UnixNano()
	until := w.Onset.Add(ShiftSpan).UnixNano()
	var c shiftComparison
	for _, t := range all {
		r := t.root()
		switch {
		case r == nil:
		case r.start < onset:
			c.before = append(c.before, t)
		case r.start < until && r.start+r.dur <= settled:
			c.after = append(c.after, t)
		}
	}
	if len(c.after) < minShiftTraces || len(c.before) < minShiftTraces {
		return nil
	}
	c.ranking = rank(c.after, c.before)
	top := c.ranking[0]
	var grown float64
	for _, r := range c.ranking {
		grown += max(r.Score, 0)
	}
	if top.Score <= 0 || top.Score < shiftMinShare*grown {
		return nil
	}
	// The services known on both sides, as rank charges calls by them.
	known := knownServices(c.after, c.before)
	c.t = welch(perTrace(c.after, top.Service, known), perTrace(c.before, top.Service, known))
	if c.t < shiftMinT {
		return nil
	}
	return &c
}

// perTrace is svc's time per trace (exclusive and network, ns) in each of
// traces, calls charged by the services known.
func perTrace(traces []*trace, svc string, known map[string]bool) []float64 {
	out := make([]float64, len(traces))
	for i, t := range traces {
		x := t.times(known)[svc].chargeSocket()
		out[i] = x.self + x.net
	}
	return out
}

// welch is Welch's t statistic of mean(a) − mean(b); +Inf when both are
// constant and a's mean is the larger.
func welch(a, b []float64) float64 {
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	se := math.Sqrt(va/float64(len(a)) + vb/float64(len(b)))
	if se == 0 {
		if ma > mb {
			return math.Inf(1)
		}
		return 0
	}
	return (ma - mb) / se
}

// meanVar is xs's mean and sample variance (len(xs) ≥ 2).
func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// describe is the comparison's evidence line.
func (c *shiftComparison) describe(anoms int) string {
	line := fmt.Sprintf("every trace of the slowdown's first %s (%d whose root spans had ended) compared with every trace before it (%d; %d anomalous spans in the window): each service's mean time per trace, which no trace's outcome selects; %s's growth stands out of the traces' spread (Welch's t = %.1f)",
		ShiftSpan, len(c.after), len(c.before), anoms, c.ranking[0].Service, math.Min(c.t, 999))
	if c.anomalous != "" {
		line += fmt.Sprintf("; the anomalous traces alone, picked for being slow, would name %s (%+.1f ms per trace)", c.anomalous, c.anomalousScore)
	}
	return line
}

// split divides traces (in start order) into slow and baseline ones. Slow
// traces are the anomalous ones after the onset — the point after which the
// share of anomalous traces rises most (a single change point; 0 when there is
// none, e.g. anomalies spread evenly) — and baseline traces the normal ones
// before it. With fewer than three anomalous traces, the slowest tenth stands
// in for the slow ones (fallback).
func split(all []*trace) (slow, base []*trace, onset int64, fallback bool) {
	n := len(all)
	cum := make([]int, n+1)
	for i, t := range all {
		cum[i+1] = cum[i]
		if t.anomalous() {
			cum[i+1]++
		}
	}
	if cum[n] < 3 {
		sorted := slices.Clone(all)
		slices.SortFunc(sorted, func(x, y *trace) int { return cmp.Compare(y.duration(), x.duration()) })
		k := max(n/10, min(n, 1))
		return sorted[:k], sorted[k:], 0, true
	}
	best, at := 0.0, 0
	minSeg := max(5, n/50)
	for k := minSeg; k <= n-minSeg; k++ {
		before := float64(cum[k]) / float64(k)
		after := float64(cum[n]-cum[k]) / float64(n-k)
		if d := after - before; d > best {
			best, at = d, k
		}
	}
	from := 0
	if best >= 0.2 {
		from = at
		onset = all[at].start()
	}
	for i, t := range all {
		switch {
		case i >= from && t.anomalous():
			slow = append(slow, t)
		case i < from && !t.anomalous():
			base = append(base, t)
		}
	}
	if len(base) < 20 {
		// Too little before the onset: every normal trace is the baseline.
		base = base[:0]
		for _, t := range all {
			if !t.anomalous() {
				base = append(base, t)
			}
		}
	}
	return slow, base, onset, false
}

func ms(d float64) float64 { return d / 1e6 }

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// meanTimes averages each service's times over traces (a service absent from
// a trace counts as zero there).
func meanTimes(traces []*trace, known map[string]bool) map[string]times {
	sum := map[string]times{}
	for _, t := range traces {
		for svc, x := range t.times(known) {
			s := sum[svc]
			s.self += x.self
			s.net += x.net
			s.local += x.local
			s.sock += x.sock
			s.remote += x.remote
			sum[svc] = s
		}
	}
	n := float64(len(traces))
	for svc, s := range sum {
		s = s.chargeSocket()
		sum[svc] = times{self: s.self / n, net: s.net / n, local: s.local / n, sock: s.sock / n, remote: s.remote / n}
	}
	return sum
}

// chargeSocket keeps of a service's socket wait the part its own work
// caused. A request waits in the socket while every thread that would read
// it is busy, and a busy thread either works (its exclusive time) or waits
// for the service's own calls out (remote). When the calls out are what
// holds the threads (a pool blocked on a slow dependency), the queue is the
// dependency's doing, not the service's: counted as the service's own, the
// queue in front of a blocked pool made the caller of a throttled service
// the culprit. So the wait is charged to the service in the share its
// threads' time was its own work, over the same traces, and the rest is left
// to its dependencies, whose own time says whether they grew.
func (s times) chargeSocket() times {
	if s.sock <= 0 {
		return s
	}
	own := s.self - s.sock
	share := 1.0
	if own+s.remote > 0 {
		share = own / (own + s.remote)
	}
	cut := s.sock * (1 - share)
	s.self -= cut
	s.local = max(s.local-cut, 0)
	s.sock -= cut
	return s
}

// slowSpans lists svc's anomalous spans in the slow traces, in the order of
// anoms (newest first), with the artifacts captured for each.
func slowSpans(slow []*trace, svc string, anoms []Anomaly) []SlowSpan {
	spans := map[model.SpanID]*span{}
	traceOf := map[model.SpanID]model.TraceID{}
	for _, t := range slow {
		for _, s := range t.spans {
			if s.service == svc {
				spans[s.id] = s
				traceOf[s.id] = t.id
			}
		}
	}
	var out []SlowSpan
	for _, a := range anoms {
		s := spans[a.Span.SpanID]
		if a.Span.Service != svc || s == nil {
			continue
		}
		out = append(out, SlowSpan{TraceID: traceOf[s.id], SpanID: s.id, Service: svc, Start: s.start, End: s.start + s.dur,
			Exclusive: s.exclusive(), Threads: slices.Clone(s.threads), Artifacts: a.Artifacts})
	}
	return out
}
