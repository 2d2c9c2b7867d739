package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/mirage"
	runner "github.com/rootline/rootline/internal/run"
	"github.com/rootline/rootline/internal/run/httpstream"
	"github.com/rootline/rootline/internal/run/readtap"
)

type runFlags struct {
	service   string
	instance  string
	server    string
	agent     string
	agentCA   string
	viaAgent  bool
	tokenFile string
	token     string
	logLevel  string
	logFormat string
	mode      string
	protocol  string
	ringBytes int
	reads     string
	readsBuf  int
	metrics   runner.MetricsOptions
	policy    string
	propagate string
	omit      httpstream.Formats
	timingHdr string
	timing    httpstream.TimingForm
	sample    float64
	inflight  time.Duration
	argv      []string
}

func parseRunFlags(args []string, stderr io.Writer) (runFlags, error) {
	f := runFlags{server: "http://127.0.0.1:4318", agent: "unix:" + agentapi.DefaultSocket, logLevel: "warn", logFormat: "text", mode: "auto", protocol: "http1", reads: "auto"}
	fs := flag.NewFlagSet("rootline run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.service, "service", "", "service.name of the spans (default: $OTEL_SERVICE_NAME, else the command's base name)")
	fs.StringVar(&f.instance, "instance", "", "service.instance.id (default: host:pid)")
	fs.StringVar(&f.server, "server", f.server, "OTLP/HTTP endpoint of the Rootline server (spans go to <server>/v1/traces); empty: no spans")
	fs.StringVar(&f.agent, "agent", f.agent, "local agent's API, told about the process so its profilers record it: unix:PATH (its unix socket, where it checks that the process is yours) "+
		"or http(s)://host:port (needs the agent's token); empty: do not register")
	fs.BoolVar(&f.viaAgent, "ship-via-agent", false, "send the spans through the -agent's span relay, which batches its node's processes' spans into one request a second to the server (fewer, larger requests: half the server's CPU per span in the demo mesh); "+
		"the server directly when the agent cannot take them (not running, no relay, not for this user without the token). Off by default while it is not known why the server opened more incidents under fault-free load with it (docs/agent.md, \"The span relay\")")
	fs.StringVar(&f.agentCA, "agent.tls.ca-file", "", "PEM bundle of the CAs to trust for an https -agent (default: the system's)")
	fs.StringVar(&f.tokenFile, "auth.token-file", "", "file holding the bearer token for the server and agent (or set ROOTLINE_AUTH_TOKEN)")
	fs.StringVar(&f.mode, "mode", f.mode, "how the service's traffic is traced: ebpf (the in-kernel datapath: sk_msg and tracepoints, the service never stops for the tracer; needs root, cgroup v2 and sockmap), ptrace (the syscall supervisor: ptrace + seccomp, any machine with ptrace rights), or auto (ebpf when it loads, else ptrace; ptrace when -protocol is h2c or grpc)")
	fs.StringVar(&f.protocol, "protocol", f.protocol, "what the service speaks: http1 (HTTP/1.x), h2c or grpc (HTTP/2 in cleartext, prior knowledge or Upgrade: h2c). Only ptrace follows HTTP/2: with h2c or grpc, -mode auto picks it and -mode ebpf is refused. "+
		"Either mode passes what it does not follow through unchanged, and the eBPF datapath warns when it sees HTTP/2")
	fs.StringVar(&f.propagate, "propagate", "w3c,b3,b3multi,request-id", "trace context formats written on outbound requests (comma-separated): w3c (traceparent, tracestate), b3 (the single header), b3multi (x-b3-*), request-id (x-request-id); none writes no context. "+
		"Inbound requests are read in every format whatever this says, and headers the application wrote itself are never changed. "+
		"Each line costs bytes on every hop (traceparent 70 B, b3 74 B, x-b3-* 133 B, x-request-id 52 B): keep only what the services, proxies and tracers between them read")
	fs.StringVar(&f.timingHdr, "timing-header", "compact", "form of the timing fields written on responses: compact (one line, rl: <server µs>;l=<local µs>;n=<net µs>;r=<remote µs>, zero waits left out, ~25 B) "+
		"or long (rootline-server-time and rootline-wait, ~91 B, what Rootline before the compact form reads). Both forms are read whatever this says")
	fs.Float64Var(&f.sample, "sample", 1, "node-side tail sampling of the spans shipped to -server: with a share in (0, 1), every span of a trace this process finds slower than its operation's baseline "+
		"(the server's detector, run here on all its spans) is shipped, and of the other traces this share, chosen by trace id so that every process keeps the same ones "+
		"(their spans carry the sampling threshold, by which the server weights its baselines); spans wait ~2s for their trace's verdict. 1 ships every span")
	fs.DurationVar(&f.inflight, "inflight.after", time.Second, "report requests still open after this long and after 3× their operation's median here: a provisional copy of the span (same ids, its age so far, rootline.in_flight=true) that the server judges without letting it into its baselines and that the final span supersedes, "+
		"so that a service whose requests hang opens an incident and is captured before they end; reported at most 4 times per request (at ages growing 4×), at most 128 spans a second. 0: off")
	fs.IntVar(&f.ringBytes, "datapath.buffer-bytes", 4<<20, "ring buffer of the eBPF datapath's span events (a power of two ≥ 4096); when it is full, spans are lost (counted), never propagation")
	fs.StringVar(&f.reads, "reads", f.reads, "how socket reads are observed: ebpf (tracepoints copy them, no ptrace stop; needs root), ptrace (a stop at each read's entry and exit), or auto (ebpf when it loads, else ptrace)")
	fs.IntVar(&f.readsBuf, "reads.buffer-bytes", readtap.DefaultRingBytes, "ring buffer of the eBPF read tap (a power of two ≥ 4096): reads wait there until the next stopped call; a connection whose reads overflow it passes through untraced from then on")
	fs.StringVar(&f.logLevel, "log.level", f.logLevel, "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log.format", f.logFormat, "text or json")
	fs.StringVar(&f.metrics.Listen, "metrics.listen", "", "serve this service's Mirage decision (rootline_bottleneck, rootline_*_wait_seconds) as Prometheus metrics at http(s)://ADDR/metrics (host:port; port 0 picks one, logged at info); empty: off. Beyond loopback it needs the auth token")
	fs.StringVar(&f.metrics.TLS.CertFile, "metrics.tls.cert-file", "", "serve -metrics.listen over TLS with this certificate (PEM; reloaded when the file changes)")
	fs.StringVar(&f.metrics.TLS.KeyFile, "metrics.tls.key-file", "", "private key (PEM) of -metrics.tls.cert-file")
	fs.StringVar(&f.metrics.TLS.ClientCAFile, "metrics.tls.client-ca-file", "", "require client certificates signed by these CAs (PEM) on -metrics.listen (mutual TLS)")
	fs.DurationVar(&f.metrics.Window, "metrics.window", 30*time.Second, "sliding window the decision is made on (mean waits per request over it; at least 1s)")
	fs.StringVar(&f.policy, "metrics.policy", "max", "how waits are aggregated: max (the single largest wait: one allocation step), sum (every wait above -metrics.min-wait on the request's path: several steps), min (the smallest wait above -metrics.min-wait)")
	fs.DurationVar(&f.metrics.Model.MinWait, "metrics.min-wait", time.Millisecond, "smallest mean wait per request worth a decision; below it rootline_bottleneck is 0 everywhere")
	fs.DurationVar(&f.metrics.Model.SLA, "metrics.sla", 0, "latency objective: decide only while the mean latency is at least -metrics.sla-fraction of it (0: always decide)")
	fs.Float64Var(&f.metrics.Model.SLAFraction, "metrics.sla-fraction", 0.8, "share of -metrics.sla at which decisions start")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline run [flags] -- CMD [ARGS...]

Starts CMD and traces it with no change to its code, in any language:
  - inbound HTTP/1.x requests: the trace context is read from traceparent, b3,
    x-b3-* or x-request-id, or a trace is started; a SERVER span per request;
  - outbound requests the servicing thread writes get traceparent, b3, x-b3-*
    and x-request-id, or the formats -propagate names (headers the application
    set itself are kept), and a CLIENT span;
  - responses get the timing line rl: <server µs>;l=..;n=..;r=.. (Mirage wait
    model; -timing-header long writes rootline-server-time and rootline-wait);
    spans carry rootline.wait.local_ms / net_ms / remote_ms;
  - SERVER spans carry thread.id and rootline.thread.ids (thread↔request records);
  - the process is registered with the local agent so its profilers record it;
  - with -metrics.listen, the service's own decision over a sliding window
    (its CPU, its link to a peer, or delegate to a peer) as Prometheus metrics,
    usable by a Kubernetes HPA (docs/run.md).
Two ways (-mode): the in-kernel datapath (default as root) puts CMD in a cgroup
of its own where eBPF programs add the header lines as the kernel queues its
writes (sk_msg) and follow its reads (tracepoints): CMD never waits for the
tracer. The syscall supervisor (ptrace + a seccomp filter on the socket calls)
rewrites writes at ptrace stops and works without BPF, at a cost per call.
HTTP/2 in cleartext (h2c, gRPC) is followed by the supervisor only: declare it
with -protocol grpc and -mode auto picks the supervisor; the datapath passes it
through and warns. Non-HTTP and TLS traffic passes through unchanged. Exit status, signals
and stdin/stdout/stderr are CMD's. If tracing cannot start, CMD runs untraced and
the reason is logged once. x86-64 Linux only.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch f.mode {
	case "auto", "ebpf", "ptrace":
	default:
		return f, fmt.Errorf("-mode %q: want auto, ebpf or ptrace", f.mode)
	}
	switch f.protocol {
	case "http1", "h2c", "grpc":
	default:
		return f, fmt.Errorf("-protocol %q: want http1, h2c or grpc", f.protocol)
	}
	if f.mode == "ebpf" && runner.SpeaksH2(f.protocol) {
		return f, fmt.Errorf("-mode ebpf with -protocol %s: the eBPF datapath does not trace HTTP/2 (docs/run.md); use -mode ptrace or auto", f.protocol)
	}
	if f.ringBytes < 4096 || f.ringBytes&(f.ringBytes-1) != 0 {
		return f, fmt.Errorf("-datapath.buffer-bytes %d: want a power of two ≥ 4096", f.ringBytes)
	}
	prop, err := httpstream.ParseFormats(f.propagate)
	if err != nil {
		return f, fmt.Errorf("-propagate: %w", err)
	}
	f.omit = httpstream.AllFormats &^ prop
	if f.timing, err = httpstream.ParseTimingForm(f.timingHdr); err != nil {
		return f, fmt.Errorf("-timing-header: %w", err)
	}
	if !(f.sample > 0 && f.sample <= 1) {
		return f, fmt.Errorf("-sample %g: want a share in (0, 1]", f.sample)
	}
	if f.inflight < 0 {
		return f, fmt.Errorf("-inflight.after %v: want a duration ≥ 0 (0: off)", f.inflight)
	}
	switch f.reads {
	case "auto", "ebpf", "ptrace":
	default:
		return f, fmt.Errorf("-reads %q: want auto, ebpf or ptrace", f.reads)
	}
	if f.readsBuf < 4096 || f.readsBuf&(f.readsBuf-1) != 0 {
		return f, fmt.Errorf("-reads.buffer-bytes %d: want a power of two ≥ 4096", f.readsBuf)
	}
	if f.agent != "" {
		if _, err := agentapi.ParseAddress(f.agent); err != nil {
			return f, fmt.Errorf("-agent: %w", err)
		}
	}
	if f.metrics.Window < time.Second {
		return f, fmt.Errorf("-metrics.window %s: want at least 1s", f.metrics.Window)
	}
	if f.metrics.Model.SLAFraction <= 0 || f.metrics.Model.SLAFraction > 1 {
		return f, fmt.Errorf("-metrics.sla-fraction %g: want a share in (0, 1]", f.metrics.Model.SLAFraction)
	}
	if f.metrics.Model.MinWait < 0 || f.metrics.Model.SLA < 0 {
		return f, errors.New("-metrics.min-wait and -metrics.sla must not be negative")
	}
	if f.metrics.Model.Policy, err = mirage.ParsePolicy(f.policy); err != nil {
		return f, fmt.Errorf("-metrics.policy: %w", err)
	}
	f.argv = fs.Args()
	if len(f.argv) == 0 {
		return f, errors.New("no command: usage is rootline run [flags] -- CMD [ARGS...]")
	}
	if f.service == "" {
		f.service = os.Getenv("OTEL_SERVICE_NAME")
	}
	if f.service == "" {
		f.service = filepath.Base(f.argv[0])
	}
	f.token = os.Getenv("ROOTLINE_AUTH_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return f, fmt.Errorf("read auth token: %w", err)
		}
		f.token = strings.TrimSpace(string(b))
	}
	if err := f.metrics.Validate(f.token); err != nil {
		return f, err
	}
	return f, nil
}

// runRun is `rootline run`: the flags, then internal/run does the rest.
// It does not use the role's signal context: the command gets the signals
// and its exit status is ours (see runner.Run).
func runRun(args []string, stderr io.Writer) int {
	f, err := parseRunFlags(args, stderr)
	log, code := startRole("run", err, f.logLevel, f.logFormat, stderr)
	if log == nil {
		return code
	}
	return runner.Run(runner.Options{
		Service: f.service, Instance: f.instance, Server: f.server, Agent: f.agent, ShipViaAgent: f.viaAgent, AgentCAFile: f.agentCA, Token: f.token,
		Mode: f.mode, Protocol: f.protocol, RingBytes: f.ringBytes, Reads: f.reads, ReadsBuf: f.readsBuf, Metrics: f.metrics, Omit: f.omit, Timing: f.timing, Sample: f.sample, InFlightAfter: f.inflight, Argv: f.argv,
		Logger: log, Stderr: stderr,
	})
}
