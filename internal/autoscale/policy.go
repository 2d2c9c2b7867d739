// Package autoscale runs the autoscaling experiment of CriticalMetrics
// (ViperProbe, "Rethinking Microservice Observability with eBPF", §5.4):
// replicas of one of the demo mesh's services (demo/services/, whose cpu=
// work is CPU time, so a throttled replica saturates as a CPU-bound service
// does), each in its own CPU-limited cgroup, behind
// a real Envoy whose endpoints follow the replica count (file-based EDS), and
// an autoscaler loop that scales them on one signal — the replicas' CPU
// utilisation, or their run-queue latency from the agent's kernel metrics.
package autoscale

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrPolicy is returned (wrapped) for a policy that cannot work.
var ErrPolicy = errors.New("autoscale: bad policy")

// Policy scales between Min and Max replicas on one signal, one replica per
// step: out when the signal is above Out, in when it is below In, and never
// within Cooldown of the previous change (the signal needs that long to show
// the effect of a change; without it the loop oscillates).
type Policy struct {
	// Name labels the policy in output ("cpu", "runq").
	Name     string
	Out, In  float64
	Min, Max int
	Cooldown time.Duration
}

// Validate reports a policy that cannot work: no room to scale, or thresholds
// that overlap (a signal both above Out and below In).
func (p Policy) Validate() error {
	switch {
	case p.Min < 1:
		return fmt.Errorf("%w: min replicas %d < 1", ErrPolicy, p.Min)
	case p.Max < p.Min:
		return fmt.Errorf("%w: max replicas %d < min %d", ErrPolicy, p.Max, p.Min)
	case !(p.In < p.Out):
		return fmt.Errorf("%w: scale-in threshold %g must be below scale-out threshold %g", ErrPolicy, p.In, p.Out)
	case p.Cooldown < 0:
		return fmt.Errorf("%w: negative cooldown", ErrPolicy)
	}
	return nil
}

// Decide returns the replica count the loop should have after one step: the
// signal's value now, the replica count now, and the time since the previous
// change. A NaN signal (nothing measured in the interval) keeps the count; so
// does a count outside [Min, Max] only move toward the range.
func (p Policy) Decide(signal float64, replicas int, sinceChange time.Duration) int {
	if replicas < p.Min {
		return p.Min
	}
	if replicas > p.Max {
		return p.Max
	}
	if math.IsNaN(signal) || sinceChange < p.Cooldown {
		return replicas
	}
	switch {
	case signal > p.Out && replicas < p.Max:
		return replicas + 1
	case signal < p.In && replicas > p.Min:
		return replicas - 1
	}
	return replicas
}
