package server

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// TestAdvertiseURL: a detector tells agents where to upload its captures'
// evidence: the configured URL, else its query address, https when that
// port has TLS, with the host name for an unspecified address.
func TestAdvertiseURL(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	for _, tc := range []struct {
		name       string
		configured string
		addr       string
		tls        bool
		want       string
		wantErr    bool
	}{
		{name: "configured", configured: "https://det-1.example:8443/", addr: "127.0.0.1:16687", want: "https://det-1.example:8443"},
		{name: "configured not absolute", configured: "det-1:16687", addr: "127.0.0.1:16687", wantErr: true},
		{name: "loopback", addr: "127.0.0.1:16687", want: "http://127.0.0.1:16687"},
		{name: "loopback with TLS", addr: "127.0.0.1:16687", tls: true, want: "https://127.0.0.1:16687"},
		{name: "unspecified", addr: "0.0.0.0:16687", tls: true, want: "https://" + net.JoinHostPort(host, "16687")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, err := net.ResolveTCPAddr("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := advertiseURL(tc.configured, addr, tc.tls)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("advertiseURL = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestDebugEndpointsNeedTheToken: /metrics and Go's profiles of the server
// are read endpoints: with a token configured, refused without it.
func TestDebugEndpointsNeedTheToken(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.AuthToken = "s3cret"
	cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr, cfg.ZipkinAddr = "", "127.0.0.1:0", ""
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.store.Close()
	h := srv.handler()
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1"} {
		for _, tok := range []string{"", "wrong", "s3cret"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			want := http.StatusUnauthorized
			if tok == "s3cret" {
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Errorf("GET %s with token %q: %d, want %d", path, tok, rec.Code, want)
			}
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /healthz without a token: %d, want 200", rec.Code)
	}
}
