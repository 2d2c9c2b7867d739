package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/agent"
	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/jfr"
	"github.com/rootline/rootline/internal/version"
)

// agentFlags are the process-level settings of `rootline agent`.
type agentFlags struct {
	cfg       agent.Config
	profilers string
	bpfStats  bool
	tokenFile string
	logLevel  string
	logFormat string
	km        kmetricsFlags // kmetrics.go
}

func parseAgentFlags(args []string, stderr io.Writer) (agentFlags, error) {
	f := agentFlags{cfg: agent.DefaultConfig(), profilers: "all", logLevel: "info", logFormat: "text"}
	fs := flag.NewFlagSet("rootline agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	fs.StringVar(&c.ServerURL, "server", c.ServerURL, "Rootline server's query/agent API base URL (https: see --server.tls.*)")
	fs.StringVar(&c.ServerTLS.CAFile, "server.tls.ca-file", "", "PEM bundle of the CAs to trust for an https --server (default: the system's)")
	fs.StringVar(&c.ServerTLS.CertFile, "server.tls.cert-file", "", "client certificate (PEM) for a server that requires mutual TLS")
	fs.StringVar(&c.ServerTLS.KeyFile, "server.tls.key-file", "", "its private key (PEM)")
	fs.StringVar(&c.ServerTLS.ServerName, "server.tls.server-name", "", "name to verify in the server's certificate (default: the --server host)")
	fs.StringVar(&c.ListenAddr, "listen", c.ListenAddr, "TCP address of the agent's API: /metrics and /healthz for anyone, the /api/ routes (dumps, registrations) only with the token; beyond loopback it needs a token")
	fs.StringVar(&c.TLS.CertFile, "tls.cert-file", "", "serve --listen over TLS with this certificate (PEM; reloaded when the file changes); the dump URL is then https")
	fs.StringVar(&c.TLS.KeyFile, "tls.key-file", "", "private key (PEM) of --tls.cert-file")
	fs.StringVar(&c.TLS.ClientCAFile, "tls.client-ca-file", "", "require client certificates signed by these CAs (PEM) on --listen (mutual TLS)")
	fs.StringVar(&c.Socket, "socket", c.Socket, "unix socket of the agent's API for callers on this machine (rootline run, and the server without a token); "+
		"each request is allowed by its caller's uid: root may do everything, another user only register, dump and list its own processes; empty: none (needs a token)")
	fs.Func("socket.mode", fmt.Sprintf("permission bits of --socket, octal (default %#o: every local user may connect, the uid check does the rest; 0600: root only, 0660: --socket.group)", c.SocketMode), func(s string) error {
		m, err := strconv.ParseUint(s, 8, 32)
		if err != nil || m > 0o777 {
			return fmt.Errorf("want octal permission bits such as 0660, got %q", s)
		}
		c.SocketMode = os.FileMode(m)
		return nil
	})
	fs.StringVar(&c.SocketGroup, "socket.group", "", "group of --socket (with --socket.mode 0660, only its members and root may connect)")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "base URL the server should send dump requests to, with a token (default: derived from --listen; without a token the server uses --socket)")
	fs.StringVar(&c.Host, "host", c.Host, "host name reported to the server (default: this machine's host name)")
	fs.Func("target", "process to record: pid=1234, or service=name,cmd=substring[,instance=id] (repeatable)", func(s string) error {
		t, err := agent.ParseTargetSpec(s)
		if err == nil {
			c.Targets = append(c.Targets, t)
		}
		return err
	})
	fs.Func("kernel.cgroup", "container to record with the kernel flight recorder: a cgroup v2 path (relative to the cgroup2 mount, or absolute), "+
		"or path=PATH|id=CGROUP_ID[,service=name][,instance=id] (repeatable); its processes become targets, and a kernel dump of one of them covers the whole cgroup", func(s string) error {
		ct, err := agent.ParseContainerSpec(s)
		if err == nil {
			c.Containers = append(c.Containers, ct)
		}
		return err
	})
	fs.BoolVar(&c.Discover, "discover", c.Discover, "find JVMs and processes with OTEL_SERVICE_NAME / service.name in their environment")
	fs.DurationVar(&c.DiscoverInterval, "discover-interval", c.DiscoverInterval, "how often /proc is scanned for targets")
	fs.DurationVar(&c.MaxWindow, "max-window", c.MaxWindow, "longest dump window accepted")
	fs.IntVar(&c.MaxConcurrentDumps, "max-concurrent-dumps", c.MaxConcurrentDumps, "profiler dumps running at once")
	fs.Int64Var(&c.MaxHeldBytes, "max-held-bytes", c.MaxHeldBytes, "memory of the kernel recorder's windows copied when their dump request is accepted, "+
		"waiting for a dump slot to be encoded; a request beyond it is answered 429 (the server asks again later); 0: windows are copied when their dump starts")
	fs.DurationVar(&c.DumpTimeout, "dump-timeout", c.DumpTimeout, "time one dump may take")
	fs.IntVar(&c.DumpNice, "dump-nice", c.DumpNice, "nice value (0–19) of the threads building a dump, so that a capture does not slow the node's services further (0: the agent's priority)")
	fs.BoolVar(&c.Relay.Disabled, "relay.disabled", false, "take no spans from the node's rootline run processes (they send theirs to the server directly); by default the agent relays them, one request a second to the server")
	fs.StringVar(&c.Relay.URL, "relay.url", "", "the server's OTLP/HTTP traces endpoint the relay sends to (default: the port the server names when the agent registers, on the --server host, /v1/traces)")
	fs.DurationVar(&c.Relay.Every, "relay.every", time.Second, "how often the relay sends the spans it holds")
	fs.StringVar(&f.profilers, "profilers", f.profilers, "comma-separated profilers to run ("+strings.Join(profilerNames(), ", ")+"), or all")
	fs.StringVar(&jfrConfig.Attach, "jfr.attach", jfr.AttachNative, "how the jfr profiler sends JVMs their diagnostic commands: native (the HotSpot attach socket, jcmd only where it cannot be used) or jcmd (a jcmd process per command)")
	fs.StringVar(&jfrConfig.Settings, "jfr.settings", jfr.DefaultConfig().Settings, "the JVMs' continuous recording's JFR settings: profile (10 ms sampling, lock waits from 10 ms) or default (20 ms, 20 ms)")
	fs.Func("jfr.events", "event settings on top of --jfr.settings, comma-separated <event>#<setting>=<value>; \"\" for none (default "+
		strings.Join(jfr.DefaultConfig().EventSettings, ",")+": native-method samples walk every idle thread's stack 50 times a second)", func(v string) error {
		jfrConfig.EventSettings = commaList(v)
		return nil
	})
	fs.BoolVar(&f.bpfStats, "bpf-stats", false, "turn on the kernel's BPF run-time statistics while the agent runs, so the profilers report their programs' CPU time (bpf_run_time_seconds); "+
		"it costs every BPF program run on the machine two clock reads, so leave it off in production")
	fs.StringVar(&f.tokenFile, "auth.token-file", "", "file holding the bearer token shared with the server (or set ROOTLINE_AUTH_TOKEN)")
	fs.StringVar(&f.logLevel, "log.level", f.logLevel, "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log.format", f.logFormat, "text or json")
	addKmetricsFlags(fs, &f.km)
	addKernelFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline agent [flags]

Runs on each node (as root). Keeps flight recorders running beside the processes it
targets — continuous JFR for JVMs, eBPF CPU sampling for any process — registers with
the server and heartbeats, and when the server reports an anomalous span, dumps the
window around it and uploads the artifacts, linked to the span.

Who may ask what: the agent's API (dumps, process registrations, containers,
kernel metrics) answers a holder of the shared token (over TCP, --listen, or the
socket), and local users on its unix socket (--socket, default `+agentapi.DefaultSocket+`):
root may do everything there, another user may only register, dump, list and
forget processes it owns (the kernel tells the caller's uid: SO_PEERCRED). Without
a token the TCP listener serves only /metrics and /healthz, and the server sends
its dump requests to the socket (so it must run on this machine, as root or as
the owner of the processes it captures). The server only asks for processes
this agent registered under the span's service.

Environment:
  ROOTLINE_AUTH_TOKEN   bearer token shared with the server (and rootline run over TCP)

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.AuthToken = os.Getenv("ROOTLINE_AUTH_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return f, fmt.Errorf("read auth token: %w", err)
		}
		c.AuthToken = strings.TrimSpace(string(b))
	}
	c.Version = version.Version
	if err := jfrConfig.Validate(); err != nil {
		return f, err
	}
	return f, c.Validate()
}

func runAgent(ctx context.Context, args []string, stderr io.Writer) int {
	f, err := parseAgentFlags(args, stderr)
	logger, code := startRole("agent", err, f.logLevel, f.logFormat, stderr)
	if logger == nil {
		return code
	}
	if f.bpfStats {
		stats, err := enableBPFStats()
		if err != nil {
			logger.Error("cannot turn on BPF statistics (--bpf-stats)", "err", err)
			return 1
		}
		defer stats.Close()
	}
	profs, err := buildProfilers(f.profilers, logger)
	if err != nil {
		logger.Error("cannot start profilers", "err", err)
		return 1
	}
	a, err := agent.New(f.cfg, profs, logger)
	if err != nil {
		for _, p := range profs {
			_ = p.Close()
		}
		logger.Error("cannot start", "err", err)
		return 1
	}
	if err := startKmetrics(a, f.km, a.Config(), logger); err != nil {
		_ = a.Close()
		logger.Error("cannot start kernel metrics", "err", err)
		return 1
	}
	if err := addDatapathSweeper(a, logger); err != nil {
		_ = a.Close()
		logger.Error("cannot start", "err", err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		logger.Error("agent stopped with an error", "err", err)
		return 1
	}
	return 0
}

// profilerFactories are the profiler plugins compiled in, by name.
var profilerFactories = map[string]func(*slog.Logger) (profiler.Profiler, error){}

func profilerNames() []string {
	var names []string
	for n := range profilerFactories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// buildProfilers starts the named profilers; with "all", a profiler that
// cannot run here (e.g. no BPF) is skipped with a warning instead of failing.
func buildProfilers(list string, logger *slog.Logger) ([]profiler.Profiler, error) {
	all := list == "all"
	var names []string
	if all {
		names = profilerNames()
	} else {
		names = commaList(list)
	}
	var out []profiler.Profiler
	for _, n := range names {
		mk, ok := profilerFactories[n]
		if !ok {
			return nil, fmt.Errorf("unknown profiler %q (have: %s)", n, strings.Join(profilerNames(), ", "))
		}
		p, err := mk(logger)
		if err != nil {
			if all {
				logger.Warn("profiler unavailable, skipped", "profiler", n, "err", err)
				continue
			}
			return nil, fmt.Errorf("profiler %s: %w", n, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// commaList splits a comma-separated flag value, trimming each item and
// dropping empty ones; "" gives an empty, non-nil list.
func commaList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
