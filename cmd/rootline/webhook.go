package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/rootline/rootline/internal/tlsconf"
	"github.com/rootline/rootline/internal/webhook"
)

const webhookUsage = `Usage: rootline webhook [flags]
       rootline webhook --dry-run FILE|- [--namespace NS] [flags]

Kubernetes mutating admission webhook (admission.k8s.io/v1, POST /mutate over
TLS) that wraps the application container of opted-in Pods in 'rootline run':

  kubectl label namespace shop rootline.dev/inject=enabled   # every Pod of shop
  (or the label rootline.dev/inject=true on a Pod template; =false opts out)

An init container copies the rootline binary from --image into an emptyDir;
the container's command becomes 'rootline run --service=... -- <its command>'.
When the Pod spec has no command, the image's ENTRYPOINT and CMD are read from
its registry (its config only, no layers), or given by the annotation
rootline.dev/command. A Pod that cannot be wrapped is admitted untraced with
the annotation rootline.dev/skipped and a warning (--strict refuses it).
Mutated Pods carry rootline.dev/status and are never mutated twice.
Annotations: rootline.dev/service, rootline.dev/containers, rootline.dev/mode,
rootline.dev/command, rootline.dev/envoy=true (Envoy sidecar, inbound traffic
redirected to it by an iptables init container). See docs/kubernetes.md.

--dry-run reads a Pod (YAML or JSON) from FILE or stdin and prints the JSON
patch the webhook would return ([] when it leaves the Pod as it is).

Flags:
`

type webhookFlags struct {
	cfg      webhook.Config
	listen   string
	tls      tlsconf.Server
	lookup   bool
	dryRun   string
	ns       string
	logLevel string
	logFmt   string
}

func runWebhook(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := webhookFlags{listen: ":8443", lookup: true, logLevel: "info", logFmt: "text"}
	f.cfg = webhook.Config{
		Mode:           "ptrace",
		ResolveTimeout: 4 * time.Second,
		Envoy:          webhook.EnvoyConfig{InboundPort: 15006, AdminPort: 15000, UID: 1337},
	}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), webhookUsage); fs.PrintDefaults() }
	fs.StringVar(&f.listen, "listen", f.listen, "HTTPS address of the webhook (the API server calls POST /mutate)")
	fs.StringVar(&f.tls.CertFile, "tls.cert-file", "", "PEM certificate chain served to the API server (required; reloaded when the file changes)")
	fs.StringVar(&f.tls.KeyFile, "tls.key-file", "", "PEM private key of --tls.cert-file")
	fs.StringVar(&f.tls.ClientCAFile, "tls.client-ca-file", "", "require API server client certificates signed by these CAs (mutual TLS; optional)")
	fs.StringVar(&f.cfg.Image, "image", "", "the Rootline image whose /rootline the init container copies into the Pod (required)")
	fs.StringVar(&f.cfg.ImagePullPolicy, "image-pull-policy", "", "pull policy of that init container (Always, IfNotPresent, Never; empty: Kubernetes' default)")
	fs.StringVar(&f.cfg.ServerURL, "server", "", "OTLP/HTTP endpoint of the Rootline server as the Pods reach it, e.g. http://rootline-server.rootline.svc:4318 (empty: spans are not sent)")
	fs.StringVar(&f.cfg.AgentURL, "agent", "", "agent API the wrapped processes register with (empty: none; the node's agent finds them by OTEL_SERVICE_NAME)")
	fs.StringVar(&f.cfg.Mode, "mode", f.cfg.Mode, "default 'rootline run --mode' (ptrace needs no privilege; ebpf makes the container privileged; auto tries ebpf, then ptrace); the annotation rootline.dev/mode overrides it")
	fs.StringVar(&f.cfg.LogLevel, "run.log-level", "", "'rootline run --log.level' of the wrapped containers (empty: its default)")
	fs.BoolVar(&f.lookup, "registry-lookup", f.lookup, "read the image config from its registry when a Pod spec has no command (credentials from $DOCKER_CONFIG/config.json)")
	fs.DurationVar(&f.cfg.ResolveTimeout, "registry-timeout", f.cfg.ResolveTimeout, "time one image-config look-up may take (keep it under the webhook's timeoutSeconds)")
	fs.BoolVar(&f.cfg.RequireCommand, "strict", false, "refuse an opted-in Pod that cannot be wrapped (default: admit it untraced, annotated rootline.dev/skipped)")
	fs.StringVar(&f.cfg.Envoy.Image, "envoy.image", "", "Envoy image of the sidecar added to Pods annotated rootline.dev/envoy=true (empty: no sidecar)")
	fs.StringVar(&f.cfg.Envoy.InitImage, "envoy.init-image", "", "image with sh and iptables for the sidecar's redirect init container")
	fs.IntVar(&f.cfg.Envoy.InboundPort, "envoy.inbound-port", f.cfg.Envoy.InboundPort, "port the sidecar receives redirected inbound traffic on")
	fs.IntVar(&f.cfg.Envoy.AdminPort, "envoy.admin-port", f.cfg.Envoy.AdminPort, "the sidecar's admin port (loopback)")
	fs.Int64Var(&f.cfg.Envoy.UID, "envoy.uid", f.cfg.Envoy.UID, "uid the sidecar runs as")
	fs.StringVar(&f.cfg.Envoy.ZipkinAddr, "envoy.zipkin", "", "host:port of the Rootline server's Zipkin receiver, where the sidecar sends its spans")
	fs.StringVar(&f.dryRun, "dry-run", "", "print the JSON patch for the Pod in this file (- for stdin) and exit")
	fs.StringVar(&f.ns, "namespace", "default", "namespace of the --dry-run Pod")
	fs.StringVar(&f.logLevel, "log.level", f.logLevel, "debug, info, warn or error")
	fs.StringVar(&f.logFmt, "log.format", f.logFmt, "text or json")
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err == nil && f.dryRun == "" && !f.tls.Enabled() {
		err = errors.New("--tls.cert-file and --tls.key-file are required: the API server calls webhooks over HTTPS only")
	}
	logger, code := startRole("webhook", err, f.logLevel, f.logFmt, stderr)
	if logger == nil {
		return code
	}
	var resolver webhook.Resolver
	if f.lookup {
		resolver = webhook.NewRegistry()
	}
	m, err := webhook.NewMutator(f.cfg, resolver, logger)
	if err != nil {
		fmt.Fprintf(stderr, "rootline webhook: %v\n", err)
		return 2
	}
	if f.dryRun != "" {
		return webhookDryRun(ctx, m, f, stdin, stdout, stderr)
	}

	tlsCfg, err := f.tls.Config()
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	srv := &http.Server{
		Handler:           m.Handler(),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       20 * time.Second,
		WriteTimeout:      40 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	logger.Info("webhook listening", "component", "webhook", "addr", ln.Addr().String(), "image", f.cfg.Image, "mode", f.cfg.Mode, "registry_lookup", f.lookup)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		logger.Error("webhook stopped", "err", err)
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return 0
}

// webhookDryRun prints the patch for one Pod read from a file or stdin.
func webhookDryRun(ctx context.Context, m *webhook.Mutator, f webhookFlags, stdin io.Reader, stdout, stderr io.Writer) int {
	var raw []byte
	var err error
	if f.dryRun == "-" {
		raw, err = io.ReadAll(io.LimitReader(stdin, webhook.MaxReviewBytes+1))
	} else {
		raw, err = os.ReadFile(f.dryRun)
	}
	if err == nil && len(raw) > webhook.MaxReviewBytes {
		err = fmt.Errorf("over %d bytes", webhook.MaxReviewBytes)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline webhook: --dry-run: %v\n", err)
		return 1
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		fmt.Fprintf(stderr, "rootline webhook: --dry-run: not YAML or JSON: %v\n", err)
		return 1
	}
	var pod corev1.Pod
	// A Pod as client libraries return it has no kind; anything else that
	// says what it is must say Pod.
	if err := json.Unmarshal(js, &pod); err != nil || (pod.Kind != "" && pod.Kind != "Pod") {
		fmt.Fprintf(stderr, "rootline webhook: --dry-run: not a Pod (kind %q): %v\n", pod.Kind, err)
		return 1
	}
	res, err := m.Mutate(ctx, &pod, f.ns)
	for _, w := range res.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline webhook: refused: %v\n", err)
		return 1
	}
	patch := res.Patch
	if patch == nil {
		patch = []byte("[]")
	}
	fmt.Fprintf(stdout, "%s\n", patch)
	return 0
}

// runInstallBinary copies this binary to the path given (the webhook's init
// container runs it into the Pod's shared emptyDir). The copy is written
// beside the target and renamed, so a restarted init container never leaves
// a half-written binary for the application container to exec.
func runInstallBinary(args []string, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "Usage: rootline install-binary DEST\n\nCopies the rootline binary to DEST (mode 0755); used by the Kubernetes webhook's init container.")
		return 2
	}
	if err := installBinary(args[0]); err != nil {
		fmt.Fprintf(stderr, "rootline install-binary: %v\n", err)
		return 1
	}
	return 0
}

func installBinary(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".rootline-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
