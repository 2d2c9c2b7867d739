package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rootline/rootline/internal/bpftest"
)

// fakeResolver stands in for a registry in these unit tests (the
// end-to-end tests in test/k8s use a real one).
type fakeResolver map[string][2][]string

func (f fakeResolver) Resolve(_ context.Context, image string) ([]string, []string, error) {
	r, ok := f[image]
	if !ok {
		return nil, nil, errors.New("MANIFEST_UNKNOWN")
	}
	return r[0], r[1], nil
}

func testConfig() Config {
	return Config{Image: "reg/rootline:1", ServerURL: "http://rl:4318", Mode: "ptrace", ResolveTimeout: time.Second,
		Envoy: EnvoyConfig{Image: "envoy:1", InitImage: "ipt:1", InboundPort: 15006, AdminPort: 15000, UID: 1337, ZipkinAddr: "rl:9411"}}
}

func newTestMutator(t *testing.T, cfg Config) *Mutator {
	t.Helper()
	m, err := NewMutator(cfg, fakeResolver{
		"app:1":   {{"/app", "--x=$(Y)"}, {"serve"}},
		"cmdonly": {nil, {"/bin/cmd", "a"}},
		"none":    {nil, nil},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pod(c corev1.Container) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
}

// applyPatch applies a Mutate patch as the API server does.
func applyPatch(t *testing.T, p *corev1.Pod, patch []byte) *corev1.Pod {
	t.Helper()
	js, _ := json.Marshal(p)
	if patch == nil {
		return p.DeepCopy()
	}
	dec, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	out, err := dec.Apply(js)
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

var wrapPrefix = []string{Binary, "run", "--service=p", "--mode=ptrace", "--server=http://rl:4318", "--agent=", "--"}

func TestMutateCommand(t *testing.T) {
	for _, tc := range []struct {
		name        string
		c           corev1.Container
		annotations map[string]string
		wantCmd     []string // after the wrapper
		wantArgs    []string
		source      string
		skipped     string // substring of the skip reason
	}{
		{name: "command and args from the spec", c: corev1.Container{Name: "a", Image: "x", Command: []string{"/srv", "$(PORT)"}, Args: []string{"-v"}},
			wantCmd: []string{"/srv", "$(PORT)"}, wantArgs: []string{"-v"}, source: "pod"},
		{name: "command only: the image's CMD stays dropped", c: corev1.Container{Name: "a", Image: "app:1", Command: []string{"/srv"}},
			wantCmd: []string{"/srv"}, source: "pod"},
		{name: "entrypoint and cmd from the image, $( escaped", c: corev1.Container{Name: "a", Image: "app:1"},
			wantCmd: []string{"/app", "--x=$$(Y)", "serve"}, source: "image"},
		{name: "entrypoint from the image, args from the spec", c: corev1.Container{Name: "a", Image: "app:1", Args: []string{"$(Z)"}},
			wantCmd: []string{"/app", "--x=$$(Y)"}, wantArgs: []string{"$(Z)"}, source: "image"},
		{name: "image with only a CMD", c: corev1.Container{Name: "a", Image: "cmdonly"},
			wantCmd: []string{"/bin/cmd", "a"}, source: "image"},
		{name: "annotation as JSON beats the registry", c: corev1.Container{Name: "a", Image: "app:1", Args: []string{"-q"}},
			annotations: map[string]string{AnnotationCommand: `["/opt/my app", "-p"]`},
			wantCmd:     []string{"/opt/my app", "-p"}, wantArgs: []string{"-q"}, source: "annotation"},
		{name: "annotation as words", c: corev1.Container{Name: "a", Image: "private"},
			annotations: map[string]string{AnnotationCommand: " /srv  -p 1 "}, wantCmd: []string{"/srv", "-p", "1"}, source: "annotation"},
		{name: "unknown image", c: corev1.Container{Name: "a", Image: "private"}, skipped: "MANIFEST_UNKNOWN"},
		{name: "image with neither", c: corev1.Container{Name: "a", Image: "none"}, skipped: "neither ENTRYPOINT nor CMD"},
		{name: "bad annotation", c: corev1.Container{Name: "a", Image: "x"}, annotations: map[string]string{AnnotationCommand: `["/x",`}, skipped: "not a JSON array"},
		{name: "bad mode", c: corev1.Container{Name: "a", Image: "x", Command: []string{"/x"}}, annotations: map[string]string{AnnotationMode: "fast"}, skipped: "not ptrace, ebpf or auto"},
		{name: "unknown container", c: corev1.Container{Name: "a", Image: "x", Command: []string{"/x"}}, annotations: map[string]string{AnnotationContainers: "b"}, skipped: `no container "b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMutator(t, testConfig())
			in := pod(tc.c)
			in.Annotations = tc.annotations
			orig := in.DeepCopy()
			res, err := m.Mutate(context.Background(), in, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if !equalPods(in, orig) {
				t.Fatal("Mutate changed its argument")
			}
			got := applyPatch(t, in, res.Patch)
			if tc.skipped != "" {
				if !strings.Contains(res.Skipped, tc.skipped) || !strings.Contains(got.Annotations[AnnotationSkipped], tc.skipped) || len(res.Warnings) != 1 {
					t.Fatalf("skipped %q annotation %q warnings %q, want %q", res.Skipped, got.Annotations[AnnotationSkipped], res.Warnings, tc.skipped)
				}
				if len(got.Spec.InitContainers) != 0 || !slices.Equal(got.Spec.Containers[0].Command, tc.c.Command) {
					t.Fatalf("a skipped pod was changed: %+v", got.Spec)
				}
				// Strict mode refuses it instead.
				cfg := testConfig()
				cfg.RequireCommand = true
				if _, err := newTestMutator(t, cfg).Mutate(context.Background(), orig, "ns"); !errors.Is(err, ErrNotWrapped) {
					t.Fatalf("strict: %v", err)
				}
				return
			}
			c := got.Spec.Containers[0]
			if want := append(slices.Clone(wrapPrefix), tc.wantCmd...); !slices.Equal(c.Command, want) {
				t.Errorf("command %q\nwant    %q", c.Command, want)
			}
			if !slices.Equal(c.Args, tc.wantArgs) {
				t.Errorf("args %q, want %q", c.Args, tc.wantArgs)
			}
			var st Status
			if err := json.Unmarshal([]byte(got.Annotations[AnnotationStatus]), &st); err != nil || st.Command["a"] != tc.source {
				t.Errorf("status %q (%v), want source %s", got.Annotations[AnnotationStatus], err, tc.source)
			}
			// Idempotent: the mutated pod gives no patch.
			if res2, err := m.Mutate(context.Background(), got, "ns"); err != nil || res2.Patch != nil {
				t.Errorf("second Mutate: patch %s err %v", res2.Patch, err)
			}
			delete(got.Annotations, AnnotationStatus)
			if res3, err := m.Mutate(context.Background(), got, "ns"); err != nil || res3.Patch != nil {
				t.Errorf("Mutate of a wrapped pod without its status: patch %s err %v", res3.Patch, err)
			}
		})
	}
}

func equalPods(a, b *corev1.Pod) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestMutateLeavesAlone(t *testing.T) {
	m := newTestMutator(t, testConfig())
	for name, p := range map[string]*corev1.Pod{
		"opted out": {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelInject: "false"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Command: []string{"/x"}}}}},
		"already mutated": {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationStatus: "{}"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Command: []string{"/x"}}}}},
	} {
		res, err := m.Mutate(context.Background(), p, "ns")
		if err != nil || res.Patch != nil || res.Skipped != "" {
			t.Errorf("%s: %+v %v", name, res, err)
		}
	}
}

func TestTargetsAndServiceName(t *testing.T) {
	ctrl := true
	for _, tc := range []struct {
		name     string
		p        corev1.Pod
		wrapped  []string
		services map[string]string
	}{
		{name: "istio proxy first is skipped; owner deployment from the replicaset",
			p: corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-7c9-", Labels: map[string]string{"pod-template-hash": "7c9"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7c9", Controller: &ctrl}}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy", Command: []string{"/p"}}, {Name: "main", Command: []string{"/m"}}}}},
			wrapped: []string{"main"}, services: map[string]string{"main": "web"}},
		{name: "kubectl default container; statefulset owner",
			p: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "b"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: &ctrl}}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Command: []string{"/a"}}, {Name: "b", Command: []string{"/b"}}}}},
			wrapped: []string{"b"}, services: map[string]string{"b": "db"}},
		{name: "two containers by annotation; label name; a container's own OTEL_SERVICE_NAME kept",
			p: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"app.kubernetes.io/name": "shop", "app": "other"},
				Annotations: map[string]string{AnnotationContainers: "a, b"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Command: []string{"/a"}},
					{Name: "b", Command: []string{"/b"}, Env: []corev1.EnvVar{{Name: "OTEL_SERVICE_NAME", Value: "cart"}}}}}},
			wrapped: []string{"a", "b"}, services: map[string]string{"a": "shop-a", "b": "cart"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMutator(t, testConfig())
			res, err := m.Mutate(context.Background(), &tc.p, "ns")
			if err != nil || res.Skipped != "" {
				t.Fatalf("%+v %v", res, err)
			}
			if !slices.Equal(res.Wrapped, tc.wrapped) {
				t.Errorf("wrapped %q, want %q", res.Wrapped, tc.wrapped)
			}
			got := applyPatch(t, &tc.p, res.Patch)
			var st Status
			_ = json.Unmarshal([]byte(got.Annotations[AnnotationStatus]), &st)
			for c, svc := range tc.services {
				if st.Service[c] != svc {
					t.Errorf("service of %s: %q, want %q", c, st.Service[c], svc)
				}
				if !slices.Contains(container(got, c).Command, "--service="+svc) {
					t.Errorf("command of %s: %q", c, container(got, c).Command)
				}
			}
		})
	}
}

func TestEnvoy(t *testing.T) {
	m := newTestMutator(t, testConfig())
	p := pod(corev1.Container{Name: "a", Command: []string{"/x"}, Ports: []corev1.ContainerPort{{ContainerPort: 9090}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 8080}}})
	p.Annotations = map[string]string{AnnotationEnvoy: "true"}
	res, err := m.Mutate(context.Background(), p, "ns")
	if err != nil || res.Skipped != "" || len(res.Warnings) != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	got := applyPatch(t, p, res.Patch)
	if len(got.Spec.Containers) != 2 || len(got.Spec.InitContainers) != 2 {
		t.Fatalf("containers %d init %d", len(got.Spec.Containers), len(got.Spec.InitContainers))
	}
	script := got.Spec.InitContainers[1].Command[2]
	if !strings.Contains(script, "--dport 8080 -j REDIRECT --to-ports 15006\n") || !strings.Contains(script, "--dport 9090") || strings.Contains(script, "--dport 53") {
		t.Errorf("script:\n%s", script)
	}

	// No TCP port declared: no sidecar, a warning, the wrapping still done.
	p = pod(corev1.Container{Name: "a", Command: []string{"/x"}})
	p.Annotations = map[string]string{AnnotationEnvoy: "true"}
	res, _ = m.Mutate(context.Background(), p, "ns")
	got = applyPatch(t, p, res.Patch)
	if len(res.Warnings) != 1 || len(got.Spec.Containers) != 1 || len(got.Spec.InitContainers) != 1 {
		t.Errorf("warnings %q containers %d", res.Warnings, len(got.Spec.Containers))
	}

	// A declared port that is Envoy's own cannot be redirected.
	p = pod(corev1.Container{Name: "a", Command: []string{"/x"}, Ports: []corev1.ContainerPort{{ContainerPort: 15006}}})
	p.Annotations = map[string]string{AnnotationEnvoy: "true"}
	if res, _ = m.Mutate(context.Background(), p, "ns"); !strings.Contains(res.Skipped, "Envoy sidecar's own port") {
		t.Errorf("skipped %q", res.Skipped)
	}
}

// TestEnvoyBootstrapValidates runs `envoy --mode validate` on the sidecar's
// bootstrap when an Envoy binary is at hand (scripts/deps.sh installs one
// for the demo).
func TestEnvoyBootstrapValidates(t *testing.T) {
	bpftest.SkipShort(t, "Envoy")
	envoy, err := exec.LookPath("envoy")
	if err != nil {
		home, _ := os.UserHomeDir()
		envoy = filepath.Join(home, ".cache", "rootline", "venv", "bin", "envoy")
		if _, err := os.Stat(envoy); err != nil {
			t.Skip("no envoy binary (PATH or ~/.cache/rootline/venv/bin/envoy) to validate the bootstrap with")
		}
	}
	cfg := testConfig().Envoy
	out, err := exec.Command(envoy, "--mode", "validate", "--config-yaml", EnvoyBootstrap(`shop "v2"`, cfg), "--log-level", "error").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate: %v\n%s", err, out)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no image":        func(c *Config) { c.Image = "" },
		"bad mode":        func(c *Config) { c.Mode = "x" },
		"bad server":      func(c *Config) { c.ServerURL = "rl:4318" },
		"envoy no init":   func(c *Config) { c.Envoy.InitImage = "" },
		"envoy root":      func(c *Config) { c.Envoy.UID = 0 },
		"envoy bad port":  func(c *Config) { c.Envoy.InboundPort = 70000 },
		"envoy no zipkin": func(c *Config) { c.Envoy.ZipkinAddr = "rl" },
	} {
		c := testConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
	if err := testConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func review(t *testing.T, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	return b
}

func TestReview(t *testing.T) {
	m := newTestMutator(t, testConfig())
	podJSON, _ := json.Marshal(pod(corev1.Container{Name: "a", Command: []string{"/x"}}))
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

	out, code, err := m.Review(context.Background(), review(t, &admissionv1.AdmissionRequest{UID: "u1", Kind: podKind, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: podJSON}}))
	if err != nil || code != 0 || out.Response.UID != "u1" || !out.Response.Allowed || out.Response.PatchType == nil || len(out.Response.Patch) == 0 {
		t.Fatalf("pod create: %+v %d %v", out, code, err)
	}
	// Anything else passes untouched.
	for _, req := range []*admissionv1.AdmissionRequest{
		{UID: "u2", Kind: podKind, Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: podJSON}},
		{UID: "u3", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte("{}")}},
		{UID: "u4", Kind: podKind, Operation: admissionv1.Create, SubResource: "ephemeralcontainers", Object: runtime.RawExtension{Raw: podJSON}},
	} {
		out, _, err := m.Review(context.Background(), review(t, req))
		if err != nil || !out.Response.Allowed || out.Response.Patch != nil {
			t.Errorf("%s: %+v %v", req.UID, out.Response, err)
		}
	}
	// A pod that does not decode is refused with a reason.
	out, _, _ = m.Review(context.Background(), review(t, &admissionv1.AdmissionRequest{UID: "u5", Kind: podKind, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{"spec":{"containers":"x"}}`)}}))
	if out.Response.Allowed || out.Response.Result == nil || !strings.Contains(out.Response.Result.Message, "cannot be decoded") {
		t.Errorf("bad pod: %+v", out.Response)
	}
	// Malformed reviews are HTTP errors.
	for name, body := range map[string][]byte{
		"not json":     []byte("{"),
		"v1beta1":      []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}`),
		"no request":   []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		"deep nesting": []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`),
	} {
		if _, code, err := m.Review(context.Background(), body); err == nil || code != http.StatusBadRequest {
			t.Errorf("%s: code %d err %v", name, code, err)
		}
	}
}
