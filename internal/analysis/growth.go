package analysis

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Growth is how much a change made at onset (a fault injected into one
// service) slowed the requests of the window's entry point there: that
// service's time per trace (exclusive and the time calls into it spent
// outside it) in every trace that began after the onset against every
// trace before it. No trace is selected by its outcome and nothing of the
// diagnosis (anomalies, incidents, kernel evidence) is read: it is the
// ground a diagnosis is judged on, not one.
type Growth struct {
	// Entry is the entry point whose traces were compared; Before and After
	// count them.
	Entry  string `json:"entry"`
	Before int    `json:"before"`
	After  int    `json:"after"`
	// ServiceScore is the service's row of the comparison (zero when no
	// trace of either side reached it).
	ServiceScore
	// T is Welch's t statistic of the service's growth per trace: below
	// about 3 the growth is within the traces' spread.
	T float64 `json:"t"`
	// EntryBaseMs and EntryAfterMs are the entry's median latency (root
	// span) before and after the onset.
	EntryBaseMs  float64 `json:"entryBaseMs"`
	EntryAfterMs float64 `json:"entryAfterMs"`
}

// minGrowthTraces is how many traces each side of the onset needs.
const minGrowthTraces = 20

// ServiceGrowth measures service's Growth at onset from the entry point's
// traces between from and to (those whose root span ended by to). An error
// is src's, or says there were too few traces to compare.
func ServiceGrowth(ctx context.Context, src Source, service string, from, onset, to time.Time) (Growth, error) {
	w, err := Collect(ctx, src, from, to)
	if err != nil {
		return Growth{}, err
	}
	g := Growth{Entry: w.Entry}
	var before, after []*trace
	for _, spans := range w.Traces {
		t := newTrace(spans)
		r := t.root()
		switch {
		case r == nil:
		case r.start < onset.UnixNano():
			before = append(before, t)
		case r.start+r.dur <= to.UnixNano():
			after = append(after, t)
		}
	}
	g.Before, g.After = len(before), len(after)
	if g.Before < minGrowthTraces || g.After < minGrowthTraces {
		return g, fmt.Errorf("analysis: %d traces of %q before %s and %d after it: %d needed on each side",
			g.Before, w.Entry, onset.UTC().Format(time.TimeOnly), g.After, minGrowthTraces)
	}
	g.ServiceScore = ServiceScore{Service: service}
	for _, sc := range rank(after, before) {
		if sc.Service == service {
			g.ServiceScore = sc
		}
	}
	if known := knownServices(after, before); known[service] {
		g.T = welch(perTrace(after, service, known), perTrace(before, service, known))
	}
	g.EntryBaseMs, g.EntryAfterMs = medianRootMs(before), medianRootMs(after)
	return g, nil
}

// medianRootMs is the median duration of traces' root spans, in ms.
func medianRootMs(traces []*trace) float64 {
	d := make([]int64, 0, len(traces))
	for _, t := range traces {
		d = append(d, t.root().dur)
	}
	slices.Sort(d)
	return round2(ms(float64(d[len(d)/2])))
}
