// Package demo runs `rootline demo`: a self-contained scenario that starts a
// server, sends it generated traffic over OTLP, injects a slowdown into one
// service, and reports what Rootline found through its own query API.
//
// The verdict is read back from the API (anomalies, traces), never from what the
// demo injected; the demo then compares the two and exits non-zero on a miss.
package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/server"
	"github.com/rootline/rootline/web"
)

// Options of the demo.
type Options struct {
	Traces      int
	SlowService string
	Factor      float64
	SlowTraces  int
	DataDir     string
	Keep        bool
	QueryAddr   string
	JSONPath    string
	// ServerConfig is a server configuration file (rootline server
	// --config) the demo's server starts from; its store directory,
	// listen addresses and token stay the demo's.
	ServerConfig string
}

// Summary is what the demo found (also written with --json).
type Summary struct {
	TracesSent     int            `json:"tracesSent"`
	SpansSent      int            `json:"spansSent"`
	SpansStored    int            `json:"spansStored"`
	Anomalies      int            `json:"anomalies"`
	ByService      map[string]int `json:"anomaliesByService"`
	Verdict        string         `json:"verdict"`
	Cause          string         `json:"cause"`
	Injected       string         `json:"injected"`
	Correct        bool           `json:"correct"`
	ExampleTraceID string         `json:"exampleTraceId,omitempty"`
	UI             string         `json:"ui"`
}

// Main parses flags and runs the demo; it returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rootline demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "mesh", "mesh: real services, sidecars and faults; synthetic: generated spans only (fast, no root)")
	m := MeshOptions{}
	var faults multiFlag
	fs.StringVar(&m.Topology, "topology", "", "topology YAML (default: the built-in ten services A…J, Protractor Fig. 6.6)")
	fs.Var(&faults, "fault", "fault to inject, name@service[=amount], repeatable (default lock@e); names: "+strings.Join(mesh.FaultNames(), ", "))
	fs.DurationVar(&m.Duration, "duration", 30*time.Second, "how long each fault stays on")
	fs.DurationVar(&m.Settle, "settle", 3*time.Minute, "at most this long a baseline before each fault waits for the server's open incidents to close (a busy machine can keep one open)")
	fs.DurationVar(&m.Warmup, "warmup", 0, "total warm-up before the first fault (default: the topology's load phases)")
	fs.Float64Var(&m.Rate, "rate", 0, "request rate during faults (default: the topology's last phase)")
	fs.StringVar(&m.Mode, "mode", "", "pod (network namespaces + iptables, needs root) or port (loopback ports); default pod when root")
	fs.BoolVar(&m.NoEnvoy, "no-envoy", false, "run without Envoy sidecars")
	fs.BoolVar(&m.NoRun, "no-run", false, "do not wrap the services in `rootline run` (then only Envoy makes spans)")
	fs.StringVar(&m.Spans, "spans", SpansBoth, "who makes the spans: both (rootline run and the Envoy sidecars: twice the spans and bytes, but the callee's sidecar shows time a request waited before the callee's process read it), run (rootline run alone; the sidecars do not trace, unless --no-run: half the bytes, and that wait counts as the caller's) or sidecar (the Envoy sidecars alone, Protractor's design; implies --no-run)")
	fs.StringVar(&m.Prefix, "prefix", "", "pod mode: prefix of the mesh's network namespaces, bridge and veths (default rl); a second mesh on the machine needs another, and another --subnet")
	fs.StringVar(&m.Subnet, "subnet", "", "pod mode: the pods' IPv4 /24, .1 being the bridge (default 10.77.0.0/24)")
	fs.StringVar(&m.Protocol, "protocol", "", "what the services speak: http (HTTP/1.1) or grpc (one unary gRPC method over h2c: the sidecars proxy HTTP/2, the load generator sends gRPC calls, and rootline run follows HTTP/2 with its supervisor); default the topology's protocol field, else http")
	fs.StringVar(&m.Propagate, "propagate", DefaultPropagate, "trace context formats each rootline run writes on the services' calls (its -propagate): w3c is all the mesh reads (the sidecars' OpenTelemetry tracer reads traceparent; Envoy makes x-request-id where it is missing); w3c,b3,b3multi,request-id is rootline run's own default, 259 B more per hop")
	fs.Float64Var(&m.Sample, "sample", 0, "node-side tail sampling in each rootline run (its -sample): ship every span of a trace the process finds anomalous and this share of the others; 0 ships every span")
	fs.BoolVar(&m.ForwardHeaders, "forward-headers", false, "make the services forward trace headers themselves (what meshes ask of applications)")
	kmetrics := fs.Bool("kmetrics", true, "the agent records every per-container kernel metric (needs root) and pushes it to the server, for `rootline analyze critical-metrics` and the UI's Metrics page; --kmetrics=false to leave them off")
	o := Options{}
	fs.IntVar(&o.Traces, "traces", 400, "synthetic: traces of normal traffic before the slowdown")
	fs.StringVar(&o.SlowService, "slow", "payment", "synthetic: service the slowdown hits (frontend, cart, payment, db)")
	fs.Float64Var(&o.Factor, "factor", 8, "synthetic: slowdown factor")
	fs.IntVar(&o.SlowTraces, "slow-traces", 5, "synthetic: traces sent while the fault is active")
	fs.StringVar(&o.DataDir, "data-dir", "", "store directory; the mesh scenario keeps the server's store in its data/ and the server's and agent's logs in server.log and agent.log (default: a temporary directory, removed at exit)")
	fs.BoolVar(&o.Keep, "keep", false, "keep everything running after the summary (Ctrl-C to stop) to browse the UI")
	fs.StringVar(&o.QueryAddr, "query.addr", "127.0.0.1:16686", "query API / UI address (use 127.0.0.1:0 for any free port)")
	fs.StringVar(&o.JSONPath, "json", "", "also write the summary as JSON to this file")
	fs.StringVar(&o.ServerConfig, "server-config", "", "start the demo's server from this configuration file (YAML, as `rootline server --config`), e.g. other detector, capture or diagnosis settings; its store directory, listen addresses and token stay the demo's")
	fs.StringVar(&m.ResultsDir, "results-dir", "", "also write each fault's result to DIR/fault-N.json (N from 1, in --fault order) as soon as it is known")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: rootline demo [flags]

The mesh scenario (default) starts a Rootline server and agent, then a polyglot
service mesh (Go, Java and Python forwarding services, each under `+"`rootline run`"+` and,
when Envoy is installed, behind a real Envoy sidecar; in network namespaces with
Istio-style iptables interception when root), drives open-loop load in phases,
injects each --fault after a warm-up, and prints what Rootline found: anomalies,
the slowest services, the evidence captured, and its verdict, read only from its
API. It exits 0 only if every verdict names the service the fault was injected
into (or no incident opened for a fault that took no or a small effect, below), and removes every process, namespace, cgroup and qdisc it made (also on
Ctrl-C).

Faults (name@service[=amount]):
  lock             a hot lock each request takes, held by another thread of the service across a
                   slow call (amount: how long it holds it each time, 20ms; then free for a quarter of
                   that on average)
  cpu-throttle     a CPU quota on the service's cgroup (amount: share of a CPU, 20%)
  cpu-hog          busy processes in the service's own cgroup (a noisy neighbour in its pod),
                   which gets a limit of half a CPU meanwhile (amount: processes, 2)
  net-bandwidth    a tbf limit on the service's link, pod mode (amount: rate, 2mbit)
  net-delay        Envoy's fault filter delays calls into the service (amount: 100ms)
  gc               an allocation storm in a Java service (amount: bytes per request)
  slow-downstream  the service's calls to its downstreams are slowed
  disk             an fsync storm (amount: bytes per request)
  cpu              extra CPU work per request
  packet-loss      a share of the packets on the service's link dropped, both ways, by a tc (TCX)
                   BPF program, pod mode (amount: 10%); TCP resends after a timeout
  noisy-neighbour  the service's apps confined to one CPU and busy processes pinned to that CPU
                   outside its cgroup: other programs of the node (amount: processes, 2)
  memory-pressure  a memory limit a little above the service's anonymous memory, filled with page
                   cache by a co-process in its memory cgroup that keeps reading a file, so that
                   its own threads reclaim (amount: room above its memory, 8MB)
  none             nothing (no @service): a fault-free stretch, where no incident should open
                   (none=10m: its length instead of --duration)

Each fault's run: a baseline at the fault's rate (until the server has no incident open), the
fault for --duration, then its verdict, read from the server's incidents (its changes while the
fault was on are in the JSON's timeline). Before judging the verdict the demo measures
what the fault did at its service, from spans alone: the growth of the service's time
per request against every trace before the onset ("effect:"). A fault that grew it by
less than 5 % of the entry's median latency took no measurable effect (an amount the
service shrugs off, such as a quota above what it uses): nothing to diagnose, and right
only when no incident opened. One under 25 % (the incident rule's diagnosis.min_shift)
took a small effect: right with no incident, or with a right verdict.
bench/accuracy.sh runs many and scores them.

The synthetic scenario sends generated traces of a small shop and needs nothing.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var sum any
	var correct bool
	switch *scenario {
	case "synthetic":
		s, err := Run(ctx, o, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "rootline demo:", err)
			return 1
		}
		sum, correct = s, s.Correct
	case "mesh":
		switch m.Spans {
		case SpansRun, SpansBoth:
		case SpansSidecar:
			m.NoRun = true
		default:
			fmt.Fprintf(stderr, "rootline demo: --spans must be run, sidecar or both, got %q\n", m.Spans)
			return 2
		}
		if m.Spans == SpansSidecar && m.NoEnvoy {
			fmt.Fprintln(stderr, "rootline demo: --spans sidecar needs the sidecars (drop --no-envoy)")
			return 2
		}
		switch m.Protocol {
		case "", mesh.ProtocolHTTP, mesh.ProtocolGRPC:
		default:
			fmt.Fprintf(stderr, "rootline demo: --protocol must be http or grpc, got %q\n", m.Protocol)
			return 2
		}
		m.Faults = faults
		m.NoKmetrics = !*kmetrics
		if len(m.Faults) == 0 {
			m.Faults = []string{"lock@e"}
		}
		m.DataDir, m.QueryAddr, m.Keep, m.JSONPath, m.ServerConfig = o.DataDir, o.QueryAddr, o.Keep, o.JSONPath, o.ServerConfig
		s, err := RunMesh(ctx, m, stdout)
		if err != nil {
			fmt.Fprintln(stderr, "rootline demo:", err)
			return 1
		}
		sum, correct = s, s.Correct
	default:
		fmt.Fprintf(stderr, "rootline demo: --scenario must be mesh or synthetic, got %q\n", *scenario)
		return 2
	}
	if o.JSONPath != "" {
		b, _ := json.MarshalIndent(sum, "", "  ")
		if err := os.WriteFile(o.JSONPath, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "rootline demo:", err)
			return 1
		}
	}
	if !correct {
		return 1
	}
	return 0
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// Run executes the scenario and prints progress and the summary to out.
func Run(ctx context.Context, o Options, out io.Writer) (Summary, error) {
	sum := Summary{Injected: o.SlowService, ByService: map[string]int{}}
	if _, ok := shop[o.SlowService]; !ok {
		return sum, fmt.Errorf("unknown service %q: choose one of frontend, cart, payment, db", o.SlowService)
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
	addrs, stop, err := startServer(ctx, dir, o.QueryAddr, "", "", o.ServerConfig)
	if err != nil {
		return sum, err
	}
	defer stop()
	sum.UI = "http://" + addrs.Query
	fmt.Fprintf(out, "rootline demo: server up — OTLP/gRPC %s, UI and API %s, store %s\n", addrs.OTLPGRPC, sum.UI, dir)

	conn, err := grpc.NewClient(addrs.OTLPGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return sum, err
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	rng := rand.New(rand.NewPCG(1, 2))
	// Every trace starts after sentFrom: each batch ends now, n × 50 ms long.
	sentFrom := time.Now().Add(-time.Duration(o.Traces+o.SlowTraces)*50*time.Millisecond - time.Second)
	send := func(n int, slow string) error {
		start := time.Now().Add(-time.Duration(n) * 50 * time.Millisecond)
		for i := 0; i < n; i += 50 {
			td := ptrace.NewTraces()
			for j := i; j < min(i+50, n); j++ {
				sum.SpansSent += addTrace(td, rng, start.Add(time.Duration(j)*50*time.Millisecond), slow, o.Factor)
				sum.TracesSent++
			}
			if _, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
				return fmt.Errorf("send spans: %w", err)
			}
		}
		return nil
	}
	fmt.Fprintf(out, "phase 1/2: %d traces of normal traffic (warming the detector's windows)\n", o.Traces)
	if err := send(o.Traces, ""); err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "phase 2/2: fault on — %s is %.0f× slower for %d traces\n", o.SlowService, o.Factor, o.SlowTraces)
	if err := send(o.SlowTraces, o.SlowService); err != nil {
		return sum, err
	}

	// Read back what Rootline found, through its API only.
	api := "http://" + addrs.Query
	var anomalies []anomalyRow
	if err := getJSON(ctx, api+"/api/v1/anomalies?limit=1000", &anomalies); err != nil {
		return sum, err
	}
	stored, err := metricValue(ctx, api+"/metrics", "rootline_pipeline_spans_stored_total")
	if err != nil {
		return sum, err
	}
	sum.SpansStored = int(stored)
	sum.Anomalies = len(anomalies)
	for _, a := range anomalies {
		sum.ByService[a.Service]++
	}
	// Verdict: the service whose own time per trace grew most between the
	// normal and the slow traces, as any caller of the analysis gets it.
	v, err := analysis.Diagnose(ctx, NewAPISource(api, ""), sentFrom, time.Now())
	if err != nil {
		return sum, err
	}
	sum.Verdict, sum.Cause, sum.ExampleTraceID = cmp.Or(v.Service, analysis.CauseNone), v.Cause, v.ExampleTraceID
	sum.Correct = sum.Verdict == o.SlowService

	fmt.Fprintf(out, "\nWhat Rootline found\n")
	fmt.Fprintf(out, "  traces sent: %d, spans sent: %d, spans stored: %d\n", sum.TracesSent, sum.SpansSent, sum.SpansStored)
	fmt.Fprintf(out, "  anomalous spans: %d\n", sum.Anomalies)
	for i, a := range anomalies {
		if i == 8 {
			fmt.Fprintf(out, "    … %d more\n", len(anomalies)-i)
			break
		}
		fmt.Fprintf(out, "    %-9s %-22s %8.1f ms  (baseline %.1f ms, ×%.1f)  trace %s\n", a.Service, a.Operation,
			float64(a.DurationNs)/1e6, float64(a.BaselineNs)/1e6, float64(a.DurationNs)/float64(max(a.BaselineNs, 1)), a.TraceID)
	}
	for _, e := range v.Evidence {
		fmt.Fprintf(out, "    · %s\n", e)
	}
	fmt.Fprintf(out, "  verdict: the slowdown starts in %q, cause %s (confidence %.2f)\n", sum.Verdict, v.Cause, v.Confidence)
	fmt.Fprintf(out, "  evidence: this scenario runs no agent, so no profiles were captured (see `rootline agent --help`)\n")
	if sum.ExampleTraceID != "" {
		fmt.Fprintf(out, "  see it: %s/#/trace/%s (UI) or %s/api/traces/%s (API)\n", api, sum.ExampleTraceID, api, sum.ExampleTraceID)
		if !o.Keep {
			fmt.Fprintf(out, "          (the server stops with the demo: run `bin/rootline demo --keep` to browse it)\n")
		}
	}
	if sum.Correct {
		fmt.Fprintf(out, "  check: correct — the injected fault was in %q\n", o.SlowService)
	} else {
		fmt.Fprintf(out, "  check: WRONG — the injected fault was in %q\n", o.SlowService)
	}
	if o.Keep {
		fmt.Fprintf(out, "\nserver kept running at %s — press Ctrl-C to stop\n", api)
		<-ctx.Done()
	}
	return sum, nil
}

// startServer runs an in-process server with the UI over dir; stop shuts it
// down. With a tokenFile its capture requests carry the token (the agent's
// API needs it); its own API stays open on its loopback address.
//
// logPath, when set, is where the server's log goes (Info and above); else
// it is discarded. configPath, when set, is a configuration file the
// server starts from (--server-config).
func startServer(ctx context.Context, dir, queryAddr, tokenFile, logPath, configPath string) (server.Addrs, func(), error) {
	cfg := server.DefaultConfig()
	if configPath != "" {
		if err := cfg.LoadFile(configPath); err != nil {
			return server.Addrs{}, nil, err
		}
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return server.Addrs{}, nil, err
		}
		cfg.Capture.AuthToken = strings.TrimSpace(string(b))
	}
	cfg.DataDir = dir
	cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr, cfg.ZipkinAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.QueryAddr = queryAddr
	cfg.SQLite.Synchronous = "NORMAL"
	logw := io.Writer(io.Discard)
	closeLog := func() {}
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return server.Addrs{}, nil, err
		}
		logw, closeLog = f, func() { _ = f.Close() }
	}
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(logw, nil)))
	if err != nil {
		closeLog()
		return server.Addrs{}, nil, err
	}
	srv.UI = web.Handler()
	if err := srv.Start(ctx); err != nil {
		closeLog()
		return server.Addrs{}, nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	return srv.Addrs(), func() { cancel(); <-done; closeLog() }, nil
}

// anomalyRow is one entry of GET /api/v1/anomalies.
type anomalyRow struct {
	TraceID    string  `json:"traceID"`
	Start      int64   `json:"start"`
	Service    string  `json:"service"`
	Operation  string  `json:"operation"`
	DurationNs int64   `json:"durationNs"`
	BaselineNs int64   `json:"baselineNs"`
	Threshold  float64 `json:"threshold"`
	Artifacts  []struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	} `json:"artifacts"`
}

// shop is the demo's topology: service → (operation, callees, mean ms).
var shop = map[string]struct {
	op      string
	callees []string
	ms      float64
}{
	"frontend": {"GET /checkout", []string{"cart", "payment"}, 4},
	"cart":     {"GET /cart", nil, 6},
	"payment":  {"POST /charge", []string{"db"}, 8},
	"db":       {"SELECT orders", nil, 3},
}

// addTrace appends one trace's spans to td, returns the span count. Each
// service span lasts its own work plus its callees (called in sequence).
func addTrace(td ptrace.Traces, rng *rand.Rand, start time.Time, slow string, factor float64) int {
	var tid pcommon.TraceID
	for i := range tid {
		tid[i] = byte(rng.Uint32())
	}
	n := 0
	var span func(svc string, parent pcommon.SpanID, at time.Time) time.Duration
	span = func(svc string, parent pcommon.SpanID, at time.Time) time.Duration {
		def := shop[svc]
		own := time.Duration((def.ms * (0.8 + 0.4*rng.Float64())) * float64(time.Millisecond))
		if svc == slow {
			own = time.Duration(float64(own) * factor)
		}
		var sid pcommon.SpanID
		for i := range sid {
			sid[i] = byte(rng.Uint32())
		}
		t := at.Add(own / 2)
		for _, c := range def.callees {
			t = t.Add(span(c, sid, t))
		}
		d := t.Sub(at) + own/2
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", svc)
		rs.Resource().Attributes().PutStr("host.name", "demo")
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(sid)
		s.SetParentSpanID(parent)
		s.SetName(def.op)
		s.SetKind(ptrace.SpanKindServer)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(d)))
		s.Attributes().PutStr("http.request.method", strings.Fields(def.op)[0])
		n++
		return d
	}
	span("frontend", pcommon.SpanID{}, start)
	return n
}

// metricValue reads one unlabelled sample from a Prometheus text endpoint.
func metricValue(ctx context.Context, u, name string) (float64, error) {
	vals, err := metricValues(ctx, u, name)
	if err != nil {
		return 0, err
	}
	v, ok := vals[name]
	if !ok {
		return 0, fmt.Errorf("metric %s not found at %s", name, u)
	}
	return v, nil
}

// metricValues reads the unlabelled samples of names from the Prometheus
// text at u in one request (those absent are left out).
func metricValues(ctx context.Context, u string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out, nil
}

func getJSON(ctx context.Context, u string, v any) error { return getJSONAuth(ctx, u, "", v) }

// getJSONAuth is getJSON with a bearer token (none if empty).
func getJSONAuth(ctx context.Context, u, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
