// Package k8s tests Rootline's Kubernetes parts against a real control
// plane: kube-apiserver and etcd built from their Go modules
// (scripts/k8s-tools.sh) and started by controller-runtime's envtest, a real
// image registry (go-containerregistry's registry protocol server), the
// OCI image `make image` built, the chart rendered by Helm's own engine, and
// `rootline webhook` running as a process over TLS.
//
// There is no kubelet: Pods are admitted and stored, never started. What
// the tests check is what the API server stores; the wrapped command lines
// are run here on the host instead (TestWrappedCommandRuns).
//
// Run with `make test-k8s`, which builds what is needed and sets:
// KUBEBUILDER_ASSETS (etcd and kube-apiserver), ROOTLINE_BIN (bin/rootline),
// ROOTLINE_IMAGE_LAYOUT (the OCI layout of make image). Without them the
// tests skip, unless ROOTLINE_REQUIRE_K8S=1, which makes that a failure.
package k8s

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var cluster struct {
	cfg     *rest.Config
	client  *kubernetes.Clientset
	dynamic *dynamic.DynamicClient
	skip    string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var missing []string
	for _, v := range []string{"KUBEBUILDER_ASSETS", "ROOTLINE_BIN", "ROOTLINE_IMAGE_LAYOUT"} {
		if os.Getenv(v) == "" {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		cluster.skip = fmt.Sprintf("%v not set: run `make test-k8s` (builds kube-apiserver, etcd, the binary and the image)", missing)
		return m.Run()
	}
	start := time.Now()
	env := &envtest.Environment{
		BinaryAssetsDirectory:    os.Getenv("KUBEBUILDER_ASSETS"),
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "k8s: starting kube-apiserver and etcd: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "k8s: stopping the control plane: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "k8s: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), cfg.Host)
	cluster.cfg = cfg
	cluster.client = kubernetes.NewForConfigOrDie(cfg)
	cluster.dynamic = dynamic.NewForConfigOrDie(cfg)
	v, err := cluster.client.Discovery().ServerVersion()
	if err != nil {
		fmt.Fprintf(os.Stderr, "k8s: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "k8s: kube-apiserver %s\n", v.GitVersion)
	return m.Run()
}

// needCluster skips (or, with ROOTLINE_REQUIRE_K8S=1, fails) a test that
// has no control plane, and returns a context for it.
func needCluster(t *testing.T) context.Context {
	t.Helper()
	if cluster.skip != "" {
		if os.Getenv("ROOTLINE_REQUIRE_K8S") == "1" {
			t.Fatalf("ROOTLINE_REQUIRE_K8S=1 but %s", cluster.skip)
		}
		t.Skip(cluster.skip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
