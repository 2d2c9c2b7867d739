package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rootline/rootline/internal/version"
)

// ErrNotWrapped is returned (wrapped) by Mutate in strict mode when an
// opted-in Pod cannot be wrapped; its message says why.
var ErrNotWrapped = errors.New("pod opted in to Rootline but cannot be wrapped")

// Resolver finds the command an image runs when a Pod spec does not say.
type Resolver interface {
	// Resolve returns the image's ENTRYPOINT and CMD. It MUST return within
	// ctx's deadline; an image whose config cannot be read (unreachable or
	// private registry, unknown tag) MUST give an error that says why. It
	// MUST be safe for concurrent use.
	Resolve(ctx context.Context, image string) (entrypoint, cmd []string, err error)
}

// Mutator turns opted-in Pods into wrapped ones.
type Mutator struct {
	cfg      Config
	resolver Resolver // nil: only the Pod spec and the annotation give a command
	logger   *slog.Logger
}

// NewMutator returns a Mutator for cfg (which must be valid). A nil logger
// logs nothing; a nil resolver does not look images up.
func NewMutator(cfg Config, resolver Resolver, logger *slog.Logger) (*Mutator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Mutator{cfg: cfg, resolver: resolver, logger: logger.With("component", "webhook")}, nil
}

// Result is what Mutate decided for one Pod.
type Result struct {
	// Patch is the RFC 6902 JSON patch from the Pod given to the mutated one;
	// nil when the Pod is left as it is.
	Patch []byte
	// Wrapped names the containers whose command now runs under rootline run.
	Wrapped []string
	// Skipped says why an opted-in Pod was not wrapped ("" when it was, or
	// when it was already).
	Skipped string
	// Warnings go back to the client that created the Pod (kubectl prints them).
	Warnings []string
}

// Status is the JSON of the rootline.dev/status annotation.
type Status struct {
	Version    string            `json:"version"`
	Containers []string          `json:"containers"`
	Mode       string            `json:"mode"`
	Service    map[string]string `json:"service"`
	// Command says, per container, where its command came from: "pod",
	// "annotation" or "image".
	Command map[string]string `json:"command"`
	Envoy   bool              `json:"envoy,omitempty"`
}

// Mutate decides what to do with pod (to be created in namespace) and
// returns the patch. pod is not modified. An error is returned only in
// strict mode, for a Pod that is opted in but cannot be wrapped.
func (m *Mutator) Mutate(ctx context.Context, pod *corev1.Pod, namespace string) (Result, error) {
	if v := pod.Labels[LabelInject]; v == "false" {
		return Result{}, nil
	}
	if _, done := pod.Annotations[AnnotationStatus]; done {
		return Result{}, nil
	}
	out := pod.DeepCopy()
	res, err := m.mutate(ctx, out)
	if err != nil {
		return Result{}, err
	}
	if res.Skipped != "" {
		m.logger.Info("pod admitted untraced", "namespace", namespace, "pod", podName(pod), "reason", res.Skipped)
		if m.cfg.RequireCommand {
			return Result{}, fmt.Errorf("%w: %s", ErrNotWrapped, res.Skipped)
		}
		// The skip is written on the Pod, where `kubectl describe` shows it,
		// and it marks the Pod so that a re-invocation does not try again.
		out = pod.DeepCopy()
		setAnnotation(out, AnnotationSkipped, res.Skipped)
		res.Warnings = append(res.Warnings, "rootline: pod not traced: "+res.Skipped)
	} else if len(res.Wrapped) > 0 {
		m.logger.Info("pod wrapped in rootline run", "namespace", namespace, "pod", podName(pod), "containers", res.Wrapped)
	}
	patch, err := diff(pod, out)
	if err != nil {
		return Result{}, err
	}
	res.Patch = patch
	return res, nil
}

// mutate changes pod in place. A non-empty Result.Skipped leaves pod in an
// unspecified state (the caller starts again from the original).
func (m *Mutator) mutate(ctx context.Context, pod *corev1.Pod) (Result, error) {
	var res Result
	names, err := m.targets(pod)
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	mode := m.cfg.Mode
	if v := pod.Annotations[AnnotationMode]; v != "" {
		if !modes[v] {
			res.Skipped = fmt.Sprintf("annotation %s: %q is not ptrace, ebpf or auto", AnnotationMode, v)
			return res, nil
		}
		mode = v
	}
	status := Status{Version: version.Version, Mode: mode, Service: map[string]string{}, Command: map[string]string{}}
	base := serviceName(pod)
	for _, name := range names {
		c := container(pod, name)
		if len(c.Command) > 0 && c.Command[0] == Binary {
			continue // wrapped before the status annotation was lost
		}
		argv, source, err := m.command(ctx, pod, c)
		if err != nil {
			res.Skipped = fmt.Sprintf("container %q: %v", name, err)
			return res, nil
		}
		svc := base
		if len(names) > 1 {
			svc = base + "-" + name
		}
		if v, ok := envValue(c, "OTEL_SERVICE_NAME"); ok && pod.Annotations[AnnotationService] == "" {
			svc = v // the container already names itself
		}
		m.wrap(c, argv, svc, mode)
		status.Containers = append(status.Containers, name)
		status.Service[name] = svc
		status.Command[name] = source
		res.Wrapped = append(res.Wrapped, name)
	}
	if len(res.Wrapped) == 0 {
		return res, nil
	}
	m.addInstaller(pod)
	if pod.Annotations[AnnotationEnvoy] == "true" {
		warn, err := m.addEnvoy(pod, status.Containers, base)
		if err != nil {
			res.Skipped = err.Error()
			return res, nil
		}
		status.Envoy = warn == ""
		if warn != "" {
			res.Warnings = append(res.Warnings, warn)
		}
	}
	js, _ := json.Marshal(status)
	setAnnotation(pod, AnnotationStatus, string(js))
	return res, nil
}

// targets returns the names of the containers to wrap: the annotation's, or
// the Pod's default container.
func (m *Mutator) targets(pod *corev1.Pod) ([]string, error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, errors.New("the pod has no containers")
	}
	if v, ok := pod.Annotations[AnnotationContainers]; ok {
		names := splitList(v)
		if len(names) == 0 {
			return nil, fmt.Errorf("annotation %s names no container", AnnotationContainers)
		}
		for _, n := range names {
			if container(pod, n) == nil {
				return nil, fmt.Errorf("annotation %s: no container %q in the pod", AnnotationContainers, n)
			}
		}
		return slices.Compact(names), nil
	}
	// kubectl's own choice of "the" container, then the first one that is
	// not a mesh's proxy (a proxy injected before this webhook ran).
	if n := pod.Annotations["kubectl.kubernetes.io/default-container"]; n != "" && container(pod, n) != nil {
		return []string{n}, nil
	}
	for _, c := range pod.Spec.Containers {
		if !proxyContainers[c.Name] {
			return []string{c.Name}, nil
		}
	}
	return nil, errors.New("the pod has only proxy containers")
}

var proxyContainers = map[string]bool{"istio-proxy": true, "linkerd-proxy": true, EnvoyContainerName: true}

// command returns the argv the container runs, as the part before its args
// (its args, if any, stay where they are), and where it came from.
//
// Kubernetes runs command+args when command is set (the image's ENTRYPOINT
// and CMD are both ignored, even with args unset), ENTRYPOINT+args when only
// args is set, and ENTRYPOINT+CMD when neither is.
func (m *Mutator) command(ctx context.Context, pod *corev1.Pod, c *corev1.Container) ([]string, string, error) {
	if len(c.Command) > 0 {
		return c.Command, "pod", nil
	}
	if v := strings.TrimSpace(pod.Annotations[AnnotationCommand]); v != "" {
		argv, err := parseCommand(v)
		if err != nil {
			return nil, "", fmt.Errorf("annotation %s: %w", AnnotationCommand, err)
		}
		return argv, "annotation", nil
	}
	if m.resolver == nil {
		return nil, "", fmt.Errorf("no command in the pod spec, no %s annotation, and image look-up is off", AnnotationCommand)
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ResolveTimeout)
	defer cancel()
	ep, cmd, err := m.resolver.Resolve(rctx, c.Image)
	if err != nil {
		return nil, "", fmt.Errorf("no command in the pod spec, no %s annotation, and the image's config cannot be read: %w", AnnotationCommand, err)
	}
	argv := escapeRefs(ep)
	if len(c.Args) == 0 {
		// The CMD moves into the command: Kubernetes would drop it once a
		// command is set.
		argv = append(argv, escapeRefs(cmd)...)
	}
	if len(argv) == 0 {
		return nil, "", fmt.Errorf("image %s has neither ENTRYPOINT nor CMD; set %s", c.Image, AnnotationCommand)
	}
	return argv, "image", nil
}

// parseCommand reads the rootline.dev/command annotation: a JSON array of
// strings, or words separated by spaces.
func parseCommand(v string) ([]string, error) {
	if strings.HasPrefix(v, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(v), &argv); err != nil {
			return nil, fmt.Errorf("not a JSON array of strings: %v", err)
		}
		if len(argv) == 0 || argv[0] == "" {
			return nil, errors.New("empty command")
		}
		return argv, nil
	}
	return strings.Fields(v), nil
}

// escapeRefs protects an image's own arguments from the $(VAR) expansion
// that Kubernetes applies to a container's command and args but a runtime
// never applies to an image's ENTRYPOINT and CMD.
func escapeRefs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$(", "$$(")
	}
	return out
}

// wrap makes c run argv (followed by its args) under rootline run.
func (m *Mutator) wrap(c *corev1.Container, argv []string, service, mode string) {
	cmd := []string{Binary, "run",
		"--service=" + service,
		"--mode=" + mode,
		"--server=" + m.cfg.ServerURL,
		"--agent=" + m.cfg.AgentURL,
	}
	if m.cfg.LogLevel != "" {
		cmd = append(cmd, "--log.level="+m.cfg.LogLevel)
	}
	c.Command = append(append(cmd, "--"), argv...)
	if _, ok := envValue(c, "OTEL_SERVICE_NAME"); !ok {
		// The node's agent finds the process by this variable (it cannot
		// take a registration by pid from another PID namespace).
		c.Env = append(c.Env, corev1.EnvVar{Name: "OTEL_SERVICE_NAME", Value: service})
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: BinVolumeName, MountPath: BinDir, ReadOnly: true})
	if mode == "ebpf" {
		// The datapath creates a cgroup for the command and attaches
		// sk_msg and cgroup programs to it: a container can do neither
		// with capabilities alone while /sys/fs/cgroup is mounted
		// read-only, which only privileged containers escape.
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		t := true
		c.SecurityContext.Privileged = &t
		c.SecurityContext.AllowPrivilegeEscalation = &t
	}
}

// addInstaller adds the emptyDir and the init container that copies the
// binary into it, ahead of the Pod's own init containers (one of which may
// be wrapped by a later version).
func (m *Mutator) addInstaller(pod *corev1.Pod) {
	limit := resource.MustParse("128Mi")
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
		Name:         BinVolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}},
	})
	init := corev1.Container{
		Name:                     InitContainerName,
		Image:                    m.cfg.Image,
		ImagePullPolicy:          corev1.PullPolicy(m.cfg.ImagePullPolicy),
		Command:                  []string{"/rootline", "install-binary", Binary},
		VolumeMounts:             []corev1.VolumeMount{{Name: BinVolumeName, MountPath: BinDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: restricted(65532),
	}
	pod.Spec.InitContainers = append([]corev1.Container{init}, pod.Spec.InitContainers...)
}

// restricted is the security context of the containers the webhook adds
// that need no privilege: acceptable under the "restricted" Pod Security
// Standard, so that opting in never makes a namespace's policy refuse the Pod.
func restricted(uid int64) *corev1.SecurityContext {
	f, t := false, true
	return &corev1.SecurityContext{
		RunAsUser:                &uid,
		RunAsNonRoot:             &t,
		AllowPrivilegeEscalation: &f,
		ReadOnlyRootFilesystem:   &t,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// serviceName is the Pod's service name: the annotation, the usual labels,
// the owning workload, the Pod's own name.
func serviceName(pod *corev1.Pod) string {
	for _, v := range []string{
		pod.Annotations[AnnotationService],
		pod.Labels["app.kubernetes.io/name"],
		pod.Labels["app"],
	} {
		if v != "" {
			return v
		}
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if o.Kind == "ReplicaSet" {
			// A Deployment's ReplicaSet is <deployment>-<pod-template-hash>.
			if h := pod.Labels["pod-template-hash"]; h != "" {
				if d, ok := strings.CutSuffix(o.Name, "-"+h); ok {
					return d
				}
			}
		}
		return o.Name
	}
	if pod.Name != "" {
		return pod.Name
	}
	if g := strings.TrimRight(pod.GenerateName, "-"); g != "" {
		return g
	}
	return pod.Spec.Containers[0].Name
}

func container(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// envValue returns a literal environment variable of c.
func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil && e.Value != "" {
			return e.Value, true
		}
	}
	return "", false
}

func setAnnotation(pod *corev1.Pod, k, v string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[k] = v
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// diff is the JSON patch from a to b.
func diff(a, b *corev1.Pod) ([]byte, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	ops, err := jsonpatch.CreatePatch(ja, jb)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}
