package server

import (
	"net"
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
