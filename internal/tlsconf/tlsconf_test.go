package tlsconf

import (
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/tlsconf/tlsconftest"
)

// writeCert writes a self-signed certificate for 127.0.0.1 named cn.
func writeCert(t *testing.T, dir, cn string) (certFile, keyFile string) {
	return tlsconftest.WriteCert(t, dir, cn)
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Server
		ok   bool
	}{
		{"plaintext", Server{}, true},
		{"cert and key", Server{CertFile: "c", KeyFile: "k"}, true},
		{"cert only", Server{CertFile: "c"}, false},
		{"client CA without cert", Server{ClientCAFile: "ca"}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
	if _, err := (Server{CertFile: "/nonexistent.crt", KeyFile: "/nonexistent.key"}).Config(); err == nil {
		t.Error("missing files must fail")
	}
}

// TestMutualTLS: a listener with a client CA accepts a client with a
// certificate from it and refuses one without.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	sc, sk := tlsconftest.WriteCert(t, dir, "server")
	cc, ck := tlsconftest.WriteCert(t, dir, "client")
	scfg, err := Server{CertFile: sc, KeyFile: sk, ClientCAFile: cc}.Config()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	}()
	dial := func(c Client) error {
		cfg, err := c.Config()
		if err != nil {
			return err
		}
		conn, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := dial(Client{CAFile: sc, CertFile: cc, KeyFile: ck}); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	if err := dial(Client{CAFile: sc}); err == nil {
		t.Fatal("client without a certificate was accepted")
	}
	if err := dial(Client{CAFile: cc, CertFile: cc, KeyFile: ck}); err == nil {
		t.Fatal("a server certificate from an untrusted CA was accepted")
	}
}

// TestReload: a replaced certificate is served after its files change.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	c1, k1 := tlsconftest.WriteCert(t, dir, "one")
	kp := &keyPair{cert: c1, key: k1}
	if err := kp.load(); err != nil {
		t.Fatal(err)
	}
	first, _ := kp.get()
	c2, k2 := tlsconftest.WriteCert(t, dir, "two")
	for _, p := range [][2]string{{c2, c1}, {k2, k1}} {
		b, _ := os.ReadFile(p[0])
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	future := time.Now().Add(time.Minute)
	_ = os.Chtimes(c1, future, future)
	kp.checked = time.Time{}
	second, _ := kp.get()
	if string(first.Certificate[0]) == string(second.Certificate[0]) {
		t.Fatal("the certificate was not reloaded")
	}
}
