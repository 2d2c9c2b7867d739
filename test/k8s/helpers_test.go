package k8s

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../../deploy/helm/rootline"
	releaseNS = "rootline"
)

// render renders the chart as `helm template --namespace rootline rl` would,
// with Helm's own engine, and returns its objects sorted by kind and name.
func render(t *testing.T, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	return renderWith(t, values, nil)
}

// renderWith renders as render does; with cfg, the templates' lookup calls
// read that cluster, as `helm install` does.
func renderWith(t *testing.T, values map[string]any, cfg *rest.Config) ([]*unstructured.Unstructured, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: "rl", Namespace: releaseNS, IsInstall: true, Revision: 1,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	var files map[string]string
	if cfg != nil {
		files, err = engine.RenderWithClient(ch, vals, cfg)
	} else {
		files, err = engine.Render(ch, vals)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[n], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			js, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %v\n%s", n, err, doc)
			}
			if string(js) == "null" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				return nil, fmt.Errorf("%s: %v\n%s", n, err, doc)
			}
			objs = append(objs, u)
		}
	}
	return objs, nil
}

func mustRender(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

// apply server-side-applies objs (dry run only when dryRun), as
// `kubectl apply --server-side [--dry-run=server]` does.
func apply(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured, dryRun bool) error {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cluster.client.Discovery()))
	var errs []string
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %s: %v", gvk.Kind, o.GetName(), err))
			continue
		}
		opts := metav1.ApplyOptions{FieldManager: "rootline-test", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		r := cluster.dynamic.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			_, err = r.Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o, opts)
		} else {
			_, err = r.Apply(ctx, o.GetName(), o, opts)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d objects refused:\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	return nil
}

// find returns the rendered object of this kind and name, or nil.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// testPKI is a CA and a serving certificate for 127.0.0.1 (the webhook
// process) signed by it, as PEM files in a folder.
type testPKI struct {
	dir               string
	caPEM             []byte
	certFile, keyFile string
}

func newPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rootline test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rootline webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	p := testPKI{
		dir:      dir,
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile: filepath.Join(dir, "tls.crt"),
		keyFile:  filepath.Join(dir, "tls.key"),
	}
	if err := os.WriteFile(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p testPKI) caBundle() string { return base64.StdEncoding.EncodeToString(p.caPEM) }

func b64file(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// The registry the tests push images to, shared by the package's tests.
var testRegistry struct {
	once sync.Once
	host string
}

// registryHost starts a registry on loopback once and returns host:port.
// go-containerregistry treats 127.0.0.1 as a plain-HTTP registry.
func registryHost() string {
	testRegistry.once.Do(func() {
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		testRegistry.host = strings.TrimPrefix(srv.URL, "http://")
	})
	return testRegistry.host
}

// webhookProc is a `rootline webhook` process.
type webhookProc struct {
	cmd  *exec.Cmd
	port int
	logs *bytes.Buffer
	mu   *sync.Mutex
}

// startWebhookOn runs ROOTLINE_BIN webhook with args on a loopback port (0:
// the kernel picks one, read from its "webhook listening" log line) and
// waits until it answers /healthz over TLS with pki's certificate.
func startWebhookOn(t *testing.T, pki testPKI, port int, args ...string) *webhookProc {
	t.Helper()
	all := append([]string{"webhook", fmt.Sprintf("--listen=127.0.0.1:%d", port),
		"--tls.cert-file=" + pki.certFile, "--tls.key-file=" + pki.keyFile, "--log.level=debug"}, args...)
	cmd := exec.Command(os.Getenv("ROOTLINE_BIN"), all...)
	w := &webhookProc{cmd: cmd, port: port, logs: &bytes.Buffer{}, mu: &sync.Mutex{}}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if _, rest, ok := strings.Cut(line, "msg=\"webhook listening\""); ok {
				if _, addr, ok := strings.Cut(rest, "addr=127.0.0.1:"); ok {
					p, _ := strconv.Atoi(strings.Fields(addr)[0])
					listening <- p
				}
			}
			w.mu.Lock()
			w.logs.WriteString(line + "\n")
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	select {
	case w.port = <-listening:
	case <-time.After(30 * time.Second):
		t.Fatalf("webhook did not say where it listens\n%s", w.log())
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.caPEM)
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsClientConfig(pool)}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", w.port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return w
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook did not answer /healthz over TLS: %v\n%s", err, w.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *webhookProc) log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

func (w *webhookProc) stop() {
	if w.cmd.ProcessState != nil {
		return
	}
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

func tlsClientConfig(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
