package critmetrics

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/store"
)

// The kernel metrics are stored as the agent pushes them (internal/kmetrics
// ToOTLP): cumulative since the agent loaded them, histograms with log2
// bounds in seconds or bytes, counters as monotonic sums, one series per
// (metric, service, container[, drop reason]). An analysis needs each
// metric as a series of per-interval values on one time grid.

// byExportName maps the stored metric names to the kernel metrics.
var byExportName = func() map[string]kmetrics.Metric {
	m := map[string]kmetrics.Metric{}
	for _, mt := range kmetrics.Metrics() {
		m[mt.ExportName()] = mt
	}
	return m
}()

// ContainerLabel is the resource attribute naming a series' cgroup.
const ContainerLabel = "container"

// cumulative is one stored series unwrapped into monotone cumulative values
// (a counter reset — the agent restarted — continues from the last value).
type cumulative struct {
	t       []int64 // Unix ns, increasing
	count   []float64
	sum     []float64
	buckets [][]float64 // histograms only, cumulative per bucket
	bounds  []float64
}

// ladder is the longest bucket bounds among the histogram points of ss (one
// metric's series). The agent sends a log2 histogram only up to its highest
// non-empty bucket, so the bounds of a point are a prefix of one ladder that
// grows as larger values arrive; unwrap pads every point to the longest.
func ladder(ss []store.MetricSeries) []float64 {
	var ref []float64
	for _, s := range ss {
		if s.Kind != store.MetricHistogram {
			continue
		}
		for _, p := range s.Points {
			if len(p.Bounds) > len(ref) {
				ref = p.Bounds
			}
		}
	}
	return ref
}

// metricLadders is the ladder of each kernel metric among series.
func metricLadders(series []store.MetricSeries) map[kmetrics.Metric][]float64 {
	byMetric := map[kmetrics.Metric][]store.MetricSeries{}
	for _, s := range series {
		if mt, ok := byExportName[s.Name]; ok {
			byMetric[mt] = append(byMetric[mt], s)
		}
	}
	out := map[kmetrics.Metric][]float64{}
	for mt, ss := range byMetric {
		out[mt] = ladder(ss)
	}
	return out
}

// padBuckets maps a point's per-bucket counts onto the bounds ref, of which
// its own bounds must be a prefix; ok is false when they are not, or when
// its overflow bucket (values above its last bound) holds counts that ref
// would split.
func padBuckets(bounds []float64, buckets []uint64, ref []float64) (row []float64, ok bool) {
	if len(buckets) != len(bounds)+1 || len(bounds) > len(ref) || !slices.Equal(bounds, ref[:len(bounds)]) {
		return nil, false
	}
	over := buckets[len(bounds)]
	if over != 0 && len(bounds) < len(ref) {
		return nil, false
	}
	row = make([]float64, len(ref)+1)
	for b, v := range buckets[:len(bounds)] {
		row[b] = float64(v)
	}
	row[len(ref)] = float64(over)
	return row, true
}

// unwrap makes s cumulative without resets; histogram buckets are put on
// the bounds ref (ladder of the metric's series), and a point whose buckets
// cannot be is left out (the neighbouring points are interpolated).
func unwrap(s store.MetricSeries, ref []float64) cumulative {
	pts := slices.Clone(s.Points)
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].Time < pts[j].Time })
	var c cumulative
	var offC, offS, prevC, prevS float64
	var offB, prevB []float64
	var prevStart int64
	hist := s.Kind == store.MetricHistogram
	if hist {
		c.bounds = ref
	}
	for i, p := range pts {
		if len(c.t) > 0 && p.Time == c.t[len(c.t)-1] {
			continue // a duplicate push
		}
		cnt, sum := p.Value, p.Value
		var row []float64
		if hist {
			cnt, sum = float64(p.Count), p.Sum
			var ok bool
			if row, ok = padBuckets(p.Bounds, p.Buckets, ref); !ok {
				continue
			}
		}
		reset := i > 0 && len(c.t) > 0 && (cnt < prevC || (p.StartTime != 0 && prevStart != 0 && p.StartTime != prevStart))
		if reset {
			offC += prevC
			offS += prevS
			for b := range offB {
				offB[b] += prevB[b]
			}
		}
		c.t = append(c.t, p.Time)
		c.count = append(c.count, cnt+offC)
		c.sum = append(c.sum, sum+offS)
		if hist {
			if offB == nil {
				offB = make([]float64, len(row))
				prevB = make([]float64, len(row))
			}
			copy(prevB, row)
			for b := range row {
				row[b] += offB[b]
			}
			c.buckets = append(c.buckets, row)
		}
		prevC, prevS, prevStart = cnt, sum, p.StartTime
	}
	return c
}

// at interpolates the cumulative values linearly at time t; ok is false
// outside the series' span.
func (c cumulative) at(t int64) (cnt, sum float64, buckets []float64, ok bool) {
	n := len(c.t)
	if n == 0 || t < c.t[0] || t > c.t[n-1] {
		return 0, 0, nil, false
	}
	i := sort.Search(n, func(i int) bool { return c.t[i] >= t })
	if c.t[i] == t || i == 0 {
		if c.buckets != nil {
			buckets = c.buckets[i]
		}
		return c.count[i], c.sum[i], buckets, true
	}
	f := float64(t-c.t[i-1]) / float64(c.t[i]-c.t[i-1])
	lerp := func(a, b float64) float64 { return a + f*(b-a) }
	if c.buckets != nil {
		buckets = make([]float64, len(c.buckets[i]))
		for b := range buckets {
			buckets[b] = lerp(c.buckets[i-1][b], c.buckets[i][b])
		}
	}
	return lerp(c.count[i-1], c.count[i]), lerp(c.sum[i-1], c.sum[i]), buckets, true
}

// intervals is one metric of one group of containers on the grid: the
// events (count), the sum of their values and the bucket counts per interval.
type intervals struct {
	metric  kmetrics.Metric
	count   []float64
	sum     []float64
	buckets [][]float64 // per interval; nil for counters
	bounds  []float64
	seen    []bool // some container had data over the interval
}

func newIntervals(mt kmetrics.Metric, n int) *intervals {
	return &intervals{metric: mt, count: make([]float64, n), sum: make([]float64, n), seen: make([]bool, n)}
}

// add accumulates c's increments over each grid interval [g[i], g[i+1]],
// cut to the series' span: an interval the series does not reach adds
// nothing (no data is no events: a container that started later, a replica
// stopped earlier), one it covers in part adds what it recorded there (a
// container that starts mid-interval and is busy at once).
func (iv *intervals) add(c cumulative, grid []int64) {
	if len(c.t) == 0 {
		return
	}
	first, last := c.t[0], c.t[len(c.t)-1]
	if c.buckets != nil && iv.buckets == nil {
		iv.bounds = c.bounds
		iv.buckets = make([][]float64, len(grid)-1)
	}
	// Every series of a metric is unwrapped onto one ladder of bounds, so
	// this holds unless a sender used other bounds altogether.
	sameBounds := slices.Equal(c.bounds, iv.bounds)
	for i := range len(grid) - 1 {
		t0, t1 := max(grid[i], first), min(grid[i+1], last)
		if t0 >= t1 {
			continue
		}
		c0, s0, b0, ok0 := c.at(t0)
		c1, s1, b1, ok1 := c.at(t1)
		if !ok0 || !ok1 {
			continue
		}
		iv.seen[i] = true
		iv.count[i] += c1 - c0
		iv.sum[i] += s1 - s0
		if b0 != nil && b1 != nil && sameBounds && len(b0) == len(iv.bounds)+1 {
			if iv.buckets[i] == nil {
				iv.buckets[i] = make([]float64, len(b0))
			}
			for b := range b0 {
				iv.buckets[i][b] += b1[b] - b0[b]
			}
		}
	}
}

// Signal says which value of a metric per interval is clustered.
type Signal string

// Signals of the metrics.
const (
	// SignalMean: the mean value of the interval's events (Δsum/Δcount),
	// for histograms of durations (seconds): latency, not how often.
	SignalMean Signal = "mean"
	// SignalSumRate: Δsum/Δt, for histograms of sizes: bytes per second.
	SignalSumRate Signal = "sum/s"
	// SignalRate: Δcount/Δt, for counters: events per second.
	SignalRate Signal = "count/s"
)

// SignalOf is the value clustered for mt.
func SignalOf(mt kmetrics.Metric) Signal {
	switch {
	case mt.Kind() == kmetrics.Counter:
		return SignalRate
	case mt.Unit() == kmetrics.Nanoseconds:
		return SignalMean
	default:
		return SignalSumRate
	}
}

// values is the signal per interval. Intervals without data, and mean
// latencies of intervals without events, take the previous value (the first
// ones the first known value): a gap is not a change of shape. ok is false
// when no interval has a value.
func (iv *intervals) values(step time.Duration) ([]float64, bool) {
	sec := step.Seconds()
	out := make([]float64, len(iv.count))
	for i := range out {
		out[i] = math.NaN()
		if !iv.seen[i] {
			continue
		}
		switch SignalOf(iv.metric) {
		case SignalRate:
			out[i] = iv.count[i] / sec
		case SignalSumRate:
			out[i] = iv.sum[i] / sec
		case SignalMean:
			if iv.count[i] > 0 {
				out[i] = iv.sum[i] / iv.count[i]
			}
		}
	}
	first := slices.IndexFunc(out, func(v float64) bool { return !math.IsNaN(v) })
	if first < 0 {
		return out, false
	}
	prev := out[first]
	for i := range out {
		if math.IsNaN(out[i]) {
			out[i] = prev
		}
		prev = out[i]
	}
	return out, true
}

// eventsPerSecond is the mean event rate over the intervals with data.
func (iv *intervals) eventsPerSecond(step time.Duration) float64 {
	var n, c float64
	for i, s := range iv.seen {
		if s {
			n++
			c += iv.count[i]
		}
	}
	if n == 0 {
		return 0
	}
	return c / (n * step.Seconds())
}

// histogram is the bucket counts summed over every interval (nil for counters).
func (iv *intervals) histogram() []uint64 {
	if iv.buckets == nil {
		return nil
	}
	var out []uint64
	for _, b := range iv.buckets {
		if b == nil {
			continue
		}
		if out == nil {
			out = make([]uint64, len(b))
		}
		for i, v := range b {
			out[i] += uint64(math.Round(max(v, 0)))
		}
	}
	return out
}

// inferStep is the median spacing of the points of every series: the
// agents' push interval.
// span is the time range the series cover, cut to [from, to] where those
// are set (0: open).
func span(cs []cumulative, from, to int64) (lo, hi int64) {
	lo, hi = int64(math.MaxInt64), int64(math.MinInt64)
	for _, c := range cs {
		lo, hi = min(lo, c.t[0]), max(hi, c.t[len(c.t)-1])
	}
	if from != 0 {
		lo = max(lo, from)
	}
	if to != 0 {
		hi = min(hi, to)
	}
	return lo, hi
}

func inferStep(cs []cumulative) (time.Duration, error) {
	var gaps []int64
	for _, c := range cs {
		for i := 1; i < len(c.t); i++ {
			gaps = append(gaps, c.t[i]-c.t[i-1])
		}
	}
	if len(gaps) == 0 {
		return 0, fmt.Errorf("%w: no series has two points", ErrNoData)
	}
	slices.Sort(gaps)
	return time.Duration(gaps[len(gaps)/2]), nil
}

// resample averages consecutive groups of values so that at most max remain.
func resample(x []float64, maxN int) []float64 {
	if maxN <= 0 || len(x) <= maxN {
		return x
	}
	g := (len(x) + maxN - 1) / maxN
	out := make([]float64, 0, (len(x)+g-1)/g)
	for i := 0; i < len(x); i += g {
		var s float64
		end := min(i+g, len(x))
		for _, v := range x[i:end] {
			s += v
		}
		out = append(out, s/float64(end-i))
	}
	return out
}
