package diagnosis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/store"
)

// metricSteal and metricBusy are the node's steal and busy CPU time
// (internal/kmetrics NodeStealMetric, NodeBusyMetric: the agent reads
// /proc/stat at each push), cumulative counters in seconds summed over the
// node's CPUs.
const (
	metricSteal = "rootline_node_cpu_steal_seconds_total"
	metricBusy  = "rootline_node_cpu_busy_seconds_total"
)

// A slowdown is the node's — the hypervisor gave its CPUs to other guests —
// when both hold:
//
//   - in the slowdown's first seconds ([onset − stealLead, onset +
//     stealEarly]) the host withheld a markedly larger share of the CPU
//     time the node asked for (steal over busy + steal) than before: at
//     least minStolenShare more and stealGrowth times as much. A guest on
//     a shared host is stolen from now and then on a healthy day, and the
//     more it asks for, the more is stolen: a fault inside it that loads
//     its CPUs (a hog, a noisy neighbour) raises the steal with the busy
//     time, not its share;
//   - no service stands out: the top suspect's growth per trace is at most
//     maxTopShare of all the services' growth, and at least minGrown
//     services grew. Stolen CPU time slows every thread that runs, so every
//     service's time grows with the CPU it uses; a fault in one service
//     (its lock, its quota, its link) grows its own time, and its callers'
//     only by waiting for it, which the ranking takes out.
//
// stealLead lets the window start before the onset the anomalies mark: the
// first requests the host slowed are flagged only once they end. The fault-
// free demo's incidents had a top share of 0.26–0.38; the kept accuracy
// runs' faults 0.35 and up (bench/RESULTS.md).
const (
	minStolenShare = 0.05
	stealGrowth    = 2.0
	maxTopShare    = 0.4
	minGrown       = 3
	stealLead      = 5 * time.Second
	stealEarly     = 15 * time.Second
)

// stealEvidence is one node's steal and busy time before and in a
// slowdown's first seconds, in ms per second of each window.
type stealEvidence struct {
	host                     string
	stealBefore, stealDuring float64
	busyBefore, busyDuring   float64
	beforeWin, duringWin     time.Duration
}

// shares are the shares of the CPU time the node asked for that the host
// withheld, before and during.
func (e stealEvidence) shares() (before, during float64) {
	if t := e.stealBefore + e.busyBefore; t > 0 {
		before = e.stealBefore / t
	}
	if t := e.stealDuring + e.busyDuring; t > 0 {
		during = e.stealDuring / t
	}
	return before, during
}

// grew says whether the host withheld markedly more than before.
func (e stealEvidence) grew() bool {
	before, during := e.shares()
	return e.duringWin > 0 && e.beforeWin > 0 && during-before >= minStolenShare && during >= stealGrowth*before
}

func (e stealEvidence) String() string {
	host := e.host
	if host == "" {
		host = "the node"
	}
	before, during := e.shares()
	return fmt.Sprintf("%s: the hypervisor withheld %.0f%% of the CPU time it asked for in the slowdown's first seconds (steal %.0f ms per second, summed over CPUs, busy %.0f), %.0f%% before the onset (steal %.0f, busy %.0f; /proc/stat, pushed by the agent)",
		host, 100*during, e.stealDuring, e.busyDuring, 100*before, e.stealBefore, e.busyBefore)
}

// readSteal reads each node's steal and busy time in [from, onset −
// stealLead) and [onset − stealLead, min(to, onset + stealEarly)].
func readSteal(ctx context.Context, mr store.MetricReader, from, onset, to time.Time) ([]stealEvidence, error) {
	split := onset.Add(-stealLead).UnixNano()
	end := min(to.UnixNano(), onset.Add(stealEarly).UnixNano())
	byHost := map[string]*stealEvidence{}
	var order []string
	for _, name := range []string{metricSteal, metricBusy} {
		series, err := mr.FindMetrics(ctx, store.MetricQuery{Name: name, From: from.UnixNano(), To: end})
		if err != nil {
			return nil, fmt.Errorf("node metric %s: %w", name, err)
		}
		for _, s := range series {
			host := s.Labels["host.name"]
			e := byHost[host]
			if e == nil {
				e = &stealEvidence{host: host}
				byHost[host] = e
				order = append(order, host)
			}
			before, during, beforeWin, duringWin := rates(s.Points, split, end)
			if name == metricSteal {
				e.stealBefore, e.stealDuring, e.beforeWin, e.duringWin = before, during, beforeWin, duringWin
			} else {
				e.busyBefore, e.busyDuring = before, during
			}
		}
	}
	slices.Sort(order)
	out := make([]stealEvidence, 0, len(order))
	for _, h := range order {
		out = append(out, *byHost[h])
	}
	return out, nil
}

// rates are a cumulative counter's (seconds) growth in ms per second over
// the points up to split and those after it up to end, and the times
// each covers. A drop of the counter (the node rebooted: it counts since
// boot) counts from zero.
func rates(points []store.MetricPoint, split, end int64) (before, during float64, beforeWin, duringWin time.Duration) {
	for i := 1; i < len(points); i++ {
		p, q := points[i-1], points[i]
		if q.Time > end {
			break
		}
		d := q.Value - p.Value
		if d < 0 {
			d = q.Value
		}
		if q.Time <= split {
			before += d
			beforeWin += time.Duration(q.Time - p.Time)
		} else {
			during += d
			duringWin += time.Duration(q.Time - p.Time)
		}
	}
	if beforeWin > 0 {
		before = 1e3 * before / beforeWin.Seconds()
	}
	if duringWin > 0 {
		during = 1e3 * during / duringWin.Seconds()
	}
	return before, during, beforeWin, duringWin
}

// spread is how the services' growth per trace is shared: the top
// suspect's share of the positive growth, that growth, and how many
// services grew.
func spread(ranking []analysis.ServiceScore) (topShare, sum float64, grown int) {
	for _, r := range ranking {
		if r.Score > 0 {
			sum += r.Score
			grown++
		}
	}
	if sum == 0 || len(ranking) == 0 {
		return 1, sum, grown
	}
	return max(ranking[0].Score, 0) / sum, sum, grown
}

// nodeVerdict makes v the node's when steal says so (see minStealPerSec):
// no culprit service, cause cpu-contention, the nodes whose steal grew in
// Node. It returns whether it did; when steal grew but a service stands
// out, it adds the steal as evidence and leaves the verdict to the
// service's.
func nodeVerdict(v *Verdict, ranking []analysis.ServiceScore, steal []stealEvidence) bool {
	var grew []stealEvidence
	for _, e := range steal {
		if e.grew() {
			grew = append(grew, e)
		}
	}
	if len(grew) == 0 || len(ranking) == 0 {
		return false
	}
	topShare, sum, grown := spread(ranking)
	top := ranking[0]
	if topShare > maxTopShare || grown < minGrown {
		for _, e := range grew {
			v.Evidence = append(v.Evidence, "the node's CPUs were stolen from: "+e.String()+
				fmt.Sprintf("; but %s stands out (%.0f%% of the services' growth per trace)", top.Service, 100*topShare))
		}
		return false
	}
	var hosts []string
	stolen := 0.0
	for _, e := range grew {
		hosts = append(hosts, e.host)
		v.Evidence = append(v.Evidence, e.String())
		before, during := e.shares()
		stolen = max(stolen, (during-before)/during)
	}
	v.Evidence = append(v.Evidence, fmt.Sprintf("no service stands out: %d services' time per trace grew, by %.1f ms in all; the most, %s, by %.1f ms (%.0f%%): "+
		"a CPU the host takes away slows every thread that runs, each service by the CPU it uses, where a fault in one service grows its own time",
		grown, sum, top.Service, top.Score, 100*topShare))
	v.Node = strings.Join(hosts, ", ")
	v.Service = ""
	v.Cause = CauseCPUContention
	v.Confidence = round2((1 - topShare) * stolen)
	v.RunnerUp = &Alternative{Service: top.Service, Score: round2(topShare),
		Why: fmt.Sprintf("its time per trace grew the most, by %.1f ms (%.0f%% of the services' growth)", top.Score, 100*topShare)}
	return true
}
