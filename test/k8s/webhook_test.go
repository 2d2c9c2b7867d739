package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/rootline/rootline/internal/webhook"
)

// warnings collects the warnings the API server passes on from webhooks.
type warnings struct {
	mu  sync.Mutex
	all []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.all = append(w.all, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.all
	w.all = nil
	return out
}

func createNamespace(ctx context.Context, t *testing.T, name string, labels map[string]string) {
	t.Helper()
	_, err := cluster.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// webhookArgs returns the args of the rendered webhook Deployment's
// container, with the listen address and certificate paths of this test.
func webhookArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	d := find(objs, "Deployment", "rl-rootline-webhook")
	if d == nil {
		t.Fatal("no webhook Deployment rendered")
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	raw, _ := cs[0].(map[string]any)["args"].([]any)
	if len(raw) == 0 || raw[0] != "webhook" {
		t.Fatalf("webhook container args %v", raw)
	}
	var args []string
	for _, a := range raw[1:] {
		s := a.(string)
		if strings.HasPrefix(s, "--listen=") || strings.HasPrefix(s, "--tls.") {
			continue
		}
		args = append(args, s)
	}
	return args
}

// TestWebhook installs the chart with the webhook pointed at a `rootline
// webhook` process (run with the chart's own arguments) and checks what the
// API server stores for opted-in and other Pods, the idempotence, the
// failure policy and TLS.
func TestWebhook(t *testing.T) {
	ctx := needCluster(t)
	rootlineRef, appRef := testImages(t)
	reg := registryHost()
	pki := newPKI(t, t.TempDir())

	createNamespace(ctx, t, releaseNS, nil)
	createNamespace(ctx, t, "opted", map[string]string{webhook.LabelInject: "enabled"})
	createNamespace(ctx, t, "plain", nil)

	values := func(url, failurePolicy, caBundle string) map[string]any {
		return map[string]any{
			"image": map[string]any{"repository": reg + "/rootline", "tag": "test"},
			"webhook": map[string]any{
				"externalURL":   url,
				"failurePolicy": failurePolicy,
				"tls":           map[string]any{"cert": b64file(t, pki.certFile), "key": b64file(t, pki.keyFile), "caBundle": caBundle},
				"envoy":         map[string]any{"image": "envoyproxy/envoy:v1.32-latest", "initImage": reg + "/iptables:test"},
			},
		}
	}
	// The webhook runs with the arguments of the chart's Deployment, on a
	// port the kernel picks; the chart is then installed pointing at it.
	args := webhookArgs(t, mustRender(t, values("https://127.0.0.1:1/mutate", "Ignore", pki.caBundle())))
	t.Logf("webhook args from the chart: %q", args)
	wh := startWebhookOn(t, pki, 0, args...)
	port := wh.port
	url := "https://127.0.0.1:" + itoa(port) + "/mutate"
	objs := mustRender(t, values(url, "Ignore", pki.caBundle()))
	if err := apply(ctx, t, objs, false); err != nil {
		t.Fatal(err)
	}

	var warn warnings
	wcfg := rest.CopyConfig(cluster.cfg)
	wcfg.WarningHandler = &warn
	pods := kubernetes.NewForConfigOrDie(wcfg).CoreV1()

	create := func(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := pods.Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s/%s: %v\nwebhook log:\n%s", ns, pod.Name, err, wh.log())
		}
		return got
	}
	base := func(name string, c corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	wrapper := func(service string) []string {
		return []string{webhook.Binary, "run", "--service=" + service, "--mode=ptrace",
			"--server=http://rl-rootline-server.rootline.svc:4318", "--agent=", "--"}
	}

	// checkWrapped asserts what every wrapped Pod has.
	checkWrapped := func(t *testing.T, p *corev1.Pod, service, source string) webhook.Status {
		t.Helper()
		var st webhook.Status
		if err := json.Unmarshal([]byte(p.Annotations[webhook.AnnotationStatus]), &st); err != nil {
			t.Fatalf("status annotation %q: %v", p.Annotations[webhook.AnnotationStatus], err)
		}
		if st.Command["app"] != source || st.Service["app"] != service || !slices.Equal(st.Containers, []string{"app"}) {
			t.Errorf("status %+v, want app from %s as %s", st, source, service)
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != webhook.InitContainerName {
			t.Fatalf("init containers %v", p.Spec.InitContainers)
		}
		ic := p.Spec.InitContainers[0]
		if ic.Image != rootlineRef || !slices.Equal(ic.Command, []string{"/rootline", "install-binary", webhook.Binary}) {
			t.Errorf("init container image %s command %q", ic.Image, ic.Command)
		}
		sc := ic.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("init container security context %+v", sc)
		}
		var vol *corev1.Volume
		for i := range p.Spec.Volumes {
			if p.Spec.Volumes[i].Name == webhook.BinVolumeName {
				vol = &p.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.EmptyDir == nil || vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.String() != "128Mi" {
			t.Errorf("volume %+v", vol)
		}
		c := p.Spec.Containers[0]
		if !slices.Contains(c.VolumeMounts, corev1.VolumeMount{Name: webhook.BinVolumeName, MountPath: webhook.BinDir, ReadOnly: true}) {
			t.Errorf("mounts %+v", c.VolumeMounts)
		}
		if !slices.Contains(c.Env, corev1.EnvVar{Name: "OTEL_SERVICE_NAME", Value: service}) {
			t.Errorf("env %+v", c.Env)
		}
		return st
	}

	var wrappedA *corev1.Pod
	t.Run("command from the pod spec", func(t *testing.T) {
		p := base("a", corev1.Container{Name: "app", Image: appRef, Command: []string{"/bin/sh", "-c", "echo wrapped-ok $0 $OTEL_SERVICE_NAME", "pod-a"}})
		p.Labels = map[string]string{"app": "shop"}
		got := create(t, "opted", p)
		checkWrapped(t, got, "shop", "pod")
		want := append(wrapper("shop"), "/bin/sh", "-c", "echo wrapped-ok $0 $OTEL_SERVICE_NAME", "pod-a")
		if c := got.Spec.Containers[0]; !slices.Equal(c.Command, want) || c.Args != nil {
			t.Errorf("command %q args %q, want %q", c.Command, c.Args, want)
		}
		if c := got.Spec.Containers[0]; c.SecurityContext != nil {
			t.Errorf("ptrace mode changed the security context: %+v", c.SecurityContext)
		}
		wrappedA = got
	})

	t.Run("entrypoint and cmd from the registry", func(t *testing.T) {
		p := base("", corev1.Container{Name: "app", Image: appRef})
		p.GenerateName = "shop-api-5d8f7c9b6-"
		ctrl := true
		p.Labels = map[string]string{"pod-template-hash": "5d8f7c9b6"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "shop-api-5d8f7c9b6", UID: "0b5c6f4e-0000-4000-8000-000000000001", Controller: &ctrl}}
		got := create(t, "opted", p)
		checkWrapped(t, got, "shop-api", "image")
		// The CMD joins the command (Kubernetes drops it once a command is
		// set), and its $(...) is escaped: a runtime never expands an image's.
		want := append(wrapper("shop-api"), "/app/shop", "--listen=:8080", "--greeting", "$$(NOT_A_VAR)")
		if c := got.Spec.Containers[0]; !slices.Equal(c.Command, want) || c.Args != nil {
			t.Errorf("command %q args %q, want %q", c.Command, c.Args, want)
		}
	})

	t.Run("entrypoint from the registry, args from the pod", func(t *testing.T) {
		got := create(t, "opted", base("args", corev1.Container{Name: "app", Image: appRef, Args: []string{"--verbose", "$(POD_NAME)"}}))
		checkWrapped(t, got, "args", "image")
		c := got.Spec.Containers[0]
		if want := append(wrapper("args"), "/app/shop", "--listen=:8080"); !slices.Equal(c.Command, want) || !slices.Equal(c.Args, []string{"--verbose", "$(POD_NAME)"}) {
			t.Errorf("command %q args %q", c.Command, c.Args)
		}
	})

	t.Run("command from the annotation", func(t *testing.T) {
		p := base("annotated", corev1.Container{Name: "app", Image: reg + "/private:v1"})
		p.Annotations = map[string]string{webhook.AnnotationCommand: `["/srv/app", "-x"]`, webhook.AnnotationService: "billing"}
		got := create(t, "opted", p)
		checkWrapped(t, got, "billing", "annotation")
		if want := append(wrapper("billing"), "/srv/app", "-x"); !slices.Equal(got.Spec.Containers[0].Command, want) {
			t.Errorf("command %q", got.Spec.Containers[0].Command)
		}
	})

	t.Run("unresolvable command: admitted untraced, with a reason", func(t *testing.T) {
		warn.take()
		p := base("unknown", corev1.Container{Name: "app", Image: reg + "/missing:v1"})
		got := create(t, "opted", p)
		if len(got.Spec.InitContainers) != 0 || got.Spec.Containers[0].Command != nil || got.Annotations[webhook.AnnotationStatus] != "" {
			t.Errorf("pod changed: init %v command %q", got.Spec.InitContainers, got.Spec.Containers[0].Command)
		}
		why := got.Annotations[webhook.AnnotationSkipped]
		if !strings.Contains(why, "cannot be read") || !strings.Contains(why, "missing") {
			t.Errorf("skipped annotation %q", why)
		}
		if w := warn.take(); len(w) != 1 || !strings.Contains(w[0], "pod not traced") {
			t.Errorf("warnings %q", w)
		}
	})

	untouched := func(t *testing.T, ns string, p *corev1.Pod) {
		t.Helper()
		sent := p.DeepCopy()
		got := create(t, ns, p)
		if len(got.Spec.InitContainers) != 0 || len(got.Spec.Volumes) != 0 || len(got.Annotations) != 0 ||
			!slices.Equal(got.Spec.Containers[0].Command, sent.Spec.Containers[0].Command) || len(got.Spec.Containers[0].Env) != 0 {
			t.Errorf("pod %s/%s was changed: %+v", ns, p.Name, got.Spec)
		}
	}
	t.Run("unlabelled pod in a plain namespace untouched", func(t *testing.T) {
		untouched(t, "plain", base("plain", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}}))
	})
	t.Run("opted-out pod in an enabled namespace untouched", func(t *testing.T) {
		p := base("optout", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}})
		p.Labels = map[string]string{webhook.LabelInject: "false"}
		untouched(t, "opted", p)
	})
	t.Run("pod label opts in within a plain namespace", func(t *testing.T) {
		p := base("podlabel", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}})
		p.Labels = map[string]string{webhook.LabelInject: "true"}
		got := create(t, "plain", p)
		checkWrapped(t, got, "podlabel", "pod")
	})

	t.Run("ebpf mode makes the container privileged", func(t *testing.T) {
		p := base("ebpf", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}})
		p.Annotations = map[string]string{webhook.AnnotationMode: "ebpf"}
		got := create(t, "opted", p)
		st := checkWrapped(t, got, "ebpf", "pod")
		sc := got.Spec.Containers[0].SecurityContext
		if st.Mode != "ebpf" || sc == nil || sc.Privileged == nil || !*sc.Privileged || !slices.Contains(got.Spec.Containers[0].Command, "--mode=ebpf") {
			t.Errorf("mode %s security context %+v", st.Mode, sc)
		}
	})

	t.Run("envoy sidecar and its iptables init container", func(t *testing.T) {
		p := base("envoy", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}}})
		p.Annotations = map[string]string{webhook.AnnotationEnvoy: "true"}
		got := create(t, "opted", p)
		st := checkWrapped(t, got, "envoy", "pod")
		if !st.Envoy || len(got.Spec.Containers) != 2 || got.Spec.Containers[1].Name != webhook.EnvoyContainerName {
			t.Fatalf("status %+v containers %d", st, len(got.Spec.Containers))
		}
		e := got.Spec.Containers[1]
		if e.Image != "envoyproxy/envoy:v1.32-latest" || !strings.Contains(strings.Join(e.Args, " "), "rl-rootline-server.rootline.svc") ||
			e.SecurityContext == nil || *e.SecurityContext.RunAsUser != 1337 {
			t.Errorf("envoy container %+v", e)
		}
		var ipt *corev1.Container
		for i := range got.Spec.InitContainers {
			if got.Spec.InitContainers[i].Name == webhook.EnvoyInitName {
				ipt = &got.Spec.InitContainers[i]
			}
		}
		if ipt == nil || ipt.Image != reg+"/iptables:test" || !strings.Contains(ipt.Command[2], "--dport 8080 -j REDIRECT --to-ports 15006") ||
			!slices.Equal(ipt.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
			t.Errorf("iptables init container %+v", ipt)
		}
	})

	t.Run("idempotent", func(t *testing.T) {
		if wrappedA == nil {
			t.Skip("the first pod was not created")
		}
		// A Pod created from a mutated Pod's spec (as a controller copying
		// a template would, or a second call) comes out the same.
		again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-again", Labels: wrappedA.Labels, Annotations: wrappedA.Annotations}, Spec: *wrappedA.Spec.DeepCopy()}
		got := create(t, "opted", again)
		if !equality.Semantic.DeepEqual(got.Spec, wrappedA.Spec) {
			t.Errorf("second mutation changed the spec:\nfirst  %+v\nsecond %+v", wrappedA.Spec, got.Spec)
		}
		// Without the status annotation too: the wrapped command is seen.
		bare := again.DeepCopy()
		bare.Name = "a-bare"
		delete(bare.Annotations, webhook.AnnotationStatus)
		got = create(t, "opted", bare)
		if !equality.Semantic.DeepEqual(got.Spec, wrappedA.Spec) {
			t.Errorf("a wrapped pod without its status annotation was changed:\n%+v", got.Spec)
		}
		// And the dry run says so: an empty patch.
		js, _ := json.Marshal(wrappedA)
		cmd := exec.Command(os.Getenv("ROOTLINE_BIN"), append([]string{"webhook", "--dry-run=-", "--namespace=opted"}, webhookArgs(t, objs)...)...)
		cmd.Stdin = bytes.NewReader(js)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "[]" {
			t.Errorf("dry run of a mutated pod: %q, %v\n%s", out, err, stderr.String())
		}
	})

	t.Run("the wrapped command runs", func(t *testing.T) {
		if wrappedA == nil {
			t.Skip("the first pod was not created")
		}
		// What the kubelet would do, on this host: the init container's
		// command copies the binary, then the container's command runs.
		dir := t.TempDir()
		bin := os.Getenv("ROOTLINE_BIN")
		ic := wrappedA.Spec.InitContainers[0].Command
		dest := filepath.Join(dir, strings.TrimPrefix(ic[2], "/"))
		if err := os.MkdirAll(filepath.Dir(dest), 0o777); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, ic[1], dest).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", ic, err, out)
		}
		st, err := os.Stat(dest)
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Fatalf("installed binary: %v %v", st, err)
		}
		c := wrappedA.Spec.Containers[0]
		cmd := exec.Command(dest, c.Command[1:]...)
		cmd.Env = os.Environ()
		for _, e := range c.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "wrapped-ok pod-a shop") {
			t.Fatalf("wrapped command: %v\n%s", err, out)
		}
	})

	t.Run("failure policy Ignore: webhook down admits unmutated", func(t *testing.T) {
		wh.stop()
		got := create(t, "opted", base("down-ignore", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}}))
		if _, ok := got.Annotations[webhook.AnnotationStatus]; ok || len(got.Spec.InitContainers) != 0 {
			t.Errorf("pod mutated with the webhook down: %+v", got.Spec)
		}
	})

	t.Run("failure policy Fail: webhook down refuses", func(t *testing.T) {
		if err := apply(ctx, t, mustRender(t, values(url, "Fail", pki.caBundle())), false); err != nil {
			t.Fatal(err)
		}
		err := refused(ctx, t, pods, "down-fail", appRef)
		if !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("create with the webhook down and failurePolicy Fail: %v", err)
		}
		t.Logf("refused: %v", err)
		// Other namespaces are not affected.
		untouched(t, "plain", base("plain-while-down", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}}))
	})

	t.Run("TLS: a CA bundle that did not sign the certificate fails", func(t *testing.T) {
		wh = startWebhookOn(t, pki, port, args...)
		other := newPKI(t, t.TempDir())
		if err := apply(ctx, t, mustRender(t, values(url, "Fail", other.caBundle())), false); err != nil {
			t.Fatal(err)
		}
		err := refused(ctx, t, pods, "wrong-ca", appRef)
		if !strings.Contains(err.Error(), "x509") {
			t.Fatalf("create with a wrong CA bundle: %v", err)
		}
		t.Logf("refused: %v", err)
		if err := apply(ctx, t, mustRender(t, values(url, "Fail", pki.caBundle())), false); err != nil {
			t.Fatal(err)
		}
		// The configuration change reaches the API server's webhook
		// client within a moment.
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := pods.Pods("opted").Create(ctx, base("right-ca", corev1.Container{Name: "app", Image: appRef, Command: []string{"/app"}}), metav1.CreateOptions{})
			if err == nil {
				checkWrapped(t, got, "right-ca", "pod")
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with the right CA bundle again: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// refused creates Pods named name-N in the opted namespace until one is
// refused (a configuration change reaches the API server's webhook client
// within a moment; Pods admitted meanwhile are deleted) and returns the error.
func refused(ctx context.Context, t *testing.T, pods typedcorev1.CoreV1Interface, name, image string) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + itoa(i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image, Command: []string{"/app"}}}}}
		_, err := pods.Pods("opted").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		_ = pods.Pods("opted").Delete(ctx, p.Name, metav1.DeleteOptions{})
		if time.Now().After(deadline) {
			t.Fatalf("pods are still admitted 20 s after the webhook configuration changed")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
