package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/critmetrics"
	"github.com/rootline/rootline/internal/tlsconf"
)

func init() {
	registerAnalyze("critical-metrics", analyzeCommand{
		Summary: "the few per-container kernel metrics worth keeping on (k-Shape clusters, cheapest per cluster, KS vs sidecar)",
		Run:     runCriticalMetrics,
	})
}

const criticalMetricsUsage = `Usage: rootline analyze critical-metrics (--data-dir DIR | --server URL) [flags]

Finds, offline, the few per-container kernel metrics worth keeping on, as
ViperProbe's CriticalMetrics do. Reads the kernel metrics the agents pushed
(rootline agent --kmetrics) from a stopped server's data directory or from a
running server's GET /api/v1/metrics, and for each service (its own containers,
and separately its sidecar containers):

  1. puts every metric on one time grid (--step; default the agents' push
     interval): mean latency per interval for durations, bytes per second for
     sizes, events per second for counters; z-normalises each series;
  2. clusters the series by shape with k-Shape (shape-based distance with FFT
     cross-correlation, centroids by shape extraction, 10 random starts per k);
     the number of clusters is the one of highest mean silhouette on the
     shape-based distance over k = 2…min(--max-k, metrics−1) (--k fixes it);
  3. keeps on the cheapest member of each cluster: measured BPF ns per event
     (the cost table, bench/RESULTS.md; --costs overrides) × the events per
     second the container recorded; every other metric can be turned off;
  4. compares each metric of the service with the same metric of its sidecar
     by a two-sample Kolmogorov–Smirnov test (histograms: the recorded values;
     counters: the per-interval rates).

The output is a readable summary, or with --json the full report: clusters
(members, centroid), critical (the chosen metrics per service and sidecar),
agentConfig (the PUT /api/v1/kmetrics/config requests that turn the chosen
metrics on and the rest off), the cost table and the KS tests.

--apply sends agentConfig to the agents named by --agent (each request to
every agent: the one whose node has the container takes it, the others refuse
it) and, as root on the agents' node, reports the BPF CPU time of the agent's
kernel-metric programs (km_*, from the kernel's BPF statistics) over
--apply.window before and after. That time is charged to the tasks whose
events the programs record, not to the agent process.

Times (--from, --to) are RFC 3339 (2026-11-28T10:00:00Z) or a duration before
now (30m).

Environment:
  ROOTLINE_AUTH_TOKEN   bearer token for --server and --agent (or --auth.token-file)

Flags:
`

type critFlags struct {
	dataDir, server, tokenFile string
	from, to                   string
	jsonOut                    bool
	costs                      string
	sidecar                    string
	opts                       critmetrics.Options
	rate                       uint
	apply                      bool
	agents                     []string
	window                     time.Duration
	tls                        tlsconf.Client
}

func parseCritFlags(args []string, stderr io.Writer) (critFlags, error) {
	var f critFlags
	fs := flag.NewFlagSet("rootline analyze critical-metrics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "", "a stopped server's data directory (its SQLite store)")
	fs.StringVar(&f.server, "server", "", "a running server's query API base URL (http://host:16686) instead of --data-dir")
	fs.StringVar(&f.tokenFile, "auth.token-file", "", "file holding the bearer token for --server and --agent (or set ROOTLINE_AUTH_TOKEN)")
	fs.StringVar(&f.tls.CAFile, "tls.ca-file", "", "PEM bundle of the CAs to trust for an https --server or --agent (default: the system's)")
	fs.StringVar(&f.from, "from", "", "start of the window: RFC 3339 or a duration before now (default: the first stored point)")
	fs.StringVar(&f.to, "to", "", "end of the window: RFC 3339 or a duration before now (default: the last stored point)")
	fs.BoolVar(&f.jsonOut, "json", false, "print the full report as JSON instead of the summary")
	fs.DurationVar(&f.opts.Step, "step", 0, "interval of the time grid (default: the median spacing of the stored points, the agents' push interval)")
	fs.IntVar(&f.opts.MinIntervals, "min-intervals", 8, "the fewest intervals in the window to analyse")
	fs.IntVar(&f.opts.K, "k", 0, "fix the number of clusters (default: chosen by silhouette)")
	fs.IntVar(&f.opts.MaxK, "max-k", 6, "the most clusters considered when choosing")
	fs.IntVar(&f.opts.Starts, "starts", 10, "k-Shape random starts per number of clusters (the best by inertia wins)")
	fs.Uint64Var(&f.opts.Seed, "seed", 1, "seed of the random starts (the same seed, the same answer)")
	fs.StringVar(&f.costs, "costs", "", "cost overrides in ns per event: metric=ns,metric=ns or a JSON file {\"runq\": 400}")
	fs.StringVar(&f.sidecar, "sidecar", critmetrics.DefaultSidecarPattern, "regular expression matching the container names of sidecars")
	fs.Float64Var(&f.opts.Alpha, "alpha", 0.05, "significance level of the KS tests")
	fs.UintVar(&f.rate, "sample", 1, "sampling rate the agent config sets for the chosen metrics: record 1 event in N")
	fs.BoolVar(&f.apply, "apply", false, "send the agent config to the agents (--agent) and measure the kernel metrics' BPF cost on this host before and after")
	fs.Func("agent", "an agent to --apply the config to: unix:/run/rootline/agent.sock or http(s)://host:port (repeatable; each request goes to every agent, the one with the container takes it)", func(v string) error {
		f.agents = append(f.agents, v)
		return nil
	})
	fs.DurationVar(&f.window, "apply.window", 30*time.Second, "how long --apply measures the BPF cost before and after (0: not measured)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), criticalMetricsUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if (f.dataDir == "") == (f.server == "") {
		return f, errors.New("give exactly one of --data-dir and --server")
	}
	if f.opts.K < 0 || f.opts.MaxK < 2 || f.opts.Starts < 1 || f.opts.MinIntervals < 2 {
		return f, errors.New("--k must be ≥ 0, --max-k ≥ 2, --starts ≥ 1, --min-intervals ≥ 2")
	}
	if f.opts.Alpha <= 0 || f.opts.Alpha >= 1 {
		return f, fmt.Errorf("--alpha %v: want a level in (0, 1)", f.opts.Alpha)
	}
	if f.rate < 1 || f.rate > 1<<20 {
		return f, fmt.Errorf("--sample %d: want 1…%d", f.rate, 1<<20)
	}
	f.opts.Rate = uint32(f.rate)
	if f.apply && len(f.agents) == 0 {
		return f, errors.New("--apply needs the agents: --agent unix:/run/rootline/agent.sock or --agent http://host:port")
	}
	if !f.apply && len(f.agents) > 0 {
		return f, errors.New("--agent is for --apply")
	}
	if f.window < 0 {
		return f, errors.New("--apply.window must not be negative")
	}
	if f.opts.Step < 0 {
		return f, errors.New("--step must not be negative")
	}
	re, err := regexp.Compile(f.sidecar)
	if err != nil {
		return f, fmt.Errorf("--sidecar: %w", err)
	}
	f.opts.Sidecar = re
	f.opts.Costs = critmetrics.DefaultCosts()
	if err := f.opts.Costs.ParseCosts(f.costs); err != nil {
		return f, err
	}
	now := time.Now()
	if f.opts.From, err = parseWhen(f.from, now); err != nil {
		return f, fmt.Errorf("--from: %w", err)
	}
	if f.opts.To, err = parseWhen(f.to, now); err != nil {
		return f, fmt.Errorf("--to: %w", err)
	}
	if f.opts.From != 0 && f.opts.To != 0 && f.opts.From >= f.opts.To {
		return f, errors.New("--from must be before --to")
	}
	return f, nil
}

func runCriticalMetrics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseCritFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze critical-metrics: %v\n", err)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "rootline analyze critical-metrics: %v\n", err)
		return 1
	}
	progress := func(msg string) { fmt.Fprintf(stderr, "%s\n", msg) }
	var src critmetrics.Source
	var where string
	token, err := analyzeToken(f.tokenFile)
	if err != nil {
		return fail(err)
	}
	tlsCfg, err := f.tls.Config()
	if err != nil {
		return fail(err)
	}
	if f.dataDir != "" {
		st, err := openDataDir(f.dataDir)
		if err != nil {
			return fail(err)
		}
		defer st.Close()
		src, where = critmetrics.StoreSource{Reader: st}, f.dataDir
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg
		src, where = critmetrics.APISource{URL: strings.TrimRight(f.server, "/"), Token: token,
			Client: &http.Client{Timeout: 60 * time.Second, Transport: tr}}, f.server
	}
	progress("reading kernel metrics from " + where)
	series, err := src.KernelMetrics(ctx, f.opts.From, f.opts.To)
	if err != nil {
		return fail(err)
	}
	points := 0
	for _, s := range series {
		points += len(s.Points)
	}
	progress(strconv.Itoa(len(series)) + " series, " + strconv.Itoa(points) + " points")
	f.opts.Progress = progress
	rep, err := critmetrics.Analyze(series, f.opts)
	if err != nil {
		return fail(err)
	}
	if f.apply {
		window := f.window
		if window == 0 {
			window = -1 // not measured
		}
		rep.Apply, err = critmetrics.Apply(ctx, rep.AgentConfig, critmetrics.ApplyOptions{Agents: f.agents, Token: token, TLS: tlsCfg, Window: window, Progress: progress})
		if err != nil {
			return fail(err)
		}
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(err)
		}
		return 0
	}
	rep.WriteSummary(stdout)
	return 0
}
