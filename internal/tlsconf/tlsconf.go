// Package tlsconf turns the TLS settings every Rootline listener and client
// shares (certificate and key files, an optional client CA for mutual TLS,
// a CA bundle to trust) into crypto/tls configurations.
//
// Certificates are read again when their files change (checked at most once
// a second, on a handshake), so a rotated certificate — a Kubernetes Secret
// update, cert-manager's renewal — is served without a restart.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server is the TLS configuration of one listener. The zero value is
// "plaintext".
type Server struct {
	// CertFile and KeyFile hold the PEM certificate chain and private key.
	// Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, makes the listener require client certificates
	// signed by one of its CAs (mutual TLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether TLS is configured.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// Validate checks that the settings are complete (it does not read files).
func (s Server) Validate() error {
	if (s.CertFile == "") != (s.KeyFile == "") {
		return errors.New("tls: cert_file and key_file go together")
	}
	if s.ClientCAFile != "" && !s.Enabled() {
		return errors.New("tls: client_ca_file needs cert_file and key_file")
	}
	return nil
}

// Config returns the listener's tls.Config, or nil when TLS is not enabled.
// The certificate is loaded now (an error names the bad file) and reloaded
// when its files change.
func (s Server) Config() (*tls.Config, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.Enabled() {
		return nil, nil
	}
	kp := &keyPair{cert: s.CertFile, key: s.KeyFile}
	if err := kp.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client is the TLS configuration of an outbound connection.
type Client struct {
	// Enabled turns TLS on (implied by any other field being set).
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs to trust instead of the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate for mutual TLS.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name verified in the server's certificate.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify disables verification (tests only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// On reports whether TLS is to be used.
func (c Client) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Config returns the client's tls.Config, or nil when TLS is off.
func (c Client) Config() (*tls.Config, error) {
	if !c.On() {
		return nil, nil
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		kp := &keyPair{cert: c.CertFile, key: c.KeyFile}
		if err := kp.load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// keyPair is a certificate and key read from files, reloaded when either
// file's modification time or size changes.
type keyPair struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(name string) (fileStamp, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

func (k *keyPair) load() error {
	cs, err := stampOf(k.cert)
	if err != nil {
		return fmt.Errorf("tls: certificate: %w", err)
	}
	ks, err := stampOf(k.key)
	if err != nil {
		return fmt.Errorf("tls: key: %w", err)
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return fmt.Errorf("tls: %s / %s: %w", k.cert, k.key, err)
	}
	k.current, k.stamp = &c, [2]fileStamp{cs, ks}
	return nil
}

// get returns the current certificate, reloading it when its files changed.
// A failed reload (a half-written file) keeps serving the previous one.
func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := time.Now(); now.Sub(k.checked) >= time.Second {
		k.checked = now
		cs, err1 := stampOf(k.cert)
		ks, err2 := stampOf(k.key)
		if err1 == nil && err2 == nil && [2]fileStamp{cs, ks} != k.stamp {
			prev, prevStamp := k.current, k.stamp
			if err := k.load(); err != nil {
				k.current, k.stamp = prev, prevStamp
			}
		}
	}
	return k.current, nil
}
