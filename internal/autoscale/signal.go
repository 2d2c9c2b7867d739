package autoscale

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
)

// RunqSource reads the replicas' run-queue latency from the kernel metrics
// collector (the agent's BPF programs and config, internal/kmetrics), with
// only the runq metric on and only for the replicas' cgroups.
type RunqSource struct {
	m     *kmetrics.Manager
	names map[string]int // container label -> slot
}

// NewRunqSource loads the kernel metrics programs and turns runq on for the
// pool's cgroups. It needs root and BPF; the error says why it cannot.
func NewRunqSource(p *Pool) (*RunqSource, error) {
	k, err := kmetrics.LoadKernel()
	if err != nil {
		return nil, fmt.Errorf("autoscale: kernel metrics: %w", err)
	}
	m, err := kmetrics.New(k, kmetrics.Options{})
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("autoscale: kernel metrics: %w", err)
	}
	on := true
	s := &RunqSource{m: m, names: map[string]int{}}
	for i, cg := range p.cgroups() {
		if _, err := m.Configure(kmetrics.ConfigRequest{Container: cg.path(), Metrics: []string{"runq"}, Enabled: &on}); err != nil {
			m.Close()
			return nil, fmt.Errorf("autoscale: kernel metrics for %s: %w", cg.path(), err)
		}
		s.names[containerLabel(cg)] = i
	}
	return s, nil
}

// containerLabel is the label kmetrics gives the cgroup ("cpu:/x/r0" for v1).
func containerLabel(cg *cgroup) string {
	if cg.cpu != "" {
		rel, _ := filepath.Rel(v1CPU, cg.cpu)
		return "cpu:/" + rel
	}
	rel, _ := filepath.Rel(v2Root, cg.v2)
	return "/" + rel
}

// read returns the cumulative runq (events, summed ns) per slot.
func (s *RunqSource) read() (map[int][2]uint64, error) {
	series, err := s.m.Read()
	if err != nil {
		return nil, err
	}
	out := map[int][2]uint64{}
	for _, se := range series {
		if se.Metric != kmetrics.RunqLatency {
			continue
		}
		if i, ok := s.names[se.Container]; ok {
			out[i] = [2]uint64{se.Count, se.Sum}
		}
	}
	return out, nil
}

// Close detaches the programs.
func (s *RunqSource) Close() error { return s.m.Close() }

// Meter measures both signals over the time since its previous Measure: the
// running replicas' CPU utilisation (cgroup CPU time over quota × time) and
// their mean run-queue latency per scheduling event. Each reader keeps its
// own Meter (the per-second record and the autoscaler's interval).
type Meter struct {
	pool     *Pool
	runq     *RunqSource // nil: runq is NaN
	t        time.Time
	usage    []time.Duration
	runqPrev map[int][2]uint64
}

// NewMeter starts a meter now.
func NewMeter(p *Pool, r *RunqSource) *Meter {
	m := &Meter{pool: p, runq: r}
	m.Measure()
	return m
}

// Reading is one Measure.
type Reading struct {
	// CPU is the running replicas' CPU time over their quota in the interval
	// (1 = every running replica used its whole quota).
	CPU float64
	// RunqMs is the mean run-queue latency per event of the running
	// replicas in ms, NaN when none was recorded.
	RunqMs float64
}

// Measure returns the signals since the previous call.
func (m *Meter) Measure() Reading {
	now := time.Now()
	n := m.pool.Replicas()
	cgs := m.pool.cgroups()
	usage := make([]time.Duration, len(cgs))
	for i, cg := range cgs {
		usage[i], _ = cg.usage()
	}
	r := Reading{CPU: math.NaN(), RunqMs: math.NaN()}
	if m.usage != nil && n > 0 {
		dt := now.Sub(m.t)
		var used time.Duration
		for i := range n {
			used += usage[i] - m.usage[i]
		}
		r.CPU = float64(used) / (float64(n) * m.pool.cfg.CPUQuota * float64(dt))
	}
	if m.runq != nil {
		if cur, err := m.runq.read(); err == nil {
			if m.runqPrev != nil {
				var cnt, sum uint64
				for i := range n {
					c, p := cur[i], m.runqPrev[i]
					if c[0] >= p[0] && c[1] >= p[1] {
						cnt += c[0] - p[0]
						sum += c[1] - p[1]
					}
				}
				if cnt > 0 {
					r.RunqMs = float64(sum) / float64(cnt) / 1e6
				}
			}
			m.runqPrev = cur
		}
	}
	m.t, m.usage = now, usage
	return r
}

// Signal picks the policy's signal from a reading.
func (r Reading) Signal(name string) float64 {
	if strings.HasPrefix(name, "runq") {
		return r.RunqMs
	}
	return r.CPU
}
