package critmetrics

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/store"
)

// TimelineOptions select and shape a Timeline. Zero values take the
// defaults.
type TimelineOptions struct {
	// From and To bound the window (Unix ns); zero: the stored span.
	From, To int64
	// Buckets is the most intervals the window is cut into (default 120);
	// an interval is never shorter than the push interval of the series.
	Buckets int
	// Service and Container, when set, keep only that service's containers
	// (each container has the service its series carry most often, as in
	// Analyze) or that one container.
	Service, Container string
	// Sidecar matches the container names of sidecars; nil:
	// DefaultSidecarPattern.
	Sidecar *regexp.Regexp
}

// Timeline is the kernel metrics of containers on one time grid, per
// interval: what a metrics view draws.
type Timeline struct {
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	Step        string    `json:"step"`
	StepSeconds float64   `json:"stepSeconds"`
	Intervals   int       `json:"intervals"`
	// Containers are ordered by service, then container name.
	Containers []TimelineContainer `json:"containers"`
}

// TimelineContainer is one container's metrics.
type TimelineContainer struct {
	Service   string           `json:"service"`
	Container string           `json:"container"`
	Sidecar   bool             `json:"sidecar"`
	Metrics   []TimelineMetric `json:"metrics"`
}

// TimelineMetric is one metric of a container per interval.
type TimelineMetric struct {
	Metric string `json:"metric"`
	// Unit is of the values: "s" (durations), "By" (bytes) or "1" (events).
	Unit   string `json:"unit"`
	Signal Signal `json:"signal"`
	// Values is the signal per interval (as Analyze clusters it, before
	// normalisation); null where the container had no data, or no events
	// to take a mean of.
	Values []*float64 `json:"values"`
	// Events is the number of recorded events per interval.
	Events []float64 `json:"events"`
	// Bounds are the histogram's upper bucket bounds (in Unit) and Buckets
	// the events per bucket per interval (len(Bounds)+1 each, the last one
	// above the last bound; null where there was no data); both are absent
	// for counters.
	Bounds  []float64   `json:"bounds,omitempty"`
	Buckets [][]float64 `json:"buckets,omitempty"`
}

// MaxTimelineBuckets bounds TimelineOptions.Buckets.
const MaxTimelineBuckets = 1000

// BuildTimeline puts the stored kernel metric series on one grid of at most
// opts.Buckets intervals, per container: the signal Analyze clusters, the
// event counts and the histogram of each interval.
func BuildTimeline(series []store.MetricSeries, opts TimelineOptions) (*Timeline, error) {
	if opts.Buckets <= 0 {
		opts.Buckets = 120
	}
	if opts.Buckets > MaxTimelineBuckets {
		return nil, fmt.Errorf("critmetrics: %d buckets, at most %d", opts.Buckets, MaxTimelineBuckets)
	}
	sidecar := opts.Sidecar
	if sidecar == nil {
		sidecar = regexp.MustCompile(DefaultSidecarPattern)
	}
	ladders := metricLadders(series)
	serviceOf := containerServices(series)
	type member struct {
		svc, ctr string
		mt       kmetrics.Metric
		c        cumulative
	}
	var ms []member
	var all []cumulative
	isSidecar := sidecarContainers(series, sidecar)
	for _, s := range series {
		mt, ok := byExportName[s.Name]
		if !ok {
			continue
		}
		ctr := s.Labels[ContainerLabel]
		svc, ok := serviceOf[ctr]
		if !ok {
			svc = ctr
		}
		if (opts.Service != "" && svc != opts.Service) || (opts.Container != "" && ctr != opts.Container) {
			continue
		}
		c := unwrap(s, ladders[mt])
		if len(c.t) == 0 {
			continue
		}
		ms = append(ms, member{svc: svc, ctr: ctr, mt: mt, c: c})
		all = append(all, c)
	}
	if len(ms) == 0 {
		return nil, ErrNoData
	}
	push, err := inferStep(all)
	if err != nil {
		return nil, err
	}
	lo, hi := span(all, opts.From, opts.To)
	if hi-lo < int64(push) {
		return nil, fmt.Errorf("%w: the window holds less than one push interval (%s) of data", ErrTooShort, push)
	}
	step := max(time.Duration((hi-lo+int64(opts.Buckets)-1)/int64(opts.Buckets)), push)
	n := int((hi - lo) / int64(step))
	grid := make([]int64, n+1)
	for i := range grid {
		grid[i] = lo + int64(i)*int64(step)
	}
	type key struct {
		svc, ctr string
	}
	ivs := map[key]map[kmetrics.Metric]*intervals{}
	for _, m := range ms {
		k := key{m.svc, m.ctr}
		if ivs[k] == nil {
			ivs[k] = map[kmetrics.Metric]*intervals{}
		}
		iv, ok := ivs[k][m.mt]
		if !ok {
			iv = newIntervals(m.mt, n)
			ivs[k][m.mt] = iv
		}
		iv.add(m.c, grid)
	}
	keys := make([]key, 0, len(ivs))
	for k := range ivs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].svc != keys[j].svc {
			return keys[i].svc < keys[j].svc
		}
		return keys[i].ctr < keys[j].ctr
	})
	tl := &Timeline{From: time.Unix(0, grid[0]).UTC(), To: time.Unix(0, grid[n]).UTC(), Step: step.String(),
		StepSeconds: step.Seconds(), Intervals: n, Containers: make([]TimelineContainer, 0, len(keys))}
	for _, k := range keys {
		tc := TimelineContainer{Service: k.svc, Container: k.ctr, Sidecar: isSidecar[k.ctr]}
		for _, mt := range kmetrics.Metrics() {
			iv, ok := ivs[k][mt]
			if !ok {
				continue
			}
			tc.Metrics = append(tc.Metrics, iv.timeline(step))
		}
		tl.Containers = append(tl.Containers, tc)
	}
	return tl, nil
}

// timeline is iv as a TimelineMetric: unlike values, a gap stays a gap
// (a view shows it; a shape comparison must not see it as a change).
func (iv *intervals) timeline(step time.Duration) TimelineMetric {
	tm := TimelineMetric{Metric: iv.metric.String(), Signal: SignalOf(iv.metric), Unit: unitOf(iv.metric),
		Values: make([]*float64, len(iv.count)), Events: slices.Clone(iv.count)}
	sec := step.Seconds()
	for i := range iv.count {
		if !iv.seen[i] {
			continue
		}
		var v float64
		switch tm.Signal {
		case SignalRate:
			v = iv.count[i] / sec
		case SignalSumRate:
			v = iv.sum[i] / sec
		case SignalMean:
			if iv.count[i] <= 0 {
				continue
			}
			v = iv.sum[i] / iv.count[i]
		}
		tm.Values[i] = &v
	}
	for i, e := range tm.Events {
		tm.Events[i] = math.Round(max(e, 0)*1000) / 1000
	}
	if iv.buckets != nil {
		tm.Bounds = iv.bounds
		tm.Buckets = make([][]float64, len(iv.buckets))
		for i, b := range iv.buckets {
			if b == nil {
				continue
			}
			row := make([]float64, len(b))
			for j, v := range b {
				row[j] = math.Round(max(v, 0)*1000) / 1000
			}
			tm.Buckets[i] = row
		}
	}
	return tm
}

// unitOf is the OTLP unit of a metric's values.
func unitOf(mt kmetrics.Metric) string {
	switch {
	case mt.Kind() == kmetrics.Counter:
		return "1"
	case mt.Unit() == kmetrics.Nanoseconds:
		return "s"
	default:
		return "By"
	}
}
