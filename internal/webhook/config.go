// Package webhook is Rootline's mutating admission webhook: it wraps the
// application container of an opted-in Pod in `rootline run`, so that its
// requests are traced with no change to the image or the workload's manifest.
//
// Opting in is by label, because the API server can filter on labels and
// never calls the webhook for other Pods: a namespace labelled
// rootline.dev/inject=enabled, or a Pod labelled rootline.dev/inject=true.
// A Pod labelled rootline.dev/inject=false stays out of an enabled namespace.
// Annotations on the Pod configure the injection (service name, container,
// mode, command, Envoy sidecar); see the constants below.
//
// A mutated Pod carries the rootline.dev/status annotation (what was done, by
// which version). A Pod that has it is never mutated again, and a container
// whose command already starts with the injected binary is left as it is, so
// a Pod mutated twice — re-invocation, a retried request, a Pod created from a
// mutated Pod's spec — is unchanged the second time.
package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Labels and annotations the webhook reads and writes.
const (
	// LabelInject opts a Pod in ("true") or out ("false"); on a namespace,
	// "enabled" opts in every Pod of the namespace.
	LabelInject = "rootline.dev/inject"

	// AnnotationService names the service (service.name of its spans).
	// Without it: the app.kubernetes.io/name label, the app label, the owning
	// workload's name, the Pod's name, the container's name — the first set.
	AnnotationService = "rootline.dev/service"
	// AnnotationContainers lists the containers to wrap (comma-separated
	// names); without it, the first container.
	AnnotationContainers = "rootline.dev/containers"
	// AnnotationMode is `rootline run --mode`: ptrace, ebpf or auto.
	AnnotationMode = "rootline.dev/mode"
	// AnnotationCommand gives the command the container runs when neither the
	// Pod spec nor a readable image config does, as a JSON array of strings
	// (["/app/server","--port","8080"]) or a plain space-separated line.
	// The Pod's args, when set, follow it, as they follow an ENTRYPOINT.
	AnnotationCommand = "rootline.dev/command"
	// AnnotationEnvoy adds the Envoy sidecar ("true"), with the init container
	// that redirects the Pod's inbound TCP traffic to it.
	AnnotationEnvoy = "rootline.dev/envoy"

	// AnnotationStatus marks a mutated Pod (JSON: version, containers,
	// mode, envoy, and for each container where its command came from).
	AnnotationStatus = "rootline.dev/status"
	// AnnotationSkipped says why an opted-in Pod was admitted unmutated.
	AnnotationSkipped = "rootline.dev/skipped"
)

// Names of what the webhook adds to a Pod.
const (
	InitContainerName  = "rootline-install"
	EnvoyContainerName = "rootline-envoy"
	EnvoyInitName      = "rootline-iptables"
	BinVolumeName      = "rootline-bin"
	EnvoyConfigVolume  = "rootline-envoy-config"
	// BinDir is where the binary is copied to and mounted in the wrapped
	// containers; Binary is its path there.
	BinDir = "/rootline-bin"
	Binary = BinDir + "/rootline"
)

// Modes of `rootline run`.
var modes = map[string]bool{"ptrace": true, "ebpf": true, "auto": true}

// Config is what the webhook injects; the same for every Pod, except for
// what a Pod's annotations choose.
type Config struct {
	// Image is the Rootline image; its /rootline binary is copied into the Pod.
	Image string
	// ImagePullPolicy of the init container ("" lets Kubernetes choose).
	ImagePullPolicy string
	// ServerURL is the OTLP/HTTP endpoint of the Rootline server
	// (`rootline run --server`).
	ServerURL string
	// AgentURL is `rootline run --agent`. Empty (the default) does not
	// register: a registration names the process by its pid, which the
	// agent (in the host's PID namespace) cannot map back from the Pod's.
	// The agent finds the process anyway by its OTEL_SERVICE_NAME.
	AgentURL string
	// Mode is the default `rootline run --mode`.
	Mode string
	// LogLevel is `rootline run --log.level`.
	LogLevel string

	// Envoy is the sidecar added to Pods annotated rootline.dev/envoy=true.
	Envoy EnvoyConfig

	// ResolveTimeout bounds the registry look-up of one image's config.
	ResolveTimeout time.Duration
	// RequireCommand makes the webhook refuse an opted-in Pod whose command
	// cannot be resolved, instead of admitting it unmutated.
	RequireCommand bool
}

// EnvoyConfig is the Envoy sidecar's part of Config.
type EnvoyConfig struct {
	// Image runs Envoy (its entrypoint is not used: the webhook runs
	// `envoy -c <generated bootstrap>`).
	Image string
	// InitImage has iptables (and sh) for the redirect init container.
	InitImage string
	// InboundPort is the port Envoy listens on for redirected inbound traffic.
	InboundPort int
	// AdminPort is Envoy's admin listener (loopback only).
	AdminPort int
	// UID runs Envoy; traffic from this UID is not redirected (Envoy's own).
	UID int64
	// ZipkinAddr is host:port of the Rootline server's Zipkin receiver.
	ZipkinAddr string
}

// Validate checks a Config for values that would make every injected Pod
// fail to start.
func (c Config) Validate() error {
	var errs []error
	if c.Image == "" {
		errs = append(errs, errors.New("image: the Rootline image is required"))
	}
	if !modes[c.Mode] {
		errs = append(errs, fmt.Errorf("mode: %q is not ptrace, ebpf or auto", c.Mode))
	}
	for name, u := range map[string]string{"server": c.ServerURL, "agent": c.AgentURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not an http(s) URL", name, u))
		}
	}
	if c.Envoy.Image != "" {
		if c.Envoy.InitImage == "" {
			errs = append(errs, errors.New("envoy: an init image with iptables is required with the Envoy image"))
		}
		if c.Envoy.InboundPort <= 0 || c.Envoy.InboundPort > 65535 || c.Envoy.AdminPort <= 0 || c.Envoy.AdminPort > 65535 {
			errs = append(errs, errors.New("envoy: ports must be 1–65535"))
		}
		if c.Envoy.UID <= 0 {
			errs = append(errs, errors.New("envoy: the uid must be a non-root uid"))
		}
		if _, _, err := net.SplitHostPort(c.Envoy.ZipkinAddr); err != nil {
			errs = append(errs, fmt.Errorf("envoy: the Zipkin address %q is not host:port", c.Envoy.ZipkinAddr))
		}
	}
	return errors.Join(errs...)
}

// splitList splits a comma-separated annotation into its trimmed, non-empty
// parts.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
