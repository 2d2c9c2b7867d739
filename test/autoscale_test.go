package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/autoscale"
	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/mesh"
)

// TestAutoscaleScalesOutOnRunqueueLatency runs the autoscaling experiment's
// parts for real: replicas of the demo mesh's Go service (WORK=cpu=2.5ms of
// CPU time per request) in CPU-limited cgroups behind Envoy (file EDS),
// the run-queue latency from the kernel metrics' BPF programs, and the
// autoscaler loop on it. Offered 1.5 times what one replica's quota serves, the
// run-queue latency of the one replica must cross the threshold, a second
// replica must be added, and Envoy must then send the second replica a fair
// share of the requests.
func TestAutoscaleScalesOutOnRunqueueLatency(t *testing.T) {
	bpftest.SkipShort(t, "the autoscaling experiment")
	bpftest.RequireBPF(t)
	envoyBin, err := mesh.FindEnvoy()
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	const quota, work = 0.1, 2500 * time.Microsecond // one replica: at most 40 req/s
	dir := t.TempDir()
	svc := filepath.Join(dir, "svc-go")
	if out, err := exec.Command("go", "build", "-o", svc, "../demo/services/go").CombinedOutput(); err != nil {
		t.Fatalf("build the demo's Go service: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := autoscale.NewPool(autoscale.PoolConfig{
		Command: []string{svc}, Env: []string{"WORK=cpu=" + work.String()}, Max: 2, CPUQuota: quota,
		CgroupName: fmt.Sprintf("rootline-e2e-autoscale-%d", os.Getpid()), Dir: dir, Cluster: "replicas",
		Drain: time.Second, Shares: 16384,
	})
	if err != nil {
		bpftest.Missing(t, "replica cgroups: "+err.Error())
	}
	defer pool.Close()
	envoy, err := autoscale.StartEnvoy(ctx, envoyBin, dir, "replicas", pool.EDSPath(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer envoy.Close()
	if err := pool.AddInfra(envoy.PID()); err != nil {
		t.Fatal(err)
	}
	runq, err := autoscale.NewRunqSource(pool)
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	defer runq.Close()

	pol := autoscale.Policy{Name: "runq", Out: 0.5, In: 0.05, Min: 1, Max: 2, Cooldown: 3 * time.Second}
	rates := autoscale.Ramp(60, 60, 0, 0, 25, 0, 0)
	res, err := autoscale.Run(ctx, autoscale.RunConfig{Policy: pol, Interval: 2 * time.Second, Rates: rates,
		Timeout: 2 * time.Second, Pool: pool, Envoy: envoy, Cluster: "replicas", Runq: runq})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decisions %+v; summary %+v", res.Decisions, res.Summary)
	if len(res.Decisions) == 0 || res.Decisions[0].From != 1 || res.Decisions[0].To != 2 {
		t.Fatalf("decisions %+v, want a scale-out 1 → 2 first", res.Decisions)
	}
	if sig := float64(res.Decisions[0].Signal); !(sig > pol.Out) {
		t.Fatalf("scaled out on run-queue latency %v ms, want > %v", sig, pol.Out)
	}
	measured := 0
	for _, s := range res.Seconds {
		if s.RunqMs == s.RunqMs && s.RunqMs > 0 {
			measured++
		}
	}
	if measured < len(res.Seconds)/2 {
		t.Fatalf("run-queue latency measured in %d of %d seconds", measured, len(res.Seconds))
	}
	if pool.Replicas() != 2 {
		t.Fatalf("%d replicas at the end, want 2", pool.Replicas())
	}
	hosts, err := envoy.HostRequests(ctx, "replicas")
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := hosts[pool.Port(0)], hosts[pool.Port(1)]
	t.Logf("requests by Envoy per replica: r0 %d, r1 %d (scale-out at %.1f s of %d s)", r0, r1, res.Decisions[0].T, len(rates))
	if len(hosts) != 2 || r1 == 0 {
		t.Fatalf("Envoy endpoints %v, want both replicas (ports %d, %d) with requests", hosts, pool.Port(0), pool.Port(1))
	}
	// After the scale-out both replicas share the load; r0 also served the
	// seconds before it alone. r1 must have at least a third of the requests
	// Envoy sent after the scale-out, i.e. a fair share, not a trickle.
	after := float64(len(rates)) - res.Decisions[0].T
	if want := 60 * after / 3; float64(r1) < want {
		t.Fatalf("replica r1 got %d requests in the %.0f s after the scale-out, want ≥ %.0f (r0 %d)", r1, after, want, r0)
	}
}
