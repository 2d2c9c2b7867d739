package analysis

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Bounds of what Collect reads.
const (
	// maxAnomalies bounds the anomalous spans read for a window.
	maxAnomalies = 1000
	// tracesPerSearch bounds one search; a slice of the window that fills it
	// is cut again (see sample).
	tracesPerSearch = 100
	// rootSearch bounds the traces per service read to find the entry
	// service when no anomaly names it.
	rootSearch = 20
	// maxCaptures bounds the capture log read to explain missing evidence.
	maxCaptures = 2000
)

// Window is the input of Analyze: what was stored about a time window.
type Window struct {
	From, To time.Time
	// Entry is the service whose traces were sampled (the root service of
	// the window's traces); "" when the window has no traces.
	Entry string
	// Traces are the window's traces through Entry, each complete, sampled
	// evenly over time.
	Traces [][]*model.Span
	// Anomalies are the anomalous spans that started in [From, To], newest
	// first, with their artifacts.
	Anomalies []Anomaly
	// Captures is the capture log, newest first; CapturesErr says why it
	// could not be read.
	Captures    []Capture
	CapturesErr error
	// SlowAbove, when set, makes a trace whose root span took longer count
	// as slow besides the traces with a flagged span: an incident opened by
	// a shift of its entry point's latency, which the detector's flags
	// (relative to each operation's recent median) mostly miss.
	SlowAbove time.Duration
	// Onset, when set, is when the slowdown began (an incident's start):
	// Analyze then also compares every trace since it with every trace
	// before it (shiftRank), which the anomalous traces alone (picked for
	// being slow, whatever made them so) misjudge when the whole latency
	// distribution moved.
	Onset time.Time
}

// Collect reads the window [from, to] from src. The entry service is the
// root service of the newest anomalous trace, else the most common root
// service among the window's traces. Its traces are sampled evenly over the
// window (up to now), slice by slice.
func Collect(ctx context.Context, src Source, from, to time.Time) (*Window, error) {
	w := &Window{From: from, To: to}
	anoms, err := src.Anomalies(ctx, from, maxAnomalies)
	if err != nil {
		return nil, err
	}
	w.Anomalies = slices.DeleteFunc(anoms, func(a Anomaly) bool {
		return a.Span == nil || a.Span.Start > to.UnixNano() || a.Span.Start < from.UnixNano()
	})

	root := ""
	if len(w.Anomalies) > 0 {
		spans, err := src.Trace(ctx, w.Anomalies[0].Span.TraceID)
		switch {
		case err == nil:
			if r := newTrace(spans).root(); r != nil {
				root = r.service
			}
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	if root == "" {
		services, err := src.Services(ctx)
		if err != nil {
			return nil, err
		}
		if root, err = findRoot(ctx, src, services, from, to); err != nil {
			return nil, err
		}
		if root == "" {
			return w, nil
		}
	}
	w.Entry = root

	end := to
	if now := time.Now(); now.Before(end) {
		end = now
	}
	traces, err := sample(ctx, src, root, from, end)
	if err != nil {
		return nil, err
	}
	for _, t := range traces {
		w.Traces = append(w.Traces, t.model)
	}
	w.Captures, w.CapturesErr = src.Captures(ctx, maxCaptures)
	return w, nil
}

// sample returns the traces of service between from and to, in start order:
// the window is cut into slices, and a slice with more traces than one search
// returns is cut again (twice at most), so a busy window is sampled evenly
// rather than only at its newest end.
func sample(ctx context.Context, src Source, service string, from, to time.Time) ([]*trace, error) {
	seen := map[model.TraceID]bool{}
	var out []*trace
	var walk func(a, b time.Time, depth int) error
	walk = func(a, b time.Time, depth int) error {
		ts, err := src.SearchTraces(ctx, service, a, b, tracesPerSearch)
		if err != nil {
			return err
		}
		if len(ts) >= tracesPerSearch && depth < 2 && b.Sub(a) > 10*time.Millisecond {
			mid := a.Add(b.Sub(a) / 2)
			if err := walk(a, mid, depth+1); err != nil {
				return err
			}
			return walk(mid.Add(time.Microsecond), b, depth+1)
		}
		for _, spans := range ts {
			t := newTrace(spans)
			if len(t.spans) > 0 && !seen[t.id] {
				seen[t.id] = true
				out = append(out, t)
			}
		}
		return nil
	}
	const slices0 = 4
	step := to.Sub(from) / slices0
	if step <= 0 {
		return nil, nil
	}
	for i := range slices0 {
		a := from.Add(time.Duration(i) * step)
		b := a.Add(step - time.Microsecond)
		if i == slices0-1 {
			b = to
		}
		if err := walk(a, b, 0); err != nil {
			return nil, err
		}
	}
	sortByStart(out)
	return out, nil
}

// sortByStart puts traces in the order their root spans started.
func sortByStart(ts []*trace) {
	slices.SortStableFunc(ts, func(x, y *trace) int { return cmp.Compare(x.start(), y.start()) })
}

// findRoot returns the service that most often owns root spans among a
// sample of the window's traces.
func findRoot(ctx context.Context, src Source, services []string, from, to time.Time) (string, error) {
	count := map[string]int{}
	for _, svc := range services {
		ts, err := src.SearchTraces(ctx, svc, from, to, rootSearch)
		if err != nil {
			return "", err
		}
		for _, spans := range ts {
			if r := newTrace(spans).root(); r != nil {
				count[r.service]++
			}
		}
	}
	best := ""
	for svc, n := range count {
		if best == "" || n > count[best] || (n == count[best] && svc < best) {
			best = svc
		}
	}
	return best, nil
}
