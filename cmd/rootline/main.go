// Command rootline is Rootline's single binary; the first argument picks the role.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/run/supervisor"
	"github.com/rootline/rootline/internal/server"
	"github.com/rootline/rootline/internal/version"
	"github.com/rootline/rootline/web"
)

const usage = `rootline — why was this request slow?

Usage:
  rootline <command> [flags]

Commands:
  server    trace backend: OTLP/Zipkin receivers, anomaly detection, evidence capture,
            embedded SQLite store, Jaeger-compatible query API and web UI
  agent     per-node flight recorders (JFR, eBPF CPU sampler) and the dump API
            that turns anomalous spans into evidence
  run       run one service under the syscall supervisor: trace context propagation,
            SERVER/CLIENT spans and wait fields with no change to its code
  demo      a self-contained scenario: server, generated traffic, an injected slowdown,
            and what Rootline found
  analyze   offline analyses of stored data (rootline analyze --help)
  webhook   Kubernetes admission webhook that wraps opted-in Pods in 'rootline run'
  storage   storage init: create or upgrade the Cassandra keyspace and the S3 bucket
  version   print the version

Run 'rootline <command> --help' for the flags of a command.
`

func main() {
	supervisor.MaybeLauncher() // `rootline run` re-executes this binary as its launcher
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "run" { // the supervisor forwards signals to the command itself
		return runRun(args[1:], stderr)
	}
	ctx, cancel, stop := signalContext()
	defer stop()
	stdout, stderr = stopOnEPIPE(stdout, cancel), stopOnEPIPE(stderr, cancel)
	switch args[0] {
	case "server":
		return runServer(ctx, args[1:], stderr)
	case "agent":
		return runAgent(ctx, args[1:], stderr)
	case "demo":
		return demo.Main(ctx, args[1:], stdout, stderr)
	case "analyze":
		return runAnalyze(ctx, args[1:], stdout, stderr)
	case "webhook":
		return runWebhook(ctx, args[1:], os.Stdin, stdout, stderr)
	case "install-binary": // the webhook's init container
		return runInstallBinary(args[1:], stderr)
	case "storage":
		return runStorage(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "rootline", version.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rootline: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// signalContext is cancelled on the first SIGINT/SIGTERM; a second one exits
// at once. SIGPIPE is taken from the runtime, which would otherwise end the
// process at its next line of output once the reader of stdout or stderr
// is gone (`rootline demo | head`), leaving a demo's namespaces and
// processes behind: such a write now fails with EPIPE, and stopOnEPIPE
// turns that into a stop with cleanup, as after Ctrl-C. (The signal comes
// for broken sockets too, so it is not itself a reason to stop.)
func signalContext() (ctx context.Context, cancel, stop func()) {
	ctx, cancelCtx := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	go func() {
		for range pipe {
		}
	}()
	go func() {
		<-ch
		cancelCtx()
		<-ch
		fmt.Fprintln(os.Stderr, "rootline: second signal, exiting without cleanup")
		os.Exit(130)
	}()
	return ctx, cancelCtx, func() { signal.Stop(ch); signal.Stop(pipe); cancelCtx() }
}

// stopOnEPIPE is w that calls cancel once a write finds its reader gone.
func stopOnEPIPE(w io.Writer, cancel func()) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		n, err := w.Write(p)
		if errors.Is(err, syscall.EPIPE) {
			cancel()
		}
		return n, err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func runServer(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := server.Load(args, func(fs *flag.FlagSet) {
		fmt.Fprint(fs.Output(), `Usage: rootline server [flags]

Runs the trace backend. Spans arrive over OTLP (gRPC :4317, HTTP :4318) and Zipkin v2
JSON (:9411); each goes through the anomaly detector (Protractor's sliding-window
median); anomalous spans trigger evidence captures from registered agents; spans and
artifacts are stored in SQLite under --data-dir (or Cassandra and S3: storage.* in the
config, see 'rootline storage init'); the query API (Jaeger-compatible /api/*, Rootline
/api/v1/*), the web UI, /metrics, /healthz and /readyz are served on --query.addr. A
request is acknowledged only after its spans are committed.

Roles (--role): "all" (the default) does everything in one process. A scale-out
deployment puts Kafka between receivers and detectors (docs/deployment.md):
  --role ingester   receivers → Kafka topic (a request is acknowledged once Kafka
                    acknowledged its records, acks=all), query API and UI, agents'
                    registrations; stateless, run as many as needed
  --role detector   a member of a Kafka consumer group: each service's spans go to one
                    detector, which detects, stores them (idempotently, offsets committed
                    after the store) and triggers captures; add detectors to scale

Every listener is on loopback by default. A receiver bound beyond loopback needs a
token or a client CA (or --receiver.allow-unauthenticated); the query port needs a
token. Every listener takes TLS (--receiver.tls.*, --query.tls.*). Requests are held
to limits (--receiver.limits.*, --receiver.max-*), and the server's memory to
--memory-limit: docs/security.md lists every limit and what a client sees past it.

Environment:
  ROOTLINE_AUTH_TOKEN          bearer token of the query API (every /api/ route and /metrics),
                               the agent and capture API, and, unless set apart, the receivers
  ROOTLINE_INGEST_TOKEN        bearer token the receivers ask for instead (HTTP Authorization,
                               gRPC metadata "authorization")
  ROOTLINE_CASSANDRA_PASSWORD  Cassandra password (or storage.spans.cassandra.password_file)
  ROOTLINE_KAFKA_PASSWORD      Kafka SASL password (or kafka.sasl.password_file)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  S3 credentials (or the *_file settings)
  GOMEMLIMIT                   replaces the default of --memory-limit

Flags:
`)
		fs.PrintDefaults()
	})
	logger, code := startRole("server", err, cfg.LogLevel, cfg.LogFormat, stderr)
	if logger == nil {
		return code
	}
	// Go's soft limit, under --memory-limit: the garbage collector works
	// harder as the heap nears it, so garbage never takes the server past
	// its bounds.
	debug.SetMemoryLimit(cfg.GoMemoryLimit())
	srv, err := server.New(cfg, logger)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	srv.UI = web.Handler()
	if err := srv.Start(ctx); err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	if err := srv.Run(ctx); err != nil {
		logger.Error("server stopped with an error", "err", err)
		return 1
	}
	return 0
}

// startRole turns a role's flag-parsing result into a logger, or into the exit
// code to return: 0 after --help, 2 for bad flags.
func startRole(role string, parseErr error, level, format string, stderr io.Writer) (*slog.Logger, int) {
	if errors.Is(parseErr, flag.ErrHelp) {
		return nil, 0
	}
	if parseErr != nil {
		fmt.Fprintf(stderr, "rootline %s: %v\n", role, parseErr)
		return nil, 2
	}
	logger, err := newLogger(level, format, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rootline %s: %v\n", role, err)
		return nil, 2
	}
	return logger, 0
}

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log.format must be text or json, got %q", format)
}
