package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/rbinder"
	"github.com/rootline/rootline/internal/rbinder/readtap"
	"github.com/rootline/rootline/internal/supervisor"
	"github.com/rootline/rootline/internal/tlsconf"
)

type runFlags struct {
	service   string
	instance  string
	server    string
	agent     string
	agentCA   string
	tokenFile string
	token     string
	logLevel  string
	logFormat string
	mode      string
	ringBytes int
	reads     string
	readsBuf  int
	argv      []string
}

func parseRunFlags(args []string, stderr io.Writer) (runFlags, error) {
	f := runFlags{server: "http://127.0.0.1:4318", agent: "unix:" + agentapi.DefaultSocket, logLevel: "warn", logFormat: "text", mode: "auto", reads: "auto"}
	fs := flag.NewFlagSet("rootline run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.service, "service", "", "service.name of the spans (default: $OTEL_SERVICE_NAME, else the command's base name)")
	fs.StringVar(&f.instance, "instance", "", "service.instance.id (default: host:pid)")
	fs.StringVar(&f.server, "server", f.server, "OTLP/HTTP endpoint of the Rootline server (spans go to <server>/v1/traces); empty: no spans")
	fs.StringVar(&f.agent, "agent", f.agent, "local agent's API, told about the process so its profilers record it: unix:PATH (its unix socket, where it checks that the process is yours) "+
		"or http(s)://host:port (needs the agent's token); empty: do not register")
	fs.StringVar(&f.agentCA, "agent.tls.ca-file", "", "PEM bundle of the CAs to trust for an https -agent (default: the system's)")
	fs.StringVar(&f.tokenFile, "auth.token-file", "", "file holding the bearer token for the server and agent (or set ROOTLINE_AUTH_TOKEN)")
	fs.StringVar(&f.mode, "mode", f.mode, "how the service's traffic is traced: ebpf (the in-kernel datapath: sk_msg and tracepoints, the service never stops for the tracer; needs root, cgroup v2 and sockmap), ptrace (the syscall supervisor: ptrace + seccomp, any machine with ptrace rights), or auto (ebpf when it loads, else ptrace)")
	fs.IntVar(&f.ringBytes, "datapath.buffer-bytes", 4<<20, "ring buffer of the eBPF datapath's span events (a power of two ≥ 4096); when it is full, spans are lost (counted), never propagation")
	fs.StringVar(&f.reads, "reads", f.reads, "how socket reads are observed: ebpf (tracepoints copy them, no ptrace stop; needs root), ptrace (a stop at each read's entry and exit), or auto (ebpf when it loads, else ptrace)")
	fs.IntVar(&f.readsBuf, "reads.buffer-bytes", readtap.DefaultRingBytes, "ring buffer of the eBPF read tap (a power of two ≥ 4096): reads wait there until the next stopped call; a connection whose reads overflow it passes through untraced from then on")
	fs.StringVar(&f.logLevel, "log.level", f.logLevel, "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log.format", f.logFormat, "text or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline run [flags] -- CMD [ARGS...]

Starts CMD and traces it with no change to its code, in any language:
  - inbound HTTP/1.x requests: the trace context is read from traceparent, b3,
    x-b3-* or x-request-id, or a trace is started; a SERVER span per request;
  - outbound requests the servicing thread writes get traceparent, b3 and
    x-request-id (headers the application set itself are kept), and a CLIENT span;
  - responses get rootline-server-time and rootline-wait (Mirage wait model);
    spans carry rootline.wait.local_ms / net_ms / remote_ms;
  - SERVER spans carry thread.id and rootline.thread.ids (thread↔request records);
  - the process is registered with the local agent so its profilers record it.
Two ways (-mode): the in-kernel datapath (default as root) puts CMD in a cgroup
of its own where eBPF programs add the header lines as the kernel queues its
writes (sk_msg) and follow its reads (tracepoints): CMD never waits for the
tracer. The syscall supervisor (ptrace + a seccomp filter on the socket calls)
rewrites writes at ptrace stops and works without BPF, at a cost per call.
Non-HTTP, TLS and HTTP/2 traffic passes through unchanged. Exit status, signals
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
	if f.ringBytes < 4096 || f.ringBytes&(f.ringBytes-1) != 0 {
		return f, fmt.Errorf("-datapath.buffer-bytes %d: want a power of two ≥ 4096", f.ringBytes)
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
	return f, nil
}

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

// runRun is `rootline run`. It does not use the role's signal context: the
// supervisor forwards SIGINT and SIGTERM to the command and returns when the
// command has exited, so its exit status is ours.
func runRun(args []string, stderr io.Writer) int {
	f, err := parseRunFlags(args, stderr)
	log, code := startRole("run", err, f.logLevel, f.logFormat, stderr)
	if log == nil {
		return code
	}
	// Components add their own "component" (shipper, rbinder, supervisor):
	// they get base; the run's own lines say component=run.
	base := log.With("service", f.service)
	log = base.With("component", "run")
	if code, err := commandMissing(f.argv[0]); err != nil {
		fmt.Fprintf(stderr, "rootline run: %v\n", err)
		return code
	}

	env := os.Environ()
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		env = append(env, "OTEL_SERVICE_NAME="+f.service) // lets the agent's discovery name it too
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sink rbinder.Sink
	var ship *rbinder.Shipper
	if f.server != "" {
		ship = rbinder.NewShipper(rbinder.ShipperConfig{
			Endpoint: strings.TrimRight(f.server, "/") + "/v1/traces", Token: f.token, Logger: base})
		go ship.Run(ctx)
		sink = ship
	}
	if f.mode != "ptrace" {
		code, started, err := runDatapath(f, env, base, sink, stderr)
		if started {
			finishShipping(ship, cancel, log)
			return code
		}
		if f.mode == "ebpf" {
			log.Error("-mode ebpf: the in-kernel datapath cannot start; running untraced", "err", err)
			return runUntraced(f.argv, env, stderr)
		}
		log.Warn("in-kernel datapath unavailable; tracing with the ptrace supervisor (slower)", "err", err)
	}

	scfg := supervisor.Config{Logger: base, Env: env}
	var reads rbinder.ReadSource
	if f.reads != "ptrace" {
		tap, err := readtap.Open(f.readsBuf)
		switch {
		case err == nil:
			defer tap.Close()
			reads = tap
			scfg.Untraced = rbinder.ReadSyscalls
			log.Debug("socket reads observed with eBPF")
		case f.reads == "ebpf":
			log.Error("-reads ebpf: cannot load the eBPF read tap; running untraced", "err", err)
			return runUntraced(f.argv, env, stderr)
		default:
			log.Info("eBPF read tap unavailable; observing reads with ptrace stops (slower)", "err", err)
		}
	}
	tr := rbinder.New(rbinder.Config{Service: f.service, Instance: f.instance, Sink: sink, Logger: base, Reads: reads})
	hooks := tr.Hooks()
	var registered int
	onExec := hooks.OnExec
	hooks.OnExec = func(t *supervisor.Task) {
		onExec(t)
		if registered == 0 && t.Tgid == t.Tid && f.agent != "" {
			registered = t.Tgid
			go registerWithAgent(f, t.Tgid, log)
		}
	}

	code, err = supervisor.Run(context.Background(), scfg, f.argv, hooks)
	if err != nil && code < 0 {
		// Fail open: the command runs untraced.
		log.Error("cannot trace the command; running it untraced", "err", err)
		return runUntraced(f.argv, env, stderr)
	}
	if registered != 0 {
		unregisterFromAgent(f, registered)
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
		"restarts", tr.Stats.Restarts.Load(), "tap_reads", tr.Stats.TapReads.Load(), "tap_gaps", tr.Stats.TapGaps.Load(), "scratch_maps", tr.Stats.Scratch.Load(), "unbound_calls", tr.Stats.Unbound.Load(), "errors", tr.Stats.Errors.Load())
	return code
}

// finishShipping sends the spans still queued and reports what was lost.
func finishShipping(ship *rbinder.Shipper, cancel context.CancelFunc, log *slog.Logger) {
	cancel()
	if ship == nil {
		return
	}
	ship.Wait()
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

// agentClient is the client of the local agent (-agent).
func agentClient(f runFlags) (*agentapi.AgentClient, error) {
	tlsCfg, err := tlsconf.Client{CAFile: f.agentCA}.Config()
	if err != nil {
		return nil, err
	}
	return agentapi.NewAgentClient(f.agent, agentapi.ClientOptions{Token: f.token, TLS: tlsCfg, Timeout: 3 * time.Second})
}

// registerWithAgent tells the local agent about the process, so that its
// profilers record it under the run's service name. A refusal (not the
// process's owner, a wrong token) is final; other failures are retried
// twice.
func registerWithAgent(f runFlags, pid int, log *slog.Logger) {
	c, err := agentClient(f)
	for attempt := 0; err == nil && attempt < 3; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		_, err = c.RegisterProcess(context.Background(), agentapi.Process{PID: int64(pid), Service: f.service, InstanceID: f.instance})
		if err == nil {
			log.Debug("registered with the agent", "pid", pid)
			return
		}
		if st := agentapi.StatusOf(err); st/100 == 4 {
			break
		}
	}
	log.Info("not registered with a local agent (profilers will not record this process)", "agent", f.agent, "err", err)
}

// unregisterFromAgent tells the agent the process is gone.
func unregisterFromAgent(f runFlags, pid int) {
	if c, err := agentClient(f); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.ForgetProcess(ctx, int64(pid))
		c.CloseIdleConnections()
	}
}
