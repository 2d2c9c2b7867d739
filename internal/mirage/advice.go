package mirage

import (
	"fmt"
	"math"
	"time"
)

// Resources is what is known of a service's allocation and its kernel
// evidence, for Advise.
type Resources struct {
	// Replicas running; zero: unknown, and horizontal advice gives the
	// factor only.
	Replicas int
	// CPUQuota is each replica's CPU limit in cores (its cgroup's
	// cpu.max or cfs_quota/cfs_period); zero: no limit or not known (a
	// throttled time says there is one), and vertical advice gives the
	// factor only.
	CPUQuota float64
	// Throttled is the time the service's threads spent throttled by that
	// quota per request over the same window as the waits (cgroup cpu.stat
	// throttled time divided by requests); zero when not measured. Throttled
	// time is part of the local wait: a throttled thread is runnable and
	// waits for its group's next period.
	Throttled time.Duration
}

// Scaling is the kind of action advised.
type Scaling string

// Kinds of advice.
const (
	ScaleNone       Scaling = "none"       // nothing to do
	ScaleVertical   Scaling = "vertical"   // more CPU quota per replica
	ScaleHorizontal Scaling = "horizontal" // more replicas
	ScaleNetwork    Scaling = "network"    // the link, not the service
	ScaleDelegate   Scaling = "delegate"   // the decision belongs to a downstream
)

// Advice is what to change for a decision.
type Advice struct {
	Service string  `json:"service"`
	Scaling Scaling `json:"scaling"`
	Peer    string  `json:"peer,omitempty"` // for network and delegate
	// From and To are the replicas (horizontal) or the per-replica quota in
	// cores (vertical), zero when not known; Factor is To/From's target
	// ratio before rounding.
	From   float64 `json:"from,omitempty"`
	To     float64 `json:"to,omitempty"`
	Factor float64 `json:"factor,omitempty"`
	// Share is the local wait's share of the hop's own time (its latency
	// less the time in calls), the measurement the amount comes from.
	Share       float64 `json:"share,omitempty"`
	Explanation string  `json:"explanation"`
}

// DefaultTargetShare is the share of its own time a request may wait for a
// CPU after scaling, when Advise is given none.
const DefaultTargetShare = 0.1

// maxFactor caps one step: a share near 1 would otherwise ask for an
// unbounded capacity, and an autoscaler reaches the rest in further steps.
const maxFactor = 4

// Advise turns service's decision (a Window's Summary or a hop's Decision)
// into autoscaling advice. For a local decision the amount comes from the
// local wait's share s of the hop's own time: a request that needed
// (1−s)·self of CPU got it stretched over self, so it received 1−s of the
// capacity it could use; giving the service (1−target)/(1−s) times its
// capacity brings the share down to target (a first-order estimate that
// assumes the capacity is shared out evenly; an autoscaler repeats it until
// the share settles). Vertical (more quota) when most of the local wait was
// throttling by the service's CPU quota; horizontal (more replicas) when it
// was run-queue wait on CPUs the service does not own alone.
func Advise(service string, d Decision, r Resources, target float64) Advice {
	if target <= 0 || target >= 1 {
		target = DefaultTargetShare
	}
	a := Advice{Service: service, Scaling: ScaleNone, Peer: d.Peer}
	switch d.Cause {
	case CauseNone:
		a.Explanation = fmt.Sprintf("%s: no bottleneck (%s).", service, d.Reason)
		return a
	case CauseNetwork:
		a.Scaling = ScaleNetwork
		a.Explanation = fmt.Sprintf("%s: the link to %s is the bottleneck (%s of network wait per request); scaling %s would not help: raise the link's bandwidth or place the two closer.",
			service, d.Peer, round(d.Wait), service)
		return a
	case CauseRemote:
		a.Scaling = ScaleDelegate
		a.Explanation = fmt.Sprintf("%s: the wait is below %s (%s per request); the decision belongs to %s's own view.",
			service, d.Peer, round(d.Wait), d.Peer)
		return a
	}
	self := d.Self
	if self <= 0 {
		self = d.Duration
	}
	if self <= 0 {
		a.Explanation = fmt.Sprintf("%s: local wait of %s but no latency to compare it with.", service, round(d.Wait))
		return a
	}
	a.Share = min(1, float64(d.Wait)/float64(self))
	if a.Share <= target {
		a.Explanation = fmt.Sprintf("%s: its local wait is %.0f%% of its own time, within the %.0f%% target.", service, 100*a.Share, 100*target)
		return a
	}
	raw := (1 - target) / math.Max(1-a.Share, 1e-9)
	a.Factor = min(maxFactor, raw)
	// goal ends each explanation: what the change is expected to do.
	goal := fmt.Sprintf("to bring the wait to %.0f%%", 100*target)
	if raw > maxFactor {
		goal = fmt.Sprintf("as a first step toward a %.0f%% wait (the estimate, ×%.1f, is capped at ×%d per step)", 100*target, raw, maxFactor)
	}
	throttledShare := 0.0
	if d.Wait > 0 {
		throttledShare = min(1, float64(r.Throttled)/float64(d.Wait))
	}
	if throttledShare >= 0.5 {
		a.Scaling = ScaleVertical
		if r.CPUQuota <= 0 {
			a.Explanation = fmt.Sprintf("%s: its requests waited %.0f%% of their own time for a CPU, %.0f%% of that throttled by its CPU quota: raise the quota ×%.2f %s.",
				service, 100*a.Share, 100*throttledShare, a.Factor, goal)
			return a
		}
		a.From = r.CPUQuota
		a.To = math.Ceil(r.CPUQuota*a.Factor*10) / 10
		a.Explanation = fmt.Sprintf("%s: its requests waited %.0f%% of their own time for a CPU, %.0f%% of that throttled by its %.2g-core quota: raise the quota to %.2g cores (×%.2f) %s.",
			service, 100*a.Share, 100*throttledShare, r.CPUQuota, a.To, a.Factor, goal)
		return a
	}
	a.Scaling = ScaleHorizontal
	why := "in the run queue"
	if r.Throttled > 0 {
		why = fmt.Sprintf("in the run queue (%.0f%% of it throttled by its quota)", 100*throttledShare)
	}
	if r.Replicas <= 0 {
		a.Explanation = fmt.Sprintf("%s: its requests waited %.0f%% of their own time for a CPU, %s: the CPUs it runs on are saturated; run ×%.2f as many replicas, on CPUs not already busy, %s.",
			service, 100*a.Share, why, a.Factor, goal)
		return a
	}
	a.From = float64(r.Replicas)
	a.To = math.Ceil(float64(r.Replicas) * a.Factor)
	a.Explanation = fmt.Sprintf("%s: its requests waited %.0f%% of their own time for a CPU, %s: the CPUs it runs on are saturated; run %.0f replicas instead of %d (×%.2f) %s.",
		service, 100*a.Share, why, a.To, r.Replicas, a.Factor, goal)
	return a
}
