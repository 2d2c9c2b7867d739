// Command autoscale runs the autoscaling experiment of CriticalMetrics
// (docs/critical-metrics.md): replicas of one of the demo mesh's services
// (demo/services/, with cpu= work per request) in CPU-limited cgroups behind
// a real Envoy (file-based EDS), one load ramp per policy,
// and an autoscaler loop scaling on the replicas' CPU utilisation or on their
// run-queue latency from the kernel metrics collector. It writes every run's
// per-second record (results.json) and the Table 4 analogue (table.md) to
// --out; bench/autoscale.sh wraps it and draws the plots.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/autoscale"
	"github.com/rootline/rootline/internal/mesh"
)

const cluster = "replicas"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "autoscale:", err)
		os.Exit(1)
	}
}

type options struct {
	out                            string
	policies                       []string
	repeats, max                   int
	quota                          float64
	work                           time.Duration
	low, high                      float64
	lead, up, hold, down, tail     int
	interval, cooldown, settle     time.Duration
	timeout                        time.Duration
	cpuOut, cpuIn, runqOut, runqIn float64
	envoy                          string
	shares                         int
	language, repo                 string
}

func run() error {
	var o options
	var policies string
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: autoscale [flags]

Runs the autoscaling experiment (docs/critical-metrics.md): --max replicas of
one of the demo mesh's services (--language, built under --repo by make
demo-services; WORK=cpu=--work, that much CPU time per request, so a replica
saturates at about --quota / --work requests per second), each in its own cgroup
limited to --quota CPUs, behind a real Envoy whose endpoints follow the replica
count through a file-based EDS; a load ramp (--low → --high req/s and back, one
rate per second); and an autoscaler loop that every --interval scales by one
replica (cooldown --cooldown) on one signal per policy:

  cpu   the running replicas' CPU time over their quota (cgroup cpuacct), out
        above --cpu-out, in below --cpu-in (the Kubernetes HPA's signal)
  runq  the replicas' mean run-queue latency per scheduling event in ms, from
        the kernel metrics collector's BPF programs (internal/kmetrics), out
        above --runq-out, in below --runq-in

Each policy runs the same ramp, --repeats times, interleaved (ABBA...). Every
second of every run is recorded (offered rate, failures, p95, replicas, both
signals) in --out/results.json; the table of failure rate, p95, mean replicas
and replica-minutes per policy is printed and written to --out/table.md.
Needs root (cgroups, BPF) and Envoy (scripts/deps.sh).

Flags:
`)
		flag.PrintDefaults()
	}
	flag.StringVar(&o.out, "out", "", "output directory (default: a new directory under /tmp)")
	flag.StringVar(&policies, "policies", "cpu,runq", "policies to run, comma-separated (cpu, runq)")
	flag.IntVar(&o.repeats, "repeats", 1, "runs per policy")
	flag.IntVar(&o.max, "max", 4, "maximum replicas")
	flag.Float64Var(&o.quota, "quota", 0.1, "CPU quota per replica, in CPUs")
	flag.DurationVar(&o.work, "work", 2500*time.Microsecond, "CPU time per request: the service's WORK=cpu=")
	flag.StringVar(&o.language, "language", "go", "the demo service the replicas run: go, java or python (demo/services/)")
	flag.StringVar(&o.repo, "repo", ".", "the repository whose build/demo (make demo-services) and demo/services hold the service")
	flag.Float64Var(&o.low, "low", 10, "lowest offered rate, req/s")
	flag.Float64Var(&o.high, "high", 100, "highest offered rate, req/s")
	flag.IntVar(&o.lead, "lead", 20, "seconds at --low before the ramp")
	flag.IntVar(&o.up, "up", 60, "seconds of the ramp up")
	flag.IntVar(&o.hold, "hold", 40, "seconds at --high")
	flag.IntVar(&o.down, "down", 60, "seconds of the ramp down")
	flag.IntVar(&o.tail, "tail", 40, "seconds at --low after the ramp")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "autoscaler interval (the signal is measured over it)")
	flag.DurationVar(&o.cooldown, "cooldown", 15*time.Second, "no scaling within this long of the previous change")
	flag.DurationVar(&o.settle, "settle", 10*time.Second, "idle time between runs")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Second, "request timeout (a timed-out request is a failure)")
	flag.Float64Var(&o.cpuOut, "cpu-out", 0.7, "cpu policy: scale out above this utilisation of the quota")
	flag.Float64Var(&o.cpuIn, "cpu-in", 0.3, "cpu policy: scale in below this utilisation")
	flag.Float64Var(&o.runqOut, "runq-out", 0.5, "runq policy: scale out above this mean run-queue latency, ms")
	flag.Float64Var(&o.runqIn, "runq-in", 0.2, "runq policy: scale in below this mean run-queue latency, ms")
	flag.IntVar(&o.shares, "shares", 16384, "CPU weight (cgroup v1 cpu.shares) of the experiment's cgroup (replicas, Envoy, load generator); 0 leaves the default 1024")
	flag.StringVar(&o.envoy, "envoy", "", "Envoy binary (default: as the demo mesh finds it)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see --help)", flag.Arg(0))
	}
	o.policies = strings.Split(policies, ",")
	pols := map[string]autoscale.Policy{
		"cpu":  {Name: "cpu", Out: o.cpuOut, In: o.cpuIn, Min: 1, Max: o.max, Cooldown: o.cooldown},
		"runq": {Name: "runq", Out: o.runqOut, In: o.runqIn, Min: 1, Max: o.max, Cooldown: o.cooldown},
	}
	for _, p := range o.policies {
		pol, ok := pols[p]
		if !ok {
			return fmt.Errorf("unknown policy %q (cpu, runq)", p)
		}
		if err := pol.Validate(); err != nil {
			return err
		}
	}
	if o.repeats < 1 || o.interval <= 0 || o.quota <= 0 || o.work <= 0 || o.low <= 0 || o.high < o.low {
		return fmt.Errorf("need --repeats ≥ 1, --interval, --quota, --work > 0 and 0 < --low ≤ --high")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (cgroups with CPU quotas, BPF for the run-queue latency)")
	}
	if o.envoy == "" {
		var err error
		if o.envoy, err = mesh.FindEnvoy(); err != nil {
			return err
		}
	}
	if o.out == "" {
		o.out = filepath.Join(os.TempDir(), "rootline-autoscale-"+time.Now().UTC().Format("20060102-150405"))
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	command := mesh.DefaultServiceCmd(o.repo)(mesh.Service{Language: o.language})
	if len(command) == 0 {
		return fmt.Errorf("unknown --language %q (go, java, python)", o.language)
	}
	// The interpreter on PATH, and the build output or script in the repository.
	if _, err := exec.LookPath(command[0]); err != nil {
		return fmt.Errorf("the %s demo service: %w (run make demo-services, or give --repo)", o.language, err)
	}
	for _, a := range command[1:] {
		if strings.Contains(a, string(filepath.Separator)) && !strings.HasPrefix(a, "-") {
			if _, err := os.Stat(a); err != nil {
				return fmt.Errorf("the %s demo service: %w (run make demo-services, or give --repo)", o.language, err)
			}
		}
	}
	work := "cpu=" + o.work.String()
	pool, err := autoscale.NewPool(autoscale.PoolConfig{
		Command: command, Env: []string{"WORK=" + work}, Max: o.max, CPUQuota: o.quota,
		CgroupName: fmt.Sprintf("rootline-autoscale-%d", os.Getpid()), Dir: o.out, Cluster: cluster,
		Drain: time.Second, Logger: logger, Shares: o.shares,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.AddInfra(os.Getpid()); err != nil {
		return err
	}
	envoy, err := autoscale.StartEnvoy(ctx, o.envoy, o.out, cluster, pool.EDSPath(), o.timeout)
	if err != nil {
		return err
	}
	defer envoy.Close()
	if err := pool.AddInfra(envoy.PID()); err != nil {
		return err
	}
	runq, err := autoscale.NewRunqSource(pool)
	if err != nil {
		return err
	}
	defer runq.Close()

	rates := autoscale.Ramp(o.low, o.high, o.lead, o.up, o.hold, o.down, o.tail)
	capacity := o.quota / o.work.Seconds()
	fmt.Printf("autoscale: %d replicas max of the %s demo service (%s), %.2f CPU each, WORK=%s: one replica serves at most about %.0f req/s\n",
		o.max, o.language, strings.Join(command, " "), o.quota, work, capacity)
	fmt.Printf("autoscale: ramp %g → %g → %g req/s over %d s per run; Envoy at %s; output in %s\n",
		o.low, o.high, o.low, len(rates), envoy.URL, o.out)
	var results []autoscale.Result
	for r := range o.repeats {
		order := o.policies
		if r%2 == 1 { // ABBA: drift of the shared machine hits both policies alike
			order = reversed(order)
		}
		for _, name := range order {
			pol := pols[name]
			if len(results) > 0 {
				if err := pool.Scale(ctx, pol.Min); err != nil {
					return err
				}
				fmt.Printf("autoscale: settling %v\n", o.settle)
				select {
				case <-time.After(o.settle):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			fmt.Printf("autoscale: run %d, policy %s (out > %g, in < %g, every %v, cooldown %v)\n",
				r+1, name, pol.Out, pol.In, o.interval, o.cooldown)
			res, err := autoscale.Run(ctx, autoscale.RunConfig{
				Policy: pol, Interval: o.interval, Rates: rates, Timeout: o.timeout,
				Pool: pool, Envoy: envoy, Cluster: cluster, Runq: runq,
				Progress: func(s autoscale.Second, d *autoscale.Decision) {
					if d != nil {
						fmt.Printf("  %5.1fs  %s %.3g: %d → %d replicas\n", d.T, name, float64(d.Signal), d.From, d.To)
					} else if s.T%10 == 9 {
						fmt.Printf("  %5ds  %5.1f req/s offered  %d replicas  cpu %.2f  runq %.3f ms\n",
							s.T+1, s.Offered, s.Replicas, float64(s.CPU), float64(s.RunqMs))
					}
				},
			})
			if err != nil {
				return err
			}
			s := res.Summary
			fmt.Printf("autoscale: %s: %d requests, %.2f %% failed, p95 %.1f ms, mean %.2f replicas, %.2f replica-minutes, %.1f replica CPU-s\n",
				name, s.Requests, 100*s.FailureRate, s.P95Ms, s.MeanReplicas, s.ReplicaMinutes, s.ReplicaCPUSec)
			results = append(results, res)
			if err := writeResults(o, command, results); err != nil {
				return err
			}
		}
	}
	table := tableMarkdown(o, results)
	fmt.Print(table)
	return os.WriteFile(filepath.Join(o.out, "table.md"), []byte(table), 0o644)
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func writeResults(o options, command []string, results []autoscale.Result) error {
	host, _ := os.Hostname()
	doc := map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "host": host, "args": os.Args[1:],
		"service": command, "language": o.language, "workPerRequest": o.work.String(), "quota": o.quota,
		"interval": o.interval.String(), "cooldown": o.cooldown.String(), "runs": results,
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "results.json"), b, 0o644)
}

// tableMarkdown is the Table 4 analogue: one row per run, and per policy the
// mean and the spread (min–max) over its runs.
func tableMarkdown(o options, results []autoscale.Result) string {
	var b strings.Builder
	b.WriteString("| policy | run | requests | failure rate | p50 ms | p95 ms | p99 ms | mean replicas | replica-minutes | replica CPU-s | outs/ins |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	runNo := map[string]int{}
	for _, r := range results {
		s := r.Summary
		runNo[r.Policy.Name]++
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f %% | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %d/%d |\n",
			r.Policy.Name, runNo[r.Policy.Name], s.Requests, 100*s.FailureRate, s.P50Ms, s.P95Ms, s.P99Ms,
			s.MeanReplicas, s.ReplicaMinutes, s.ReplicaCPUSec, s.ScaleOuts, s.ScaleIns)
	}
	for _, name := range o.policies {
		var fr, p95, rep []float64
		for _, r := range results {
			if r.Policy.Name == name {
				fr = append(fr, 100*r.Summary.FailureRate)
				p95 = append(p95, r.Summary.P95Ms)
				rep = append(rep, r.Summary.MeanReplicas)
			}
		}
		if len(fr) > 1 {
			fmt.Fprintf(&b, "| %s | mean (min–max) of %d | | %s %% | | %s | | %s | | | |\n", name, len(fr),
				spread(fr, "%.2f"), spread(p95, "%.1f"), spread(rep, "%.2f"))
		}
	}
	return b.String()
}

func spread(v []float64, f string) string {
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range v {
		lo, hi, sum = math.Min(lo, x), math.Max(hi, x), sum+x
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", sum/float64(len(v)), lo, hi)
}
