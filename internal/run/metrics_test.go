package run

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/tlsconf"
	"github.com/rootline/rootline/internal/tlsconf/tlsconftest"
)

// The metrics listener serves the decision of the spans it is fed, over TLS
// when asked, and only with the token when one is configured.
func TestMetricsListener(t *testing.T) {
	cert, key := tlsconftest.WriteCert(t, t.TempDir(), "metrics")
	for _, tc := range []struct {
		name  string
		tls   bool
		token string
	}{
		{"plaintext", false, ""},
		{"tls and token", true, "s3cret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := MetricsOptions{Listen: "127.0.0.1:0"}
			st := new(Stats)
			st.Opaque.Add(3)
			st.H2Untraced.Add(2)
			client := http.DefaultClient
			if tc.tls {
				o.TLS = tlsconf.Server{CertFile: cert, KeyFile: key}
				pem, err := os.ReadFile(cert)
				if err != nil {
					t.Fatal(err)
				}
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			}
			sink, url, stop, err := startMetrics(o, tc.token, st, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if tc.tls != strings.HasPrefix(url, "https://") {
				t.Fatalf("url %s", url)
			}
			srv := &model.Span{Kind: model.KindServer, Service: "leaf", Duration: 30e6, Attributes: []model.KeyValue{
				model.Float(model.AttrWaitLocalMs, 12), model.Float(model.AttrWaitNetMs, 0), model.Float(model.AttrWaitRemoteMs, 0)}}
			srv.TraceID[0], srv.SpanID[0] = 1, 1
			sink.Emit(srv)

			get := func(auth string) (int, string) {
				req, _ := http.NewRequest("GET", url, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if tc.token != "" {
				if code, _ := get(""); code != http.StatusUnauthorized {
					t.Fatalf("no token: status %d, want 401", code)
				}
				if code, _ := get("Bearer wrong"); code != http.StatusUnauthorized {
					t.Fatalf("wrong token: status %d, want 401", code)
				}
			}
			code, body := get("Bearer " + tc.token)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			for _, want := range []string{
				`rootline_bottleneck{cause="local",peer="",service="leaf"} 1`,
				`rootline_local_wait_seconds_sum{service="leaf"} 0.012`,
				`rootline_bottleneck_window_requests{service="leaf"} 1`,
				"rootline_run_opaque_connections_total 3",
				"rootline_run_http2_untraced_connections_total 2",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("metrics lack %s:\n%s", want, body)
				}
			}
		})
	}
}
