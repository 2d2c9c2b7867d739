package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/kmetrics"
)

// critReport is the part of `rootline analyze critical-metrics --json` the
// test reads.
type critReport struct {
	Intervals int                 `json:"intervals"`
	Critical  map[string][]string `json:"critical"`
	Services  []critService       `json:"services"`
	Apply     *struct {
		Applied int `json:"applied"`
		Agents  []struct {
			Agent    string `json:"agent"`
			Accepted int    `json:"accepted"`
		} `json:"agents"`
		Refused []struct {
			Container string   `json:"container"`
			Errors    []string `json:"errors"`
		} `json:"refused"`
		Before       *critCost `json:"before"`
		After        *critCost `json:"after"`
		OverheadNote string    `json:"overheadNote"`
	} `json:"apply"`
	AgentConfig []struct {
		Container string   `json:"container"`
		Metrics   []string `json:"metrics"`
		Enabled   *bool    `json:"enabled"`
		Rate      *uint32  `json:"rate"`
	} `json:"agentConfig"`
}

type critCost struct {
	Programs      int     `json:"programs"`
	RunsPerSecond float64 `json:"runsPerSecond"`
	NsPerSecond   float64 `json:"nsPerSecond"`
	NsPerRun      float64 `json:"nsPerRun"`
}

type critService struct {
	Service string   `json:"service"`
	App     *critGrp `json:"app"`
	Sidecar *critGrp `json:"sidecar"`
	Error   string   `json:"error"`
	KS      []critKS `json:"ks"`
}

type critGrp struct {
	Containers []string `json:"containers"`
	Metrics    []struct {
		Metric          string  `json:"metric"`
		EventsPerSecond float64 `json:"eventsPerSecond"`
		CostNsPerSecond float64 `json:"costNsPerSecond"`
	} `json:"metrics"`
	Flat     []string `json:"flat"`
	K        int      `json:"k"`
	Clusters []struct {
		Members []struct {
			Metric string  `json:"metric"`
			SBD    float64 `json:"sbd"`
		} `json:"members"`
		Centroid       []float64 `json:"centroid"`
		Representative string    `json:"representative"`
	} `json:"clusters"`
	Critical []string `json:"critical"`
	Off      []string `json:"off"`
}

type critKS struct {
	Metric    string  `json:"metric"`
	D         float64 `json:"d"`
	P         float64 `json:"p"`
	Different bool    `json:"different"`
}

// kmContainer is a container of the agent's GET /api/v1/kmetrics.
type kmContainer struct {
	Name   string `json:"name"`
	Config map[string]struct {
		Enabled bool   `json:"enabled"`
		Rate    uint32 `json:"rate"`
	} `json:"config"`
}

func (g *critGrp) clusterOf(metric string) int {
	for j, c := range g.Clusters {
		for _, m := range c.Members {
			if m.Metric == metric {
				return j
			}
		}
	}
	return -1
}

// TestCriticalMetricsOnRecordedKernelMetrics records real kernel metrics
// (rootline agent --kmetrics, every metric on) of a workload with known
// shapes and a "sidecar" beside it, then runs `rootline analyze
// critical-metrics` on them, against the running server and on its data
// directory once stopped, and applies the agent config it proposes to the
// agent. The workload (test/testdata/kphases) sends over loopback to itself,
// so the bytes it sends and receives are one shape; it writes 64 KiB where
// its sidecar writes 100 bytes and burns CPU in long bursts where the
// sidecar barely runs, so the KS tests must tell them apart.
func TestCriticalMetricsOnRecordedKernelMetrics(t *testing.T) {
	bpftest.RequireBPF(t)
	bin := buildTestdata(t, "kphases")
	const service = "cm-svc"
	runFor := 30 * time.Second
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		cg  string
	}
	var procs []proc
	for _, mode := range []string{"app", "sidecar"} {
		name := fmt.Sprintf("rootline-e2e-cm-%d-app", os.Getpid())
		if mode == "sidecar" {
			name += "-sidecar"
		}
		dir := testCgroup(t, name)
		cmd := exec.Command(bin, "-mode", mode, "-duration", runFor.String())
		in, _ := cmd.StdinPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{cmd: cmd, in: in, cg: "/" + name})
	}

	dataDir := t.TempDir()
	srv := startServer(t, dataDir)
	ag := startAgent(t, srv, "--profilers", "cpu",
		"--target", fmt.Sprintf("pid=%d,service=%s", procs[0].cmd.Process.Pid, service),
		"--target", fmt.Sprintf("pid=%d,service=%s", procs[1].cmd.Process.Pid, service),
		"--kmetrics", "--kmetrics.enable", "all", "--kmetrics.push-interval", "500ms",
		"--kmetrics.otlp-url", "http://"+srv.http+"/v1/metrics")

	// The window: whole seconds inside the run, so that both sources read
	// the same points.
	time.Sleep(time.Second) // a first push before the work starts
	start := time.Now()
	for _, p := range procs {
		fmt.Fprintln(p.in, "go")
	}
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
	time.Sleep(2 * time.Second) // the last pushes
	from := start.Truncate(time.Second).Add(time.Second).UTC().Format(time.RFC3339)
	to := start.Add(runFor).Truncate(time.Second).UTC().Format(time.RFC3339)
	window := []string{"--from", from, "--to", to, "--json"}

	live := analyzeCrit(t, append([]string{"--server", "http://" + srv.query}, window...)...)
	if live.Intervals < 40 {
		t.Fatalf("%d intervals in %s … %s, want ≥ 40 of 500 ms", live.Intervals, from, to)
	}
	// Every metric is on for every container the agent sees, so the report
	// has other services too (whatever else runs on this machine).
	si := slices.IndexFunc(live.Services, func(s critService) bool { return s.Service == service })
	if si < 0 {
		t.Fatalf("no service %s in %+v", service, live.Services)
	}
	s := live.Services[si]
	if s.Error != "" || s.App == nil || s.Sidecar == nil {
		t.Fatalf("service %s: error %q, app %v, sidecar %v", service, s.Error, s.App, s.Sidecar)
	}
	if !slices.Equal(s.App.Containers, []string{procs[0].cg}) || !slices.Equal(s.Sidecar.Containers, []string{procs[1].cg}) {
		t.Fatalf("containers: app %v sidecar %v, want %s and %s", s.App.Containers, s.Sidecar.Containers, procs[0].cg, procs[1].cg)
	}
	for _, g := range []*critGrp{s.App, s.Sidecar} {
		checkGroup(t, g)
	}
	// Every byte the app sends over loopback it receives: one shape.
	app := s.App
	send, recv := app.clusterOf("tcp_send_bytes"), app.clusterOf("tcp_recv_bytes")
	if send < 0 || send != recv {
		t.Errorf("tcp_send_bytes in cluster %d, tcp_recv_bytes in %d: want one cluster (clusters %+v)", send, recv, app.Clusters)
	}
	if app.clusterOf("oncpu") < 0 || app.clusterOf("page_faults_user") < 0 {
		t.Errorf("the app's CPU bursts or page faults have no cluster: %+v (flat %v)", app.Clusters, app.Flat)
	}
	// The KS tests see the app's 64 KiB writes and long CPU bursts against
	// the sidecar's 100-byte writes and short runs.
	// Every app write is 64 KiB and every sidecar write 100 bytes: the two
	// distributions of sizes barely overlap (D near 1).
	for _, want := range []struct {
		metric string
		minD   float64
	}{{"tcp_send_bytes", 0.9}, {"oncpu", 0}} {
		i := slices.IndexFunc(s.KS, func(k critKS) bool { return k.Metric == want.metric })
		if i < 0 {
			t.Errorf("no KS test of %s: %+v", want.metric, s.KS)
			continue
		}
		if k := s.KS[i]; !k.Different || k.P > 1e-6 || k.D < want.minD {
			t.Errorf("KS %s app vs sidecar: %+v, want different (D ≥ %g, p ≤ 1e-6)", want.metric, k, want.minD)
		}
	}
	if !slices.Equal(live.Critical[service], app.Critical) || !slices.Equal(live.Critical[service+" sidecar"], s.Sidecar.Critical) {
		t.Errorf("critical %v does not match the groups' %v and %v", live.Critical, app.Critical, s.Sidecar.Critical)
	}

	// --apply sends the config to the agent, which takes it: after it, each
	// container records exactly its critical metrics.
	ours := 0
	for _, req := range live.AgentConfig {
		if req.Container == procs[0].cg || req.Container == procs[1].cg {
			ours++
		}
	}
	if ours != 4 {
		t.Errorf("%d config requests for the two containers, want 4 (critical on, the rest off, each)", ours)
	}
	applied := analyzeCrit(t, append([]string{"--server", "http://" + srv.query, "--apply", "--agent", "unix:" + ag.socket, "--apply.window", "3s"}, window...)...)
	a := applied.Apply
	if a == nil {
		t.Fatal("no apply section in the report")
	}
	for _, rf := range a.Refused {
		if rf.Container == procs[0].cg || rf.Container == procs[1].cg {
			t.Errorf("the agent refused the config of %s: %v", rf.Container, rf.Errors)
		}
	}
	if a.Applied < ours || len(a.Agents) != 1 || a.Agents[0].Accepted != a.Applied {
		t.Errorf("apply: %+v", a)
	}
	// The agent's programs ran before and after (every metric stays on by
	// default for the rest of the machine), measured by the kernel.
	for _, c := range []*critCost{a.Before, a.After} {
		if c == nil || c.Programs < 10 || c.RunsPerSecond <= 0 || c.NsPerSecond <= 0 {
			t.Errorf("BPF cost before %+v after %+v (note %q)", a.Before, a.After, a.OverheadNote)
			break
		}
	}
	client := unixHTTP(ag.socket)
	var state struct {
		Containers []kmContainer `json:"containers"`
	}
	resp, err := client.Get("http://agent/api/v1/kmetrics")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&state)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		cg       string
		critical []string
	}{{procs[0].cg, app.Critical}, {procs[1].cg, s.Sidecar.Critical}} {
		i := slices.IndexFunc(state.Containers, func(c kmContainer) bool { return c.Name == want.cg })
		if i < 0 {
			t.Errorf("the agent has no entry for %s after the config: %+v", want.cg, state.Containers)
			continue
		}
		var on []string
		for m, c := range state.Containers[i].Config {
			if c.Enabled {
				on = append(on, m)
			}
		}
		slices.Sort(on)
		crit := slices.Sorted(slices.Values(want.critical))
		if !slices.Equal(on, crit) {
			t.Errorf("%s records %v after the config, want its critical metrics %v", want.cg, on, crit)
		}
	}

	// The stopped server's data directory gives the same answer.
	if err := srv.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("server exit: %v", err)
	}
	offline := analyzeCrit(t, append([]string{"--data-dir", dataDir}, window...)...)
	if offline.Intervals != live.Intervals || fmt.Sprint(offline.Critical) != fmt.Sprint(live.Critical) {
		t.Errorf("data dir: %d intervals, critical %v; server: %d intervals, critical %v",
			offline.Intervals, offline.Critical, live.Intervals, live.Critical)
	}
	if a.Before != nil && a.After != nil {
		t.Logf("applied %d requests; kernel metrics' BPF cost before %+v, after %+v", a.Applied, *a.Before, *a.After)
	}
	// And the summary for people says the same.
	out, err := exec.Command(rootlineBin(t), "analyze", "critical-metrics", "--data-dir", dataDir, "--from", from, "--to", to).Output()
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	if !strings.Contains(string(out), "critical: "+strings.Join(app.Critical, ", ")) {
		t.Errorf("summary lacks the app's critical metrics %v:\n%s", app.Critical, out)
	}
	t.Logf("summary:\n%s", out)
}

// checkGroup checks what holds for any recorded data: the clusters
// partition the metrics with a shape, each keeps its cheapest member, and
// the critical and off metrics cover every metric once.
func checkGroup(t *testing.T, g *critGrp) {
	t.Helper()
	cost := map[string]float64{}
	for _, m := range g.Metrics {
		cost[m.Metric] = m.CostNsPerSecond
	}
	seen := map[string]bool{}
	if len(g.Clusters) != g.K || g.K < 1 {
		t.Errorf("k = %d with %d clusters", g.K, len(g.Clusters))
	}
	for _, c := range g.Clusters {
		if len(c.Members) == 0 {
			t.Errorf("empty cluster %+v", c)
			continue
		}
		best := c.Members[0].Metric
		for _, m := range c.Members {
			if seen[m.Metric] {
				t.Errorf("%s in two clusters", m.Metric)
			}
			seen[m.Metric] = true
			if m.SBD < -1e-9 || m.SBD > 2 {
				t.Errorf("%s: SBD %g outside [0, 2]", m.Metric, m.SBD)
			}
			if cost[m.Metric] < cost[best] {
				best = m.Metric
			}
		}
		if cost[c.Representative] != cost[best] {
			t.Errorf("cluster keeps %s (%.0f ns/s), %s is cheaper (%.0f ns/s)", c.Representative, cost[c.Representative], best, cost[best])
		}
	}
	for _, f := range g.Flat {
		if seen[f] {
			t.Errorf("%s both flat and clustered", f)
		}
		seen[f] = true
	}
	if len(seen) != len(g.Metrics) {
		t.Errorf("%d metrics clustered or flat, %d recorded", len(seen), len(g.Metrics))
	}
	if len(g.Critical) != len(g.Clusters) || len(g.Critical)+len(g.Off) != len(kmetrics.Metrics()) {
		t.Errorf("critical %v, off %v", g.Critical, g.Off)
	}
}

func analyzeCrit(t *testing.T, args ...string) critReport {
	t.Helper()
	cmd := exec.Command(rootlineBin(t), append([]string{"analyze", "critical-metrics"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootline analyze critical-metrics %v: %v\n%s", args, err, stderr.String())
	}
	var r critReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return r
}

// unixHTTP is a client of the agent's unix socket.
func unixHTTP(socket string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
}
