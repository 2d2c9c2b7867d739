package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rootline/rootline/internal/agentapi"
	runner "github.com/rootline/rootline/internal/run"
	"github.com/rootline/rootline/internal/run/readtap"
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
		Service: f.service, Instance: f.instance, Server: f.server, Agent: f.agent, AgentCAFile: f.agentCA, Token: f.token,
		Mode: f.mode, RingBytes: f.ringBytes, Reads: f.reads, ReadsBuf: f.readsBuf, Argv: f.argv,
		Logger: log, Stderr: stderr,
	})
}
