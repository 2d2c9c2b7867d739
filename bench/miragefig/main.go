// Command miragefig reproduces Figures 5.4 and 5.5 of *Aggregated tracing
// model for MirageOS unikernels* (§5.3) on Rootline: a chain of three of the
// demo's services, api → frontend → backend, each under `rootline run` in its
// own network namespace (the mesh's pod mode), driven closed-loop by a
// growing number of concurrent clients, once with the backend under a CPU
// quota (its cgroup's CFS quota: Figure 5.4) and once with a bandwidth limit on
// the backend's link (tbf both ways: Figure 5.5).
//
// Per step (a client count) it measures the clients' mean and p95 latency,
// reads the step's traces back from the server's query API, and computes per
// service, with internal/mirage, the mean local wait of its SERVER spans, the
// mean network and remote waits of its CLIENT spans (what `rootline run`
// puts on them: rootline.wait.*) and each hop's decision ("my CPU", "my link
// to X", "delegate to X"). It also records the backend's CPU and throttled
// time per request and the bytes per request on its link, the evidence that
// the fault, and not the machine, is the bottleneck.
//
// Unless given, the fault's amount is derived from a calibration at one
// client with no fault: the backend's CPU per request c and bytes per request
// b on its link, and the one-client latency L. A closed loop of n clients
// asks for about n/L requests per second, so a quota of knee·c/L (a rate of
// knee·8b/L bit/s) is reached at about knee clients: the bottleneck appears
// inside the client range, as it did in the dissertation (at 150 and 50
// threads of its own range).
//
// It writes OUT/results.json and OUT/table.md and prints the table;
// bench/miragefig.sh draws the figures from the JSON (plot.py). The server
// runs in this process, as the demo's does. Needs root
// (pod mode, cgroups, tc) and `make build`.
//
//	sudo go run ./bench/miragefig --rootline bin/rootline --out /tmp/mf
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/overhead"
	"github.com/rootline/rootline/internal/server"
)

// The chain, in call order from the entry.
var chain = []string{"api", "frontend", "backend"}

// Results is what results.json holds.
type Results struct {
	Date     string   `json:"date"`
	Machine  string   `json:"machine"`
	Language string   `json:"language"`
	Work     []string `json:"work"` // per service of chain
	Envoy    bool     `json:"envoy"`
	// Calibration at one client, no fault.
	Calibration Step     `json:"calibration"`
	Configs     []Config `json:"configs"`
}

func main() {
	rootline := flag.String("rootline", "bin/rootline", "rootline binary (for `rootline run`)")
	repo := flag.String("repo", ".", "repository root (build/demo, demo/services)")
	configs := flag.String("configs", "cpu,net", "configurations to run: cpu (a CPU quota on the backend's cgroup, Figure 5.4), net (a tbf bandwidth limit on the backend's link, Figure 5.5), none (the same ramp with nothing injected: what the machine alone does to the waits)")
	clientList := flag.String("clients", "1,2,4,6,8,12,16,24", "concurrent closed-loop clients, one step each, in order")
	step := flag.Duration("step", 20*time.Second, "measured load per step")
	warmup := flag.Duration("warmup", 3*time.Second, "load before each step's measurement (the queue settles at the new client count)")
	quota := flag.String("cpu-quota", "auto", "the backend's CPU quota in the cpu configuration, a share of one CPU (\"20%\"), or auto (see -knee)")
	bandwidth := flag.String("bandwidth", "auto", "the backend's link rate in the net configuration, a tc rate (\"400kbit\"), or auto (see -knee)")
	knee := flag.Float64("knee", 4, "auto amounts: the client count at which the backend's quota or link should saturate")
	lang := flag.String("language", "go,go,java", "language of the services (go, java, python): one for all three, or api,frontend,backend. The default backend is Java: a request runs on a kernel thread of its own there, so the run-queue wait a quota causes is the request's local wait; a Go backend's requests also wait for the Go scheduler, which the kernel does not see")
	firstWarmup := flag.Duration("first-warmup", 20*time.Second, "load at 2 clients once, before the calibration (connections, the datapath's maps, the JVM's JIT: a cold JVM's CPU per request is half again as much)")
	work := flag.String("work", "cpu=0.5ms,sleep=10ms;cpu=0.5ms,sleep=10ms;alloc=2MB,sleep=20ms", "per-request work of api;frontend;backend in the services' WORK syntax. The backend's CPU work is alloc (bytes allocated and touched: CPU time a quota stretches; cpu= spins for a wall time, which a quota does not lengthen); the sleeps keep the offered load of a few clients below what this shared machine can serve, so that the fault, not the machine, is what saturates")
	envoy := flag.Bool("envoy", false, "put Envoy sidecars in front of the services (the dissertation's chain had none)")
	prefix := flag.String("prefix", "mf", "prefix of the mesh's network namespaces, bridge and veths (distinct from any other mesh on the machine)")
	subnet := flag.String("subnet", "10.83.0.0/24", "the pods' /24 (.1 is the bridge), distinct from any other mesh's")
	out := flag.String("out", "", "directory for results.json and table.md (default: a new one under /tmp)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail(errors.New("needs root (pod mode, cgroups, tc)"))
	}
	clients, err := parseClients(*clientList)
	check(err)
	names := strings.Split(*configs, ",")
	for _, n := range names {
		if n != "cpu" && n != "net" && n != "none" {
			fail(fmt.Errorf("-configs: unknown configuration %q (want cpu, net, none)", n))
		}
	}
	langs := strings.Split(*lang, ",")
	if len(langs) == 1 {
		langs = []string{langs[0], langs[0], langs[0]}
	}
	if len(langs) != len(chain) {
		fail(fmt.Errorf("-language: want one language or %d separated by ',', got %d", len(chain), len(langs)))
	}
	works := strings.Split(*work, ";")
	if len(works) != len(chain) {
		fail(fmt.Errorf("-work: want %d works separated by ';', got %d", len(chain), len(works)))
	}
	if *out == "" {
		*out, err = os.MkdirTemp("", "rootline-miragefig.")
		check(err)
	}
	check(os.MkdirAll(*out, 0o755))
	self, err := filepath.Abs(*rootline)
	check(err)

	var topo strings.Builder
	fmt.Fprintf(&topo, "entry: %s\nservices:\n", chain[0])
	for i, s := range chain {
		calls := ""
		if i+1 < len(chain) {
			calls = chain[i+1]
		}
		fmt.Fprintf(&topo, "  - {name: %s, language: %s, calls: [%s], work: %q}\n", s, langs[i], calls, works[i])
	}
	fmt.Fprintf(&topo, "load:\n  - {rate: 1, duration: 1s}\n")
	t, err := mesh.Parse([]byte(topo.String()))
	check(err)

	dir, err := os.MkdirTemp("", "miragefig-run-")
	check(err)
	atExit(func() { os.RemoveAll(dir) })
	go func() {
		// Ctrl-C: undo the fault, remove the mesh's namespaces, cgroups and
		// qdiscs, stop the server.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		fail(errors.New("interrupted"))
	}()
	addrs, stopServer := startServer(filepath.Join(dir, "data"))
	atExit(stopServer)

	gw, err := demo.SubnetGateway(*subnet)
	check(err)
	opts := mesh.Options{Mode: mesh.ModePod, Dir: filepath.Join(dir, "mesh"), ServiceCmd: mesh.DefaultServiceCmd(*repo),
		Logger: slog.New(slog.DiscardHandler), Prefix: *prefix, Subnet: *subnet, Expose: []string{addrs.OTLPHTTP}}
	if *envoy {
		opts.EnvoyBin, err = mesh.FindEnvoy()
		check(err)
	}
	_, port, _ := net.SplitHostPort(addrs.OTLPHTTP)
	check(demo.ShareDatapath())
	opts.Wrap = func(svc string, argv []string) []string {
		return append([]string{self, "run", "--service", svc, "--server", "http://" + net.JoinHostPort(gw, port),
			"--agent", "", "--"}, argv...)
	}
	progress("starting the chain %s (%s, pod mode %s, envoy %v)", strings.Join(chain, " → "), *lang, *prefix, *envoy)
	ctx := context.Background()
	m, err := mesh.Start(ctx, t, opts)
	check(err)
	atExit(func() { _ = m.Close() })
	check(demo.WaitServing(ctx, m.EntryURL(), 90*time.Second))

	r := runner{m: m, api: demo.NewAPISource("http://"+addrs.Query, ""), url: m.EntryURL(), step: *step, warmup: *warmup}
	r.index()
	res := Results{Date: time.Now().UTC().Format(time.RFC3339), Language: strings.Join(langs, ","), Work: works, Envoy: *envoy,
		Machine: fmt.Sprintf("%d CPUs, kernel %s, load average at start %s", runtime.NumCPU(), kernel(), loadAvg())}

	r.load(2, *firstWarmup)
	progress("calibrating: 1 client, no fault, %s", *step)
	res.Calibration = r.run(1)
	cal := res.Calibration
	progress("calibration: %.1f ms mean, %.1f req/s, backend CPU %.2f ms/request, %.0f bytes/request into it and %.0f out on its link",
		cal.MeanMs, cal.PerSec, cal.BackendCPUms, cal.BackendBytesIn, cal.BackendBytesOut)

	write := func() {
		b, _ := json.MarshalIndent(res, "", "  ")
		check(os.WriteFile(filepath.Join(*out, "results.json"), append(b, '\n'), 0o644))
		f, err := os.Create(filepath.Join(*out, "table.md"))
		check(err)
		for _, c := range res.Configs {
			Table(f, c, chain)
		}
		check(f.Close())
	}
	for _, name := range names {
		c := Config{Name: name}
		switch name {
		case "cpu":
			amount, how := *quota, "given with -cpu-quota"
			if amount == "auto" {
				// Requests per second at the knee ≈ knee / L; CPU per request c.
				share := *knee * cal.BackendCPUms / cal.MeanMs
				amount = fmt.Sprintf("%.1f%%", 100*share)
				how = fmt.Sprintf("quota = knee × backend CPU per request / one-client latency = %.0f × %.2f ms / %.1f ms = %s of a CPU (calibration at 1 client, no fault)",
					*knee, cal.BackendCPUms, cal.MeanMs, amount)
			}
			c.Fault = mesh.Fault{Name: mesh.FaultCPUThrottle, Service: "backend", Amount: amount}.String()
			c.How = how
		case "net":
			amount, how := *bandwidth, "given with -bandwidth"
			if amount == "auto" {
				// tbf limits each direction of the link at the rate: the
				// busier direction saturates first.
				b := math.Max(cal.BackendBytesIn, cal.BackendBytesOut)
				bits := *knee * 8 * b / (cal.MeanMs / 1000)
				amount = fmt.Sprintf("%.0fkbit", math.Max(bits/1000, 8))
				how = fmt.Sprintf("rate = knee × 8 × bytes per request in the busier direction of the backend's link / one-client latency = %.0f × 8 × %.0f B / %.1f ms = %s (calibration at 1 client, no fault)",
					*knee, b, cal.MeanMs, amount)
			}
			c.Fault = mesh.Fault{Name: mesh.FaultNetBandwidth, Service: "backend", Amount: amount}.String()
			c.How = how
		case "none":
			c.Fault, c.How = mesh.FaultNone, "nothing injected: the control"
		}
		f, err := mesh.ParseFault(c.Fault)
		check(err)
		progress("%s: injecting %s (%s)", name, c.Fault, c.How)
		undo, err := m.Inject(f)
		check(err)
		for _, n := range clients {
			st := r.run(n)
			c.Steps = append(c.Steps, st)
			line := fmt.Sprintf("%s %2d clients: %6.1f req/s mean %6.1f ms p95 %6.1f ms errors %d traces %d |", name, n, st.PerSec, st.MeanMs, st.P95Ms, st.Errors, st.Traces)
			for _, s := range chain {
				if w := st.Services[s]; w != nil {
					line += fmt.Sprintf(" %s local %.1f net %.1f remote %.1f [%s] |", s, w.Local, w.Net, w.Remote, decisionString(w.Decisions))
				}
			}
			progress("%s", line)
			res.Configs = slices.DeleteFunc(res.Configs, func(x Config) bool { return x.Name == name })
			res.Configs = append(res.Configs, c)
			write()
		}
		check(undo())
		// Let the queues drain before the next configuration.
		time.Sleep(2 * time.Second)
	}
	write()
	for _, c := range res.Configs {
		Table(os.Stdout, c, chain)
	}
	progress("results in %s", *out)
	runExit()
}

var (
	exitMu  sync.Mutex
	atExits []func()
)

// atExit registers f to run, last registered first, when the program ends,
// also on failure and Ctrl-C: the mesh's namespaces, cgroups and qdiscs must
// not outlive it.
func atExit(f func()) {
	exitMu.Lock()
	defer exitMu.Unlock()
	atExits = append(atExits, f)
}

func runExit() {
	exitMu.Lock()
	fs := atExits
	atExits = nil
	exitMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// runner drives the chain and reads its spans back.
type runner struct {
	m          *mesh.Mesh
	api        *demo.APISource
	url        string
	step       time.Duration
	warmup     time.Duration
	peers      map[string]string // pod IP → service
	backend    mesh.Replica
	loadClient *http.Client
}

func (r *runner) index() {
	r.peers = map[string]string{}
	for _, s := range r.m.Services() {
		for _, rep := range s.Replicas {
			r.peers[rep.IP] = s.Name
			r.peers[s.Name] = s.Name
			if s.Name == chain[len(chain)-1] {
				r.backend = rep
			}
		}
	}
	// Enough idle connections that no client opens a new one per request.
	r.loadClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}}
}

// peerName names a CLIENT span's peer (host or host:port) by its service.
func (r *runner) peerName(p string) string {
	host := p
	if h, _, err := net.SplitHostPort(p); err == nil {
		host = h
	}
	if s, ok := r.peers[host]; ok {
		return s
	}
	return p
}

// load runs n closed-loop clients for d and returns the successful
// requests' latencies and the failures.
func (r *runner) load(n int, d time.Duration) ([]time.Duration, int) {
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t0 := time.Now()
				resp, err := r.loadClient.Get(r.url)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				el := time.Since(t0)
				mu.Lock()
				if ok {
					lat = append(lat, el)
				} else {
					errs++
				}
				mu.Unlock()
				if !ok {
					time.Sleep(100 * time.Millisecond) // no hot loop on a broken chain
				}
			}
		}()
	}
	wg.Wait()
	return lat, errs
}

// run is one step: warm-up, the measured load, then the step's traces.
func (r *runner) run(n int) Step {
	r.load(n, r.warmup)
	cpu0, thr0 := overhead.TreeCPU(r.backend.AppPID), readThrottle(r.backend.Cgroup)
	in0, out0 := linkBytes(r.backend.Veth)
	t0 := time.Now()
	lat, errs := r.load(n, r.step)
	t1 := time.Now()
	cpu, thr := overhead.TreeCPU(r.backend.AppPID)-cpu0, readThrottle(r.backend.Cgroup)
	in1, out1 := linkBytes(r.backend.Veth)
	st := Step{Clients: n, Latency: Summarize(lat, errs, t1.Sub(t0)), Seconds: t1.Sub(t0).Seconds(), LoadAvg: loadAvg()}
	if reqs := float64(len(lat) + errs); reqs > 0 {
		st.BackendCPUms = ms(cpu) / reqs
		st.ThrottledMs = ms(thr.time-thr0.time) / reqs
		st.BackendBytesIn = float64(in1-in0) / reqs
		st.BackendBytesOut = float64(out1-out0) / reqs
	}
	// The spans of the step's last requests are still in `rootline run`'s
	// export batches.
	time.Sleep(3 * time.Second)
	traces := r.traces(t0, t1, len(lat)+errs)
	if p := thr.periods - thr0.periods; p > 0 {
		st.ThrottledPeriods = float64(thr.throttled-thr0.throttled) / float64(p)
	}
	st.Traces = len(traces)
	st.Services = Aggregate(traces, t0.UnixNano(), t1.UnixNano(), r.peerName)
	return st
}

// traces reads the entry's traces that started in [from, to) from the query
// API, in sub-windows small enough that no search hits the API's cap of
// 1000 traces (it keeps the newest), deduplicated by trace id.
func (r *runner) traces(from, to time.Time, expect int) [][]*model.Span {
	const perSearch = 600
	parts := max(1, (expect+perSearch-1)/perSearch)
	width := to.Sub(from) / time.Duration(parts)
	seen := map[model.TraceID]bool{}
	var out [][]*model.Span
	for i := range parts {
		a := from.Add(time.Duration(i) * width)
		b := a.Add(width)
		if i == parts-1 {
			b = to
		}
		trs, err := r.api.SearchTraces(context.Background(), chain[0], a, b, 1000)
		if err != nil {
			progress("reading traces %s–%s: %v", a.Format(time.TimeOnly), b.Format(time.TimeOnly), err)
			continue
		}
		if len(trs) >= 1000 {
			progress("a search of %s hit the API's cap of 1000 traces: the step's means are of its newest traces", width)
		}
		for _, tr := range trs {
			if len(tr) == 0 || seen[tr[0].TraceID] {
				continue
			}
			seen[tr[0].TraceID] = true
			out = append(out, tr)
		}
	}
	return out
}

// throttle is a cgroup's cpu.stat: the quota's periods with runnable
// tasks, those that ran out of quota, and the time its tasks were held back.
type throttle struct {
	periods, throttled int64
	time               time.Duration
}

// readThrottle reads cgroup v1's cpu.stat (throttled_time in ns) or v2's
// (throttled_usec); zero when unreadable.
func readThrottle(cg string) throttle {
	var t throttle
	if cg == "" {
		return t
	}
	b, err := os.ReadFile(filepath.Join(cg, "cpu.stat"))
	if err != nil {
		return t
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, " ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			t.periods = n
		case "nr_throttled":
			t.throttled = n
		case "throttled_time":
			t.time = time.Duration(n)
		case "throttled_usec":
			t.time = time.Duration(n) * time.Microsecond
		}
	}
	return t
}

// linkBytes is what a pod's link carried into the pod (the host's end of
// the veth sent it) and out of it (that end received it).
func linkBytes(veth string) (in, out int64) {
	read := func(f string) int64 {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", veth, "statistics", f))
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	return read("tx_bytes"), read("rx_bytes")
}

func parseClients(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("-clients: %q is not a client count in 1..1000", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// startServer runs a server in this process, every listener on a free
// loopback port (the mesh forwards the pods' gateway to its OTLP/HTTP
// receiver), storing into dir; stop shuts it down.
func startServer(dir string) (addrs server.Addrs, stop func()) {
	cfg := server.DefaultConfig()
	cfg.DataDir = dir
	cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr, cfg.ZipkinAddr, cfg.QueryAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	srv, err := server.New(cfg, slog.New(slog.DiscardHandler))
	check(err)
	check(srv.Start(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	return srv.Addrs(), func() { cancel(); <-done }
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "miragefig: %s %s\n", time.Now().UTC().Format(time.TimeOnly), fmt.Sprintf(format, args...))
}

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "miragefig:", err)
	runExit()
	os.Exit(1)
}
