// Command meshoverhead reproduces Protractor's Table 6.3 (the Protractor
// thesis, KTH 2018, §6.2) on
// this machine: latency percentiles and error rates of the demo mesh at
// several request rates, (a) with Envoy sidecars and no tracing, and (b) the
// same plus all of Rootline — server (detection, captures, store), agent with
// its profilers, every service under `rootline run`, sidecars tracing to the
// server. Modes alternate in each round on the same machine. Two more modes
// split (b): envoy+rootline-no-run (no supervisor; the agent discovers the
// JVMs), envoy+rootline-no-sidecar-tracing (everything, but the sidecars do
// not trace: the spans come from `rootline run` alone), envoy+run (server
// and `rootline run` only, no agent, so no profiler or kernel recorder
// follows the services) and envoy+tracing (the sidecars' tracing and the
// server alone). A mode with agent flags after a
// colon, e.g. envoy+rootline:profilers=jfr:kmetrics=true, runs the agent
// with --profilers=jfr --kmetrics=true: variants of one mode side by side
// (a comma inside a value is written "/": profilers=cpu/kernel). A mode
// with a label after "#" runs once more in each round: envoy#2 against
// envoy is the A/A control, how far the baseline's p95 moves by itself.
// Δp95 is given for the medians over the rounds and round by round.
//
// Every mode also reports the machine's busy CPU per request (all
// processes, /proc/stat), steadier than the latency percentiles on a
// shared VM and what the percentiles grow from once the CPUs are busy.
//
// For (b) it also reports Rootline's network bytes per request — every
// packet to and from the server's ports (OTLP from sidecars and supervisors,
// agent registration, heartbeats and artifact uploads; IP and TCP headers
// included, as in Protractor's formula), counted by iptables rules so that
// nothing copies the traffic, plus the header lines `rootline run` adds —
// and the server's CPU per 1,000 spans.
//
//	sudo go run ./bench/meshoverhead --rootline bin/rootline
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/loadgen"
	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/overhead"
)

// allModes are the modes -modes accepts (see the package comment).
var allModes = []string{"envoy", "envoy+rootline", "envoy+rootline-no-run", "envoy+rootline-no-sidecar-tracing", "envoy+run", "envoy+tracing"}

type result struct {
	overhead.Latency
	serverCPUPer1kSpan time.Duration
	bytesPerReq        float64
	spansPerReq        float64
	agentCPU           float64 // share of one core, jcmd and other helpers included
	machinePerReq      time.Duration
	byCommand          map[string]time.Duration // CPU per request
	capturesPerMin     float64                  // captures that ran (not skipped by the rate limits)
}

func main() {
	rootline := flag.String("rootline", "bin/rootline", "rootline binary")
	repo := flag.String("repo", ".", "repository root (build/demo, demo/services)")
	topoFile := flag.String("topology", "", "topology YAML (default: the built-in ten services)")
	rates := flag.String("rates", "10,25,40", "request rates (per second)")
	duration := flag.Duration("duration", 20*time.Second, "measured load per rate")
	rounds := flag.Int("rounds", 2, "rounds; each runs every mode at every rate")
	modeList := flag.String("modes", "envoy,envoy+rootline,envoy+rootline-no-run,envoy+run",
		"modes, comma-separated: envoy (no tracing), envoy+rootline (everything), envoy+rootline-no-run (no rootline run), envoy+rootline-no-sidecar-tracing (everything but the sidecars' spans), envoy+run (server and rootline run only, no agent), envoy+tracing (sidecars tracing to the server, nothing else); MODE:flag=value/value… passes flags to the agent, MODE@PATH runs the rootline binary at PATH (two builds side by side), MODE#LABEL runs MODE once more (envoy#2: an A/A control of the baseline)")
	warmup := flag.Duration("warmup", 3*time.Second, "load before each measured rate (the first one after the mesh starts gets 3× as much: JIT warm-up of the JVMs)")
	byCommand := flag.Int("by-command", 0, "also print, per mode and rate, the N commands that used the most CPU per request (rootline run, envoy, java…; medians over the rounds)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail(fmt.Errorf("needs root (pod mode)"))
	}
	self, err := filepath.Abs(*rootline)
	check(err)
	topo := mesh.Default()
	if *topoFile != "" {
		topo, err = mesh.Load(*topoFile)
		check(err)
	}
	envoy, err := mesh.FindEnvoy()
	check(err)
	rateList, err := overhead.ParseRates(*rates)
	check(err)
	modes := strings.Split(*modeList, ",")
	if modes[0] != "envoy" {
		fail(fmt.Errorf("-modes must start with envoy, the baseline"))
	}
	for _, m := range modes {
		base, agentFlags := splitMode(m)
		if !slices.Contains(allModes, base) {
			fail(fmt.Errorf("unknown mode %q", m))
		}
		if len(agentFlags) > 0 && !strings.HasPrefix(base, "envoy+rootline") {
			fail(fmt.Errorf("mode %q: agent flags but no agent", m))
		}
	}
	res := map[string]map[float64][]result{}
	for _, m := range modes {
		res[m] = map[float64][]result{}
	}
	for round := range *rounds {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			for rate, r := range runMode(self, *repo, envoy, topo, mode, rateList, *duration, *warmup) {
				res[mode][rate] = append(res[mode][rate], r)
				fmt.Fprintf(os.Stderr, "round %d %-21s %3.0f/s p50 %v p95 %v p99 %v errors %d/%d machine CPU/request %v agent CPU %.1f%% captures/min %.1f\n",
					round+1, mode, rate, r.P50, r.P95, r.P99, r.Errors, r.Sent, r.machinePerReq.Round(10*time.Microsecond), 100*r.agentCPU, r.capturesPerMin)
			}
		}
	}
	fmt.Printf("| rate (req/s) | mode | p50 | p95 | Δp95 vs envoy | Δp95 round by round | p99 | errors | machine CPU/request | Rootline bytes/request | spans/request | server CPU per 1,000 spans | agent CPU | captures/min |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rateList {
		a := med(res["envoy"][rate])
		for _, m := range modes {
			b := med(res[m][rate])
			extra := "| – | – | – | – | – |"
			if m != "envoy" {
				extra = fmt.Sprintf("| %.0f | %.1f | %v | %.1f%% | %.1f |", b.bytesPerReq, b.spansPerReq,
					b.serverCPUPer1kSpan.Round(time.Millisecond), 100*b.agentCPU, b.capturesPerMin)
			}
			fmt.Printf("| %.0f | %s | %v | %v | %+.1f%% | %s | %v | %.2f%% | %v %s\n", rate, m,
				ms(b.P50), ms(b.P95), 100*(float64(b.P95)/float64(a.P95)-1), byRound(res["envoy"][rate], res[m][rate]), ms(b.P99), b.ErrorPercent(),
				ms(b.machinePerReq), extra)
		}
	}
	if *byCommand > 0 {
		printByCommand(modes, rateList, res, *byCommand)
	}
}

// byRound is each round's Δp95 of a mode against the baseline of the same
// round (modes alternate within a round, so the pair saw the same hour of
// the machine).
func byRound(base, mode []result) string {
	var out []string
	for i := range min(len(base), len(mode)) {
		out = append(out, fmt.Sprintf("%+.1f", 100*(float64(mode[i].P95)/float64(base[i].P95)-1)))
	}
	return strings.Join(out, " / ")
}

// printByCommand prints the n commands with the most CPU per request, per
// rate and mode (median over the rounds).
func printByCommand(modes []string, rates []float64, res map[string]map[float64][]result, n int) {
	fmt.Printf("\nCPU per request by command (median over the rounds):\n\n| rate (req/s) | mode | commands |\n|---|---|---|\n")
	for _, rate := range rates {
		for _, m := range modes {
			names := map[string]bool{}
			for _, r := range res[m][rate] {
				for c := range r.byCommand {
					names[c] = true
				}
			}
			type cmdCPU struct {
				name string
				cpu  time.Duration
			}
			var cs []cmdCPU
			for c := range names {
				cs = append(cs, cmdCPU{c, overhead.MedianOf(res[m][rate], func(r result) time.Duration { return r.byCommand[c] })})
			}
			slices.SortFunc(cs, func(a, b cmdCPU) int { return int(b.cpu - a.cpu) })
			var parts []string
			for _, c := range cs[:min(n, len(cs))] {
				parts = append(parts, fmt.Sprintf("%s %s", c.name, ms(c.cpu)))
			}
			fmt.Printf("| %.0f | %s | %s |\n", rate, m, strings.Join(parts, ", "))
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// med takes each statistic's median over the rounds.
func med(rs []result) result {
	return result{
		Latency:            overhead.MedianLatency(rs, func(r result) overhead.Latency { return r.Latency }),
		serverCPUPer1kSpan: overhead.MedianOf(rs, func(r result) time.Duration { return r.serverCPUPer1kSpan }),
		bytesPerReq:        overhead.MedianOf(rs, func(r result) float64 { return r.bytesPerReq }),
		spansPerReq:        overhead.MedianOf(rs, func(r result) float64 { return r.spansPerReq }),
		agentCPU:           overhead.MedianOf(rs, func(r result) float64 { return r.agentCPU }),
		capturesPerMin:     overhead.MedianOf(rs, func(r result) float64 { return r.capturesPerMin }),
		machinePerReq:      overhead.MedianOf(rs, func(r result) time.Duration { return r.machinePerReq }),
	}
}

// splitMode splits a mode into its base mode and the agent flags after it
// (envoy+rootline:profilers=cpu/jfr → envoy+rootline, [--profilers=cpu,jfr]);
// a binary after "@" (envoy+rootline@/tmp/old/rootline) is dropped here
// (see modeBinary).
func splitMode(mode string) (string, []string) {
	mode, _, _ = strings.Cut(copyOf(mode), "@")
	parts := strings.Split(mode, ":")
	var flags []string
	for _, p := range parts[1:] {
		flags = append(flags, "--"+strings.ReplaceAll(p, "/", ","))
	}
	return parts[0], flags
}

// copyOf is the mode a labelled copy runs: "envoy#2" is envoy again, an
// A/A control of the baseline in the same rounds.
func copyOf(mode string) string {
	if i := strings.LastIndexByte(mode, '#'); i >= 0 {
		return mode[:i]
	}
	return mode
}

// modeBinary is the rootline binary of a mode: the one after "@" (server,
// agent and rootline run of another build, to compare two side by side), or
// self.
func modeBinary(mode, self string) string {
	if _, bin, ok := strings.Cut(copyOf(mode), "@"); ok {
		if abs, err := filepath.Abs(bin); err == nil {
			return abs
		}
		return bin
	}
	return self
}

// runMode starts the mesh in one mode and measures every rate.
func runMode(self, repo, envoy string, topo *mesh.Topology, modeName string, rates []float64, d, warmup time.Duration) map[float64]result {
	ctx := context.Background()
	self = modeBinary(modeName, self)
	mode, agentFlags := splitMode(modeName)
	dir, err := os.MkdirTemp("", "meshoverhead-")
	check(err)
	defer os.RemoveAll(dir)
	opts := mesh.Options{Mode: mesh.ModePod, Dir: filepath.Join(dir, "mesh"), EnvoyBin: envoy,
		ServiceCmd: mesh.DefaultServiceCmd(repo), Logger: slog.New(slog.DiscardHandler)}
	var srv, agent *exec.Cmd
	var counted *byteCounter
	var queryAddr string
	if mode != "envoy" {
		var grpcAddr, httpAddr string
		// As in the demo: the pods reach the agent's API, so it takes a token.
		tokenFile, err := demo.WriteToken(dir)
		check(err)
		srv, grpcAddr, httpAddr, queryAddr = startServer(self, dir, tokenFile)
		defer stop(srv)
		counted = countBytes(grpcAddr, httpAddr, queryAddr)
		defer counted.close()
		pod := func(h string) string {
			_, port, _ := net.SplitHostPort(h)
			return net.JoinHostPort("10.77.0.1", port)
		}
		opts.Tracing, opts.OTLPEndpoint, opts.Expose = mode != "envoy+rootline-no-sidecar-tracing", grpcAddr, []string{httpAddr}
		agentURL := "" // no agent to register with
		if strings.HasPrefix(mode, "envoy+rootline") {
			// Without the supervisor nothing registers the services: the
			// agent discovers them (JVMs, OTEL_SERVICE_NAME) itself.
			var agentAddr string
			agent, agentAddr = startAgent(self, "http://"+queryAddr, mode == "envoy+rootline-no-run", append(agentFlags, "--auth.token-file", tokenFile))
			defer stop(agent)
			opts.Expose = append(opts.Expose, agentAddr)
			agentURL = "http://" + pod(agentAddr)
		}
		if mode != "envoy+rootline-no-run" && mode != "envoy+tracing" {
			check(demo.ShareDatapath()) // as the demo does
			opts.Wrap = func(svc string, argv []string) []string {
				return append([]string{self, "run", "--service", svc, "--server", "http://" + pod(httpAddr),
					"--agent", agentURL, "--auth.token-file", tokenFile, "--"}, argv...)
			}
		}
	}
	m, err := mesh.Start(ctx, topo, opts)
	check(err)
	defer m.Close()
	check(demo.WaitServing(ctx, m.EntryURL(), 90*time.Second))
	out := map[float64]result{}
	for i, rate := range rates {
		w := warmup
		if i == 0 {
			w *= 3
		}
		_, _ = loadgen.Run(ctx, loadgen.Config{URL: m.EntryURL(), Phases: []loadgen.Phase{{Rate: rate, Duration: w}}})
		var cpu0, agentCPU0 time.Duration
		var spans0, captures0 float64
		var bytes0 int64
		if srv != nil {
			cpu0, spans0, bytes0 = overhead.CPU(srv.Process.Pid), metric(queryAddr, storedSpans), counted.total()
			captures0 = metric(queryAddr, capturesTotal, skipped)
		}
		if agent != nil {
			agentCPU0 = overhead.CPUWithChildren(agent.Process.Pid)
		}
		begun, machine0, commands0 := time.Now(), overhead.MachineCPU(), overhead.CPUByCommand()
		r, err := loadgen.Run(ctx, loadgen.Config{URL: m.EntryURL(), Phases: []loadgen.Phase{{Rate: rate, Duration: d}}})
		check(err)
		pr := r.Phases[0]
		sent := time.Duration(max(pr.Sent, 1))
		res := result{Latency: overhead.Measured(pr),
			machinePerReq: (overhead.MachineCPU() - machine0) / sent, byCommand: map[string]time.Duration{}}
		for c, cpu := range overhead.CPUByCommand() {
			res.byCommand[c] = (cpu - commands0[c]) / sent
		}
		if srv != nil {
			time.Sleep(2 * time.Second) // the last batches
			took := time.Since(begun)
			if agent != nil {
				res.agentCPU = float64(overhead.CPUWithChildren(agent.Process.Pid)-agentCPU0) / float64(took)
			}
			res.capturesPerMin = (metric(queryAddr, capturesTotal, skipped) - captures0) / took.Minutes()
			spans := metric(queryAddr, storedSpans) - spans0
			cpu := overhead.CPU(srv.Process.Pid) - cpu0
			if spans > 0 {
				res.serverCPUPer1kSpan = time.Duration(float64(cpu) / spans * 1000)
			}
			// Header lines rootline run adds per hop: propagation on each
			// request (~330 bytes), timing on each response (~90 bytes).
			added := 0.0
			if opts.Wrap != nil {
				visits := 0
				for _, n := range topo.Visits() {
					visits += n
				}
				added = float64(visits) * (330 + 90)
			}
			res.bytesPerReq = float64(counted.total()-bytes0)/float64(max(pr.Sent, 1)) + added
			res.spansPerReq = spans / float64(max(pr.Sent, 1))
		}
		out[rate] = res
	}
	return out
}

func startServer(self, dir, tokenFile string) (*exec.Cmd, string, string, string) {
	addrs := freeAddrs(4)
	cmd := exec.Command(self, "server", "--data-dir", filepath.Join(dir, "data"), "--log.level", "warn", "--auth.token-file", tokenFile,
		"--otlp.grpc.addr", addrs[0], "--otlp.http.addr", addrs[1], "--query.addr", addrs[2], "--zipkin.addr", addrs[3])
	cmd.Stderr = os.Stderr
	check(cmd.Start())
	waitHTTP("http://" + addrs[2] + "/readyz")
	return cmd, addrs[0], addrs[1], addrs[2]
}

func startAgent(self, server string, discover bool, flags []string) (*exec.Cmd, string) {
	addr := freeAddrs(1)[0]
	args := append([]string{"agent", "--server", server, "--listen", addr, fmt.Sprint("--discover=", discover), "--log.level", "warn"}, flags...)
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	check(cmd.Start())
	waitHTTP("http://" + addr + "/healthz")
	return cmd, addr
}

func stop(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGTERM)
	_ = c.Wait()
}

func waitHTTP(u string) {
	for i := 0; i < 200; i++ {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail(fmt.Errorf("%s never answered", u))
}

func freeAddrs(n int) []string {
	var ls []net.Listener
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		check(err)
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// byteCounter counts the bytes of every packet to and from a set of local
// TCP ports with iptables rules (the kernel counts; nothing copies the
// traffic), leaving out this process's own queries, which come from
// queryIP.
type byteCounter struct{}

// queryIP is the source address of this program's own requests to the
// server (metrics), which byteCounter leaves out.
const queryIP = "127.0.0.2"

// Chains of the filter table: packets to the ports (INPUT) and from them
// (OUTPUT). Loopback packets traverse both hooks, so each chain matches one
// direction only.
const (
	chainIn  = "meshoverhead-in"
	chainOut = "meshoverhead-out"
)

func countBytes(addrs ...string) *byteCounter {
	c := &byteCounter{}
	c.close() // a killed run's leftovers
	rules := []string{"*filter", ":" + chainIn + " - [0:0]", ":" + chainOut + " - [0:0]",
		"-A INPUT -j " + chainIn, "-A OUTPUT -j " + chainOut}
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		check(err)
		rules = append(rules, fmt.Sprintf("-A %s ! -s %s/32 -p tcp --dport %s", chainIn, queryIP, port),
			fmt.Sprintf("-A %s ! -d %s/32 -p tcp --sport %s", chainOut, queryIP, port))
	}
	cmd := exec.Command("iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(strings.Join(append(rules, "COMMIT"), "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("count the server's bytes: iptables-restore: %w: %s", err, out))
	}
	return c
}

// total sums the counters' bytes.
func (c *byteCounter) total() int64 {
	var n int64
	for _, ch := range []string{chainIn, chainOut} {
		out, err := exec.Command("iptables", "-t", "filter", "-n", "-v", "-x", "-L", ch).Output()
		check(err)
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] != "pkts" {
				if b, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					n += b
				}
			}
		}
	}
	return n
}

func (c *byteCounter) close() {
	for _, r := range [][]string{
		{"-D", "INPUT", "-j", chainIn}, {"-D", "OUTPUT", "-j", chainOut},
		{"-F", chainIn}, {"-F", chainOut}, {"-X", chainIn}, {"-X", chainOut},
	} {
		_ = exec.Command("iptables", r...).Run()
	}
}

// queryClient makes this program's own requests to the server from
// queryIP, so that byteCounter leaves them out.
var queryClient = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
	LocalAddr: &net.TCPAddr{IP: net.ParseIP(queryIP)}}).DialContext}}

const (
	storedSpans   = "rootline_pipeline_spans_stored_total"
	capturesTotal = "rootline_captures_total" // by final state
	skipped       = `state="skipped"`         // captures that did not run
)

// metric sums the server's samples of one metric over its labels, leaving
// out the series whose labels contain one of except.
func metric(query, name string, except ...string) float64 {
	resp, err := queryClient.Get("http://" + query + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' ||
			slices.ContainsFunc(except, func(e string) bool { return strings.Contains(rest, e) }) {
			continue
		}
		fields := strings.Fields(rest)
		f, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		sum += f
	}
	return sum
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "meshoverhead:", err)
	os.Exit(1)
}
