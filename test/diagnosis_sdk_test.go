package test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/mirage"
)

// venvPython returns the interpreter of the venv scripts/deps.sh installs
// the tests' Python packages into, once module imports there; without it the
// test skips (fails under ROOTLINE_REQUIRE_BPF=1, as CI installs it).
func venvPython(t *testing.T, module string) string {
	t.Helper()
	venv := os.Getenv("ROOTLINE_VENV")
	if venv == "" {
		home, _ := os.UserHomeDir()
		venv = filepath.Join(home, ".cache", "rootline", "venv")
	}
	py := filepath.Join(venv, "bin", "python3")
	if out, err := exec.Command(py, "-c", "import "+module).CombinedOutput(); err != nil {
		if os.Getenv("ROOTLINE_REQUIRE_BPF") == "1" {
			t.Fatalf("%s is not installed in %s (make deps): %v\n%s", module, venv, err, out)
		}
		t.Skipf("%s is not installed in %s (make deps): %v", module, venv, err)
	}
	return py
}

// TestDiagnosisOTelSDK: a Python service instrumented with the
// OpenTelemetry SDK, not under `rootline run`, exports its spans to the
// server itself and is found by the agent through OTEL_SERVICE_NAME. Its
// cgroup gets a CPU quota of 2 % of a CPU while it serves CPU-bound
// requests: the server opens an incident at its entry point, and the verdict
// names the service and cpu-throttle, from the kernel's record of the threads
// its spans name (thread.id, as SDKs set it) — the same evidence as for a
// service under `rootline run`.
func TestDiagnosisOTelSDK(t *testing.T) {
	// Discovery on: the service is found as a user's would be, by its
	// environment.
	e := newCPEnvServer(t, "kernel", nil, "--discover=true", "--discover-interval", "1s")
	py := venvPython(t, "opentelemetry.exporter.otlp.proto.http.trace_exporter")
	app, _ := filepath.Abs("testdata/otelsdk/app.py")
	cg := cpuCgroup(t, "rootline-test-diagnosis-sdk")
	mustWrite(t, cg+"/cpu.cfs_period_us", "250000")

	const svc = "dg-sdk"
	cmd := exec.Command("sh", "-c", "echo $$ > "+cg+"/cgroup.procs && exec "+py+" "+app)
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME="+svc,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+e.srv.http, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_SAMPLER=always_on")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, nil)
	portc := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				n, _ := strconv.Atoi(p)
				portc <- n
			}
		}
	}()
	var port int
	select {
	case port = <-portc:
	case <-time.After(60 * time.Second):
		t.Fatal("the SDK service did not start listening in 60 s")
	}

	// The agent finds the process by its environment (scanned every second).
	if pid := e.waitProcess(t, svc); pid != cmd.Process.Pid {
		t.Fatalf("the agent registered %s as pid %d, want %d", svc, pid, cmd.Process.Pid)
	}

	for range 40 {
		dgGet(t, port, "ms=10")
	}
	time.Sleep(500 * time.Millisecond)
	mustWrite(t, cg+"/cpu.cfs_quota_us", "5000")
	for range 20 {
		dgGet(t, port, "ms=10")
	}
	mustWrite(t, cg+"/cpu.cfs_quota_us", "-1")
	inc := e.waitVerdict(t, svc, 5)
	e.checkVerdict(t, inc, svc, diagnosis.CauseCPUThrottle)
	checkQuotaAdvice(t, inc.Verdict)
}

// checkQuotaAdvice asserts a throttled culprit is advised more CPU quota,
// by a factor from its waits.
func checkQuotaAdvice(t *testing.T, v *diagnosis.Verdict) {
	t.Helper()
	if a := v.Advice; a == nil || a.Scaling != mirage.ScaleVertical || a.Factor <= 1 || a.Service != v.Service {
		t.Fatalf("advice %+v, want more CPU quota for %s", a, v.Service)
	} else {
		t.Logf("advice: %s", a.Explanation)
	}
}
