package kmetrics

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// scale converts a BPF value of metric m to its exported unit (seconds for
// times, bytes and events as they are).
func scale(m Metric) float64 {
	if m.Unit() == Nanoseconds {
		return 1e-9
	}
	return 1
}

// Bounds returns the cumulative upper bounds and counts of a log2 histogram
// in exported units, up to its highest non-empty bucket: bucket i holds
// values in [2^i, 2^(i+1)), so its upper bound is 2^(i+1) (0 and 1 fall in
// bucket 0).
func Bounds(m Metric, buckets [NumBuckets]uint64) (upper []float64, cumulative []uint64) {
	top := -1
	for i := NumBuckets - 1; i >= 0; i-- {
		if buckets[i] != 0 {
			top = i
			break
		}
	}
	var acc uint64
	f := scale(m)
	for i := 0; i <= top; i++ {
		acc += buckets[i]
		upper = append(upper, math.Ldexp(1, i+1)*f)
		cumulative = append(cumulative, acc)
	}
	return upper, cumulative
}

var (
	promLabels = []string{"container", "service", "cgroup_id"}
	dropLabels = []string{"container", "service", "cgroup_id", "reason"}
)

func promDesc(m Metric) *prometheus.Desc {
	if m == Drops {
		return prometheus.NewDesc(m.ExportName(), m.Help(), dropLabels, nil)
	}
	return prometheus.NewDesc(m.ExportName(), m.Help(), promLabels, nil)
}

// Describe sends nothing: the manager is an unchecked collector (its series
// come and go with containers).
func (m *Manager) Describe(chan<- *prometheus.Desc) {}

// Collect exports every series: histograms with container, service and
// cgroup_id labels (log2 buckets), counters as counters (*_total, drops also
// by reason). Values are raw sampled counts.
func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	series, err := m.Read()
	if err != nil {
		m.logger.Warn("read kernel metrics", "err", err)
		return
	}
	descs := map[Metric]*prometheus.Desc{}
	for _, s := range series {
		d, ok := descs[s.Metric]
		if !ok {
			d = promDesc(s.Metric)
			descs[s.Metric] = d
		}
		id := formatID(s.CgroupID)
		switch {
		case s.Metric == Drops:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(s.Count), s.Container, s.Service, id, s.Reason)
		case s.Metric.Kind() == Counter:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, s.counterValue(), s.Container, s.Service, id)
		default:
			upper, cum := Bounds(s.Metric, s.Buckets)
			b := make(map[float64]uint64, len(upper))
			for i, u := range upper {
				b[u] = cum[i]
			}
			ch <- prometheus.MustNewConstHistogram(d, s.Count, float64(s.Sum)*scale(s.Metric), b, s.Container, s.Service, id)
		}
	}
}

// counterValue is a counter's exported value: the time it counts, in
// seconds, for a counter of time (cpu_throttled), else the events.
func (s Series) counterValue() float64 {
	if s.Metric.Unit() == Nanoseconds {
		return float64(s.Sum) * 1e-9
	}
	return float64(s.Count)
}

func formatID(id uint64) string { return strconv.FormatUint(id, 10) }
