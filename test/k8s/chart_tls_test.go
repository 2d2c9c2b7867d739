package k8s

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// serverTLSWant is what a chart case's server TLS wiring must render.
type serverTLSWant struct {
	secret    string // server.tls.existingSecret; "": no TLS anywhere
	caKey     string // the Secret key the agents mount as the server's CA
	receivers bool   // the receivers serve TLS too
}

const (
	serverHost  = "rl-rootline-server.rootline.svc"
	tlsCertPath = "/etc/rootline/tls/tls.crt"
	tlsKeyPath  = "/etc/rootline/tls/tls.key"
	agentCAFile = "/etc/rootline/server-ca/ca.crt"
)

// checkServerTLS asserts the server's and the agents' TLS fields of the
// rendered objects present in objs: the server's configuration (query_tls,
// receiver.tls), its Secret volume and mount, its probes' scheme; the agents'
// server URL, CA file, CA volume and kernel-metrics URL; the webhook's
// receiver URL for the sidecars.
func checkServerTLS(t *testing.T, objs []*unstructured.Unstructured, want serverTLSWant) {
	t.Helper()
	on := want.secret != ""
	query, recv := "http", "http"
	if on {
		query = "https"
	}
	if on && want.receivers {
		recv = "https"
	}

	if cm := find(objs, "ConfigMap", "rl-rootline-server"); cm != nil {
		raw, _, _ := unstructured.NestedString(cm.Object, "data", "server.yaml")
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
			t.Fatalf("server.yaml: %v\n%s", err, raw)
		}
		checkTLSFiles(t, "query_tls", cfg["query_tls"], on)
		receiver, _ := cfg["receiver"].(map[string]any)
		checkTLSFiles(t, "receiver.tls", receiver["tls"], on && want.receivers)
	}

	if srv := serverWorkload(objs); srv != nil {
		spec, _, _ := unstructured.NestedMap(srv.Object, "spec", "template", "spec")
		c := container(t, spec, "server")
		vol := volume(spec, "tls")
		mount := volumeMount(c, "tls")
		if !on {
			if vol != nil || mount != nil {
				t.Errorf("server: TLS volume %v / mount %v without server.tls.existingSecret", vol, mount)
			}
		} else {
			if name, _, _ := unstructured.NestedString(vol, "secret", "secretName"); name != want.secret {
				t.Errorf("server: tls volume's secret %q, want %q (volume %v)", name, want.secret, vol)
			}
			if mount["mountPath"] != "/etc/rootline/tls" || mount["readOnly"] != true {
				t.Errorf("server: tls mount %v, want /etc/rootline/tls read-only", mount)
			}
		}
		for _, probe := range []string{"readinessProbe", "livenessProbe"} {
			scheme, _, _ := unstructured.NestedString(c, probe, "httpGet", "scheme")
			if scheme == "" {
				scheme = "HTTP"
			}
			if scheme != strings.ToUpper(query) {
				t.Errorf("server: %s scheme %q, want %q", probe, scheme, strings.ToUpper(query))
			}
		}
	}

	if ds := find(objs, "DaemonSet", "rl-rootline-agent"); ds != nil {
		spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
		c := container(t, spec, "agent")
		args := stringArgs(c)
		if a := "--server=" + query + "://" + serverHost + ":16686"; !slices.Contains(args, a) {
			t.Errorf("agent: no %s in %q", a, args)
		}
		hasCA := slices.Contains(args, "--server.tls.ca-file="+agentCAFile)
		if hasCA != on {
			t.Errorf("agent: --server.tls.ca-file=%s present %v, want %v: %q", agentCAFile, hasCA, on, args)
		}
		for _, a := range args {
			if u, ok := strings.CutPrefix(a, "--kmetrics.otlp-url="); ok && u != recv+"://"+serverHost+":4318/v1/metrics" {
				t.Errorf("agent: --kmetrics.otlp-url=%s, want the %s receiver", u, recv)
			}
		}
		vol := volume(spec, "server-ca")
		mount := volumeMount(c, "server-ca")
		if !on {
			if vol != nil || mount != nil {
				t.Errorf("agent: CA volume %v / mount %v without server.tls.existingSecret", vol, mount)
			}
		} else {
			if name, _, _ := unstructured.NestedString(vol, "secret", "secretName"); name != want.secret {
				t.Errorf("agent: server-ca volume's secret %q, want %q", name, want.secret)
			}
			// Only the CA is projected: the agents never see the server's key.
			items, _, _ := unstructured.NestedSlice(vol, "secret", "items")
			if len(items) != 1 || items[0].(map[string]any)["key"] != want.caKey || items[0].(map[string]any)["path"] != "ca.crt" {
				t.Errorf("agent: server-ca items %v, want only %s as ca.crt", items, want.caKey)
			}
			if mount["mountPath"] != "/etc/rootline/server-ca" || mount["readOnly"] != true {
				t.Errorf("agent: server-ca mount %v, want /etc/rootline/server-ca read-only", mount)
			}
		}
	}

	if d := find(objs, "Deployment", "rl-rootline-webhook"); d != nil && find(objs, "ConfigMap", "rl-rootline-server") != nil {
		spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
		args := stringArgs(container(t, spec, "webhook"))
		if a := "--server=" + recv + "://" + serverHost + ":4318"; !slices.Contains(args, a) {
			t.Errorf("webhook: no %s in %q", a, args)
		}
	}
}

// checkTLSFiles asserts a tlsconf.Server block of the server's configuration.
func checkTLSFiles(t *testing.T, key string, v any, want bool) {
	t.Helper()
	m, _ := v.(map[string]any)
	if !want {
		if v != nil {
			t.Errorf("server.yaml: %s %v, want none", key, v)
		}
		return
	}
	if m["cert_file"] != tlsCertPath || m["key_file"] != tlsKeyPath {
		t.Errorf("server.yaml: %s %v, want cert_file %s and key_file %s", key, v, tlsCertPath, tlsKeyPath)
	}
	if _, ok := m["client_ca_file"]; ok {
		// The kubelet's probes present no client certificate.
		t.Errorf("server.yaml: %s asks for client certificates: %v", key, v)
	}
}

func serverWorkload(objs []*unstructured.Unstructured) *unstructured.Unstructured {
	if o := find(objs, "StatefulSet", "rl-rootline-server"); o != nil {
		return o
	}
	return find(objs, "Deployment", "rl-rootline-server")
}

func container(t *testing.T, podSpec map[string]any, name string) map[string]any {
	t.Helper()
	c := named(podSpec, "containers", name)
	if c == nil {
		t.Fatalf("no container %q", name)
	}
	return c
}

func volume(podSpec map[string]any, name string) map[string]any {
	return named(podSpec, "volumes", name)
}

func volumeMount(c map[string]any, name string) map[string]any {
	return named(c, "volumeMounts", name)
}

// named returns the element of obj's list field whose name is name, or nil.
func named(obj map[string]any, field, name string) map[string]any {
	list, _, _ := unstructured.NestedSlice(obj, field)
	for _, e := range list {
		if e := e.(map[string]any); e["name"] == name {
			return e
		}
	}
	return nil
}

func stringArgs(c map[string]any) []string {
	raw, _ := c["args"].([]any)
	out := make([]string, 0, len(raw))
	for _, a := range raw {
		out = append(out, a.(string))
	}
	return out
}

// TestChartServerCAKey renders the chart as `helm install` does (its lookup
// reads the API server) with server.tls.existingSecret naming Secrets stored
// there: the agents trust ca.crt when the Secret has one, tls.crt when it has
// not, and server.tls.caKey overrides both.
func TestChartServerCAKey(t *testing.T) {
	ctx := needCluster(t)
	createNamespace(ctx, t, releaseNS, nil)
	pem := []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
	for name, data := range map[string]map[string][]byte{
		"rl-tls-with-ca":     {"tls.crt": pem, "tls.key": pem, "ca.crt": pem},
		"rl-tls-self-signed": {"tls.crt": pem, "tls.key": pem},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: releaseNS}, Type: corev1.SecretTypeTLS, Data: data}
		if _, err := cluster.client.CoreV1().Secrets(releaseNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.client.CoreV1().Secrets(releaseNS).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	for _, tc := range []struct{ secret, caKey, want string }{
		{"rl-tls-with-ca", "", "ca.crt"},
		{"rl-tls-self-signed", "", "tls.crt"},
		{"rl-tls-not-there-yet", "", "ca.crt"},
		{"rl-tls-with-ca", "tls.crt", "tls.crt"},
	} {
		objs, err := renderWith(t, map[string]any{"server": map[string]any{"tls": map[string]any{"existingSecret": tc.secret, "caKey": tc.caKey}}}, cluster.cfg)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		checkServerTLS(t, objs, serverTLSWant{secret: tc.secret, caKey: tc.want})
	}
}

// TestChartServerTLSRuns runs what the chart renders with server TLS on the
// query port and the receivers: the server with the rendered server.yaml (the
// Secret's mount, the token, the data directory and the listen addresses
// moved to this machine), and the agent with the DaemonSet's arguments. The
// server must serve both ports over TLS only, and the agent must register
// with it over https, trusting the CA the chart mounts.
func TestChartServerTLSRuns(t *testing.T) {
	needCluster(t)
	dir := t.TempDir()
	pki := newPKI(t, dir)
	caFile := filepath.Join(dir, "ca.crt")
	tokenFile := filepath.Join(dir, "token")
	for f, b := range map[string][]byte{caFile: pki.caPEM, tokenFile: []byte("chart-tls-token")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	objs := mustRender(t, map[string]any{"server": map[string]any{"tls": map[string]any{"existingSecret": "rl-server-tls", "receivers": true}}})
	checkServerTLS(t, objs, serverTLSWant{secret: "rl-server-tls", caKey: "ca.crt", receivers: true})

	// The server, as its Pod runs it but on this machine.
	raw, _, _ := unstructured.NestedString(find(objs, "ConfigMap", "rl-rootline-server").Object, "data", "server.yaml")
	raw = strings.NewReplacer("/etc/rootline/tls/", dir+"/", "/etc/rootline/token/token", tokenFile,
		"/var/lib/rootline/data", filepath.Join(dir, "data")).Replace(raw)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"query_addr", "otlp_grpc_addr", "otlp_http_addr", "zipkin_addr"} {
		cfg[k] = "127.0.0.1:0"
	}
	cfg["log_format"] = "json"
	b, _ := yaml.Marshal(cfg)
	cfgFile := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(os.Getenv("ROOTLINE_BIN"), "server", "--config="+cfgFile)
	logs := &syncBuffer{}
	srv.Stderr, srv.Stdout = logs, logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	var ready map[string]any
	waitFor(t, 30*time.Second, "the server's ready line", logs, func() bool {
		ready = logLine(logs.String(), "rootline server ready")
		return ready != nil
	})
	query, _ := ready["query"].(string)
	otlpHTTP, _ := ready["otlp_http"].(string)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.caPEM)
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsClientConfig(pool)}}
	plain := &http.Client{Timeout: 5 * time.Second}
	for _, u := range []string{"https://" + query + "/healthz", "https://" + otlpHTTP + "/v1/traces"} {
		resp, err := tlsClient.Get(u)
		if err != nil {
			t.Fatalf("GET %s with the Secret's CA: %v\n%s", u, err, logs)
		}
		resp.Body.Close()
		if strings.HasSuffix(u, "/healthz") && resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", u, resp.Status)
		}
		// A plain-HTTP client gets the TLS listener's 400 answer, never the API.
		if resp, err := plain.Get(strings.Replace(u, "https://", "http://", 1)); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain GET %s: %s, want 400 (the port serves TLS only)", u, resp.Status)
			}
		}
	}

	// The agent, with the DaemonSet's arguments: the rendered https URL to
	// this server, the mounted CA file and token moved to this machine.
	spec, _, _ := unstructured.NestedMap(find(objs, "DaemonSet", "rl-rootline-agent").Object, "spec", "template", "spec")
	var args []string
	for _, a := range stringArgs(container(t, spec, "agent")) {
		switch {
		case strings.HasPrefix(a, "--server="):
			a = strings.Replace(a, serverHost+":16686", query, 1)
		case a == "--server.tls.ca-file="+agentCAFile:
			a = "--server.tls.ca-file=" + caFile
		case strings.HasPrefix(a, "--auth.token-file="):
			a = "--auth.token-file=" + tokenFile
		case strings.HasPrefix(a, "--listen="), strings.HasPrefix(a, "--advertise-url="):
			continue
		case strings.HasPrefix(a, "--host="):
			a = "--host=chart-tls-node"
		case strings.HasPrefix(a, "--profilers="):
			// JFR alone needs no BPF: what is tested here is the server link.
			a = "--profilers=jfr"
		}
		args = append(args, a)
	}
	if !slices.Contains(args, "--server=https://"+query) {
		t.Fatalf("agent args %q do not call https://%s", args, query)
	}
	// No discovery: the agent must not attach to this machine's other JVMs.
	args = append(args, "--listen=127.0.0.1:0", "--discover=false")
	agent := exec.Command(os.Getenv("ROOTLINE_BIN"), args...)
	agentLogs := &syncBuffer{}
	agent.Stderr, agent.Stdout = agentLogs, agentLogs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	waitFor(t, 60*time.Second, "the agent's registration over https", agentLogs, func() bool {
		l := logLine(logs.String(), "agent registered")
		return l != nil && l["host"] == "chart-tls-node"
	})
}

// syncBuffer is a bytes.Buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLine returns the last JSON log line of logs whose msg is msg.
func logLine(logs, msg string) map[string]any {
	var found map[string]any
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			found = m
		}
	}
	return found
}

func waitFor(t *testing.T, d time.Duration, what string, logs fmt.Stringer, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s\n%s", d, what, lastLines(logs.String(), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
