package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/rootline/rootline/internal/loadgen"
)

// RunConfig is one policy's run over one load ramp.
type RunConfig struct {
	Policy Policy
	// Interval between the autoscaler's decisions; the signal is measured
	// over it.
	Interval time.Duration
	// Rates is the offered load, one rate per second (a second at rate 0 is
	// sent at the smallest rate loadgen allows).
	Rates   []float64
	Timeout time.Duration
	Pool    *Pool
	Envoy   *Envoy
	Cluster string
	Runq    *RunqSource // nil when the kernel metrics are unavailable
	// Progress, if set, gets every second's record as it is known (without
	// the load's figures, which come at the end) and every decision.
	Progress func(Second, *Decision)
}

// Second is what one second of a run measured.
type Second struct {
	T           int     `json:"t"`
	Offered     float64 `json:"offered"`
	Sent        int64   `json:"sent"`
	Failed      int64   `json:"failed"`
	FailureRate float64 `json:"failureRate"`
	P95Ms       Num     `json:"p95Ms"`
	Replicas    int     `json:"replicas"`
	CPU         Num     `json:"cpu"`
	RunqMs      Num     `json:"runqMs"`
}

// Decision is one change of the replica count.
type Decision struct {
	T      float64 `json:"t"`
	Signal Num     `json:"signal"`
	From   int     `json:"from"`
	To     int     `json:"to"`
}

// Summary is a run's Table 4 row.
type Summary struct {
	Requests       int64   `json:"requests"`
	Failed         int64   `json:"failed"`
	FailureRate    float64 `json:"failureRate"`
	P50Ms          float64 `json:"p50Ms"`
	P95Ms          float64 `json:"p95Ms"`
	P99Ms          float64 `json:"p99Ms"`
	MeanReplicas   float64 `json:"meanReplicas"`
	ReplicaMinutes float64 `json:"replicaMinutes"`
	ReplicaCPUSec  float64 `json:"replicaCpuSeconds"`
	ScaleOuts      int     `json:"scaleOuts"`
	ScaleIns       int     `json:"scaleIns"`
}

// Result of a run.
type Result struct {
	Policy    Policy     `json:"policy"`
	Seconds   []Second   `json:"seconds"`
	Decisions []Decision `json:"decisions"`
	Summary   Summary    `json:"summary"`
}

// Run starts the pool at the policy's minimum, sends the ramp through Envoy,
// and lets the autoscaler loop scale the pool on the policy's signal.
func Run(ctx context.Context, cfg RunConfig) (Result, error) {
	p := cfg.Policy
	if err := p.Validate(); err != nil {
		return Result{}, err
	}
	if p.Max > len(cfg.Pool.slots) {
		return Result{}, fmt.Errorf("%w: max %d replicas but the pool has %d", ErrPolicy, p.Max, len(cfg.Pool.slots))
	}
	if len(cfg.Rates) == 0 {
		return Result{}, fmt.Errorf("autoscale: no load")
	}
	if err := cfg.Pool.Scale(ctx, p.Min); err != nil {
		return Result{}, err
	}
	if err := cfg.Envoy.WaitHosts(ctx, cfg.Cluster, p.Min, 10*time.Second); err != nil {
		return Result{}, err
	}
	phases := make([]loadgen.Phase, len(cfg.Rates))
	for i, r := range cfg.Rates {
		phases[i] = loadgen.Phase{Rate: max(r, 0.5), Duration: time.Second}
	}
	cpu0 := cfg.Pool.totalUsage()
	res := Result{Policy: p}
	var mu sync.Mutex
	seconds := make([]Second, len(cfg.Rates))

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	// The per-second record.
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := NewMeter(cfg.Pool, cfg.Runq)
		for i := range seconds {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Until(start.Add(time.Duration(i+1) * time.Second))):
			}
			r := m.Measure()
			s := Second{T: i, Offered: cfg.Rates[i], Replicas: cfg.Pool.Replicas(), CPU: Num(r.CPU), RunqMs: Num(r.RunqMs)}
			mu.Lock()
			seconds[i] = s
			mu.Unlock()
			if cfg.Progress != nil {
				cfg.Progress(s, nil)
			}
		}
	}()
	// The autoscaler.
	wg.Add(1)
	var scaleErr error
	go func() {
		defer wg.Done()
		m := NewMeter(cfg.Pool, cfg.Runq)
		last := start
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			sig := m.Measure().Signal(p.Name)
			n := cfg.Pool.Replicas()
			want := p.Decide(sig, n, time.Since(last))
			if want == n {
				continue
			}
			d := Decision{T: time.Since(start).Seconds(), Signal: Num(sig), From: n, To: want}
			if err := cfg.Pool.Scale(runCtx, want); err != nil {
				if runCtx.Err() == nil {
					scaleErr = err
					cancel()
				}
				return
			}
			last = time.Now()
			// The scaling interval restarts after the change: the change
			// itself (replica start, drain) is not measured as load.
			m.Measure()
			mu.Lock()
			res.Decisions = append(res.Decisions, d)
			mu.Unlock()
			if cfg.Progress != nil {
				cfg.Progress(Second{}, &d)
			}
		}
	}()
	lr, err := loadgen.Run(runCtx, loadgen.Config{URL: cfg.Envoy.URL, Phases: phases, Timeout: cfg.Timeout, MaxInFlight: 512})
	cancel()
	wg.Wait()
	if scaleErr != nil {
		return res, scaleErr
	}
	if err != nil && ctx.Err() != nil {
		return res, err
	}
	res.Seconds = seconds
	var replicaSec float64
	for i := range res.Seconds {
		s := &res.Seconds[i]
		if i < len(lr.Phases) {
			ph := lr.Phases[i]
			s.Sent, s.Failed = ph.Scheduled, ph.Errors
			s.FailureRate = ph.ErrorRate()
			s.P95Ms = Num(float64(ph.P95()) / 1e6)
			if ph.Latency.Count() == 0 {
				s.P95Ms = Num(math.NaN())
			}
		}
		replicaSec += float64(s.Replicas)
	}
	t := lr.Total
	res.Summary = Summary{
		Requests: t.Scheduled, Failed: t.Errors, FailureRate: t.ErrorRate(),
		P50Ms: float64(t.P50()) / 1e6, P95Ms: float64(t.P95()) / 1e6, P99Ms: float64(t.P99()) / 1e6,
		MeanReplicas:   replicaSec / float64(len(res.Seconds)),
		ReplicaMinutes: replicaSec / 60,
		ReplicaCPUSec:  (cfg.Pool.totalUsage() - cpu0).Seconds(),
	}
	for _, d := range res.Decisions {
		if d.To > d.From {
			res.Summary.ScaleOuts++
		} else {
			res.Summary.ScaleIns++
		}
	}
	return res, nil
}

// totalUsage is the CPU time of every slot's cgroup.
func (p *Pool) totalUsage() time.Duration {
	var t time.Duration
	for _, cg := range p.cgroups() {
		u, _ := cg.usage()
		t += u
	}
	return t
}

// Ramp is a load of one rate per second: low for lead seconds, up to high
// over up seconds, high for hold, back down to low over down, low for tail.
func Ramp(low, high float64, lead, up, hold, down, tail int) []float64 {
	var out []float64
	for range lead {
		out = append(out, low)
	}
	for i := range up {
		out = append(out, low+(high-low)*float64(i+1)/float64(up))
	}
	for range hold {
		out = append(out, high)
	}
	for i := range down {
		out = append(out, high-(high-low)*float64(i+1)/float64(down))
	}
	for range tail {
		out = append(out, low)
	}
	return out
}

// Num is a float that is null in JSON when it is NaN (nothing measured).
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON reads null as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	err := json.Unmarshal(b, &f)
	*n = Num(f)
	return err
}
