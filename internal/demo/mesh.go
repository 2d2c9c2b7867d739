package demo

import (
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/loadgen"
	"github.com/rootline/rootline/internal/mesh"
)

// MeshOptions configure the mesh scenario (the default `rootline demo`).
type MeshOptions struct {
	Topology string   // YAML file; empty: mesh.Default()
	Faults   []string // name@service[=amount], run one after the other
	Warmup   time.Duration
	Duration time.Duration // of each fault
	// Settle bounds the baseline before each fault, which goes on until
	// the server has no incident open (0: 3 minutes).
	Settle  time.Duration
	Rate    float64 // 0: the topology's last phase rate
	Mode    string  // pod, port or "" (pod when root)
	NoEnvoy bool
	NoRun   bool
	// Spans says who makes the spans (SpansRun, SpansSidecar, SpansBoth;
	// "" is SpansBoth).
	Spans string
	// Protocol, when set, overrides the topology's (mesh.ProtocolHTTP or
	// mesh.ProtocolGRPC): with gRPC the services serve and call one unary
	// method over h2c, the sidecars proxy HTTP/2, the load is gRPC calls,
	// and rootline run follows HTTP/2 (its supervisor).
	Protocol       string
	ForwardHeaders bool
	// Propagate is rootline run's -propagate for every service (""
	// is DefaultPropagate).
	Propagate string
	// Sample is rootline run's -sample (node-side tail sampling) for
	// every service; 0 leaves it off.
	Sample float64
	// Prefix and Subnet place the mesh (mesh.Options); "" keeps the
	// defaults (rl, 10.77.0.0/24). A second mesh on the machine needs both.
	Prefix, Subnet string
	DataDir        string
	QueryAddr      string
	Keep           bool
	JSONPath       string
	ServerConfig   string // a server configuration file the server starts from (Options.ServerConfig)
	RepoRoot       string // where build/demo and demo/services are; "" = next to the binary
	Logger         *slog.Logger

	// NoKmetrics runs the agent without its per-container kernel metrics
	// (by default, as root, every metric is on and pushed every second).
	NoKmetrics bool
	// ResultsDir, when set, gets each fault's result as fault-<n>.json (n
	// from 1, in --fault order) as soon as it is known, so that a driver
	// of many faults keeps what finished when the demo is stopped.
	ResultsDir string
}

// FaultResult is what the demo found about one injected fault.
type FaultResult struct {
	Injected string `json:"injected"`
	Service  string `json:"service"`
	// Language is the service's; ExpectedCause the cause the fault should
	// be diagnosed as (mesh.ExpectedCause; "" when it has none the kernel
	// measures).
	Language      string    `json:"language,omitempty"`
	ExpectedCause string    `json:"expectedCause,omitempty"`
	From          time.Time `json:"from"`
	// Onset is when the fault was injected; To when it was removed.
	Onset time.Time `json:"onset"`
	To    time.Time `json:"to"`
	// Timeline is the server's verdict as the demo saw it change while the
	// fault was on and until the verdict was read (polled every second):
	// the time from onset to a verdict is read from it.
	Timeline []VerdictAt `json:"timeline,omitempty"`
	// Captures are the capture log's entries for the fault's service
	// created, asked for or ended from 40 s before the onset (a capture
	// taken then holds the first one after it back, capture.min_interval)
	// to the end of the fault: with Timeline, why a cause came when it did.
	Captures []CaptureAt `json:"captures,omitempty"`
	// Incidents counts the incidents the server opened between the onset
	// and the end of the fault (all entry points); a fault-free run wants 0.
	Incidents int `json:"incidents"`
	// OpenDuring counts the incidents open at any time between the onset
	// and the end of the fault, also those opened before it: what a
	// fault-free stretch is judged by.
	OpenDuring int `json:"openDuring"`
	// NodeVerdicts counts those of OpenDuring whose verdict names the
	// node (no service stood out and the hypervisor stole its CPUs).
	NodeVerdicts int `json:"nodeVerdicts"`
	// CauseCorrect: the verdict names the service and ExpectedCause. (For
	// a fault that took no effect, NoEffect, both say that no incident
	// opened.)
	CauseCorrect bool `json:"causeCorrect"`
	// Anomalies counts the anomalous spans the API listed for the fault's
	// window (AnomaliesCapped: at least that many, the API's page was full).
	Anomalies       int            `json:"anomalies"`
	AnomaliesCapped bool           `json:"anomaliesCapped,omitempty"`
	ByService       map[string]int `json:"anomaliesByService"`
	// Incident is the server's incident for the fault (nil when none
	// opened); Verdict is its verdict.
	Incident *diagnosis.Incident `json:"incident,omitempty"`
	Verdict  diagnosis.Verdict   `json:"verdict"`
	// CriticalPath is the kernel critical path of the culprit's slowest
	// span in the verdict's example trace (without its segments), when the
	// server has one.
	CriticalPath *critpath.SpanPath `json:"criticalPath,omitempty"`
	Evidence     map[string]int     `json:"evidenceArtifacts"`
	Load         LoadSummary        `json:"load"`
	// Baseline is the load of the baseline phase just before the onset,
	// at the same rate: with Load, how much the fault slowed requests.
	Baseline *LoadSummary `json:"baseline,omitempty"`
	// Correct: the verdict names the fault's service; for a fault that
	// took no effect (NoEffect), no incident opened; for a fault-free
	// stretch, no incident was open.
	Correct bool   `json:"correct"`
	Error   string `json:"error,omitempty"`

	// Effect is what the fault did at its service, measured from the entry
	// point's traces before and after the onset (analysis.ServiceGrowth):
	// the ground a verdict is judged on, read from spans only. NoEffect:
	// it grew that service's time per request by less than MinEffect of
	// the entry's median latency, or within the traces' spread (Welch's t
	// under 3) — nothing for a diagnosis to find; a right answer then is no
	// incident. EffectError says why there is no Effect.
	Effect      *analysis.Growth `json:"effect,omitempty"`
	NoEffect    bool             `json:"noEffect,omitempty"`
	EffectError string           `json:"effectError,omitempty"`
	// SmallEffect: the fault took effect, by less than MinIncident of the
	// entry's median — a slowdown the server's incident rule is not built
	// to open an incident for. Right with no incident, or with one whose
	// verdict is right.
	SmallEffect bool `json:"smallEffect,omitempty"`

	// NoPath says why there is no CriticalPath (the notes of the stored
	// paths read), when there is none.
	NoPath string `json:"noCriticalPath,omitempty"`
}

// MinEffect is the share of the entry point's median latency by which a
// fault must grow its service's time per request to count as one that took
// effect (FaultResult.NoEffect). The same growth between two fault-free
// stretches is under about 1 % (a service's mean time per trace over a few
// hundred traces moves by ±0.5 ms at 15 req/s here).
const MinEffect = 0.05

// MinIncident is the growth of a fault's service's time per request, as a
// share of the entry's median, from which the fault's slowdown is one the
// server's incident rule is built to open an incident for: the shift rule's
// default (diagnosis.min_shift, which judges the entry's median and 90th
// percentile; the anomaly rule opens sooner for a slowdown of a few
// requests far over their operation's median).
var MinIncident = diagnosis.DefaultConfig().MinShift

// tookEffect says whether g is a growth a diagnosis should find: at least
// MinEffect of the entry's median, and out of the traces' spread.
func tookEffect(g analysis.Growth) bool {
	return g.T >= 3 && g.Score >= MinEffect*g.EntryBaseMs
}

// describeEffect is the demo's line on what a fault did at its service.
func describeEffect(fr FaultResult) string {
	g := fr.Effect
	if g == nil {
		return "not measured: " + fr.EffectError
	}
	share := 0.0
	if g.EntryBaseMs > 0 {
		share = 100 * g.Score / g.EntryBaseMs
	}
	line := fmt.Sprintf("%+.1f ms per request at %s (own %+.1f, calls into it %+.1f), %.1f %% of the entry's %.1f ms median before (%.1f ms after; Welch's t = %.1f; %d traces before, %d after)",
		g.Score, g.Service, g.SelfDeltaMs, g.NetDeltaMs, share, g.EntryBaseMs, g.EntryAfterMs, min(g.T, 999), g.Before, g.After)
	switch {
	case fr.NoEffect:
		line += fmt.Sprintf(" — no measurable effect (under %.0f %%): nothing for a diagnosis to find; a larger amount takes effect", 100*MinEffect)
	case fr.SmallEffect:
		line += fmt.Sprintf(" — a small effect, under the %.0f %% the incident rule is built for (diagnosis.min_shift)", 100*MinIncident)
	}
	return line
}

// VerdictAt is the server's verdict at a time after a fault's onset.
type VerdictAt struct {
	AfterMs  int64  `json:"afterMs"`
	Incident string `json:"incident"`
	Service  string `json:"service"`
	Cause    string `json:"cause"`
	// PathSpans and Missing are the verdict's (its kernel paths read, what
	// it lacked): why a cause came late or changed.
	PathSpans int      `json:"pathSpans,omitempty"`
	Missing   []string `json:"missing,omitempty"`
	// Evidence is the verdict's last evidence lines (the cause's).
	Evidence []string `json:"evidence,omitempty"`
}

// CaptureAt is a capture of the fault's service, its times in ms after
// the onset (negative: before it).
type CaptureAt struct {
	PID         int64  `json:"pid"`
	State       string `json:"state"`
	Suspect     bool   `json:"suspect,omitempty"`
	WindowFrom  int64  `json:"windowFromMs"`
	WindowTo    int64  `json:"windowToMs"`
	CreatedMs   int64  `json:"createdMs"`
	RequestedMs *int64 `json:"requestedMs,omitempty"`
	FinishedMs  *int64 `json:"finishedMs,omitempty"`
	Spans       int    `json:"spans"`
	Error       string `json:"error,omitempty"`
}

// faultCaptures reads the capture log's entries for svc created, asked
// for or ended in [onset − 40 s, to], oldest first (nil when the log cannot be read: it
// only explains the timeline).
func faultCaptures(ctx context.Context, api, token, svc string, onset, to time.Time) []CaptureAt {
	var log []struct {
		PID       int64     `json:"pid"`
		Service   string    `json:"service"`
		Start     int64     `json:"start"`
		End       int64     `json:"end"`
		SpanCount int       `json:"spanCount"`
		State     string    `json:"state"`
		Suspect   bool      `json:"suspect"`
		Error     string    `json:"error"`
		Created   time.Time `json:"created"`
		Requested time.Time `json:"requested"`
		Finished  time.Time `json:"finished"`
	}
	if err := getJSONAuth(ctx, api+"/api/v1/captures?limit=2000", token, &log); err != nil {
		return nil
	}
	ms := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		v := t.Sub(onset).Milliseconds()
		return &v
	}
	within := func(t time.Time) bool { return !t.IsZero() && !t.Before(onset.Add(-40*time.Second)) && !t.After(to) }
	var out []CaptureAt
	for _, c := range log {
		// Created, asked for or ended in the span: a capture created
		// long before the onset and held past it is what held the next.
		if c.Service != svc || !(within(c.Created) || within(c.Requested) || within(c.Finished)) {
			continue
		}
		out = append(out, CaptureAt{PID: c.PID, State: c.State, Suspect: c.Suspect, Spans: c.SpanCount, Error: c.Error,
			WindowFrom: (c.Start - onset.UnixNano()) / 1e6, WindowTo: (c.End - onset.UnixNano()) / 1e6,
			CreatedMs: c.Created.Sub(onset).Milliseconds(), RequestedMs: ms(c.Requested), FinishedMs: ms(c.Finished)})
	}
	slices.SortFunc(out, func(a, b CaptureAt) int { return cmp.Compare(a.CreatedMs, b.CreatedMs) })
	return out
}

// LoadSummary is the load generator's view of a phase.
type LoadSummary struct {
	Rate   float64 `json:"rate"`
	Sent   int64   `json:"sent"`
	Errors int64   `json:"errors"`
	P50Ms  float64 `json:"p50Ms"`
	P95Ms  float64 `json:"p95Ms"`
	P99Ms  float64 `json:"p99Ms"`
}

// MeshSummary is the demo's result (also written with --json).
type MeshSummary struct {
	Mode string `json:"mode"`
	// Protocol is what the services speak: http or grpc.
	Protocol string `json:"protocol"`
	Envoy    bool   `json:"envoy"`
	Run      bool   `json:"rootlineRun"`
	// SidecarSpans: the sidecars send spans too (or alone).
	SidecarSpans bool          `json:"sidecarSpans"`
	Services     int           `json:"services"`
	Warmup       []LoadSummary `json:"warmup"`
	// Traces is how well the warm-up's traces joined across the hops.
	Traces    *TraceJoin    `json:"traces,omitempty"`
	Faults    []FaultResult `json:"faults"`
	UI        string        `json:"ui"`
	Correct   bool          `json:"correct"`
	Notes     []string      `json:"notes,omitempty"`
	SpansSeen int           `json:"spansStored"`
	// Kmetrics says whether the agent recorded kernel metrics; Agent is
	// the agent process's own CPU time over the run (its BPF programs run
	// in the traced tasks and are not in it).
	Kmetrics bool      `json:"kmetrics"`
	Agent    *AgentCPU `json:"agent,omitempty"`
	// Work is how long the server took for its incidents' verdicts and
	// for the critical paths of the kernel snapshots: with the captures'
	// times, what a verdict's latency after the onset is made of.
	Work []ServerWork `json:"serverWork,omitempty"`
	// Store is the server's data directory when it outlives the demo
	// (--data-dir).
	Store string `json:"store,omitempty"`
}

// ServerWork is the count and mean duration of one kind of the server's
// work, from its /metrics histogram.
type ServerWork struct {
	What   string  `json:"what"`
	Count  int     `json:"count"`
	MeanMs float64 `json:"meanMs"`
}

// serverWork reads the histograms of the server's verdicts and critical
// paths at api (those it lacks are left out).
func serverWork(ctx context.Context, api string) []ServerWork {
	hists := []struct{ what, name string }{
		{"verdicts", "rootline_incident_verdict_seconds"},
		{"critical paths of a snapshot", "rootline_critpath_seconds"},
	}
	var names []string
	for _, h := range hists {
		names = append(names, h.name+"_count", h.name+"_sum")
	}
	vals, err := metricValues(ctx, api+"/metrics", names...)
	if err != nil {
		return nil
	}
	var out []ServerWork
	for _, h := range hists {
		n, sum := vals[h.name+"_count"], vals[h.name+"_sum"]
		if n == 0 {
			continue
		}
		out = append(out, ServerWork{What: h.what, Count: int(n), MeanMs: math.Round(1e4*sum/n) / 10})
	}
	return out
}

// AgentCPU is a process's CPU time (user + system) over a wall time.
type AgentCPU struct {
	CPUSeconds  float64 `json:"cpuSeconds"`
	WallSeconds float64 `json:"wallSeconds"`
	// Share is CPUSeconds / WallSeconds (1 = one CPU busy).
	Share float64 `json:"share"`
}

func summarize(r loadgen.PhaseResult) LoadSummary {
	return LoadSummary{Rate: r.Rate, Sent: r.Sent, Errors: r.Errors, P50Ms: msOf(r.P50()), P95Ms: msOf(r.P95()), P99Ms: msOf(r.P99())}
}

// msOf is d in milliseconds, to the microsecond.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RunMesh runs the mesh scenario: server, agent, the topology's services
// (each under `rootline run` and with an Envoy sidecar when available), load
// in phases, then each fault in turn with a verdict read from the API.
func RunMesh(ctx context.Context, o MeshOptions, out io.Writer) (MeshSummary, error) {
	var sum MeshSummary
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	self, err := os.Executable()
	if err != nil {
		return sum, err
	}
	if o.RepoRoot == "" {
		o.RepoRoot = filepath.Dir(filepath.Dir(self)) // bin/rootline → repo
	}
	topo := mesh.Default()
	if o.Topology != "" {
		if topo, err = mesh.Load(o.Topology); err != nil {
			return sum, err
		}
	}
	if o.Protocol != "" {
		topo.Protocol = o.Protocol
		if err := topo.Validate(); err != nil {
			return sum, err
		}
	}
	var faults []mesh.Fault
	for _, s := range o.Faults {
		f, err := mesh.ParseFault(s)
		if err != nil {
			return sum, err
		}
		if f.Name != mesh.FaultNone && topo.Service(f.Service) == nil {
			return sum, fmt.Errorf("fault %s: no service %q in the topology", s, f.Service)
		}
		faults = append(faults, f)
	}
	root := os.Geteuid() == 0
	mode := mesh.Mode(o.Mode)
	if mode == mesh.ModeAuto {
		mode = mesh.ModePort
		if root {
			mode = mesh.ModePod
		}
	}
	if mode == mesh.ModePod && !root {
		return sum, fmt.Errorf("pod mode needs root (network namespaces, iptables); use --mode port")
	}
	if !root {
		sum.Notes = append(sum.Notes, "not root: port mode; faults that need root (cpu-throttle, net-bandwidth) are unavailable")
	}
	sum.Mode = string(mode)
	sum.Protocol = cmp.Or(topo.Protocol, mesh.ProtocolHTTP)
	if err := checkServiceBinaries(topo, o.RepoRoot); err != nil {
		return sum, err
	}
	serviceCmd := mesh.DefaultServiceCmd(o.RepoRoot)
	if topo.GRPC() {
		deps, err := mesh.FindGRPCDeps(topo)
		if err != nil {
			return sum, fmt.Errorf("--protocol grpc: %w", err)
		}
		serviceCmd = mesh.GRPCServiceCmd(o.RepoRoot, deps)
	}

	dir := o.DataDir
	if dir == "" {
		d, err := tempDir()
		if err != nil {
			return sum, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	// The pods reach the agent's API through the bridge (mesh.Options.Expose):
	// beyond loopback, so it takes a token (dumps can be triggered there). The
	// server sends it with its dump requests; its own API stays on loopback,
	// open to the UI.
	tokenFile, err := WriteToken(dir)
	if err != nil {
		return sum, err
	}
	tokenBytes, err := os.ReadFile(tokenFile)
	if err != nil {
		return sum, err
	}
	// The capture API (which agents upload to) takes the token: the demo's
	// own reads of it, for the verdict, send it too.
	token := strings.TrimSpace(string(tokenBytes))
	addrs, stopServer, err := startServer(ctx, filepath.Join(dir, "data"), o.QueryAddr, tokenFile, filepath.Join(dir, "server.log"), o.ServerConfig)
	if err != nil {
		return sum, err
	}
	defer stopServer()
	api := "http://" + addrs.Query
	sum.UI = api
	fmt.Fprintf(out, "rootline demo: server up — UI and API %s, OTLP/gRPC %s, OTLP/HTTP %s\n", api, addrs.OTLPGRPC, addrs.OTLPHTTP)

	// Kernel metrics need root (eBPF); they go to the server's OTLP/HTTP
	// receiver, with the token.
	var kmArgs []string
	switch {
	case o.NoKmetrics:
	case !root:
		sum.Notes = append(sum.Notes, "not root: the agent records no kernel metrics")
	default:
		// Only this mesh's pods: another mesh on the node has services of
		// the same names.
		kmArgs = []string{"--kmetrics", "--kmetrics.enable", "all", "--kmetrics.push-interval", "1s",
			"--kmetrics.cgroups", mesh.CgroupPath(o.Prefix),
			"--kmetrics.otlp-url", "http://" + addrs.OTLPHTTP + "/v1/metrics"}
	}
	// The agent relays the services' spans (rootline run sends them to
	// it) to the server's OTLP/HTTP receiver, one request a second.
	relayArgs := []string{"--relay.url", "http://" + addrs.OTLPHTTP + "/v1/traces"}
	agent, err := startAgentProc(ctx, self, api, dir, tokenFile, append(relayArgs, kmArgs...)...)
	if err != nil && kmArgs != nil {
		sum.Notes = append(sum.Notes, "the agent did not start with kernel metrics, started it without: "+firstLine(err.Error()))
		kmArgs = nil
		agent, err = startAgentProc(ctx, self, api, dir, tokenFile, relayArgs...)
	}
	if err != nil {
		return sum, err
	}
	defer agent.stop()
	agentAddr := agent.addr
	sum.Kmetrics = kmArgs != nil
	km := "off"
	if sum.Kmetrics {
		km = "every metric, pushed every second"
	}
	fmt.Fprintf(out, "rootline demo: agent up at %s (profilers: cpu, jfr, and kernel and goroutines when available; kernel metrics: %s)\n", agentAddr, km)

	envoy := ""
	if !o.NoEnvoy {
		if envoy, err = mesh.FindEnvoy(); err != nil {
			sum.Notes = append(sum.Notes, "no Envoy ("+err.Error()+"): spans come from rootline run only")
			envoy = ""
		}
	}
	if envoy == "" && o.Spans == SpansSidecar {
		return sum, errors.New("--spans sidecar: no Envoy sidecars to make the spans (scripts/deps.sh installs Envoy)")
	}
	sum.Envoy = envoy != ""
	sum.Run = !o.NoRun
	// One source of spans per hop: where rootline run traces a service its
	// SERVER and CLIENT spans say what the sidecars' would, so by default
	// the sidecars trace only when nothing else does.
	sum.SidecarSpans = sidecarSpans(sum.Envoy, o.Spans, o.NoRun)
	subnet := o.Subnet
	if subnet == "" {
		subnet = "10.77.0.0/24"
	}
	gw, err := SubnetGateway(subnet)
	if err != nil {
		return sum, err
	}
	podAddr := func(h string) string {
		if mode != mesh.ModePod {
			return h
		}
		_, port, _ := net.SplitHostPort(h)
		return net.JoinHostPort(gw, port) // the bridge, by the mesh's contract
	}
	opts := mesh.Options{
		Mode: mode, Dir: filepath.Join(dir, "mesh"), EnvoyBin: envoy, Tracing: sum.SidecarSpans,
		OTLPEndpoint: addrs.OTLPGRPC, Expose: []string{addrs.OTLPHTTP, agentAddr},
		ServiceCmd: serviceCmd, ForwardHeaders: o.ForwardHeaders,
		Prefix: o.Prefix, Subnet: subnet, Logger: log,
	}
	if !o.NoRun {
		if mode == mesh.ModePod {
			if err := ShareDatapath(); err != nil {
				log.Info("the pods' rootline runs load a datapath each", "err", err)
			}
		}
		var proto []string
		if topo.GRPC() {
			// Only the supervisor follows HTTP/2 (docs/run.md): with
			// -protocol grpc, rootline run's -mode auto picks it.
			proto = []string{"--protocol", "grpc"}
		}
		opts.Wrap = func(svc string, argv []string) []string {
			// DefaultPropagate says why W3C alone: b3, x-b3-* and
			// x-request-id would cost 259 B per hop for no reader.
			args := append([]string{self, "run", "--service", svc, "--server", "http://" + podAddr(addrs.OTLPHTTP),
				"--agent", "http://" + podAddr(agentAddr), "--auth.token-file", tokenFile, "--propagate", o.propagate()}, proto...)
			if o.Sample > 0 && o.Sample < 1 {
				args = append(args, "--sample", strconv.FormatFloat(o.Sample, 'g', -1, 64))
			}
			return append(append(args, "--"), argv...)
		}
	}
	fmt.Fprintf(out, "rootline demo: starting %d services in %s mode (%s)…\n", len(topo.Services), mode, describe(sum))
	m, err := mesh.Start(ctx, topo, opts)
	if err != nil {
		return sum, fmt.Errorf("start the mesh: %w", err)
	}
	// The server (this process) and the agent run as a pod beside the
	// services', as on a Kubernetes node, not in the root cgroup where each
	// of their threads would weigh as much as the whole mesh for the CPU.
	if err := m.AdoptInfra(os.Getpid(), agent.pid); err != nil {
		sum.Notes = append(sum.Notes, "Rootline's processes stay in their cgroup, not in a pod beside the services': "+firstLine(err.Error()))
	}
	defer func() {
		if err := m.Close(); err != nil {
			fmt.Fprintf(out, "rootline demo: cleanup: %v\n", err)
		}
		if o.NoRun {
			return
		}
		if removed, err := SweepDatapaths(); err != nil {
			fmt.Fprintf(out, "rootline demo: cleanup: %v\n", err)
		} else if len(removed) > 0 {
			fmt.Fprintf(out, "rootline demo: cleanup: removed the eBPF datapath killed runs left attached (%s)\n", strings.Join(removed, ", "))
		}
	}()
	sum.Services = len(topo.Services)
	entry := m.EntryURL()
	fmt.Fprintf(out, "rootline demo: mesh up, entry %s (%s)\n", entry, sum.Protocol)
	wait := WaitServing
	if topo.GRPC() {
		wait = WaitServingGRPC
	}
	if err := wait(ctx, entry, 90*time.Second); err != nil {
		return sum, err
	}
	// load is the load generator's target; each run adds its phases.
	load := func(phases []loadgen.Phase, p func(loadgen.Progress)) loadgen.Config {
		return loadgen.Config{URL: entry, GRPC: topo.GRPC(), Phases: phases, Progress: p}
	}

	anomalies := &anomalyCounter{api: api}
	// Each progress line counts the anomalous spans since its phase began
	// (a load run's elapsed time starting over is a new phase).
	progress := func(label string) func(loadgen.Progress) {
		last := time.Duration(-1)
		return func(p loadgen.Progress) {
			if p.Elapsed < last || last < 0 {
				anomalies.restart(time.Now().Add(-p.Elapsed))
			}
			last = p.Elapsed
			if p.Elapsed.Round(time.Second)%(5*time.Second) != 0 {
				return
			}
			fmt.Fprintf(out, "  %-22s %3.0fs  target %4.0f/s  done %5.1f/s  p50 %6.1f ms  p99 %7.1f ms  errors %d  anomalies %s\n",
				label, p.Elapsed.Seconds(), p.Target, p.Rate, msOf(p.P50), msOf(p.P99), p.Errors, anomalies.String())
		}
	}
	stopCount := anomalies.poll(ctx)
	defer stopCount()

	// Warm-up: the topology's phases of increasing rate, so the detector's
	// windows learn the normal latency.
	phases := topo.Phases
	if o.Warmup > 0 {
		phases = scalePhases(phases, o.Warmup)
	}
	rate := o.Rate
	if rate == 0 && len(phases) > 0 {
		rate = phases[len(phases)-1].Rate
	}
	fmt.Fprintf(out, "phase: warm-up, %s\n", phaseList(phases))
	warmFrom := time.Now()
	for i, ph := range phases {
		res, err := loadgen.Run(ctx, load([]loadgen.Phase{{Rate: ph.Rate, Duration: ph.Duration}},
			progress(fmt.Sprintf("warm-up %d/%d", i+1, len(phases)))))
		if err != nil {
			return sum, err
		}
		sum.Warmup = append(sum.Warmup, summarize(res.Phases[0]))
	}
	if sum.Run || sum.SidecarSpans {
		// Did the warm-up's traces join across every hop? Read back from
		// the server, once the last batches of spans are in.
		warmTo := time.Now()
		sleepCtx(ctx, 3*time.Second)
		tj, err := measureTraceJoin(ctx, api, token, topo, sum.Run, sum.SidecarSpans, warmFrom, warmTo, 50)
		if err != nil {
			fmt.Fprintf(out, "traces: %v\n", err)
		} else {
			sum.Traces = &tj
			fmt.Fprintf(out, "traces: %s\n", tj)
		}
	}

	sum.Correct = len(faults) > 0
	for i, f := range faults {
		if ctx.Err() != nil {
			return sum, ctx.Err()
		}
		d := o.Duration
		if f.Name == mesh.FaultNone && f.Amount != "" {
			d, _ = time.ParseDuration(f.Amount) // ParseFault checked it
		}
		lang := ""
		if svc := topo.Service(f.Service); svc != nil {
			lang = svc.Language
		}
		fr := runFault(ctx, m, api, token, load, f, lang, rate, d, cmp.Or(o.Settle, 3*time.Minute), progress(f.String()), out)
		if o.ResultsDir != "" && ctx.Err() == nil { // an interrupted run is no result
			if err := writeJSON(filepath.Join(o.ResultsDir, fmt.Sprintf("fault-%d.json", i+1)), fr); err != nil {
				return sum, err
			}
		}
		sum.Faults = append(sum.Faults, fr)
		sum.Correct = sum.Correct && fr.Correct
		if i < len(faults)-1 {
			// Recovery: normal traffic so the detector's windows forget the fault.
			fmt.Fprintf(out, "phase: recovery, %.0f/s for %s\n", rate, o.Duration)
			if _, err := loadgen.Run(ctx, load([]loadgen.Phase{{Rate: rate, Duration: o.Duration}}, progress("recovery"))); err != nil {
				return sum, err
			}
		}
	}
	if v, err := metricValue(ctx, api+"/metrics", "rootline_pipeline_spans_stored_total"); err == nil {
		sum.SpansSeen = int(v)
	}
	if c, err := agent.cpu(); err == nil {
		sum.Agent = &c
	}
	sum.Work = serverWork(ctx, api)
	if o.DataDir != "" {
		sum.Store = filepath.Join(dir, "data")
	}
	printMeshSummary(out, sum)
	if o.Keep {
		fmt.Fprintf(out, "\nmesh and server kept running at %s — press Ctrl-C to stop and clean up\n", api)
		<-ctx.Done()
	}
	return sum, nil
}

// DefaultPropagate is the trace context formats the demo's rootline runs
// write: W3C alone, the only one anything in the mesh reads (the sidecars'
// OpenTelemetry tracer; Envoy makes its own x-request-id where a request
// has none; the services read no context; the analysis reads no
// x-request-id).
const DefaultPropagate = "w3c"

func (o *MeshOptions) propagate() string {
	if o.Propagate == "" {
		return DefaultPropagate
	}
	return o.Propagate
}

// Who makes the spans in the mesh (MeshOptions.Spans).
const (
	// SpansRun: rootline run alone, the sidecars do not trace (unless the
	// services do not run under rootline run).
	SpansRun = "run"
	// SpansSidecar: the sidecars alone (Protractor's design); the services
	// do not run under rootline run.
	SpansSidecar = "sidecar"
	// SpansBoth: both, two spans of each side of a hop: the default. The
	// callee's ingress sidecar span is what shows time a request waited at
	// the callee before its process read it (a service stalled in GC or
	// holding its interpreter lock); with SpansRun that time is the
	// caller's, and the demo test's gc fault on a Python service was
	// blamed on its caller.
	SpansBoth = "both"
)

// sidecarSpans reports whether the sidecars trace: with sidecars, when
// asked to (sidecar, both), or when the services do not run under rootline
// run and nothing else would make spans.
func sidecarSpans(envoy bool, spans string, noRun bool) bool {
	return envoy && (spans == SpansBoth || spans == "" || spans == SpansSidecar || noRun)
}

// SubnetGateway is the .1 of an IPv4 /24: a pod-mode mesh's bridge, how
// its pods reach the host (mesh.Options.Subnet).
func SubnetGateway(subnet string) (string, error) {
	_, n, err := net.ParseCIDR(subnet)
	if err != nil || n.IP.To4() == nil {
		return "", fmt.Errorf("subnet %q: want an IPv4 /24 such as 10.77.0.0/24", subnet)
	}
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], 1).String(), nil
}

func describe(s MeshSummary) string {
	var parts []string
	if s.Protocol == mesh.ProtocolGRPC {
		parts = append(parts, "speaking gRPC")
	}
	if s.Run {
		parts = append(parts, "each under rootline run")
	} else {
		parts = append(parts, "no rootline run")
	}
	switch {
	case s.Envoy && s.SidecarSpans:
		parts = append(parts, "Envoy sidecars tracing to the server")
	case s.Envoy:
		parts = append(parts, "Envoy sidecars (not tracing: rootline run makes the spans)")
	default:
		parts = append(parts, "no sidecars")
	}
	return strings.Join(parts, ", ")
}

func phaseList(ph []mesh.Phase) string {
	var s []string
	for _, p := range ph {
		s = append(s, fmt.Sprintf("%.0f/s for %s", p.Rate, p.Duration))
	}
	return strings.Join(s, ", then ")
}

// scalePhases fits the phases into total, keeping their proportions.
func scalePhases(ph []mesh.Phase, total time.Duration) []mesh.Phase {
	var sum time.Duration
	for _, p := range ph {
		sum += p.Duration
	}
	if sum == 0 {
		return ph
	}
	out := make([]mesh.Phase, len(ph))
	for i, p := range ph {
		out[i] = mesh.Phase{Rate: p.Rate, Duration: time.Duration(float64(total) * float64(p.Duration) / float64(sum))}
	}
	return out
}

func runFault(ctx context.Context, m *mesh.Mesh, api, token string, load func([]loadgen.Phase, func(loadgen.Progress)) loadgen.Config,
	f mesh.Fault, lang string, rate float64, d, settle time.Duration, progress func(loadgen.Progress), out io.Writer) (fr FaultResult) {
	fr = FaultResult{Injected: f.String(), Service: f.Service, ByService: map[string]int{}, Language: lang,
		ExpectedCause: mesh.ExpectedCause(f.Name, lang)}
	// A baseline just before the fault, at the same rate, once the server
	// has closed the incidents of what came before (the previous fault's),
	// so that each fault is judged on its own incident.
	base := min(d, 20*time.Second)
	fr.From = time.Now()
	fmt.Fprintf(out, "phase: baseline for %s, %.0f/s for %s (and until no incident is open)\n", f, rate, base)
	for first := true; ; first = false {
		res, err := loadgen.Run(ctx, load([]loadgen.Phase{{Rate: rate, Duration: base}}, progress))
		if err != nil {
			fr.Error = err.Error()
			return fr
		}
		if len(res.Phases) > 0 {
			b := summarize(res.Phases[0])
			fr.Baseline = &b
		}
		n, err := openIncidents(ctx, api, token)
		if err != nil || n == 0 {
			break
		}
		if time.Since(fr.From) > settle {
			fmt.Fprintf(out, "  %d incidents still open after %s (--settle); injecting the fault anyway\n", n, settle)
			break
		}
		if first {
			fmt.Fprintf(out, "  %d incidents still open; more baseline\n", n)
		}
		base = 5 * time.Second
	}
	fmt.Fprintf(out, "phase: fault %s on, %.0f/s for %s\n", f, rate, d)
	onset := time.Now()
	fr.Onset = onset
	undo, err := m.Inject(f)
	if err != nil {
		fr.Error = err.Error()
		fmt.Fprintf(out, "  cannot inject %s: %v\n", f, err)
		return fr
	}
	watch := watchVerdicts(ctx, api, token, onset)
	res, err := loadgen.Run(ctx, load([]loadgen.Phase{{Rate: rate, Duration: d}}, progress))
	if uerr := undo(); uerr != nil {
		fmt.Fprintf(out, "  undo %s: %v\n", f, uerr)
	}
	fr.To = time.Now()
	defer func() { fr.Timeline = watch() }()
	if err != nil {
		fr.Error = err.Error()
		return fr
	}
	fr.Load = summarize(res.Phases[0])
	// Let the last spans arrive and the evidence of the fault's anomalies
	// reach the server.
	sleepCtx(ctx, 3*time.Second)
	if n := waitCaptures(ctx, api, token, fr.From, 90*time.Second); n > 0 {
		fmt.Fprintf(out, "  %d captures still running after 90 s; reading the verdict without them\n", n)
	}

	const page = 1000 // the API's largest page
	var all []anomalyRow
	_ = getJSONAuth(ctx, fmt.Sprintf("%s/api/v1/anomalies?limit=%d&since=%d", api, page, fr.From.UnixNano()), token, &all)
	fr.AnomaliesCapped = len(all) >= page
	for _, a := range all {
		if a.Start <= fr.To.UnixNano() {
			fr.Anomalies++
			fr.ByService[a.Service]++
		}
	}
	fr.Incidents, fr.OpenDuring, fr.NodeVerdicts = countIncidents(ctx, api, token, onset, fr.To)
	if f.Name != mesh.FaultNone {
		fr.Captures = faultCaptures(ctx, api, token, f.Service, onset, fr.To)
		if g, err := analysis.ServiceGrowth(ctx, NewAPISource(api, token), f.Service, fr.From, onset, fr.To); err != nil {
			fr.EffectError = err.Error()
		} else {
			fr.Effect, fr.NoEffect = &g, !tookEffect(g)
			fr.SmallEffect = !fr.NoEffect && g.Score < MinIncident*g.EntryBaseMs
		}
	}
	if f.Name == mesh.FaultNone {
		// Nothing injected: any incident open meanwhile is a false alarm.
		fr.Correct = fr.OpenDuring == 0
		fr.CauseCorrect = fr.Correct
		if !fr.Correct {
			fr.Incident, _ = serverVerdict(ctx, api, token, onset, fr.To)
			if fr.Incident != nil && fr.Incident.Verdict != nil {
				fr.Verdict = *fr.Incident.Verdict
			}
		}
		printFault(out, fr)
		return fr
	}
	fr.Incident, err = serverVerdict(ctx, api, token, onset, fr.To)
	if err != nil {
		fr.Error = err.Error()
	}
	fr.Evidence = map[string]int{}
	if fr.Incident != nil && fr.Incident.Verdict != nil {
		fr.Verdict = *fr.Incident.Verdict
		seen := map[string]bool{}
		for _, a := range all {
			for _, art := range a.Artifacts {
				if a.Service == fr.Verdict.Service && !seen[art.ID] {
					seen[art.ID] = true
					fr.Evidence[art.Kind]++
				}
			}
		}
	} else {
		// No incident: the server judged the slowdown too small or too
		// short to open one. The demo then ranks the services of the
		// window itself (the same ranking the server's verdict starts
		// from, with the fault's injection as the onset) and says so; it
		// names no resource, which only the server's evidence reading
		// gives.
		fr.Verdict = diagnosis.Verdict{Cause: diagnosis.CauseUnknown, Missing: []string{
			"the server opened no incident with a verdict for the fault's window; the culprit below is the demo's own ranking of the window's traces, without a cause"}}
		if v, err := analysis.DiagnoseSince(ctx, NewAPISource(api, token), fr.From, fr.Onset, fr.To); err == nil {
			fr.Verdict.Service, fr.Verdict.Ranking, fr.Verdict.ExampleTraceID = v.Service, v.Ranking, v.ExampleTraceID
			fr.Verdict.SlowTraces, fr.Verdict.BaseTraces = v.SlowTraces, v.BaseTraces
			fr.Verdict.Evidence = v.Evidence
			fr.Evidence = v.Artifacts
			if fr.Evidence == nil {
				fr.Evidence = map[string]int{}
			}
		}
	}
	judge(&fr)
	fr.CriticalPath, fr.NoPath = culpritPath(ctx, api, token, fr.Verdict, all, fr.Onset, fr.To)
	printFault(out, fr)
	return fr
}

// judge sets a fault's Correct and CauseCorrect from its verdict and the
// effect the fault took.
func judge(fr *FaultResult) {
	// Right is the server's verdict naming the service: the demo's own
	// ranking, without an incident, is no verdict of Rootline's.
	fr.Correct = fr.Incident != nil && fr.Verdict.Service == fr.Service
	fr.CauseCorrect = fr.Correct && fr.ExpectedCause != "" && fr.Verdict.Cause == fr.ExpectedCause
	switch {
	case fr.NoEffect:
		// Nothing to find: judged as a fault-free stretch is.
		fr.Correct = fr.Incidents == 0
		fr.CauseCorrect = fr.Correct
	case fr.SmallEffect && fr.Incident == nil && fr.Incidents == 0:
		// Too small for an incident, and none opened.
		fr.Correct, fr.CauseCorrect = true, true
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// incidentsSince lists the server's incidents overlapping [from, to] (to
// zero: up to now).
func incidentsSince(ctx context.Context, api, token string, from, to time.Time) ([]diagnosis.Incident, error) {
	var resp struct {
		Incidents []diagnosis.Incident `json:"incidents"`
	}
	u := fmt.Sprintf("%s/api/v1/incidents?since=%d&limit=1000", api, from.UnixNano())
	if !to.IsZero() {
		u += fmt.Sprintf("&until=%d", to.UnixNano())
	}
	err := getJSONAuth(ctx, u, token, &resp)
	return resp.Incidents, err
}

// openIncidents counts the server's open incidents.
func openIncidents(ctx context.Context, api, token string) (int, error) {
	list, err := incidentsSince(ctx, api, token, time.Now().Add(-time.Hour), time.Time{})
	n := 0
	for _, inc := range list {
		if inc.State == diagnosis.StateOpen {
			n++
		}
	}
	return n, err
}

// countIncidents counts the incidents the server opened between from and
// a few seconds after to (the rule needs a window's worth of requests), and
// those open at any time between from and to.
func countIncidents(ctx context.Context, api, token string, from, to time.Time) (opened, open, node int) {
	list, _ := incidentsSince(ctx, api, token, from.Add(-10*time.Second), time.Time{})
	for _, inc := range list {
		op := time.Unix(0, inc.Opened)
		if !op.Before(from) && op.Before(to.Add(5*time.Second)) {
			opened++
		}
		if op.Before(to) && (inc.Closed == 0 || !time.Unix(0, inc.Closed).Before(from)) {
			open++
			if inc.Verdict != nil && inc.Verdict.Node != "" {
				node++
			}
		}
	}
	return opened, open, node
}

// watchVerdicts polls the server's incidents every second from onset on
// and records each change of the verdict (and when its first kernel paths
// came) of the incident the fault opened
// (the one with the most anomalous requests that opened after onset); the
// function it returns stops polling and returns the changes.
func watchVerdicts(ctx context.Context, api, token string, onset time.Time) func() []VerdictAt {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan []VerdictAt, 1)
	go func() {
		var tl []VerdictAt
		defer func() { done <- tl }()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			list, err := incidentsSince(ctx, api, token, onset.Add(-10*time.Second), time.Time{})
			if err == nil {
				var best *diagnosis.Incident
				for i, inc := range list {
					if inc.Opened >= onset.UnixNano() && (best == nil || inc.Anomalous > best.Anomalous) {
						best = &list[i]
					}
				}
				if best != nil {
					at := VerdictAt{AfterMs: time.Since(onset).Milliseconds(), Incident: best.ID}
					if v := best.Verdict; v != nil {
						at.Service, at.Cause, at.PathSpans = v.Service, v.Cause, v.PathSpans
						for _, m := range v.Missing[:min(len(v.Missing), 2)] {
							at.Missing = append(at.Missing, clipText(m, 240))
						}
						for _, e := range v.Evidence[max(len(v.Evidence)-2, 0):] {
							at.Evidence = append(at.Evidence, clipText(e, 240))
						}
					}
					// A change of the verdict, or its first kernel paths.
					if n := len(tl); n == 0 || tl[n-1].Incident != at.Incident || tl[n-1].Service != at.Service || tl[n-1].Cause != at.Cause ||
						(tl[n-1].PathSpans > 0) != (at.PathSpans > 0) {
						tl = append(tl, at)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []VerdictAt {
		cancel()
		return <-done
	}
}

// culpritPath returns the stored critical path of the culprit's slowest
// span in the fault's window [from, to], its segments left out: the
// "critical-path" artifacts linked to the culprit's anomalous spans (rows),
// newest first, the verdict's example trace preferred, then the path the
// kernel saw most of. When none is stored it asks the server for the
// example trace's paths, which it may compute on the spot, for at most
// pathWait. nil when there is none, with why: the stored paths' note on
// one of the culprit's spans, or that none was stored.
func culpritPath(ctx context.Context, api, token string, v diagnosis.Verdict, rows []anomalyRow, from, to time.Time) (*critpath.SpanPath, string) {
	if v.Service == "" {
		return nil, ""
	}
	type art struct {
		id    string
		start int64
	}
	var arts []art
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Service != v.Service || r.Start < from.UnixNano() || r.Start > to.UnixNano() {
			continue
		}
		for _, a := range r.Artifacts {
			if a.Kind == critpath.ArtifactKind && !seen[a.ID] {
				seen[a.ID] = true
				arts = append(arts, art{a.ID, r.Start})
			}
		}
	}
	sort.Slice(arts, func(i, j int) bool { return arts[i].start > arts[j].start })
	var best *critpath.SpanPath
	// causeMs is the time a path's own threads spent in the states that
	// point to the verdict's cause: the path printed is one that shows
	// the verdict's evidence (a span of the culprit that made a call has
	// a path too, mostly waiting on its callee), then the example trace's.
	causeMs := func(p *critpath.SpanPath) float64 {
		if v.Cause == "" || v.Cause == diagnosis.CauseUnknown {
			return 0
		}
		return diagnosis.PathCauses(p)[v.Cause]
	}
	better := func(p *critpath.SpanPath) bool {
		if best == nil {
			return true
		}
		if pc, bc := causeMs(p), causeMs(best); pc != bc {
			return pc > bc
		}
		if ex := v.ExampleTraceID; ex != "" && (p.TraceID == ex) != (best.TraceID == ex) {
			return p.TraceID == ex
		}
		if pu, bu := p.States[critpath.Unknown]/max(p.Ms, 1e-9), best.States[critpath.Unknown]/max(best.Ms, 1e-9); pu != bu {
			return pu < bu
		}
		return p.Ms > best.Ms
	}
	why := fmt.Sprintf("no critical-path artifact is linked to %s's anomalous spans in the fault's window", v.Service)
	for _, a := range arts[:min(len(arts), maxPathArtifacts)] {
		st, err := storedPaths(ctx, api, token, a.id)
		if err != nil {
			why = err.Error()
			continue
		}
		for _, n := range st.Notes {
			if strings.Contains(n, "("+v.Service+" ") {
				why = n
				break
			}
		}
		for i := range st.Paths {
			p := &st.Paths[i]
			if p.Service == v.Service && p.Start >= from.UnixNano() && p.Start <= to.UnixNano() && better(p) {
				best = p
			}
		}
	}
	if best == nil && v.ExampleTraceID != "" {
		pctx, cancel := context.WithTimeout(ctx, pathWait)
		defer cancel()
		var res critpath.TraceResult
		if err := getJSONAuth(pctx, fmt.Sprintf("%s/api/v1/traces/%s/critical-path", api, v.ExampleTraceID), token, &res); err == nil {
			for i := range res.Spans {
				if p := &res.Spans[i]; p.Service == v.Service && better(p) {
					best = p
				}
			}
		}
	}
	if best == nil {
		return nil, why
	}
	best.Segments, best.Arrows, best.Threads = nil, nil, nil
	return best, ""
}

// maxPathArtifacts bounds the stored critical-path documents culpritPath
// reads, maxPathBytes what one may inflate to, and pathWait how long it
// waits for paths the server computes when asked: on a loaded node that
// is minutes for a trace linked to many snapshots.
const (
	maxPathArtifacts = 4
	maxPathBytes     = 64 << 20
	pathWait         = 60 * time.Second
)

// storedPaths downloads and decodes one "critical-path" artifact.
func storedPaths(ctx context.Context, api, token, id string) (*critpath.Stored, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/artifacts/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET artifact %s: %s", id, resp.Status)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", id, err)
	}
	var st critpath.Stored
	if err := json.NewDecoder(io.LimitReader(zr, maxPathBytes)).Decode(&st); err != nil {
		return nil, fmt.Errorf("artifact %s: %w", id, err)
	}
	if st.Version != critpath.StoredVersion {
		return nil, fmt.Errorf("artifact %s: stored paths version %d, this build reads %d", id, st.Version, critpath.StoredVersion)
	}
	return &st, nil
}

// faultIncident is the incident of a fault that began at onset among
// incidents read around it: of those that opened since the onset, the one
// with the most anomalous requests (as watchVerdicts follows), else one
// already open at the onset (the fault merged into it). One whose last
// anomalous request ended before the onset is another's: a slowdown that
// lingered after the previous fault, closed just before this one began,
// had more anomalous requests than the fault's own incident and was read
// as its verdict (bench/RESULTS.md). nil when there is none.
func faultIncident(list []diagnosis.Incident, onset time.Time) *diagnosis.Incident {
	var best *diagnosis.Incident
	bestAfter := false
	for i, inc := range list {
		if inc.End > 0 && inc.End < onset.UnixNano() {
			continue
		}
		after := inc.Opened >= onset.UnixNano()
		if best == nil || after && !bestAfter || after == bestAfter && inc.Anomalous > best.Anomalous {
			best, bestAfter = &list[i], after
		}
	}
	return best
}

// serverVerdict waits for the server's incident of the fault that began at
// onset (faultIncident) to have a verdict computed after the evidence
// arrived, and returns it; nil when none opened.
func serverVerdict(ctx context.Context, api, token string, onset, to time.Time) (*diagnosis.Incident, error) {
	asked := time.Now()
	deadline := asked.Add(60 * time.Second)
	var best *diagnosis.Incident
	for {
		var resp struct {
			Incidents []diagnosis.Incident `json:"incidents"`
		}
		u := fmt.Sprintf("%s/api/v1/incidents?since=%d&until=%d&limit=1000", api, onset.Add(-10*time.Second).UnixNano(), to.UnixNano())
		if err := getJSONAuth(ctx, u, token, &resp); err != nil {
			return nil, fmt.Errorf("read the server's incidents: %w", err)
		}
		best = faultIncident(resp.Incidents, onset)
		// A verdict computed after we started waiting includes the
		// captures that had completed by then.
		if best != nil && best.Verdict != nil && best.Verdict.Updated > asked.UnixNano() {
			return best, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return best, nil
		}
		sleepCtx(ctx, time.Second)
	}
}

// WaitServing sends requests through the whole topology until a few in a
// row succeed: JVMs and sidecars answer their first requests slowly.
func WaitServing(ctx context.Context, url string, limit time.Duration) error {
	client := &http.Client{Timeout: 20 * time.Second}
	return waitServing(ctx, url, limit, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	})
}

// WaitServingGRPC is WaitServing with gRPC calls (the demo's method) to
// url's host:port.
func WaitServingGRPC(ctx context.Context, url string, limit time.Duration) error {
	return waitServing(ctx, url, limit, func() error {
		return loadgen.Once(ctx, loadgen.Config{URL: url, GRPC: true, Timeout: 20 * time.Second})
	})
}

func waitServing(ctx context.Context, url string, limit time.Duration, try func() error) error {
	deadline := time.Now().Add(limit)
	ok := 0
	var last error
	for ok < 5 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the mesh does not answer at %s: %v", url, last)
		}
		err := try()
		if err == nil {
			ok++
			continue
		}
		ok, last = 0, err
		sleepCtx(ctx, 200*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// waitCaptures waits until no capture created since from is pending or
// requested, and returns how many still are when limit passes.
func waitCaptures(ctx context.Context, api, token string, from time.Time, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		var caps []struct {
			State   string    `json:"state"`
			Created time.Time `json:"created"`
		}
		open := 0
		if getJSONAuth(ctx, api+"/api/v1/captures?limit=1000", token, &caps) == nil {
			for _, c := range caps {
				if !c.Created.Before(from) && (c.State == "pending" || c.State == "requested") {
					open++
				}
			}
		}
		if open == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return open
		}
		sleepCtx(ctx, time.Second)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func printFault(out io.Writer, fr FaultResult) {
	fmt.Fprintf(out, "\nfault %s\n", fr.Injected)
	fmt.Fprintf(out, "  load: %.0f/s, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, errors %d of %d\n",
		fr.Load.Rate, fr.Load.P50Ms, fr.Load.P95Ms, fr.Load.P99Ms, fr.Load.Errors, fr.Load.Sent)
	var svcs []string
	for s := range fr.ByService {
		svcs = append(svcs, s)
	}
	sort.Slice(svcs, func(i, j int) bool { return fr.ByService[svcs[i]] > fr.ByService[svcs[j]] })
	var parts []string
	for _, s := range svcs {
		parts = append(parts, fmt.Sprintf("%s %d", s, fr.ByService[s]))
	}
	atLeast := ""
	if fr.AnomaliesCapped {
		atLeast = "at least "
	}
	fmt.Fprintf(out, "  anomalous spans: %s%d (%s)\n", atLeast, fr.Anomalies, strings.Join(parts, ", "))
	if !strings.HasPrefix(fr.Injected, mesh.FaultNone) {
		fmt.Fprintf(out, "  effect: %s\n", describeEffect(fr))
	}
	if inc := fr.Incident; inc != nil {
		fmt.Fprintf(out, "  incident %s at %s: %d anomalous of %d requests\n", inc.ID, inc.Entry, inc.Anomalous, inc.Requests)
		if sh := inc.Shift; sh != nil {
			fmt.Fprintf(out, "    opened on a latency shift: p50 %.1f ms, p90 %.1f ms over the window against %.1f and %.1f ms before\n", sh.P50Ms, sh.P90Ms, sh.BaseP50Ms, sh.BaseP90Ms)
		}
	} else {
		fmt.Fprintf(out, "  no incident opened\n")
	}
	fmt.Fprintf(out, "  slowest services (growth of own time per slow trace):\n")
	for i, r := range fr.Verdict.Ranking {
		if i == 4 {
			break
		}
		fmt.Fprintf(out, "    %-6s +%7.1f ms own, +%6.1f ms network, +%6.1f ms run-queue\n", r.Service, r.SelfDeltaMs, r.NetDeltaMs, r.LocalDeltaMs)
	}
	for _, e := range fr.Verdict.Evidence {
		fmt.Fprintf(out, "    · %s\n", e)
	}
	for _, e := range fr.Verdict.Missing {
		fmt.Fprintf(out, "    missing: %s\n", e)
	}
	switch {
	case fr.Incident != nil && fr.Verdict.Node != "":
		fmt.Fprintf(out, "  server's verdict: the node %s (every service slower, none standing out, its CPUs stolen by the hypervisor), cause %s (confidence %.2f)\n", fr.Verdict.Node, fr.Verdict.Cause, fr.Verdict.Confidence)
	case fr.Incident != nil:
		fmt.Fprintf(out, "  server's verdict: %q is the culprit, cause %s (confidence %.2f)\n", fr.Verdict.Service, fr.Verdict.Cause, fr.Verdict.Confidence)
	default:
		fmt.Fprintf(out, "  no server verdict; the demo's own ranking names %q (no cause without the server's evidence reading)\n", fr.Verdict.Service)
	}
	if p := fr.CriticalPath; p != nil {
		fmt.Fprintf(out, "  critical path of %s %s in trace %s (%.1f ms):\n", p.Service, p.Operation, p.TraceID, p.Ms)
		fmt.Fprintf(out, "    own threads: %s\n", critpath.Shares(p.Waits, p.Ms))
		for i, b := range p.BlockedBy {
			if i == 3 {
				fmt.Fprintf(out, "    … blocked by %d more requests\n", len(p.BlockedBy)-i)
				break
			}
			fmt.Fprintf(out, "    blocked by %s %s (trace %s) for %.1f ms\n", b.Service, b.Operation, b.TraceID, b.Ms)
		}
	} else if fr.Verdict.Service != "" {
		fmt.Fprintf(out, "  critical path of %s: none (%s)\n", fr.Verdict.Service, fr.NoPath)
	}
	switch {
	case strings.HasPrefix(fr.Injected, mesh.FaultNone):
		fmt.Fprintf(out, "  check: nothing injected, %d incidents open meanwhile, %d of them opened then (want 0); %d with the node's verdict (its CPUs stolen by the hypervisor)\n", fr.OpenDuring, fr.Incidents, fr.NodeVerdicts)
	case fr.NoEffect && fr.Incidents == 0:
		fmt.Fprintf(out, "  check: the fault took no measurable effect at %q and no incident opened, as none should\n", fr.Service)
	case fr.NoEffect:
		fmt.Fprintf(out, "  check: the fault took no measurable effect at %q, yet %d incidents opened meanwhile (want 0)\n", fr.Service, fr.Incidents)
	case fr.SmallEffect && fr.Incident == nil && fr.Incidents == 0:
		fmt.Fprintf(out, "  check: the fault took a small effect at %q, under the %.0f %% an incident needs, and no incident opened\n", fr.Service, 100*MinIncident)
	case fr.Incident == nil:
		fmt.Fprintf(out, "  check: MISSED — the fault took effect at %q and no incident opened (the demo's own ranking above names %q)\n", fr.Service, fr.Verdict.Service)
	case fr.CauseCorrect:
		fmt.Fprintf(out, "  check: correct — the fault was injected into %q and makes %s\n", fr.Service, fr.ExpectedCause)
	case fr.Correct && fr.ExpectedCause == "":
		fmt.Fprintf(out, "  check: correct — the fault was injected into %q (its cause is none the kernel measures)\n", fr.Service)
	case fr.Correct:
		fmt.Fprintf(out, "  check: service right, cause WRONG — the fault was injected into %q and makes %s\n", fr.Service, fr.ExpectedCause)
	default:
		fmt.Fprintf(out, "  check: WRONG — the fault was injected into %q\n", fr.Service)
	}
	if fr.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", fr.Error)
	}
}

func printMeshSummary(out io.Writer, s MeshSummary) {
	fmt.Fprintf(out, "\nWhat Rootline found\n")
	fmt.Fprintf(out, "  %d services, %s mode, %s; %d spans stored\n", s.Services, s.Mode, describe(s), s.SpansSeen)
	if s.Traces != nil {
		fmt.Fprintf(out, "  traces of the warm-up: %s\n", s.Traces)
	}
	for _, f := range s.Faults {
		mark := checkMark(f)
		who := f.Verdict.Service
		if f.Verdict.Node != "" {
			who = "node " + f.Verdict.Node
		}
		fmt.Fprintf(out, "  %-24s → verdict %-4s cause %-14s %s\n", f.Injected, who, f.Verdict.Cause, mark)
		if f.Verdict.ExampleTraceID != "" {
			fmt.Fprintf(out, "      see it: %s/#/trace/%s\n", s.UI, f.Verdict.ExampleTraceID)
		}
	}
	if a := s.Agent; a != nil {
		km := "without kernel metrics"
		switch {
		case s.Kmetrics && s.Store != "":
			km = "with kernel metrics (the UI's Metrics page; afterwards: rootline analyze critical-metrics --data-dir " + s.Store + ")"
		case s.Kmetrics:
			km = "with kernel metrics (the UI's Metrics page with --keep; --data-dir keeps them for rootline analyze critical-metrics)"
		}
		fmt.Fprintf(out, "  agent: %.1f s of CPU over %.0f s (%.1f %% of one CPU), %s\n", a.CPUSeconds, a.WallSeconds, 100*a.Share, km)
	}
	for _, w := range s.Work {
		fmt.Fprintf(out, "  server: %d %s, %.1f ms each on average\n", w.Count, w.What, w.MeanMs)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
	fmt.Fprintf(out, "  UI: %s (stops with the demo; add --keep to browse)\n", s.UI)
}

// checkMark is a fault's outcome in the summary's one line.
func checkMark(f FaultResult) string {
	switch {
	case strings.HasPrefix(f.Injected, mesh.FaultNone) && f.OpenDuring == 0:
		return "correct (no incident)"
	case strings.HasPrefix(f.Injected, mesh.FaultNone):
		return fmt.Sprintf("WRONG (%d incidents open)", f.OpenDuring)
	case f.Error != "" && f.Incident == nil:
		return "ERROR (" + clipText(f.Error, 60) + ")"
	case f.NoEffect && f.Incidents == 0:
		return "no effect (no incident, correct)"
	case f.NoEffect:
		return fmt.Sprintf("no effect (%d incidents opened)", f.Incidents)
	case f.SmallEffect && f.Incident == nil && f.Incidents == 0:
		return "small effect (no incident, correct)"
	case f.Incident == nil:
		return "MISSED (no incident)"
	case f.CauseCorrect || (f.Correct && f.ExpectedCause == ""):
		return "correct"
	case f.Correct:
		return "service right, cause WRONG (want " + f.ExpectedCause + ")"
	}
	return "WRONG"
}

// checkServiceBinaries says what to build when the demo services are missing.
func checkServiceBinaries(topo *mesh.Topology, repo string) error {
	need := map[string]string{
		"go":     filepath.Join(repo, "build", "demo", "svc-go"),
		"java":   filepath.Join(repo, "build", "demo", "java", "Svc.class"),
		"python": filepath.Join(repo, "demo", "services", "python", "svc.py"),
	}
	if topo.GRPC() {
		// The Java service's gRPC mode is a class of its own, built only
		// when scripts/deps.sh fetched grpc-java.
		need["java-grpc"] = filepath.Join(repo, "build", "demo", "java", "SvcGrpc.class")
	}
	for _, s := range topo.Services {
		lang := strings.ToLower(s.Language)
		for _, k := range []string{lang, lang + "-grpc"} {
			p := need[k]
			if p == "" {
				continue
			}
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("demo service for %s (%s) missing at %s: run `make build` first", s.Name, s.Language, p)
			}
		}
	}
	return nil
}

// WriteToken writes a random bearer token, readable by root only, to a file
// in dir (flags take a file, so that the token shows in no process listing).
func WriteToken(dir string) (string, error) {
	// A --data-dir that does not exist yet is created here, before anything
	// else is written into it.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, "auth.token")
	if err := os.WriteFile(path, []byte(rand.Text()+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("auth token: %w", err)
	}
	return path, nil
}

// agentProc is the demo's running agent.
type agentProc struct {
	addr    string
	pid     int
	started time.Time
	stop    func()
}

// cpu is the agent's CPU time since it started.
func (a agentProc) cpu() (AgentCPU, error) {
	cpu, err := processCPU(a.pid)
	if err != nil {
		return AgentCPU{}, err
	}
	wall := time.Since(a.started).Seconds()
	return AgentCPU{CPUSeconds: cpu.Seconds(), WallSeconds: wall, Share: cpu.Seconds() / wall}, nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// startAgentProc runs `rootline agent` as a child (with extra flags) and
// waits for its API.
func startAgentProc(ctx context.Context, self, api, dir, tokenFile string, extra ...string) (agentProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return agentProc{}, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return agentProc{}, err
	}
	// The pods and the server reach the agent over TCP with the token: no
	// unix socket, which would clash with a node's own agent's.
	cmd := exec.Command(self, append([]string{"agent", "--server", api, "--listen", addr, "--socket=", "--discover=false", "--auth.token-file", tokenFile}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	// The thread that forks the agent stays until the agent ends: its end
	// is what the agent's parent-death signal follows.
	started0 := time.Now()
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		logf.Close()
		return agentProc{}, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return agentProc{addr: addr, pid: cmd.Process.Pid, started: started0, stop: stop}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			b, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
			return agentProc{}, fmt.Errorf("agent did not start: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// anomalyCounter polls the anomaly count for the progress lines: the
// anomalous spans since the current phase began, up to the API's page
// (counterPage; "1000+" beyond it).
type anomalyCounter struct {
	api   string
	n     atomic.Int64
	since atomic.Int64 // Unix ns
}

// counterPage is the most anomalies one poll lists: the query API's default
// cap on a page.
const counterPage = 1000

// restart counts from t on.
func (a *anomalyCounter) restart(t time.Time) {
	a.since.Store(t.UnixNano())
	a.n.Store(0)
}

// String renders the count ("1000+" when the page was full).
func (a *anomalyCounter) String() string {
	if n := a.n.Load(); n < counterPage {
		return strconv.FormatInt(n, 10)
	}
	return strconv.Itoa(counterPage) + "+"
}

func (a *anomalyCounter) poll(ctx context.Context) func() {
	if a.since.Load() == 0 {
		a.since.Store(time.Now().UnixNano())
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(3 * time.Second)
		defer t.Stop()
		for {
			var rows []json.RawMessage
			since := a.since.Load()
			if getJSON(cctx, fmt.Sprintf("%s/api/v1/anomalies?limit=%d&since=%d", a.api, counterPage, since), &rows) == nil && a.since.Load() == since {
				a.n.Store(int64(len(rows)))
			}
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return cancel
}

// clipText shortens s to at most n bytes (at a rune boundary), marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
