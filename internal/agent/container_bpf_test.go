package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

var _ CgroupProfiler = (*kernel.Recorder)(nil)

// gated is a shell that waits for a line on stdin, spins, sleeps (in a
// child `sleep`), prints "done" and waits for stdin to close.
type gated struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startGated(t *testing.T) *gated {
	t.Helper()
	cmd := exec.Command("sh", "-c", `read x; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 0.3; echo done; read y`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return &gated{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
}

func (g *gated) pid() int { return g.cmd.Process.Pid }

func (g *gated) run(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(g.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if !g.out.Scan() || g.out.Text() != "done" {
		t.Fatalf("pid %d did not finish: %v", g.pid(), g.out.Err())
	}
}

// artifactServer is a stand-in for the server's capture routes that keeps
// the uploaded artifacts.
type artifactServer struct {
	mu        sync.Mutex
	arts      map[string][]capturedArtifact
	completed map[string]agentapi.Completion
}

type capturedArtifact struct {
	kind, fileName string
	attrs          string
	data           []byte
}

func newArtifactServer(t *testing.T) (*artifactServer, string) {
	s := &artifactServer{arts: map[string][]capturedArtifact{}, completed: map[string]agentapi.Completion{}}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, agentapi.RegistrationReply{AgentID: "a1", HeartbeatSeconds: 10})
	}
	mux.HandleFunc("POST /api/v1/agents", reply)
	mux.HandleFunc("PUT /api/v1/agents/{id}", reply)
	mux.HandleFunc("DELETE /api/v1/agents/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /api/v1/captures/{id}/artifacts", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		q := r.URL.Query()
		s.mu.Lock()
		s.arts[r.PathValue("id")] = append(s.arts[r.PathValue("id")], capturedArtifact{kind: q.Get("kind"), fileName: q.Get("fileName"), attrs: q.Get("attrs"), data: b})
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]any{"id": "x"})
	})
	mux.HandleFunc("POST /api/v1/captures/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		var c agentapi.Completion
		_ = decodeJSON(w, r, &c, false)
		s.mu.Lock()
		s.completed[r.PathValue("id")] = c
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// kernelDump waits (a minute at most) until capture id completes with its
// kernel snapshot (no CTF export: the recorder's default), and returns it.
func (s *artifactServer) kernelDump(t *testing.T, id string) []capturedArtifact {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var c agentapi.Completion
	var arts []capturedArtifact
	for ok := false; !ok; c, arts, ok = s.done(id) {
		if time.Now().After(deadline) {
			t.Fatalf("dump %s not completed", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.Status != agentapi.StatusComplete || len(arts) != 1 || arts[0].kind != "kernel" {
		t.Fatalf("completion %+v, %d artifacts", c, len(arts))
	}
	return arts
}

func (s *artifactServer) done(id string) (agentapi.Completion, []capturedArtifact, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.completed[id]
	return c, s.arts[id], ok
}

// TestContainerKernelRecording: a container registered through the agent's
// HTTP API is recorded by the real BPF flight recorder, and a kernel dump
// of its process holds that process's RUNNING and BLOCKED intervals (and
// those of the child it forked), while a process outside the cgroup is not
// recorded. Root and BPF needed (fails under ROOTLINE_REQUIRE_BPF=1).
func TestContainerKernelRecording(t *testing.T) {
	bpftest.Require(t, kernel.Available())
	if _, err := exec.LookPath("sh"); err != nil {
		bpftest.Missing(t, "sh not installed")
	}
	root := cgroup2Root()
	if root == "" {
		bpftest.Missing(t, "no cgroup v2 hierarchy mounted")
	}
	dir := filepath.Join(root, fmt.Sprintf("rootline-agent-bpf-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		bpftest.Missing(t, "cannot create a cgroup v2: "+err.Error())
	}
	t.Cleanup(func() { // last: after the processes are killed (cleanups run last-in first-out)
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})

	srv, url := newArtifactServer(t)
	rec, err := kernel.New(kernel.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, testConfig(url), rec) // the agent closes rec

	member := startGated(t)
	joinCgroup(t, dir, member.pid()) // before it does anything
	outsider := startGated(t)        // in the test's own cgroup, never registered

	code, body := postJSON(t, apiURL(a, "/api/v1/containers"), "",
		ContainerSpec{Cgroup: strings.TrimPrefix(dir, root), Service: "svc-container"})
	if code != http.StatusCreated {
		t.Fatalf("register container: %d %s", code, body)
	}
	cts := a.Containers()
	if len(cts) != 1 || len(cts[0].PIDs) != 1 || cts[0].PIDs[0] != member.pid() {
		t.Fatalf("containers = %+v", cts)
	}
	if got := rec.Stats()["cgroups"]; got != 1 {
		t.Errorf("recorder cgroups = %v, want 1", got)
	}

	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { outsider.run(t) })
	member.run(t)
	wg.Wait()
	end := time.Now()

	req := agentapi.DumpRequest{CaptureID: "ctr-1", PID: int64(member.pid()), Start: start.UnixNano(), End: end.UnixNano(), Kinds: []string{"kernel"}}
	if code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", req); code != http.StatusAccepted {
		t.Fatalf("dump: %d %s", code, body)
	}
	arts := srv.kernelDump(t, "ctr-1")
	wantFile := fmt.Sprintf("kernel-svc-container-cgroup-%d%s", cts[0].CgroupID, kernel.FileExt)
	if arts[0].fileName != wantFile || !strings.Contains(arts[0].attrs, `"cgroup_id":"`+strconv.FormatUint(cts[0].CgroupID, 10)+`"`) {
		t.Errorf("artifact %s %s, want %s", arts[0].fileName, arts[0].attrs, wantFile)
	}
	snap, err := kernel.DecodeSnapshot(arts[0].data)
	if err != nil {
		t.Fatal(err)
	}
	pid := uint32(member.pid())
	states := map[string]time.Duration{}
	sleepChild := false
	for _, th := range snap.Threads {
		// The process outside the cgroup is no target and is not
		// followed; it may be listed only as a task seen holding a CPU
		// the members waited for (kernel.HolderDepth).
		if th.PID == uint32(outsider.pid()) && (th.Target || th.Depth != kernel.HolderDepth) {
			t.Errorf("the process outside the cgroup is in the snapshot: %+v", th)
		}
		if th.Target && th.PID != pid && th.Comm == "sleep" {
			sleepChild = true
		}
	}
	for _, iv := range snap.Intervals {
		if iv.TID == pid {
			states[iv.State] += time.Duration(iv.End - iv.Start)
		}
	}
	t.Logf("snapshot: %d threads, %d intervals, %d lost; pid %d: %v", len(snap.Threads), len(snap.Intervals), snap.Lost, pid, states)
	if states[kernel.StateRunning] <= 0 || states[kernel.StateBlocked] <= 0 {
		t.Errorf("pid %d: no RUNNING and BLOCKED intervals: %v", pid, states)
	}
	if !sleepChild {
		t.Errorf("the `sleep` the container's shell forked is not a target thread: %+v", snap.Threads)
	}

	// Never registered, not in the cgroup: its own records (wakeups, forks,
	// exits) are not taken. It can only appear as the other task of a
	// member's context switch, so the recorder never saw it woken, whereas
	// the member was (by the test's write, by its `sleep` exiting).
	memberWoken := false
	for _, w := range snap.Wakeups {
		memberWoken = memberWoken || w.Wakee == pid
	}
	if !memberWoken {
		t.Errorf("no wakeup of pid %d recorded", pid)
	}
	arts2, err := rec.Dump(context.Background(), profiler.Target{PID: outsider.pid()}, profiler.Window{Start: start, End: end})
	if err == nil {
		osnap, err := kernel.DecodeSnapshot(arts2[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(osnap.Wakeups) != 0 {
			t.Errorf("the process outside the cgroup was recorded: %d wakeups of it", len(osnap.Wakeups))
		}
	} else if !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("dump of the process outside the cgroup: %v", err)
	}
	for _, p := range a.processes() {
		if p.PID == int64(outsider.pid()) {
			t.Errorf("the process outside the cgroup is a target: %+v", p)
		}
	}

	// Unregistered: no longer recorded, no longer a target.
	if code, msg := deleteReq(t, apiURL(a, fmt.Sprintf("/api/v1/containers/%d", cts[0].CgroupID))); code != http.StatusNoContent {
		t.Fatalf("unregister: %d %s", code, msg)
	}
	if got := rec.Stats()["cgroups"]; got != 0 || len(a.processes()) != 0 {
		t.Errorf("after unregistering: recorder cgroups %v, targets %+v", got, a.processes())
	}
}
