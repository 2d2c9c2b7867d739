package agent

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/store/storetest"
	"github.com/rootline/rootline/internal/tlsconf"
	"github.com/rootline/rootline/internal/tlsconf/tlsconftest"
)

// tlsServer runs the real capture server (capture.Manager) over TLS with
// the given certificate; agentTLS configures its dump requests.
func tlsServer(t *testing.T, cert, key string, agentTLS tlsconf.Client) (*capture.Manager, *storetest.MemArtifacts, string) {
	t.Helper()
	cfg := capture.DefaultConfig()
	cfg.Pre, cfg.Post, cfg.Settle = 0, 0, 10*time.Millisecond
	cfg.Heartbeat = time.Second
	cfg.AuthToken = "tok"
	cfg.AgentTLS = agentTLS
	arts := &storetest.MemArtifacts{}
	m, err := capture.New(cfg, arts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(m.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	hs.StartTLS()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; hs.Close() })
	return m, arts, hs.URL
}

// TestTLS: the agent serves its API over TLS (the dump URL it registers is
// https), reaches an https server trusting a CA bundle, and the server's
// dump requests reach it over TLS with its CA bundle: a capture completes.
// A server that does not trust the agent's certificate gets a failed
// capture that says why, and plaintext HTTP to the agent's TLS port gets no
// API.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := tlsconftest.WriteCert(t, dir, "server")
	agCert, agKey := tlsconftest.WriteCert(t, dir, "agent")
	proc := child(t)

	for _, tc := range []struct {
		name     string
		agentTLS tlsconf.Client
		state    string
		msg      string
	}{
		{"trusted", tlsconf.Client{CAFile: agCert}, capture.StateComplete, ""},
		{"untrusted", tlsconf.Client{CAFile: srvCert}, capture.StateFailed, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, arts, url := tlsServer(t, srvCert, srvKey, tc.agentTLS)
			if !strings.HasPrefix(url, "https://") {
				t.Fatalf("server URL %s", url)
			}
			cfg := testConfig(url)
			cfg.AuthToken = "tok"
			cfg.ServerTLS = tlsconf.Client{CAFile: srvCert}
			cfg.TLS = tlsconf.Server{CertFile: agCert, KeyFile: agKey}
			cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-tls"}}
			a := startAgent(t, cfg, &fakeProfiler{name: "cpu"})
			if !strings.HasPrefix(a.DumpURL(), "https://127.0.0.1:") {
				t.Fatalf("dump URL %q is not https", a.DumpURL())
			}
			waitUntil(t, "registration over TLS", func() bool { ag := m.Agents(); return len(ag) == 1 && len(ag[0].Processes) == 1 })
			(&server{m: m}).anomaly("svc-tls", 1)
			var c capture.Capture
			waitUntil(t, "capture", func() bool {
				cs := m.Captures(0)
				if len(cs) == 1 {
					c = cs[0]
				}
				return len(cs) == 1 && c.State != capture.StatePending && c.State != capture.StateRequested
			})
			if c.State != tc.state || !strings.Contains(c.Error, tc.msg) {
				t.Fatalf("capture = %s %q, want %s with %q", c.State, c.Error, tc.state, tc.msg)
			}
			if tc.state == capture.StateComplete && len(arts.All()) != 1 {
				t.Fatalf("artifacts uploaded over TLS = %d, want 1", len(arts.All()))
			}
			resp, err := http.Get("http://" + a.Addr().String() + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Error("the TLS listener answered plaintext HTTP")
				}
			}
		})
	}
}
