package mesh

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plannedMesh is a mesh planned but not started, for config tests.
func plannedMesh(t *testing.T, mode Mode, tracing bool) *Mesh {
	t.Helper()
	m := &Mesh{mode: mode, topo: fanout(), opts: Options{Prefix: "rlx", EnvoyBin: "envoy", Tracing: tracing, OTLPEndpoint: "127.0.0.1:4317"}}
	if mode == ModePod {
		m.gw, m.subnet, m.bridge = "10.77.0.1", "10.77.0", "rlx-br0"
	}
	if err := m.plan(); err != nil {
		t.Fatal(err)
	}
	return m
}

// fanout has replicas and a service called by two others.
func fanout() Topology {
	return Topology{Entry: "a", Services: []Service{
		{Name: "a", Language: LangGo, Calls: []string{"b", "c"}, Replicas: 1},
		{Name: "b", Language: LangJava, Calls: []string{"d"}, Replicas: 2},
		{Name: "c", Language: LangPython, Calls: []string{"d"}, Replicas: 1},
		{Name: "d", Language: LangGo, Replicas: 3},
	}}
}

// TestEnvoyConfigValidates runs every generated config through
// `envoy --mode validate`.
func TestEnvoyConfigValidates(t *testing.T) {
	envoy := requireEnvoy(t)
	for _, tc := range []struct {
		name    string
		mode    Mode
		tracing bool
	}{
		{"pod tracing", ModePod, true},
		{"pod no tracing", ModePod, false},
		{"port tracing", ModePort, true},
		{"port no tracing", ModePort, false},
		{"pod tracing grpc", ModePod, true},
		{"port no tracing grpc", ModePort, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := plannedMesh(t, tc.mode, tc.tracing)
			if strings.HasSuffix(tc.name, "grpc") {
				m.topo.Protocol = ProtocolGRPC
			}
			dir := t.TempDir()
			for si, s := range m.topo.Services {
				for _, r := range m.services[si].Replicas {
					sp, err := m.sidecarSpec(s, r)
					if err != nil {
						t.Fatal(err)
					}
					if tc.tracing != (sp.OTLP != "") {
						t.Errorf("%s: OTLP %q with tracing %v", sp.NodeID, sp.OTLP, tc.tracing)
					}
					cfg, err := writeEnvoyConfig(dir, sp)
					if err != nil {
						t.Fatal(err)
					}
					out, err := exec.Command(envoy, "--mode", "validate", "-c", cfg, "--disable-hot-restart").CombinedOutput()
					if err != nil {
						t.Fatalf("%s does not validate: %v\n%s", cfg, err, out)
					}
				}
			}
		})
	}
}

// TestEnvoyConfigShape checks what the sidecars route where.
func TestEnvoyConfigShape(t *testing.T) {
	pod := plannedMesh(t, ModePod, true)
	sp, err := pod.sidecarSpec(pod.topo.Services[0], pod.services[0].Replicas[0])
	if err != nil {
		t.Fatal(err)
	}
	if sp.OTLP != "10.77.0.1:4317" {
		t.Errorf("pod OTLP = %q, want the gateway", sp.OTLP)
	}
	if sp.App != "127.0.0.1:8080" || sp.Inbound != "0.0.0.0:15006" {
		t.Errorf("pod inbound %s → %s", sp.Inbound, sp.App)
	}
	var d []string
	for _, r := range sp.Outbound[0].Routes {
		if r.Service == "d" {
			d = r.Endpoints
		}
	}
	if strings.Join(d, " ") != "10.77.0.14:8080 10.77.0.15:8080 10.77.0.16:8080" {
		t.Errorf("d's endpoints %v", d)
	}
	b, _ := json.Marshal(sp.bootstrap())
	for _, want := range []string{"envoy.filters.http.fault", "envoy.tracers.opentelemetry", "original_dst", `"admin_layer"`,
		`"tracing.opentelemetry.min_flush_spans":512`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("pod config lacks %s", want)
		}
	}

	port := plannedMesh(t, ModePort, false)
	a := port.services[0].Replicas[0]
	sp, _ = port.sidecarSpec(port.topo.Services[0], a)
	if len(sp.Outbound) != 2 {
		t.Fatalf("port mode a has %d outbound listeners, want one per callee", len(sp.Outbound))
	}
	b, _ = json.Marshal(sp.bootstrap())
	if strings.Contains(string(b), "opentelemetry") {
		t.Error("tracing off but the config has a tracer")
	}
	calls := port.callsEnv(port.topo.Services[0], a)
	if strings.Count(calls, "http://127.0.0.1:") != 2 {
		t.Errorf("port mode CALLS %q", calls)
	}
	if got := pod.callsEnv(pod.topo.Services[0], pod.services[0].Replicas[0]); got != "http://b:8080/,http://c:8080/" {
		t.Errorf("pod mode CALLS %q", got)
	}
}

// TestEnvoyConfigGRPC: with the gRPC protocol every cluster that leads to an
// app (its own, or another sidecar) speaks HTTP/2; with HTTP none does, and
// only the OTLP exporter's cluster is HTTP/2 in both.
func TestEnvoyConfigGRPC(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		want     bool
	}{{ProtocolHTTP, false}, {ProtocolGRPC, true}} {
		for _, mode := range []Mode{ModePod, ModePort} {
			m := plannedMesh(t, mode, true)
			m.topo.Protocol = tc.protocol
			sp, err := m.sidecarSpec(m.topo.Services[0], m.services[0].Replicas[0])
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(sp.bootstrap())
			var cfg struct {
				StaticResources struct {
					Clusters []map[string]any `json:"clusters"`
				} `json:"static_resources"`
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range cfg.StaticResources.Clusters {
				name := c["name"].(string)
				_, h2 := c["typed_extension_protocol_options"]
				switch {
				case name == "rootline_otlp":
					if !h2 {
						t.Errorf("%s %s: the OTLP/gRPC cluster is not HTTP/2", tc.protocol, mode)
					}
				case name == "local_app" || strings.HasPrefix(name, "svc_"):
					n++
					if h2 != tc.want {
						t.Errorf("%s %s: cluster %s HTTP/2 %v, want %v", tc.protocol, mode, name, h2, tc.want)
					}
				}
			}
			if n < 3 {
				t.Errorf("%s %s: %d app clusters, want local_app and the callees'", tc.protocol, mode, n)
			}
		}
	}
}

func TestInterceptRules(t *testing.T) {
	m := plannedMesh(t, ModePod, false)
	rules := m.interceptRules()
	for _, want := range []string{
		"-A RL_INBOUND -p tcp --dport 15000 -j RETURN",
		"-A RL_INBOUND -p tcp --dport 9090 -j RETURN",
		"-A RL_INBOUND -p tcp -j REDIRECT --to-ports 15006",
		"-A RL_OUTBOUND -m owner --gid-owner 1337 -j RETURN",
		"-A RL_OUTBOUND -d 10.77.0.1/32 -j RETURN",
		"-A RL_OUTBOUND -d 10.77.0.0/24 -p tcp -j REDIRECT --to-ports 15001",
	} {
		if !strings.Contains(rules, want+"\n") {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	hosts := m.hostsFile()
	if !strings.Contains(hosts, "10.77.0.10\ta a-0\n") || !strings.Contains(hosts, "10.77.0.16\td-2\n") {
		t.Errorf("hosts:\n%s", hosts)
	}
}

func TestRealEnvoy(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "venv", "bin", "envoy")
	bin := filepath.Join(dir, "venv", "lib", "python3.11", "site-packages", "envoy", "_bin", "envoy")
	for _, p := range []string{script, bin} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(script, []byte("#!/usr/bin/python3\n"), 0o755)
	os.WriteFile(bin, []byte("\x7fELF"), 0o755)
	if got := realEnvoy(script); got != bin {
		t.Errorf("realEnvoy(script) = %s, want %s", got, bin)
	}
	if got := realEnvoy(bin); got != bin {
		t.Errorf("realEnvoy(bin) = %s", got)
	}
}
