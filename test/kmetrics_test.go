package test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
)

// testCgroup creates a cgroup v2 named name (skipping the test, or failing
// it under ROOTLINE_REQUIRE_BPF=1, when there is no cgroup v2 hierarchy to
// create it in) and removes it at the end, once its processes are gone.
func testCgroup(t *testing.T, name string) string {
	t.Helper()
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		root = "/sys/fs/cgroup"
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
			bpftest.Missing(t, "no cgroup v2 hierarchy")
		}
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		bpftest.Missing(t, "create cgroup: "+err.Error())
	}
	t.Cleanup(func() {
		for range 100 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}

// TestKernelMetricsReachTheServer runs an agent with --kmetrics against a
// real server: a busy workload in its own cgroup v2, registered as a target
// with a service name, shows up as OTLP-pushed on-CPU and run-queue
// histograms in GET /api/v1/metrics.
func TestKernelMetricsReachTheServer(t *testing.T) {
	bpftest.RequireBPF(t)
	dir := testCgroup(t, fmt.Sprintf("rootline-e2e-km-%d", os.Getpid()))

	// A shell that moves into the cgroup before it loops (never spinning
	// anywhere else), then burns CPU in short bursts.
	work := exec.Command("sh", "-c", "read x; while :; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.01; done")
	in, _ := work.StdinPipe()
	if err := work.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = work.Process.Kill(); _ = work.Wait() })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(work.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in, "go")

	srv := startServer(t, t.TempDir())
	startAgent(t, srv, "--profilers", "cpu", "--target", fmt.Sprintf("pid=%d,service=km-svc", work.Process.Pid),
		"--kmetrics", "--kmetrics.enable", "oncpu,runq", "--kmetrics.push-interval", "500ms",
		"--kmetrics.otlp-url", "http://"+srv.http+"/v1/metrics")

	type point struct {
		Count   uint64   `json:"count"`
		Sum     float64  `json:"sum"`
		Buckets []uint64 `json:"buckets"`
	}
	var body struct {
		Series []struct {
			Name    string            `json:"name"`
			Service string            `json:"service"`
			Kind    string            `json:"kind"`
			Labels  map[string]string `json:"labels"`
			Points  []point           `json:"points"`
		} `json:"series"`
	}
	q := url.Values{"name": {"rootline_kernel_oncpu_seconds"}, "service": {"km-svc"}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code := srv.getJSON(t, "/api/v1/metrics?"+q.Encode(), &body); code != 200 {
			t.Fatalf("GET /api/v1/metrics: %d", code)
		}
		if len(body.Series) > 0 {
			s := body.Series[0]
			last := s.Points[len(s.Points)-1]
			if len(s.Points) >= 2 && last.Count > 0 {
				if s.Kind != "histogram" || s.Labels["container"] != "/"+filepath.Base(dir) || s.Labels["host.name"] == "" || len(last.Buckets) == 0 {
					t.Fatalf("series = %+v", s)
				}
				t.Logf("%d points; last: %d on-CPU intervals, %.3f s", len(s.Points), last.Count, last.Sum)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no on-CPU series for km-svc within 30s: %+v", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	q.Set("name", "rootline_kernel_runq_latency_seconds")
	if srv.getJSON(t, "/api/v1/metrics?"+q.Encode(), &body); len(body.Series) == 0 {
		t.Error("no run-queue series for km-svc")
	}
}
