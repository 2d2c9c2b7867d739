//go:build linux

package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/run/httpstream"
	"github.com/rootline/rootline/internal/run/readtap"
	"github.com/rootline/rootline/internal/run/supervisor"
)

// Options is what `rootline run` is asked to do (cmd/rootline parses them
// from its flags).
type Options struct {
	// Service and Instance name the spans (service.name,
	// service.instance.id; "" Instance: host:pid).
	Service  string
	Instance string
	// Server is the OTLP/HTTP endpoint of the Rootline server (spans go to
	// Server/v1/traces); "" sends no spans.
	Server string
	// Agent is the local agent's API (agentapi.ParseAddress: its unix
	// socket, or an http(s) URL), told about the process so that its
	// profilers record it; "" does not register.
	Agent string
	// ShipViaAgent sends the spans through the Agent's span relay, which
	// batches the node's processes' spans into one request a second to the
	// server (the server directly when the agent cannot take them).
	ShipViaAgent bool
	// AgentCAFile is a PEM bundle of the CAs to trust for an https Agent
	// ("": the system's).
	AgentCAFile string
	// Token is the bearer token for the server and the agent ("" none).
	Token string
	// Mode is how the traffic is traced: "ebpf" (the in-kernel datapath),
	// "ptrace" (the syscall supervisor) or "auto" (ebpf when it loads,
	// unless Protocol says the service speaks HTTP/2).
	Mode string
	// Protocol is what the service is declared to speak: "" or "http1"
	// (HTTP/1.x, followed in both modes), "h2c" or "grpc" (HTTP/2 in
	// cleartext, which only the supervisor follows: "auto" picks it).
	Protocol string
	// RingBytes is the datapath's span events ring (a power of two ≥ 4096).
	RingBytes int
	// Reads is how the supervisor observes socket reads: "ebpf" (the read
	// tap), "ptrace" or "auto"; ReadsBuf is the read tap's ring.
	Reads    string
	ReadsBuf int
	// Metrics is the decentralised mode's listener (off when Listen is "").
	Metrics MetricsOptions
	// Omit are the propagation formats not written on the service's
	// outbound requests, in either mode (0: every format is written).
	// Extraction reads every format whatever it says.
	Omit httpstream.Formats
	// Timing is the form of the timing fields written on responses, in
	// either mode (httpstream.HeaderCompact; the zero value is compact).
	// Both forms are read whatever it says.
	Timing httpstream.TimingForm
	// Sample is the shipper's node-side tail sampling (ShipperConfig.Sample:
	// the share of normal traces shipped; 0 or 1 ships every span).
	Sample float64
	// InFlightAfter, when > 0, reports requests still open after it and
	// after 3× their operation's median (InFlight): provisional spans that
	// let the server see a hanging service before its requests end.
	InFlightAfter time.Duration
	// Argv is the command.
	Argv []string
	// Logger is the run's logger; Stderr gets the few lines meant for the
	// terminal (a command that cannot be run). nil: os.Stderr.
	Logger *slog.Logger
	Stderr io.Writer
}

// SpeaksH2 reports whether a declared protocol (Options.Protocol) runs over
// HTTP/2, which only the supervisor follows.
func SpeaksH2(protocol string) bool { return protocol == "h2c" || protocol == "grpc" }

// commandMissing says why argv0 cannot be run, with the exit status a shell
// gives then (127: not found, 126: not executable); before anything is
// started for it, so that a typo is not reported as a tracing problem.
func commandMissing(argv0 string) (int, error) {
	if _, err := exec.LookPath(argv0); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return 126, err
		}
		return 127, err
	}
	return 0, nil
}

// Run runs o.Argv traced as o asks and returns its exit status (the
// shell's: 128 + the signal when a signal ended it; 127 or 126 when it
// cannot be run). It does not use a signal context: SIGINT, SIGTERM and the
// other signals a supervisor should not act on itself go to the command,
// and Run returns when the command has exited, so that its exit status is
// the run's. If tracing cannot start, the command runs untraced and the
// reason is logged once.
func Run(o Options) int {
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	// Components add their own "component" (shipper, tracer, supervisor):
	// they get base; the run's own lines say component=run.
	base := o.Logger.With("service", o.Service)
	log := base.With("component", "run")
	if code, err := commandMissing(o.Argv[0]); err != nil {
		fmt.Fprintf(stderr, "rootline run: %v\n", err)
		return code
	}

	env := os.Environ()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		env = append(env, "OTEL_SERVICE_NAME="+o.Service) // lets the agent's discovery name it too
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sink Sink
	var ship *Shipper
	if o.Server != "" {
		cfg := ShipperConfig{Endpoint: strings.TrimRight(o.Server, "/") + "/v1/traces", Token: o.Token, Sample: o.Sample, Logger: base}
		if o.Agent != "" && o.ShipViaAgent {
			if c, err := agentClient(o); err != nil {
				log.Warn("spans go to the server directly: no client of the agent", "err", err)
			} else {
				cfg.Agent = c
			}
		}
		ship = NewShipper(cfg)
		go ship.Run(ctx)
		sink = ship
	}
	// Requests in flight: in front of the shipper, behind the metrics
	// tee, so that no provisional span reaches the live decision.
	var inflight *InFlight
	if ship != nil && o.InFlightAfter > 0 {
		inflight = NewInFlight(InFlightConfig{After: o.InFlightAfter, Service: o.Service, Instance: o.Instance}, ship, ship)
		go inflight.Run(ctx)
		sink = inflight
	}
	// The metrics listener is a convenience: if it cannot start, the
	// command still runs traced, and the reason is logged.
	// The counters of the datapath or the supervisor, which the metrics
	// listener serves.
	st := new(Stats)
	if live, _, stop, err := startMetrics(o.Metrics, o.Token, st, base.With("component", "metrics")); err != nil {
		log.Error("cannot start the metrics listener; running without it", "err", err)
	} else if live != nil {
		defer stop()
		if sink != nil {
			sink = teeSink{live, sink}
		} else {
			sink = live
		}
	}
	if o.Mode == "auto" && SpeaksH2(o.Protocol) {
		// The in-kernel datapath passes HTTP/2 through untraced
		// (docs/run.md): a service declared to speak it is traced by the
		// supervisor, which follows HTTP/1.x and HTTP/2 connection by
		// connection.
		log.Info("tracing with the ptrace supervisor: the eBPF datapath does not trace HTTP/2", "protocol", o.Protocol)
		o.Mode = "ptrace"
	}
	if o.Mode != "ptrace" {
		code, started, err := runDatapath(o, env, base, sink, st, inflight, stderr)
		if started {
			finishShipping(ship, cancel, log)
			return code
		}
		if o.Mode == "ebpf" {
			log.Error("-mode ebpf: the in-kernel datapath cannot start; running untraced", "err", err)
			return runUntraced(o.Argv, env, stderr)
		}
		log.Warn("in-kernel datapath unavailable; tracing with the ptrace supervisor (slower)", "err", err)
	}

	// The supervisor sees a request when the service reads it: the time
	// the request waited in the socket before that read is not in its
	// server time (docs/run.md, "The socket wait"), and a caller counts
	// it as network. Only the in-kernel datapath dates a request from
	// its arrival.
	log.Info("ptrace supervisor: a request's server time starts when the service reads it, not when it arrived in the socket (its caller counts the socket wait as network)")
	scfg := supervisor.Config{Logger: base, Env: env}
	var reads ReadSource
	if o.Reads != "ptrace" {
		tap, err := readtap.Open(o.ReadsBuf)
		switch {
		case err == nil:
			defer tap.Close()
			reads = tap
			scfg.Untraced = ReadSyscalls
			log.Debug("socket reads observed with eBPF")
		case o.Reads == "ebpf":
			log.Error("-reads ebpf: cannot load the eBPF read tap; running untraced", "err", err)
			return runUntraced(o.Argv, env, stderr)
		default:
			log.Info("eBPF read tap unavailable; observing reads with ptrace stops (slower)", "err", err)
		}
	}
	tr := New(Config{Service: o.Service, Instance: o.Instance, Sink: sink, Logger: base, Reads: reads, Stats: st, Omit: o.Omit, Timing: o.Timing, InFlight: inflight})
	hooks := tr.Hooks()
	var registered int
	onExec := hooks.OnExec
	hooks.OnExec = func(t *supervisor.Task) {
		onExec(t)
		if registered == 0 && t.Tgid == t.Tid && o.Agent != "" {
			registered = t.Tgid
			go registerWithAgent(o, t.Tgid, log)
		}
	}

	code, err := supervisor.Run(context.Background(), scfg, o.Argv, hooks)
	if err != nil && code < 0 {
		// Fail open: the command runs untraced.
		log.Error("cannot trace the command; running it untraced", "err", err)
		return runUntraced(o.Argv, env, stderr)
	}
	if registered != 0 {
		unregisterFromAgent(o, registered)
	}
	finishShipping(ship, cancel, log)
	if n := tr.Stats.Opaque.Load(); n > 0 {
		log.Info("connections passed through untraced: not HTTP/1.x (TLS, HTTP/2 or another protocol)", "connections", n)
	}
	if n := tr.Stats.TapGaps.Load(); n > 0 {
		log.Warn("connections passed through untraced because the eBPF read tap's buffer overflowed (raise -reads.buffer-bytes)", "connections", n)
	}
	if n := tr.Stats.Errors.Load(); n > 0 {
		log.Warn("tracing errors: the affected calls and connections passed through unchanged", "errors", n)
	}
	log.Debug("done", "requests", tr.Stats.Requests.Load(), "calls", tr.Stats.Calls.Load(),
		"opaque_connections", tr.Stats.Opaque.Load(), "rewrites", tr.Stats.Rewrites.Load(),
		"restarts", tr.Stats.Restarts.Load(), "tap_reads", tr.Stats.TapReads.Load(), "tap_gaps", tr.Stats.TapGaps.Load(), "scratch_maps", tr.Stats.Scratch.Load(), "unbound_calls", tr.Stats.Unbound.Load(),
		"http2_connections", tr.Stats.H2Conns.Load(), "http2_upgrades", tr.Stats.H2Upgrades.Load(), "guessed_calls", tr.Stats.Guessed.Load(), "errors", tr.Stats.Errors.Load())
	return code
}

// finishShipping sends the spans still queued and reports what was lost.
func finishShipping(ship *Shipper, cancel context.CancelFunc, log *slog.Logger) {
	cancel()
	if ship == nil {
		return
	}
	ship.Wait()
	if out, anomalous := ship.SampledOut(); out+anomalous > 0 {
		log.Info("node-side sampling", "spans_not_shipped", out, "anomalous_traces_shipped", anomalous, "sent", ship.Sent.Load())
	}
	if d, x := ship.Dropped.Load(), ship.Failed.Load(); d+x > 0 {
		log.Warn("spans not delivered", "dropped_queue_full", d, "failed_to_send", x, "sent", ship.Sent.Load())
	}
}

func runUntraced(argv, env []string, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	err := cmd.Start()
	if err == nil {
		err = waitForwarding(cmd)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintf(stderr, "rootline run: %v\n", err)
	}
	return exitCode(err)
}

// waitForwarding waits for a started command, passing on to it the signals
// a supervisor should not act on itself (stop, hang-up, user signals), so
// that the command, not rootline run, decides how to end.
func waitForwarding(cmd *exec.Cmd) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-waited:
			return err
		}
	}
}
