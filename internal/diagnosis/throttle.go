package diagnosis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// metricThrottled is the time a container's CPU quota held its threads off
// the CPUs (internal/kmetrics cpu_throttled: the agent reads the cgroup's
// cpu.stat at each push), a cumulative counter in seconds summed over CPUs.
const metricThrottled = "rootline_kernel_cpu_throttled_seconds_total"

// The quota explains a service's longer waits for a CPU when, during the
// incident, its containers were throttled for at least minThrottledPerSec
// (ms per second of the incident) more than before the onset, and at least
// throttleGrowth times as much: a container whose quota is near its usage
// is throttled now and then on a healthy day.
const (
	minThrottledPerSec = 10.0
	throttleGrowth     = 2.0
)

// throttleEvidence is what the cgroups of a service's containers say of
// their CPU quota before and since an incident's onset.
type throttleEvidence struct {
	// before and during are the throttled time (ms) before and since the
	// onset, over windows of beforeWin and duringWin (duringWin 0: no
	// point since the onset yet).
	before, during       float64
	beforeWin, duringWin time.Duration
	// containers are the containers with throttled time in the incident.
	containers []string
	// seen says some container of the service reports the metric: its
	// cgroup has CPU bandwidth control.
	seen bool
}

// perSec is the throttled ms per second of each window.
func (e throttleEvidence) perSec() (before, during float64) {
	if e.beforeWin > 0 {
		before = e.before / e.beforeWin.Seconds()
	}
	if e.duringWin > 0 {
		during = e.during / e.duringWin.Seconds()
	}
	return before, during
}

// throttled says whether the quota held the service off markedly more
// than before the onset.
func (e throttleEvidence) throttled() bool {
	before, during := e.perSec()
	return e.seen && during-before >= minThrottledPerSec && during >= throttleGrowth*before
}

func (e throttleEvidence) String() string {
	before, during := e.perSec()
	s := fmt.Sprintf("its CPU quota held its containers off the CPUs for %.0f ms per second since the onset, %.0f before (cgroup cpu.stat)", during, before)
	if len(e.containers) > 0 {
		s += ": " + strings.Join(e.containers, ", ")
	}
	return s
}

// readThrottle reads the throttled time of svc's containers (series whose
// service label names it, alone or among others) in [from, onset) and
// [onset, to]. The windows are the times the points cover (the agent
// pushes every few seconds): the first point to the last before the onset,
// and from there to the last point.
func readThrottle(ctx context.Context, mr store.MetricReader, svc string, from, onset, to time.Time) (throttleEvidence, error) {
	var e throttleEvidence
	series, err := mr.FindMetrics(ctx, store.MetricQuery{Name: metricThrottled, From: from.UnixNano(), To: to.UnixNano()})
	if err != nil {
		return e, fmt.Errorf("kernel metric %s: %w", metricThrottled, err)
	}
	for _, s := range series {
		for _, name := range strings.Split(s.Service, ",") {
			if name != svc {
				continue
			}
			e.seen = true
			if n := len(s.Points); n > 1 {
				first, last, split := s.Points[0].Time, s.Points[n-1].Time, s.Points[0].Time
				for _, p := range s.Points {
					if p.Time < onset.UnixNano() {
						split = p.Time
					}
				}
				e.beforeWin = max(e.beforeWin, time.Duration(split-first))
				e.duringWin = max(e.duringWin, time.Duration(last-split))
			}
			before, during := increase(s.Points, onset.UnixNano())
			e.before += 1e3 * before
			e.during += 1e3 * during
			if during > 0 {
				e.containers = append(e.containers, fmt.Sprintf("%s %.0f ms", containerName(s), 1e3*during))
			}
		}
	}
	return e, nil
}
