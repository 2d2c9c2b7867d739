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
// (a comma inside a value is written "/": profilers=cpu/kernel); a flag
// named run.X goes to every `rootline run` as -X instead
// (envoy+rootline-no-sidecar-tracing:run.propagate=w3c is the demo's
// default, which writes W3C trace context alone), one named server.X to the
// mode's server as --X (after -server-flags). A mode
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
// split by sender, the spans per export request each receiver got, and the
// server's CPU per 1,000 spans.
//
// On a machine shared with other work the machine's CPU counts that work
// too: "own CPU" is the CPU of the mesh's processes (apps, `rootline run`,
// sidecars), the server and the agent, with their children. Each mode's
// own CPU per request minus the baseline's in the same round is given with
// a 95 % interval over the rounds (paired rounds: a pair saw the same state
// of the machine). Before the load, each mode's fixed costs are measured
// with no load (--idle): CPU per second by command, bytes per second.
//
// The demo's default (`rootline demo --spans run`: the sidecars do not
// trace where `rootline run` does) is envoy+rootline-no-sidecar-tracing;
// envoy+rootline is --spans both, envoy+rootline-no-run is close to
// --spans sidecar. The mesh gets its own --prefix and --subnet, so that it
// runs beside a demo.
//
//	sudo go run ./bench/meshoverhead --rootline bin/rootline
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/loadgen"
	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/overhead"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// allModes are the modes -modes accepts (see the package comment).
var allModes = []string{"envoy", "envoy+rootline", "envoy+rootline-no-run", "envoy+rootline-no-sidecar-tracing", "envoy+run", "envoy+tracing"}

type result struct {
	overhead.Latency
	serverCPUPer1kSpan time.Duration
	bytesPerReq        float64
	bytesBy            map[string]float64 // per request, by sender (see senders)
	spansPerReq        float64
	spansPerBatch      map[string]float64 // by receiver (otlp_grpc: the sidecars; otlp_http: rootline run)
	agentCPU           float64            // share of one core, jcmd and other helpers included
	machinePerReq      time.Duration
	ownPerReq          time.Duration            // the mesh's and Rootline's processes only (see ownPIDs)
	byCommand          map[string]time.Duration // CPU per request, of those processes
	capturesPerMin     float64                  // captures that ran (not skipped by the rate limits)
	incidents          float64                  // incidents the server opened in the measured window
}

// idle is a mode's fixed cost: CPU per second of wall time with the mesh up
// and no load, by command (the agent with its children), and the bytes per
// second to and from the server.
type idle struct {
	machine   time.Duration            // ms of CPU per s, all processes
	own       time.Duration            // the mesh's and Rootline's processes
	byCommand map[string]time.Duration // of those processes
	agent     time.Duration
	bytes     float64
}

func main() {
	rootline := flag.String("rootline", "bin/rootline", "rootline binary")
	repo := flag.String("repo", ".", "repository root (build/demo, demo/services)")
	topoFile := flag.String("topology", "", "topology YAML (default: the built-in ten services)")
	rates := flag.String("rates", "10,25,40", "request rates (per second)")
	duration := flag.Duration("duration", 20*time.Second, "measured load per rate")
	rounds := flag.Int("rounds", 2, "rounds; each runs every mode at every rate")
	modeList := flag.String("modes", "envoy,envoy+rootline,envoy+rootline-no-run,envoy+run",
		"modes, comma-separated: envoy (no tracing), envoy+rootline (everything), envoy+rootline-no-run (no rootline run), envoy+rootline-no-sidecar-tracing (everything but the sidecars' spans), envoy+run (server and rootline run only, no agent), envoy+tracing (sidecars tracing to the server, nothing else); MODE:flag=value/value… passes flags to the agent (MODE:run.flag=value to every rootline run, e.g. run.propagate=w3c), MODE@PATH runs the rootline binary at PATH (two builds side by side), MODE#LABEL runs MODE once more (envoy#2: an A/A control of the baseline)")
	warmup := flag.Duration("warmup", 3*time.Second, "load before each measured rate (the first one after the mesh starts gets 3× as much: JIT warm-up of the JVMs)")
	byCommand := flag.Int("by-command", 0, "also print, per mode and rate, the N commands that used the most CPU per request (rootline run, envoy, java…; medians over the rounds)")
	idleFor := flag.Duration("idle", 10*time.Second, "after the rates, measure each mode's fixed costs (CPU per second by command, bytes per second) this long with no load; 0 skips")
	prefix := flag.String("prefix", "mo", "prefix of the mesh's network namespaces, bridge and veths (another mesh on the machine, e.g. the demo's \"rl\", needs another)")
	serverFlags := flag.String("server-flags", "", "more flags for every mode's server, space-separated (e.g. \"--capture.min-interval=1h\": captures at most once per process and hour, to measure ingest alone)")
	subnet := flag.String("subnet", "10.79.0.0/24", "the pods' /24 (.1 is the bridge); distinct from any other mesh's on the machine")
	flag.StringVar(&profileDir, "server-profile", "", "write a CPU profile of each mode's server over each measured load into this directory (MODE-RATE-N.pprof; go tool pprof reads it); the profiler's own cost, ~1 %, is in the server's CPU")
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
		base, flags := splitMode(m)
		if !slices.Contains(allModes, base) {
			fail(fmt.Errorf("unknown mode %q", m))
		}
		agentFlags, runFlags, srvFlags := splitRunFlags(flags)
		if len(srvFlags) > 0 && copyOf(base) == "envoy" {
			fail(fmt.Errorf("mode %q: server flags but no server", m))
		}
		if len(agentFlags) > 0 && !strings.HasPrefix(base, "envoy+rootline") {
			fail(fmt.Errorf("mode %q: agent flags but no agent", m))
		}
		if len(runFlags) > 0 && (base == "envoy" || base == "envoy+rootline-no-run" || base == "envoy+tracing") {
			fail(fmt.Errorf("mode %q: rootline run flags but no rootline run", m))
		}
		runFormats(runFlags) // fails on a bad -propagate or -timing-header
	}
	gw, err := demo.SubnetGateway(*subnet)
	check(err)
	res := map[string]map[float64][]result{}
	idles := map[string][]idle{}
	for _, m := range modes {
		res[m] = map[float64][]result{}
	}
	for round := range *rounds {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			out, id := runMode(self, *repo, envoy, topo, meshPlace{*prefix, *subnet, gw}, mode, rateList, *duration, *warmup, *idleFor, strings.Fields(*serverFlags))
			for rate, r := range out {
				res[mode][rate] = append(res[mode][rate], r)
				fmt.Fprintf(os.Stderr, "round %d %-21s %3.0f/s p50 %v p95 %v p99 %v errors %d/%d machine CPU/request %v own %v agent CPU %.1f%% captures/min %.1f incidents %.0f bytes/request %.0f\n",
					round+1, mode, rate, r.P50, r.P95, r.P99, r.Errors, r.Sent, r.machinePerReq.Round(10*time.Microsecond), r.ownPerReq.Round(10*time.Microsecond), 100*r.agentCPU, r.capturesPerMin, r.incidents, r.bytesPerReq)
			}
			if id != nil {
				idles[mode] = append(idles[mode], *id)
				fmt.Fprintf(os.Stderr, "round %d %-21s idle: machine %v/s own %v/s agent %v/s bytes %.0f/s\n", round+1, mode, id.machine, id.own, id.agent, id.bytes)
			}
		}
	}
	fmt.Printf("| rate (req/s) | mode | p50 | p95 | Δp95 vs envoy | Δp95 round by round | p99 | errors | machine CPU/request | own CPU/request | Rootline bytes/request | spans/request | server CPU per 1,000 spans | agent CPU | captures/min | incidents opened, round by round |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rateList {
		a := med(res["envoy"][rate])
		for _, m := range modes {
			b := med(res[m][rate])
			extra := "| – | – | – | – | – | – |"
			if copyOf(m) != "envoy" { // the baseline and its A/A copies have no Rootline
				var inc []string
				for _, r := range res[m][rate] {
					inc = append(inc, fmt.Sprintf("%.0f", r.incidents))
				}
				extra = fmt.Sprintf("| %.0f | %.1f | %v | %.1f%% | %.1f | %s |", b.bytesPerReq, b.spansPerReq,
					b.serverCPUPer1kSpan.Round(time.Millisecond), 100*b.agentCPU, b.capturesPerMin, strings.Join(inc, " / "))
			}
			fmt.Printf("| %.0f | %s | %v | %v | %+.1f%% | %s | %v | %.2f%% | %v | %v %s\n", rate, m,
				ms(b.P50), ms(b.P95), 100*(float64(b.P95)/float64(a.P95)-1), byRound(res["envoy"][rate], res[m][rate]), ms(b.P99), b.ErrorPercent(),
				ms(b.machinePerReq), ms(b.ownPerReq), extra)
		}
	}
	printPaired(modes, rateList, res)
	printBytes(modes, rateList, res)
	if len(idles) > 0 {
		printIdle(modes, rateList, res, idles)
	}
	if *byCommand > 0 {
		printByCommand(modes, rateList, res, *byCommand)
	}
}

// printPaired prints each mode's CPU per request minus the baseline's in
// the same round, as a mean with its 95 % interval over the rounds: what
// Rootline (or the A/A control's noise) adds per request. "Own" is the CPU
// of the mesh's and Rootline's processes, the machine's is everything the
// CPUs did (other work on a shared machine included).
func printPaired(modes []string, rates []float64, res map[string]map[float64][]result) {
	fmt.Printf("\nCPU per request minus the envoy baseline's in the same round (mean over the rounds, 95 %% interval, Student's t):\n\n")
	fmt.Printf("| rate (req/s) | mode | Δ own CPU/request | Δ machine CPU/request | rounds |\n|---|---|---|---|---|\n")
	for _, rate := range rates {
		base := res["envoy"][rate]
		for _, m := range modes[1:] {
			var own, machine []float64
			for i := range min(len(base), len(res[m][rate])) {
				r := res[m][rate][i]
				own = append(own, float64(r.ownPerReq-base[i].ownPerReq)/1e6)
				machine = append(machine, float64(r.machinePerReq-base[i].machinePerReq)/1e6)
			}
			om, oh := overhead.PairedCI(own)
			mm, mh := overhead.PairedCI(machine)
			fmt.Printf("| %.0f | %s | %+.2f ± %.2f ms | %+.2f ± %.2f ms | %d |\n", rate, m, om, oh, mm, mh, len(own))
		}
	}
}

// printBytes prints the bytes per request by sender and the spans per
// request (batch) each receiver got (medians over the rounds).
func printBytes(modes []string, rates []float64, res map[string]map[float64][]result) {
	fmt.Printf("\nRootline's bytes per request by sender (IP bytes both ways; medians over the rounds) and spans per export request:\n\n")
	fmt.Printf("| rate (req/s) | mode | total |")
	for _, s := range senders {
		fmt.Printf(" %s |", s)
	}
	fmt.Printf(" spans per batch: sidecars (OTLP/gRPC) | spans per batch: OTLP/HTTP (rootline run or the relay) |\n|---|---|---|%s---|---|\n", strings.Repeat("---|", len(senders)))
	for _, rate := range rates {
		for _, m := range modes {
			rs := res[m][rate]
			if m == "envoy" || copyOf(m) == "envoy" || len(rs) == 0 {
				continue
			}
			fmt.Printf("| %.0f | %s | %.0f |", rate, m, overhead.MedianOf(rs, func(r result) float64 { return r.bytesPerReq }))
			for _, s := range senders {
				fmt.Printf(" %.0f |", overhead.MedianOf(rs, func(r result) float64 { return r.bytesBy[s] }))
			}
			for _, rcv := range []string{"otlp_grpc", "otlp_http"} {
				fmt.Printf(" %.1f |", overhead.MedianOf(rs, func(r result) float64 { return r.spansPerBatch[rcv] }))
			}
			fmt.Println()
		}
	}
}

// printIdle prints each mode's fixed costs: CPU per second with no load (the
// machine's, and the Rootline processes' and the JVMs' by command), against
// the agent's under load at each rate.
func printIdle(modes []string, rates []float64, res map[string]map[float64][]result, idles map[string][]idle) {
	cmds := []string{"rootline server", "rootline agent", "rootline run", "java", "envoy"}
	fmt.Printf("\nFixed costs: CPU ms per second with the mesh up and no load (medians over the rounds); the agent's under load for comparison:\n\n")
	fmt.Printf("| mode | machine | own |")
	for _, c := range cmds {
		fmt.Printf(" %s |", c)
	}
	fmt.Printf(" Rootline's bytes/s |")
	for _, r := range rates {
		fmt.Printf(" agent at %.0f req/s |", r)
	}
	fmt.Printf("\n|---|---|---|%s---|%s\n", strings.Repeat("---|", len(cmds)), strings.Repeat("---|", len(rates)))
	msps := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }
	for _, m := range modes {
		ids := idles[m]
		if len(ids) == 0 {
			continue
		}
		fmt.Printf("| %s | %s | %s |", m, msps(overhead.MedianOf(ids, func(i idle) time.Duration { return i.machine })),
			msps(overhead.MedianOf(ids, func(i idle) time.Duration { return i.own })))
		for _, c := range cmds {
			if c == "rootline agent" {
				fmt.Printf(" %s |", msps(overhead.MedianOf(ids, func(i idle) time.Duration { return i.agent })))
				continue
			}
			fmt.Printf(" %s |", msps(overhead.MedianOf(ids, func(i idle) time.Duration { return i.byCommand[c] })))
		}
		fmt.Printf(" %.0f |", overhead.MedianOf(ids, func(i idle) float64 { return i.bytes }))
		for _, r := range rates {
			fmt.Printf(" %.1f |", 1000*overhead.MedianOf(res[m][r], func(r result) float64 { return r.agentCPU }))
		}
		fmt.Println()
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
		ownPerReq:          overhead.MedianOf(rs, func(r result) time.Duration { return r.ownPerReq }),
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

// splitRunFlags separates a mode's flags (splitMode) into the agent's,
// those of `rootline run` (--run.X=v → --X=v) and the server's
// (--server.X=v → --X=v).
func splitRunFlags(flags []string) (agent, run, server []string) {
	for _, f := range flags {
		if rest, ok := strings.CutPrefix(f, "--run."); ok {
			run = append(run, "--"+rest)
		} else if rest, ok := strings.CutPrefix(f, "--server."); ok {
			server = append(server, "--"+rest)
		} else {
			agent = append(agent, f)
		}
	}
	return agent, run, server
}

// runFormats returns the propagation formats `rootline run` writes with
// these flags (its default: all) and the form of its timing lines (its
// default: compact).
func runFormats(runFlags []string) (httpstream.Formats, httpstream.TimingForm) {
	f, form := httpstream.AllFormats, httpstream.TimingCompact
	for _, fl := range runFlags {
		var err error
		if v, ok := strings.CutPrefix(fl, "--propagate="); ok {
			f, err = httpstream.ParseFormats(v)
		} else if v, ok := strings.CutPrefix(fl, "--timing-header="); ok {
			form, err = httpstream.ParseTimingForm(v)
		}
		check(err)
	}
	return f, form
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

// meshPlace is where a run's mesh lives: its prefix, its subnet and the
// subnet's gateway (the bridge, through which pods reach the host).
type meshPlace struct{ prefix, subnet, gw string }

// runMode starts the mesh in one mode, measures every rate, then its fixed
// costs with no load for idleFor (nil when 0).
func runMode(self, repo, envoy string, topo *mesh.Topology, place meshPlace, modeName string, rates []float64, d, warmup, idleFor time.Duration, serverFlags []string) (map[float64]result, *idle) {
	ctx := context.Background()
	self = modeBinary(modeName, self)
	mode, flags := splitMode(modeName)
	agentFlags, runFlags, srvFlags := splitRunFlags(flags)
	serverFlags = append(slices.Clone(serverFlags), srvFlags...)
	formats, form := runFormats(runFlags)
	dir, err := os.MkdirTemp("", "meshoverhead-")
	check(err)
	defer os.RemoveAll(dir)
	opts := mesh.Options{Mode: mesh.ModePod, Dir: filepath.Join(dir, "mesh"), EnvoyBin: envoy,
		ServiceCmd: mesh.DefaultServiceCmd(repo), Logger: slog.New(slog.DiscardHandler),
		Prefix: place.prefix, Subnet: place.subnet}
	var srv, agent *exec.Cmd
	var counted *byteCounter
	var queryAddr string
	if mode != "envoy" {
		var grpcAddr, httpAddr string
		// As in the demo: the pods reach the agent's API, so it takes a token.
		tokenFile, err := demo.WriteToken(dir)
		check(err)
		tok, err := os.ReadFile(tokenFile)
		check(err)
		serverToken = strings.TrimSpace(string(tok))
		srv, grpcAddr, httpAddr, queryAddr = startServer(self, dir, tokenFile, serverFlags)
		defer stop(srv)
		pod := func(h string) string {
			_, port, _ := net.SplitHostPort(h)
			return net.JoinHostPort(place.gw, port)
		}
		opts.Tracing, opts.OTLPEndpoint, opts.Expose = mode != "envoy+rootline-no-sidecar-tracing", grpcAddr, []string{httpAddr}
		agentURL := "" // no agent to register with
		agentAddr := ""
		if strings.HasPrefix(mode, "envoy+rootline") {
			// Without the supervisor nothing registers the services: the
			// agent discovers them (JVMs, OTEL_SERVICE_NAME) itself.
			agent, agentAddr = startAgent(self, "http://"+queryAddr, mode == "envoy+rootline-no-run", append(agentFlags, "--auth.token-file", tokenFile))
			defer stop(agent)
			opts.Expose = append(opts.Expose, agentAddr)
			agentURL = "http://" + pod(agentAddr)
		}
		counted = countBytes(map[string]string{grpcAddr: senderSidecars, httpAddr: senderRun, queryAddr: senderAgent, agentAddr: senderRunAgent})
		defer counted.close()
		if mode != "envoy+rootline-no-run" && mode != "envoy+tracing" {
			check(demo.ShareDatapath()) // as the demo does
			opts.Wrap = func(svc string, argv []string) []string {
				args := append([]string{self, "run", "--service", svc, "--server", "http://" + pod(httpAddr),
					"--agent", agentURL, "--auth.token-file", tokenFile}, runFlags...)
				return append(append(args, "--"), argv...)
			}
		}
	}
	m, err := mesh.Start(ctx, topo, opts)
	check(err)
	defer m.Close()
	check(demo.WaitServing(ctx, m.EntryURL(), 90*time.Second))
	// Fixed costs first: before any load the detector has no anomaly to
	// capture, so this is the cost of being there.
	var id *idle
	if idleFor > 0 {
		time.Sleep(3 * time.Second) // the readiness probes' spans
		id = measureIdle(m, srv, agent, counted, idleFor)
	}
	// Header lines rootline run adds per hop (see inBandBytes).
	visits := 0
	for _, n := range topo.Visits() {
		visits += n
	}
	inBand := 0.0
	if opts.Wrap != nil {
		inBand = float64(visits * inBandBytes(formats, form))
	}
	out := map[float64]result{}
	for i, rate := range rates {
		w := warmup
		if i == 0 {
			w *= 3
		}
		_, _ = loadgen.Run(ctx, loadgen.Config{URL: m.EntryURL(), Phases: []loadgen.Phase{{Rate: rate, Duration: w}}})
		var cpu0, agentCPU0 time.Duration
		var spans0, captures0, incidents0 float64
		var bytes0 map[string]int64
		var batches0 map[string][2]float64
		if srv != nil {
			cpu0, spans0, bytes0 = overhead.CPU(srv.Process.Pid), metric(queryAddr, storedSpans), counted.bySender()
			captures0 = metric(queryAddr, capturesTotal, skipped)
			incidents0 = metric(queryAddr, incidentsOpened)
			batches0 = receiverBatches(queryAddr)
		}
		if agent != nil {
			agentCPU0 = overhead.CPUWithChildren(agent.Process.Pid)
		}
		pids := ownPIDs(m, srv, agent)
		begun, machine0, commands0 := time.Now(), overhead.MachineCPU(), overhead.TreeCPUByCommand(pids...)
		profiled := make(chan struct{})
		if srv != nil && profileDir != "" {
			go profileServer(queryAddr, modeName, rate, d, profiled)
		} else {
			close(profiled)
		}
		r, err := loadgen.Run(ctx, loadgen.Config{URL: m.EntryURL(), Phases: []loadgen.Phase{{Rate: rate, Duration: d}}})
		check(err)
		<-profiled
		pr := r.Phases[0]
		sent := time.Duration(max(pr.Sent, 1))
		res := result{Latency: overhead.Measured(pr),
			machinePerReq: (overhead.MachineCPU() - machine0) / sent, byCommand: map[string]time.Duration{}}
		for c, cpu := range overhead.TreeCPUByCommand(pids...) {
			// A process that exited took its CPU time with it: no negative costs.
			res.byCommand[c] = max(cpu-commands0[c], 0) / sent
			res.ownPerReq += res.byCommand[c]
		}
		if srv != nil {
			time.Sleep(2 * time.Second) // the last batches
			took := time.Since(begun)
			if agent != nil {
				res.agentCPU = float64(overhead.CPUWithChildren(agent.Process.Pid)-agentCPU0) / float64(took)
			}
			res.capturesPerMin = (metric(queryAddr, capturesTotal, skipped) - captures0) / took.Minutes()
			// With nothing injected, an incident is a false alarm (or the
			// machine's own drift): a mode that opens more is not free.
			res.incidents = metric(queryAddr, incidentsOpened) - incidents0
			spans := metric(queryAddr, storedSpans) - spans0
			cpu := overhead.CPU(srv.Process.Pid) - cpu0
			if spans > 0 {
				res.serverCPUPer1kSpan = time.Duration(float64(cpu) / spans * 1000)
			}
			n := float64(max(pr.Sent, 1))
			res.bytesBy = map[string]float64{senderInBand: inBand}
			res.bytesPerReq = inBand
			for sender, b := range counted.bySender() {
				res.bytesBy[sender] = float64(b-bytes0[sender]) / n
				if sender != senderRunAgent { // node-local, not Rootline's server
					res.bytesPerReq += res.bytesBy[sender]
				}
			}
			res.spansPerBatch = map[string]float64{}
			for rcv, v := range receiverBatches(queryAddr) {
				if reqs := v[1] - batches0[rcv][1]; reqs > 0 {
					res.spansPerBatch[rcv] = (v[0] - batches0[rcv][0]) / reqs
				}
			}
			res.spansPerReq = spans / n
		}
		out[rate] = res
	}
	return out, id
}

// measureIdle measures a mode's fixed costs with no load for d.
func measureIdle(m *mesh.Mesh, srv, agent *exec.Cmd, counted *byteCounter, idleFor time.Duration) *idle {
	id := idle{byCommand: map[string]time.Duration{}}
	var agent0 time.Duration
	var bytes0 map[string]int64
	if agent != nil {
		agent0 = overhead.CPUWithChildren(agent.Process.Pid)
	}
	if counted != nil {
		bytes0 = counted.bySender()
	}
	pids := ownPIDs(m, srv, agent)
	begun, machine0, commands0 := time.Now(), overhead.MachineCPU(), overhead.TreeCPUByCommand(pids...)
	time.Sleep(idleFor)
	took := time.Since(begun)
	perSec := func(cpu time.Duration) time.Duration { return time.Duration(float64(cpu) / took.Seconds()) }
	id.machine = perSec(overhead.MachineCPU() - machine0)
	for c, cpu := range overhead.TreeCPUByCommand(pids...) {
		// A process that exited took its CPU time with it: no negative costs.
		id.byCommand[c] = perSec(max(cpu-commands0[c], 0))
		id.own += id.byCommand[c]
	}
	if agent != nil {
		id.agent = perSec(overhead.CPUWithChildren(agent.Process.Pid) - agent0)
	}
	if counted != nil {
		for sender, b := range counted.bySender() {
			if sender != senderRunAgent {
				id.bytes += float64(b-bytes0[sender]) / took.Seconds()
			}
		}
	}
	return &id
}

// ownPIDs are the processes whose CPU is the mode's: the mesh's apps (with
// their rootline run) and sidecars, the server and the agent, and their
// descendants — not the rest of a machine shared with other work.
func ownPIDs(m *mesh.Mesh, cmds ...*exec.Cmd) []int {
	var pids []int
	for _, s := range m.Services() {
		for _, r := range s.Replicas {
			pids = append(pids, r.AppPID)
			if r.EnvoyPID != 0 {
				pids = append(pids, r.EnvoyPID)
			}
		}
	}
	for _, c := range cmds {
		if c != nil && c.Process != nil {
			pids = append(pids, c.Process.Pid)
		}
	}
	return pids
}

// Senders of Rootline's bytes: each is the traffic of one of the server's
// (or the agent's) ports, both directions; the in-band header lines are
// computed (see inBandBytes).
const (
	senderSidecars = "sidecars → server (OTLP/gRPC)"
	senderRun      = "spans → server (OTLP/HTTP: rootline run's, through the agent's relay with run.ship-via-agent=true)"
	senderAgent    = "agent ↔ server (registration, heartbeats, uploads)"
	senderInBand   = "header lines rootline run adds (in band)"
	senderRunAgent = "rootline run ↔ agent (node-local, not in the total: registrations and the relayed spans)"
)

var senders = []string{senderSidecars, senderRun, senderAgent, senderInBand, senderRunAgent}

// inBandBytes is what `rootline run` adds to one hop: the propagation lines
// of the formats it writes on the request (all: traceparent, b3, x-b3-*,
// x-request-id) and the timing on the response (rl, the default compact
// form, or the two long lines), as the tracer writes them for a typical
// request.
func inBandBytes(formats httpstream.Formats, form httpstream.TimingForm) int {
	ctx := httpstream.Context{TraceID: httpstream.TraceID{1: 1}, SpanID: httpstream.SpanID{1: 1}, Sampled: true}
	req := httpstream.AppendInjectFormats(nil, ctx, httpstream.SpanID{2: 2}, nil, formats)
	resp := httpstream.AppendTiming(nil, httpstream.Timing{ServerTime: 12345 * time.Microsecond, HasServerTime: true,
		Waits: []httpstream.Wait{{Kind: httpstream.WaitLocal, Duration: 85 * time.Microsecond},
			{Kind: httpstream.WaitNet, Duration: 410 * time.Microsecond}, {Kind: httpstream.WaitRemote, Duration: 8120 * time.Microsecond}}}, form)
	return len(req) + len(resp)
}

// receiverBatches returns, by receiver, the spans received and the requests
// answered (every outcome).
func receiverBatches(query string) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, rcv := range []string{"otlp_grpc", "otlp_http"} {
		sel := `receiver="` + rcv + `"`
		out[rcv] = [2]float64{metricWith(query, "rootline_receiver_spans_received_total", sel),
			metricWith(query, "rootline_receiver_requests_total", sel)}
	}
	return out
}

// profileDir is where -server-profile writes the servers' CPU profiles.
var profileDir string

// profiles counts the profiles written, to name them apart across rounds.
var profiles atomic.Int32

// profileServer writes a CPU profile of the server over the next d (its
// /debug/pprof/profile, which takes the API's token) and closes done.
func profileServer(queryAddr, mode string, rate float64, d time.Duration, done chan<- struct{}) {
	defer close(done)
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == '=' || r == '@' {
			return '_'
		}
		return r
	}, mode)
	path := filepath.Join(profileDir, fmt.Sprintf("%s-%g-%d.pprof", name, rate, profiles.Add(1)))
	req, err := http.NewRequest("GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", queryAddr, max(int(d.Seconds()), 1)), nil)
	check(err)
	req.Header.Set("Authorization", "Bearer "+serverToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "server profile: %v\n", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "server profile %s: %v\n", path, err)
	}
}

// startServer starts a server as the demo configures it: a token for its
// API and captures, receivers that take spans without one (the sidecars'
// OpenTelemetry tracer sends none).
func startServer(self, dir, tokenFile string, flags []string) (*exec.Cmd, string, string, string) {
	addrs := freeAddrs(4)
	cmd := exec.Command(self, append([]string{"server", "--data-dir", filepath.Join(dir, "data"), "--log.level", "warn", "--auth.token-file", tokenFile,
		"--receiver.allow-unauthenticated",
		"--otlp.grpc.addr", addrs[0], "--otlp.http.addr", addrs[1], "--query.addr", addrs[2], "--zipkin.addr", addrs[3]}, flags...)...)
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
// queryIP. Each port is one sender's (see senders).
type byteCounter struct {
	rules []string // the sender of each rule, in the chains' order
}

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

// countBytes counts the traffic of each address's port as its sender's;
// empty addresses are skipped.
func countBytes(bySender map[string]string) *byteCounter {
	c := &byteCounter{}
	c.close() // a killed run's leftovers
	rules := []string{"*filter", ":" + chainIn + " - [0:0]", ":" + chainOut + " - [0:0]",
		"-A INPUT -j " + chainIn, "-A OUTPUT -j " + chainOut}
	addrs := slices.Sorted(maps.Keys(bySender))
	var in, out []string
	for _, a := range addrs {
		if a == "" {
			continue
		}
		_, port, err := net.SplitHostPort(a)
		check(err)
		in = append(in, fmt.Sprintf("-A %s ! -s %s/32 -p tcp --dport %s", chainIn, queryIP, port))
		out = append(out, fmt.Sprintf("-A %s ! -d %s/32 -p tcp --sport %s", chainOut, queryIP, port))
		c.rules = append(c.rules, bySender[a])
	}
	rules = append(append(rules, in...), out...)
	cmd := exec.Command("iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(strings.Join(append(rules, "COMMIT"), "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("count the server's bytes: iptables-restore: %w: %s", err, out))
	}
	return c
}

// bySender sums the counters' bytes by sender.
func (c *byteCounter) bySender() map[string]int64 {
	n := map[string]int64{}
	for _, ch := range []string{chainIn, chainOut} {
		out, err := exec.Command("iptables", "-t", "filter", "-n", "-v", "-x", "-L", ch).Output()
		check(err)
		i := 0
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] != "pkts" {
				if b, err := strconv.ParseInt(f[1], 10, 64); err == nil && i < len(c.rules) {
					n[c.rules[i]] += b
					i++
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

// serverToken is the running mode's server's bearer token.
var serverToken string

// queryClient makes this program's own requests to the server from
// queryIP, so that byteCounter leaves them out.
var queryClient = &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
	LocalAddr: &net.TCPAddr{IP: net.ParseIP(queryIP)}}).DialContext}}

const (
	storedSpans     = "rootline_pipeline_spans_stored_total"
	capturesTotal   = "rootline_captures_total" // by final state
	incidentsOpened = "rootline_incidents_opened_total"
	skipped         = `state="skipped"` // captures that did not run
)

// metricWith sums the server's samples of one metric whose labels contain
// sel.
func metricWith(query, name, sel string) float64 {
	return sumMetric(query, name, func(labels string) bool { return strings.Contains(labels, sel) })
}

// metric sums the server's samples of one metric over its labels, leaving
// out the series whose labels contain one of except.
func metric(query, name string, except ...string) float64 {
	return sumMetric(query, name, func(labels string) bool {
		return !slices.ContainsFunc(except, func(e string) bool { return strings.Contains(labels, e) })
	})
}

// sumMetric sums the server's samples of one metric whose labels keep takes.
func sumMetric(query, name string, keep func(labels string) bool) float64 {
	req, err := http.NewRequest(http.MethodGet, "http://"+query+"/metrics", nil)
	check(err)
	// The server has a token (as in the demo): /metrics asks for it.
	req.Header.Set("Authorization", "Bearer "+serverToken)
	resp, err := queryClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Errorf("the server's /metrics answered %s", resp.Status))
	}
	b, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' || !keep(rest) {
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
