package diagnosis

import (
	"fmt"
	"time"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/mirage"
)

// advise turns a verdict into what to change, after the Mirage model: for
// the CPU causes the amount comes from the culprit's measured waits (its
// slow spans' run-queue and throttled time against their exclusive time,
// from the kernel critical paths), vertical when its cgroup's quota held it
// off the CPU and horizontal when it waited for CPUs it shares; the other
// causes are not capacity problems and the advice says where to look. It
// returns nil when there is no culprit or nothing measured to advise from.
// The verdict knows neither the culprit's replicas nor its quota, so the
// advice gives the factor; mirage.Advise gives absolute numbers when a
// caller knows them.
func advise(v *Verdict) *mirage.Advice {
	if v.Service == "" {
		return nil
	}
	a := &mirage.Advice{Service: v.Service, Scaling: mirage.ScaleNone}
	switch v.Cause {
	case CauseCPU, CauseCPUContention, CauseCPUThrottle:
		if v.PathSpans == 0 {
			return nil // named from profiles: no waits to size a change with
		}
		var self float64
		for state, ms := range v.Waits {
			if state != "downstream" {
				self += ms
			}
		}
		n := float64(v.PathSpans)
		per := func(ms float64) time.Duration { return time.Duration(ms / n * float64(time.Millisecond)) }
		thr, rq := v.Waits[critpath.Throttled], v.Waits[critpath.Runqueue]+v.Waits[OwnQueue]
		d := mirage.Decision{Cause: mirage.CauseLocal, Wait: per(thr + rq), Self: per(self), LocalKnown: true}
		adv := mirage.Advise(v.Service, d, mirage.Resources{Throttled: per(thr)}, 0)
		if adv.Scaling == mirage.ScaleNone && v.Cause == CauseCPU {
			adv.Explanation = fmt.Sprintf("%s: its slow requests ran on a CPU for most of their own time and waited little for one: more replicas or quota would not shorten them; its CPU profile shows the work that grew.", v.Service)
		}
		return &adv
	case CauseNetwork:
		a.Scaling, a.Peer = mirage.ScaleNetwork, v.Service
		a.Explanation = fmt.Sprintf("%s: the link to it is the bottleneck; scaling it would not help: look at the link's bandwidth, loss and delay.", v.Service)
	case CauseDownstream:
		a.Scaling = mirage.ScaleDelegate
		a.Explanation = fmt.Sprintf("%s: the time is in calls to dependencies that send no spans; the decision belongs to them.", v.Service)
	case CauseLock:
		a.Explanation = fmt.Sprintf("%s: its requests waited for a lock; more CPU or replicas would not shorten that (more replicas may if the lock is per process): see the blocking requests on the critical path.", v.Service)
	case CauseDisk:
		a.Explanation = fmt.Sprintf("%s: its requests waited for block I/O; more CPU or replicas would not shorten that: look at the device's load and the writes (fsync) on the path.", v.Service)
	case CauseGC:
		a.Explanation = fmt.Sprintf("%s: its requests waited for garbage collection; more CPU helps only the collector's share: look at the heap size and the allocation rate.", v.Service)
	case CauseMemory:
		a.Explanation = fmt.Sprintf("%s: its requests waited for memory (page faults, reclaim); raise its memory limit or cut what it holds.", v.Service)
	default:
		return nil
	}
	return a
}
