// Command runoverhead measures what `rootline run` costs a 3-hop chain of Go
// services (bench/chain), against the same chain plain and instrumented in
// code with the OpenTelemetry Go SDK (Rbinder: "Transparent Tracing of
// Microservice-based Applications", §5: 1.097× for the supervisor vs 1.052×
// for code instrumentation).
//
// Each (round, rate) runs every mode back to back in a rotating order on the
// same machine, with an open-loop load (internal/loadgen, latency from the
// intended send time). Spans of both traced modes go to one Rootline server.
// CPU is the user+system time of every process of the chain (supervisors
// included) per request. A mode "run@PATH" (or "run-ptrace@PATH") runs
// `rootline run` from the binary at PATH instead: two builds side by side.
//
//	go run ./bench/runoverhead --rootline bin/rootline --chain /tmp/chain
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/loadgen"
	"github.com/rootline/rootline/internal/overhead"
)

type sample struct {
	overhead.Latency
	cpuPerReq time.Duration
}

func main() {
	rootline := flag.String("rootline", "bin/rootline", "rootline binary")
	chain := flag.String("chain", "", "bench/chain binary (go build -C bench/chain -o /tmp/chain .)")
	rates := flag.String("rates", "50,100,200", "request rates (per second)")
	duration := flag.Duration("duration", 15*time.Second, "load per measurement")
	rounds := flag.Int("rounds", 3, "rounds (each runs every mode at every rate)")
	spin := flag.Int("spin-us", 1000, "CPU work per hop per request (µs)")
	flag.IntVar(&hops, "hops", 3, "services in the chain (1-3: a; a → b; a → b → c)")
	modes := flag.String("modes", "plain,run,otel", "modes to compare: plain, run (rootline run --mode ebpf: the in-kernel datapath), run-ptrace (rootline run --mode ptrace: the supervisor, reads by the eBPF read tap), otel (the OpenTelemetry Go SDK in code)")
	interleave := flag.Bool("interleave", false, "run every mode's chain at once and alternate requests between them (see interleave.go): ratios with a 95 % interval, free of the machine's drift")
	flag.Parse()
	if hops < 1 || hops > 3 {
		fmt.Fprintln(os.Stderr, "runoverhead: --hops must be 1, 2 or 3")
		os.Exit(2)
	}
	if *chain == "" {
		fmt.Fprintln(os.Stderr, "runoverhead: --chain is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "runoverhead-")
	check(err)
	defer os.RemoveAll(dir)

	srv := exec.Command(*rootline, "server", "--data-dir", filepath.Join(dir, "data"), "--log.level", "warn",
		"--otlp.grpc.addr", "", "--otlp.http.addr", "127.0.0.1:24318", "--zipkin.addr", "", "--query.addr", "127.0.0.1:26686")
	srv.Stderr = os.Stderr
	check(srv.Start())
	defer func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() }()
	time.Sleep(time.Second)

	modeList := strings.Split(*modes, ",")
	if *interleave {
		rateList, err := overhead.ParseRates(*rates)
		check(err)
		runInterleaved(*rootline, *chain, modeList, rateList, *duration, *rounds, *spin)
		return
	}
	results := map[string]map[float64][]sample{}
	for _, m := range modeList {
		results[m] = map[float64][]sample{}
	}
	rateList, err := overhead.ParseRates(*rates)
	check(err)
	for round := range *rounds {
		for _, rate := range rateList {
			for i := range modeList {
				m := modeList[(i+round)%len(modeList)]
				s := measure(*rootline, *chain, m, rate, *duration, *spin)
				fmt.Fprintf(os.Stderr, "round %d rate %.0f %-5s mean %v p50 %v p99 %v cpu/req %v errors %d/%d\n",
					round+1, rate, m, s.Mean, s.P50, s.P99, s.cpuPerReq, s.Errors, s.Sent)
				results[m][rate] = append(results[m][rate], s)
			}
		}
	}
	fmt.Printf("| rate (req/s) | mode | mean | p50 | p99 | CPU per request | mean × plain | p99 × plain | CPU × plain | errors |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rateList {
		base := med(results[modeList[0]][rate])
		for _, m := range modeList {
			s := med(results[m][rate])
			fmt.Printf("| %.0f | %s | %v | %v | %v | %v | %.3f | %.3f | %.2f | %d |\n", rate, m,
				s.Mean.Round(time.Microsecond), s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond),
				s.cpuPerReq.Round(time.Microsecond),
				float64(s.Mean)/float64(base.Mean), float64(s.P99)/float64(base.P99),
				float64(s.cpuPerReq)/float64(base.cpuPerReq), s.Errors)
		}
	}
}

// med takes each statistic's median over the rounds.
func med(ss []sample) sample {
	return sample{
		Latency:   overhead.MedianLatency(ss, func(s sample) overhead.Latency { return s.Latency }),
		cpuPerReq: overhead.MedianOf(ss, func(s sample) time.Duration { return s.cpuPerReq }),
	}
}

// hops is the chain's length (--hops).
var hops = 3

// chainRun is one mode's chain of three services, started.
type chainRun struct {
	url   string
	procs []*exec.Cmd
	pids  []int
}

// startChain starts c, b and a (a calls b, b calls c) in mode.
func startChain(rootline, chain, mode string, spin int) *chainRun {
	cr := &chainRun{}
	call := ""
	for _, name := range []string{"c", "b", "a"}[3-hops:] {
		env := append(os.Environ(), "LISTEN=127.0.0.1:0", "CALL="+call, fmt.Sprint("SPIN_US=", spin), "SERVICE_NAME="+name)
		argv := []string{chain}
		base, bin, other := strings.Cut(mode, "@")
		if !other {
			bin = rootline
		}
		switch base {
		case "run", "run-ptrace":
			m := map[string]string{"run": "ebpf", "run-ptrace": "ptrace"}[base]
			argv = []string{bin, "run", "--mode", m, "--service", name, "--server", "http://127.0.0.1:24318", "--agent", "", "--", chain}
		case "otel":
			env = append(env, "OTEL=1", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:24318")
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Stderr = env, untracedWatch{}
		out, err := cmd.StdoutPipe()
		check(err)
		check(cmd.Start())
		cr.procs, cr.pids = append(cr.procs, cmd), append(cr.pids, cmd.Process.Pid)
		line, err := bufio.NewReader(out).ReadString('\n')
		check(err)
		port := strings.TrimSpace(strings.TrimPrefix(line, "listening "))
		call = "http://127.0.0.1:" + port
	}
	cr.url = call + "/"
	return cr
}

func (cr *chainRun) stop() {
	for _, p := range cr.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}
}

func measure(rootline, chain, mode string, rate float64, d time.Duration, spin int) sample {
	cr := startChain(rootline, chain, mode, spin)
	defer cr.stop()
	// Warm up connections and caches, then measure.
	_, _ = loadgen.Run(context.Background(), loadgen.Config{URL: cr.url, Phases: []loadgen.Phase{{Rate: rate, Duration: 2 * time.Second}}})
	cpu0 := overhead.TreeCPU(cr.pids...)
	res, err := loadgen.Run(context.Background(), loadgen.Config{URL: cr.url, Phases: []loadgen.Phase{{Rate: rate, Duration: d}}})
	check(err)
	cpu1 := overhead.TreeCPU(cr.pids...)
	pr := res.Phases[0]
	return sample{Latency: overhead.Measured(pr), cpuPerReq: (cpu1 - cpu0) / time.Duration(max(pr.Sent, 1))}
}

// untracedWatch passes a process's stderr on and stops the benchmark when a
// `rootline run` says its service runs untraced (a build whose datapath
// does not load would otherwise measure as free).
type untracedWatch struct{}

func (untracedWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("running untraced")) {
		os.Stderr.Write(p)
		fmt.Fprintln(os.Stderr, "runoverhead: a service runs untraced; stopping")
		os.Exit(1)
	}
	return os.Stderr.Write(p)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "runoverhead:", err)
		os.Exit(1)
	}
}
