package diagnosis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// metricPointLimit bounds the points one read of a metric returns. The
// store's default (10,000) is reached by the kernel's per-container series
// (20 containers, one point a second) over the lookback and 6 minutes of an
// incident, and a store cuts a read by series: the last series would be
// missing, not the oldest points. A read that reaches the bound is an
// error the verdict reports as missing evidence.
const metricPointLimit = 200_000

// metricKeepLimit bounds the points an incident's state keeps of one
// metric (64 B each): 20 containers' for about 40 minutes. Past it, the
// verdicts of that incident read the metric from scratch again. A
// variable for the tests.
var metricKeepLimit = 50_000

// metricReRead is how far before the end of its last read a verdict reads
// a metric again: an agent pushes its points in batches, so those of the
// last seconds may land after a read.
const metricReRead = 15 * time.Second

// metricRead is one metric's series verdicts read over [from, to], the
// last at readAt (the verdict's clock).
type metricRead struct {
	from, to, readAt int64
	series           []store.MetricSeries
	keys             []string // seriesKey of each series, sorted
}

// settled is the end of what c holds that no late point can change: up to
// metricReRead before its last read.
func (c *metricRead) settled() int64 {
	return max(c.from, min(c.to, c.readAt-metricReRead.Nanoseconds()))
}

// incrementalMetrics is the store.MetricReader a verdict reads the kernel's
// and the node's counters through. With a VerdictState it keeps what it
// read: the window starts at the onset minus the lookback, which does not
// move, so the next verdict of the incident reads only the points after
// what a read before could have missed (metricRead.settled), not the
// lookback and the whole incident again. Counters are read for their
// value, count and sum only (store.MetricQuery.OmitBuckets). now is the
// verdict's clock.
type incrementalMetrics struct {
	mr  store.MetricReader
	st  *VerdictState
	now int64
}

func (m incrementalMetrics) FindMetrics(ctx context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	q.OmitBuckets = true
	if q.Limit <= 0 {
		q.Limit = metricPointLimit
	}
	if m.st == nil || q.Name == "" || q.Service != "" || q.From == 0 || q.To == 0 {
		return m.find(ctx, q)
	}
	c := m.st.metrics[q.Name]
	if c == nil || c.from != q.From {
		series, err := m.find(ctx, q)
		if err != nil {
			return nil, err
		}
		c = &metricRead{from: q.From, to: q.To, readAt: m.now}
		c.merge(series, q.From)
		if m.st.metrics == nil {
			m.st.metrics = map[string]*metricRead{}
		}
		m.st.metrics[q.Name] = c
		if c.points() > metricKeepLimit {
			delete(m.st.metrics, q.Name)
		}
		return c.upTo(q.To), nil
	}
	if settled := c.settled(); q.To > settled {
		more := q
		more.From = settled + 1
		series, err := m.find(ctx, more)
		if err != nil {
			return nil, err
		}
		c.merge(series, more.From)
		c.to, c.readAt = max(c.to, q.To), m.now
		if c.points() > metricKeepLimit {
			delete(m.st.metrics, q.Name)
		}
	}
	return c.upTo(q.To), nil
}

// points is how many points c holds.
func (c *metricRead) points() int {
	n := 0
	for _, s := range c.series {
		n += len(s.Points)
	}
	return n
}

// find reads q from the store; reaching q.Limit is an error.
func (m incrementalMetrics) find(ctx context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	series, err := m.mr.FindMetrics(ctx, q)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, s := range series {
		n += len(s.Points)
	}
	if n >= q.Limit {
		return nil, fmt.Errorf("more than %d points in %s: the read would leave series out", q.Limit, time.Duration(q.To-q.From).Round(time.Second))
	}
	return series, nil
}

// merge replaces c's points from since on with those of series, which
// hold no point before since.
func (c *metricRead) merge(series []store.MetricSeries, since int64) {
	for i := range c.series {
		pts := c.series[i].Points
		c.series[i].Points = pts[:sort.Search(len(pts), func(j int) bool { return pts[j].Time >= since })]
	}
	for _, s := range series {
		k := seriesKey(s)
		i, ok := slices.BinarySearch(c.keys, k)
		if !ok {
			c.keys = slices.Insert(c.keys, i, k)
			s.Points = slices.Clone(s.Points)
			c.series = slices.Insert(c.series, i, s)
			continue
		}
		c.series[i].Points = append(c.series[i].Points, s.Points...)
	}
}

// upTo is c's series with their points up to to, those with none left out,
// as the store would answer a read ending at to.
func (c *metricRead) upTo(to int64) []store.MetricSeries {
	out := make([]store.MetricSeries, 0, len(c.series))
	for _, s := range c.series {
		n := sort.Search(len(s.Points), func(j int) bool { return s.Points[j].Time > to })
		if n == 0 {
			continue
		}
		s.Points = slices.Clip(s.Points[:n])
		out = append(out, s)
	}
	return out
}

// seriesKey identifies a series of one metric: its service and labels, in
// the order a store lists them.
func seriesKey(s store.MetricSeries) string {
	labels, _ := json.Marshal(s.Labels) // a map of strings: cannot fail; keys sorted
	return s.Service + "\x00" + string(labels)
}
