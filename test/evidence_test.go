package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/model"
)

// agentProc is a running `rootline agent`.
type agentProc struct {
	// addr is its TCP listener (/metrics), socket its unix socket.
	addr, socket string
	logs         *lockedBuffer
	// stop stops it (SIGTERM, then SIGKILL after 20 s) and waits; the
	// test's cleanup calls it too.
	stop func()
}

// startAgent runs `rootline agent` against srv and returns once it registered.
func startAgent(t *testing.T, srv *serverProc, args ...string) agentProc {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(rootlineBin(t), append([]string{"agent", "--server", "http://" + srv.query,
		"--listen", "127.0.0.1:0", "--socket", socket, "--discover=false", "--log.format", "json"}, args...)...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var agents []struct {
			Processes []struct{ PID int64 } `json:"processes"`
		}
		srv.getJSON(t, "/api/v1/agents", &agents)
		if len(agents) == 1 && len(agents[0].Processes) > 0 {
			for line := range strings.SplitSeq(logs.String(), "\n") {
				var l struct{ Msg, Listen string }
				if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "agent started" {
					return agentProc{addr: l.Listen, socket: socket, logs: logs, stop: stop}
				}
			}
			t.Fatalf("no \"agent started\" line in the agent's log:\n%s", logs)
		}
		select {
		case <-exited:
			t.Fatalf("agent exited:\n%s", logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not register a target within 20s:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startTarget starts a long-running process and returns its pid.
func startTarget(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// startSpin builds bench/spin (a CPU-bound Go program whose hot function is
// main.hotLoop) into dir, starts it for two minutes and returns its pid.
func startSpin(t *testing.T, dir string) int {
	t.Helper()
	bin := filepath.Join(dir, "hotgo")
	if out, err := exec.Command("go", "build", "-o", bin, "../bench/spin").CombinedOutput(); err != nil {
		t.Fatalf("build target: %v\n%s", err, out)
	}
	return startTarget(t, bin, "--duration", "2m")
}

// anomalyFor sends a warm-up of normal spans of service svc, then one slow
// span served by pid that ends now, and returns the slow trace's id.
func anomalyFor(t *testing.T, srv *serverProc, svc string, pid int) model.TraceID {
	t.Helper()
	ctx := context.Background()
	base := time.Now().Add(-time.Minute)
	for i := range 20 {
		if code, _, err := postOTLP(ctx, srv.http, makeTrace(tid(uint64(i+1)), base.Add(time.Duration(i)*time.Second),
			spanSpec{service: svc, name: "GET /work", duration: 10 * time.Millisecond})); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	slow := tid(777)
	if code, _, err := postOTLP(ctx, srv.http, makeTrace(slow, time.Now().Add(-time.Second),
		spanSpec{service: svc, name: "GET /work", duration: time.Second, res: map[string]any{"process.pid": pid}})); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	return model.TraceID(slow)
}

// evidence waits for artifacts on the slow trace and returns them.
func evidence(t *testing.T, srv *serverProc, trace model.TraceID, wantKinds int) []artifactJSON {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var arts []artifactJSON
		srv.getJSON(t, "/api/v1/traces/"+trace.String()+"/artifacts", &arts)
		if len(arts) >= wantKinds {
			return arts
		}
		if time.Now().After(deadline) {
			var caps any
			srv.getJSON(t, "/api/v1/captures", &caps)
			t.Fatalf("only %d artifacts after 60s; captures: %v", len(arts), caps)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type artifactJSON struct {
	ID, Kind, MediaType, FileName string
	PID                           int64
	Size                          int64
	Partial                       bool
}

// flameShare returns the share of the flame graph's value under frames whose
// name contains fn, and the total.
func flameShare(t *testing.T, srv *serverProc, artifact, fn string) (float64, int64) {
	t.Helper()
	var fg struct {
		ValueTotal int64 `json:"valueTotal"`
		Root       node  `json:"root"`
	}
	if c := srv.getJSON(t, "/api/v1/artifacts/"+artifact+"/flamegraph", &fg); c != 200 {
		t.Fatalf("flamegraph: status %d", c)
	}
	var under func(n node) int64
	under = func(n node) int64 {
		if strings.Contains(n.Name, fn) {
			return n.Value
		}
		var s int64
		for _, c := range n.Children {
			s += under(c)
		}
		return s
	}
	if fg.Root.Value == 0 {
		return 0, 0
	}
	return float64(under(fg.Root)) / float64(fg.Root.Value), fg.Root.Value
}

type node struct {
	Name     string `json:"name"`
	Value    int64  `json:"value"`
	Children []node `json:"children"`
}

func TestAnomalyCapturesCPUProfileOfTheServingProcess(t *testing.T) {
	bpftest.RequireBPF(t)
	dir := t.TempDir()
	pid := startSpin(t, dir)
	srv := startServer(t, filepath.Join(dir, "data"), "--detector.min-fill", "10", "--capture.pre", "3s", "--capture.post", "0s", "--capture.settle", "500ms")
	startAgent(t, srv, "--profilers", "cpu", "--target", fmt.Sprintf("pid=%d,service=hot-svc", pid))
	time.Sleep(4 * time.Second) // the flight recorder fills
	slow := anomalyFor(t, srv, "hot-svc", pid)
	arts := evidence(t, srv, slow, 1)
	a := arts[0]
	if a.Kind != "cpu" || a.PID != int64(pid) || a.Size == 0 {
		t.Fatalf("artifact %+v", a)
	}
	share, total := flameShare(t, srv, a.ID, "main.hotLoop")
	t.Logf("cpu artifact %s: %d ns of CPU sampled, %.0f%% under main.hotLoop", a.ID, total, 100*share)
	if total < int64(500*time.Millisecond) || share < 0.7 {
		t.Fatalf("flame graph: %d ns sampled, %.2f under main.hotLoop; want ≥ 0.5 s and ≥ 0.7", total, share)
	}
	// The span carries the link in the Jaeger JSON too.
	var tr jaegerResponse
	srv.getJSON(t, "/api/traces/"+slow.String(), &tr)
	found := false
	for _, tg := range tr.Data[0].Spans[0].Tags {
		found = found || (tg.Key == "rootline.artifact.ids" && strings.Contains(fmt.Sprint(tg.Value), a.ID))
	}
	if !found {
		t.Fatal("span lacks rootline.artifact.ids")
	}
}

func TestAnomalyCapturesJFRRecordingOfTheServingJVM(t *testing.T) {
	for _, tool := range []string{"java", "javac", "jcmd", "jfr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (JDK 17 is part of this machine kind): %v", tool, err)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "Spin.java")
	if err := os.WriteFile(src, []byte(spinJava), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("javac", "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	cmd := exec.Command("java", "-cp", dir, "Spin")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !bufio.NewScanner(stdout).Scan() { // "ready" once main runs
		t.Fatal("JVM did not start")
	}
	pid := cmd.Process.Pid
	srv := startServer(t, filepath.Join(dir, "data"), "--detector.min-fill", "10", "--capture.pre", "4s", "--capture.post", "0s", "--capture.settle", "500ms")
	startAgent(t, srv, "--profilers", "jfr", "--target", fmt.Sprintf("pid=%d,service=jvm-svc", pid))
	time.Sleep(6 * time.Second)
	slow := anomalyFor(t, srv, "jvm-svc", pid)
	arts := evidence(t, srv, slow, 2)
	var pprofID string
	kinds := map[string]bool{}
	for _, a := range arts {
		kinds[a.MediaType] = true
		if strings.Contains(a.MediaType, "protobuf") {
			pprofID = a.ID
		}
	}
	if pprofID == "" {
		t.Fatalf("no pprof conversion among %+v", arts)
	}
	share, total := flameShare(t, srv, pprofID, "Spin.hotLoop")
	t.Logf("jfr artifacts %v; pprof: %d, %.0f%% under Spin.hotLoop", kinds, total, 100*share)
	if total == 0 || share < 0.5 {
		t.Fatalf("flame graph: total %d, %.2f under Spin.hotLoop", total, share)
	}
}

const spinJava = `public class Spin {
    static volatile long sink;
    static long hotLoop(long n) {
        long x = 1;
        for (long i = 0; i < n; i++) { x = x * 6364136223846793005L + 1442695040888963407L; }
        return x;
    }
    public static void main(String[] args) {
        System.out.println("ready");
        long deadline = System.currentTimeMillis() + 120_000;
        while (System.currentTimeMillis() < deadline) { sink += hotLoop(1 << 20); }
    }
}
`
