package k8s

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartCases are the values combinations the chart is rendered with.
var chartCases = []struct {
	name   string
	values map[string]any
	// kinds that must be rendered, by kind/name
	want []string
	// kinds that must not be
	absent []string
	// why the rendered server.yaml is not read by the binary ("" : it is)
	configUnchecked string
	// the server's and agents' TLS wiring (zero: none)
	tls serverTLSWant
}{
	{
		name:   "defaults: embedded store, agent, webhook with a generated certificate",
		values: map[string]any{},
		want: []string{"StatefulSet/rl-rootline-server", "Service/rl-rootline-server-headless", "DaemonSet/rl-rootline-agent",
			"Deployment/rl-rootline-webhook", "Secret/rl-rootline-webhook-tls", "MutatingWebhookConfiguration/rl-rootline-webhook",
			"Secret/rl-rootline-token", "ServiceAccount/rl-rootline-agent", "PodDisruptionBudget/rl-rootline-webhook"},
		absent: []string{"Deployment/rl-rootline-server"},
	},
	{
		name: "scale-out server, kernel metrics, existing token and TLS secrets, envoy, strict, private registry",
		values: map[string]any{
			"auth": map[string]any{"existingSecret": "my-token"},
			"server": map[string]any{"mode": "scaleout", "replicas": 3,
				"config": map[string]any{"storage": map[string]any{"spans": map[string]any{"type": "shared-example"}}, "detector": map[string]any{"window": 1000}}},
			"agent": map[string]any{"kmetrics": true, "profilers": "cpu,kernel"},
			"webhook": map[string]any{"strict": true, "failurePolicy": "Fail", "replicas": 1, "dockerConfigSecret": "regcred",
				"tls":   map[string]any{"existingSecret": "my-webhook-tls", "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
				"envoy": map[string]any{"image": "envoyproxy/envoy:v1.32-latest", "initImage": "example.com/iptables:1"}},
		},
		want:            []string{"Deployment/rl-rootline-server", "ConfigMap/rl-rootline-server", "DaemonSet/rl-rootline-agent", "Deployment/rl-rootline-webhook"},
		absent:          []string{"StatefulSet/rl-rootline-server", "Secret/rl-rootline-token", "Secret/rl-rootline-webhook-tls", "PodDisruptionBudget/rl-rootline-webhook"},
		configUnchecked: "the binary has no span store that replicas share yet (storage.spans.type is sqlite only), so the scale-out case names a placeholder",
	},
	{
		name:   "server only",
		values: map[string]any{"agent": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": false}, "auth": map[string]any{"token": "t0ken"}},
		want:   []string{"StatefulSet/rl-rootline-server", "Secret/rl-rootline-token"},
		absent: []string{"DaemonSet/rl-rootline-agent", "Deployment/rl-rootline-webhook", "MutatingWebhookConfiguration/rl-rootline-webhook"},
	},
	{
		name:   "agent and webhook only, server elsewhere",
		values: map[string]any{"server": map[string]any{"enabled": false}, "webhook": map[string]any{"mode": "auto", "registryLookup": false}},
		want:   []string{"DaemonSet/rl-rootline-agent", "Deployment/rl-rootline-webhook"},
		absent: []string{"StatefulSet/rl-rootline-server", "ConfigMap/rl-rootline-server"},
	},
	{
		name: "server TLS on the query port from a Secret without ca.crt, kernel metrics",
		values: map[string]any{
			"server": map[string]any{"tls": map[string]any{"existingSecret": "rl-server-tls", "caKey": "tls.crt"}},
			"agent":  map[string]any{"kmetrics": true},
		},
		want: []string{"StatefulSet/rl-rootline-server", "DaemonSet/rl-rootline-agent", "Deployment/rl-rootline-webhook"},
		tls:  serverTLSWant{secret: "rl-server-tls", caKey: "tls.crt"},
	},
	{
		name: "server TLS on the query port and the receivers, CA from ca.crt, kernel metrics",
		values: map[string]any{
			"server": map[string]any{"tls": map[string]any{"existingSecret": "rl-server-tls", "receivers": true}},
			"agent":  map[string]any{"kmetrics": true},
		},
		want: []string{"StatefulSet/rl-rootline-server", "DaemonSet/rl-rootline-agent", "Deployment/rl-rootline-webhook"},
		tls:  serverTLSWant{secret: "rl-server-tls", caKey: "ca.crt", receivers: true},
	},
}

// TestChart renders the chart with each values combination, checks which
// objects come out, validates every object against the API server
// (server-side apply, dry run: schema, defaults and admission), and parses
// every Rootline container's arguments — and the server's configuration
// file — with the real binary, so that the chart cannot name a flag or a
// key the binary does not have.
func TestChart(t *testing.T) {
	ctx := needCluster(t)
	createNamespace(ctx, t, releaseNS, nil)
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, tc.values)
			for _, w := range tc.want {
				kind, name, _ := strings.Cut(w, "/")
				if find(objs, kind, name) == nil {
					t.Errorf("%s not rendered", w)
				}
			}
			for _, w := range tc.absent {
				kind, name, _ := strings.Cut(w, "/")
				if find(objs, kind, name) != nil {
					t.Errorf("%s rendered", w)
				}
			}
			if err := apply(ctx, t, objs, true); err != nil {
				t.Fatalf("server-side dry run: %v", err)
			}
			if tc.configUnchecked != "" {
				t.Logf("the server's configuration file is not checked with the binary: %s", tc.configUnchecked)
			}
			checkArgs(t, objs, tc.configUnchecked == "")
			checkServerTLS(t, objs, tc.tls)
			t.Logf("%d objects valid", len(objs))
		})
	}

	for _, bad := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"server": map[string]any{"mode": "sharded"}}, "server.mode must be embedded or scaleout"},
		{map[string]any{"server": map[string]any{"mode": "scaleout"}}, "needs a span store the replicas share"},
		{map[string]any{"server": map[string]any{"mode": "scaleout", "config": map[string]any{"storage": map[string]any{"spans": map[string]any{"type": "sqlite"}}}}}, "use server.mode=embedded"},
		{map[string]any{"webhook": map[string]any{"failurePolicy": "Retry"}}, "webhook.failurePolicy must be Ignore or Fail"},
		{map[string]any{"webhook": map[string]any{"tls": map[string]any{"existingSecret": "x"}}}, "give caBundle"},
		{map[string]any{"webhook": map[string]any{"envoy": map[string]any{"image": "envoy"}}}, "webhook.envoy.initImage is required"},
		{map[string]any{"server": map[string]any{"tls": map[string]any{"receivers": true}}}, "server.tls.receivers needs server.tls.existingSecret"},
		{map[string]any{"server": map[string]any{"tls": map[string]any{"existingSecret": "s", "receivers": true}},
			"webhook": map[string]any{"envoy": map[string]any{"image": "envoy", "initImage": "init"}}}, "sends its spans to the Zipkin receiver in plain text"},
	} {
		if _, err := render(t, bad.values); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %v: error %v, want %q", bad.values, err, bad.want)
		}
	}
}

// checkArgs runs `rootline <args> --help` for every container of objs that
// runs the Rootline image: the flags are parsed (an unknown one exits 2),
// and the server's --config file is read with the ConfigMap's content
// (unknown keys are refused).
func checkArgs(t *testing.T, objs []*unstructured.Unstructured, withConfig bool) {
	t.Helper()
	var serverConfig string
	if cm := find(objs, "ConfigMap", "rl-rootline-server"); cm != nil && withConfig {
		serverConfig, _, _ = unstructured.NestedString(cm.Object, "data", "server.yaml")
	}
	for _, o := range objs {
		cs, found, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if !found {
			continue
		}
		for _, c := range cs {
			c := c.(map[string]any)
			raw, _ := c["args"].([]any)
			if len(raw) == 0 {
				continue
			}
			args := make([]string, 0, len(raw)+1)
			for _, a := range raw {
				s := a.(string)
				if strings.HasPrefix(s, "--config=") {
					if !withConfig {
						continue
					}
					f := filepath.Join(t.TempDir(), "server.yaml")
					if err := os.WriteFile(f, []byte(serverConfig), 0o600); err != nil {
						t.Fatal(err)
					}
					s = "--config=" + f
				}
				args = append(args, s)
			}
			out, err := exec.Command(os.Getenv("ROOTLINE_BIN"), append(args, "--help")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s %s: rootline %q: %v\n%s", o.GetKind(), o.GetName(), args, err, lastLines(string(out), 5))
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
