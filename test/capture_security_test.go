package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/model"
)

// TestForgedSpansTriggerNoDump: whoever can send spans to the server cannot
// choose which process the agent profiles. A real server and a real agent
// (root, the eBPF CPU profiler) recording two real processes — "victim"
// (a CPU-bound Go program) and "bystander" (sleep) — get anomalous spans
// that name a registered service with another pid (an unregistered process,
// or the other service's), an unregistered service with the victim's pid,
// and the other service with the victim's host and pid: none of them
// brings a dump, each is counted. The legitimate anomaly sent after them
// still gets its CPU profile, in a capture that explains it alone.
func TestForgedSpansTriggerNoDump(t *testing.T) {
	bpftest.RequireBPF(t)
	dir := t.TempDir()
	victim := startSpin(t, dir)
	bystander := startTarget(t, "sleep", "300")
	stranger := startTarget(t, "sleep", "300") // recorded by nobody
	srv := startServer(t, filepath.Join(dir, "data"), "--detector.min-fill", "10",
		"--capture.pre", "3s", "--capture.post", "0s", "--capture.settle", "500ms")
	ag := startAgent(t, srv, "--profilers", "cpu",
		"--target", fmt.Sprintf("pid=%d,service=victim", victim), "--target", fmt.Sprintf("pid=%d,service=bystander", bystander))
	host, _ := os.Hostname()
	time.Sleep(4 * time.Second) // the flight recorder fills

	ctx := context.Background()
	next := uint64(1000)
	send := func(svc string, d time.Duration, start time.Time, res map[string]any) model.TraceID {
		t.Helper()
		next++
		id := tid(next)
		if code, _, err := postOTLP(ctx, srv.http, makeTrace(id, start, spanSpec{service: svc, name: "GET /work", duration: d, res: res})); err != nil || code != 200 {
			t.Fatalf("send %s: %d %v", svc, code, err)
		}
		return model.TraceID(id)
	}
	base := time.Now().Add(-time.Minute)
	for _, svc := range []string{"victim", "bystander", "intruder"} {
		for i := range 20 {
			send(svc, 10*time.Millisecond, base.Add(time.Duration(i)*time.Second), nil)
		}
	}
	slowAt := time.Now().Add(-time.Second)
	forged := map[string]model.TraceID{}
	for name, f := range map[string]struct {
		svc string
		res map[string]any
	}{
		"registered service, unregistered pid":  {"victim", map[string]any{"process.pid": stranger}},
		"registered service, another's pid":     {"victim", map[string]any{"process.pid": bystander}},
		"unregistered service, registered pid":  {"intruder", map[string]any{"process.pid": victim}},
		"another service with the victim's pid": {"bystander", map[string]any{"host.name": host, "process.pid": victim}},
	} {
		forged[name] = send(f.svc, time.Second, slowAt, f.res)
	}
	legit := send("victim", time.Second, slowAt, map[string]any{"process.pid": victim})

	arts := evidence(t, srv, legit, 1)
	if a := arts[0]; a.Kind != "cpu" || a.PID != int64(victim) || a.Size == 0 {
		t.Fatalf("legitimate anomaly's artifact = %+v, want a CPU profile of pid %d", a, victim)
	}
	// Anomalies are routed in the order they were committed: had a forged
	// one brought a capture, it would be listed by now.
	var caps []struct {
		PID       int64  `json:"pid"`
		Service   string `json:"service"`
		SpanCount int    `json:"spanCount"`
		State     string `json:"state"`
	}
	srv.getJSON(t, "/api/v1/captures", &caps)
	if len(caps) != 1 || caps[0].PID != int64(victim) || caps[0].SpanCount != 1 || caps[0].Service != "victim" {
		t.Errorf("captures = %+v, want one of pid %d (victim) explaining the legitimate span only", caps, victim)
	}
	for name, id := range forged {
		var got []artifactJSON
		srv.getJSON(t, "/api/v1/traces/"+id.String()+"/artifacts", &got)
		if len(got) != 0 {
			t.Errorf("%s: the forged span got artifacts %+v", name, got)
		}
	}
	if n := metric(t, "http://"+srv.query+"/metrics", "rootline_capture_unregistered_pid_total"); n != float64(len(forged)) {
		t.Errorf("rootline_capture_unregistered_pid_total = %v, want %d", n, len(forged))
	}
	// The agent was asked for one dump, the legitimate one.
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, "http://"+ag.addr+"/metrics", `rootline_agent_dumps_total{outcome="complete"}`) != 1 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range []string{`rootline_agent_dumps_total{outcome="complete"}`, `rootline_agent_dumps_total{outcome="partial"}`,
		`rootline_agent_dumps_total{outcome="failed"}`, `rootline_agent_dumps_total{outcome="rejected"}`} {
		want := 0.0
		if strings.Contains(m, "complete") {
			want = 1
		}
		if n := metric(t, "http://"+ag.addr+"/metrics", m); n != want {
			t.Errorf("agent %s = %v, want %v", m, n, want)
		}
	}
}

// metric reads one sample of a Prometheus text exposition (0 when absent).
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q", series, v)
			}
			return f
		}
	}
	return 0
}

// TestRunAsAnotherUserRegistersItsOwnProcess: `rootline run` started by a
// user other than root (nobody, ptrace mode) registers the process it
// starts — that user's — with the root agent through the agent's unix
// socket, where the agent checks the caller's uid; the server then lists it
// under the run's service. (That such a user cannot register someone
// else's process is internal/agent's TestSocketChecksTheCallersUID.)
func TestRunAsAnotherUserRegistersItsOwnProcess(t *testing.T) {
	bpftest.RequireBPF(t)
	srv := startServer(t, t.TempDir())
	anchor := startTarget(t, "sleep", "300")
	ag := startAgent(t, srv, "--profilers", "cpu", "--target", fmt.Sprint("pid=", anchor))
	// nobody must reach the socket.
	for d := filepath.Dir(ag.socket); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const nobody = 65534
	cmd := exec.Command(rootlineBin(t), "run", "--mode", "ptrace", "--reads", "ptrace", "--server", "", "--log.level", "debug",
		"--agent", "unix:"+ag.socket, "--service", "nobodys-svc", "--", "sleep", "300")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("rootline run as nobody:\n%s", logs)
		}
	})
	var agents []struct {
		Processes []struct {
			PID     int64  `json:"pid"`
			Service string `json:"service"`
		} `json:"processes"`
	}
	var pid int64
	for deadline := time.Now().Add(20 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		srv.getJSON(t, "/api/v1/agents", &agents)
		for _, p := range agents[0].Processes {
			if p.Service == "nobodys-svc" {
				pid = p.PID
			}
		}
	}
	if pid == 0 {
		t.Fatalf("the agent never reported nobodys-svc: %+v", agents)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || !strings.Contains(string(b), fmt.Sprintf("\nUid:\t%d\t%d\t%d", nobody, nobody, nobody)) {
		t.Fatalf("registered pid %d is not nobody's process: %v\n%s", pid, err, b)
	}
}
