package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(socketClientEnv) != "" {
		os.Exit(socketClientMain()) // a child of TestSocketChecksTheCallersUID
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction(kclock.Refresher))
}

// fakeProfiler is a profiler for this unit test of the agent logic: it
// records Start/Stop calls and dumps what dumpFn returns (by default one
// artifact of 100 bytes).
type fakeProfiler struct {
	name     string
	supports func(profiler.Target) bool
	startErr error
	dumpFn   func(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error)

	mu      sync.Mutex
	started []profiler.Target
	stopped []int
	dumps   int
	closed  bool
}

func (f *fakeProfiler) Name() string { return f.name }

func (f *fakeProfiler) Supports(t profiler.Target) bool { return f.supports == nil || f.supports(t) }

func (f *fakeProfiler) Start(_ context.Context, t profiler.Target) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	f.started = append(f.started, t)
	return nil
}

func (f *fakeProfiler) Dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	f.mu.Lock()
	f.dumps++
	fn := f.dumpFn
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, t, w)
	}
	return []profiler.Artifact{{Kind: f.name, MediaType: "application/octet-stream", FileName: fmt.Sprintf("%s-%d.bin", f.name, t.PID),
		Data: bytes.Repeat([]byte{'x'}, 100), Start: w.Start, End: w.End}}, nil
}

func (f *fakeProfiler) Stop(t profiler.Target) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, t.PID)
	return nil
}

func (f *fakeProfiler) Stats() map[string]float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return map[string]float64{"dumps": float64(f.dumps)}
}

func (f *fakeProfiler) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeProfiler) startedPIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, t := range f.started {
		out = append(out, t.PID)
	}
	return out
}

func (f *fakeProfiler) stoppedPIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.stopped...)
}

func (f *fakeProfiler) dumpCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dumps
}

// server is the real capture server (capture.Manager) on httptest.
type server struct {
	m    *capture.Manager
	arts *storetest.MemArtifacts
	url  string
	srv  *httptest.Server
	// failRegistrations answers that many registrations 503 first.
	mu                sync.Mutex
	failRegistrations int
	registrations     int
}

func newServer(t *testing.T, mod func(*capture.Config)) *server {
	t.Helper()
	cfg := capture.DefaultConfig()
	cfg.Pre, cfg.Post, cfg.Settle = 0, 0, 10*time.Millisecond
	cfg.Heartbeat = time.Second
	if mod != nil {
		mod(&cfg)
	}
	s := &server{arts: &storetest.MemArtifacts{}}
	m, err := capture.New(cfg, s.arts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.m = m
	h := m.Handler()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/agents" {
			s.mu.Lock()
			s.registrations++
			fail := s.failRegistrations > 0
			if fail {
				s.failRegistrations--
			}
			s.mu.Unlock()
			if fail {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	s.url = s.srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.srv.Close() })
	return s
}

// anomaly makes the server capture svc's process for a window a minute ago.
func (s *server) anomaly(svc string, n byte) {
	sp := &model.Span{TraceID: model.TraceID{n}, SpanID: model.SpanID{n, 1}, Service: svc, Name: "op",
		Start: time.Now().Add(-time.Minute).UnixNano(), Duration: int64(100 * time.Millisecond),
		Resource: []model.KeyValue{model.String("service.name", svc)}}
	sp.SetAttr(model.Bool(model.AttrAnomaly, true))
	s.m.OnCommitted([]*model.Span{sp})
}

// capture waits for the only capture of the server to end and returns it.
func (s *server) finished(t *testing.T) capture.Capture {
	t.Helper()
	var c capture.Capture
	waitUntil(t, "capture to end", func() bool {
		cs := s.m.Captures(0)
		if len(cs) != 1 {
			return false
		}
		c = cs[0]
		return c.State != capture.StatePending && c.State != capture.StateRequested
	})
	return c
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// child starts `sleep 30` and kills it at cleanup.
func child(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child process: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// startAgent runs an agent until the test ends.
func startAgent(t *testing.T, cfg Config, profs ...profiler.Profiler) *Agent {
	t.Helper()
	if cfg.Socket == DefaultSocket {
		cfg.Socket = testSocket(t)
	}
	a, err := New(cfg, profs, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.retryMin, a.retryMax = 10*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

// testSocket is a path for an agent's socket in a directory of the test's.
func testSocket(t *testing.T) string {
	return filepath.Join(t.TempDir(), "agent.sock")
}

func testConfig(serverURL string) Config {
	cfg := DefaultConfig()
	cfg.ServerURL = serverURL
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Host = "node-1"
	cfg.Discover = false
	cfg.DiscoverInterval = 20 * time.Millisecond
	return cfg
}

func (s *server) agents() []agentapi.Registration {
	return s.m.Agents()
}

func TestRegistrationHeartbeatAndReregister(t *testing.T) {
	srv := newServer(t, func(c *capture.Config) { c.AuthToken = "s3cret" })
	srv.failRegistrations = 2 // the server is not ready at first: the agent retries
	proc := child(t)
	cpu := &fakeProfiler{name: "cpu"}
	jfr := &fakeProfiler{name: "jfr", supports: func(profiler.Target) bool { return false }}
	cfg := testConfig(srv.url)
	cfg.AuthToken = "s3cret"
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-reg", InstanceID: "svc-reg-1"}}
	a := startAgent(t, cfg, cpu, jfr)

	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 })
	reg := srv.agents()[0]
	want := agentapi.Process{PID: int64(proc.Process.Pid), Service: "svc-reg", InstanceID: "svc-reg-1", Command: "sleep 30", Kinds: []string{"cpu"}}
	if reg.Host != "node-1" || reg.DumpURL != a.DumpURL() || !slices.Equal(reg.Kinds, []string{"cpu", "jfr"}) ||
		len(reg.Processes) != 1 || fmt.Sprint(reg.Processes[0]) != fmt.Sprint(want) {
		t.Fatalf("registration = %+v, want process %+v", reg, want)
	}
	if !strings.HasPrefix(a.DumpURL(), "http://127.0.0.1:") {
		t.Errorf("dump URL %q not derived from the bound address", a.DumpURL())
	}

	// The server forgets the agent: the next heartbeat gets 404 and the agent registers again.
	req, _ := http.NewRequest(http.MethodDelete, srv.url+"/api/v1/agents/"+reg.AgentID, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitUntil(t, "re-registration", func() bool {
		ag := srv.agents()
		return len(ag) == 1 && ag[0].AgentID != reg.AgentID
	})
	srv.mu.Lock()
	n := srv.registrations
	srv.mu.Unlock()
	if n != 4 { // 2 refused, 1 accepted, 1 after the 404
		t.Errorf("registrations = %d, want 4", n)
	}
}

func TestDumpUploadsArtifacts(t *testing.T) {
	srv := newServer(t, nil)
	proc := child(t)
	cpu := &fakeProfiler{name: "cpu", dumpFn: func(_ context.Context, tg profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
		return []profiler.Artifact{
			{Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip", FileName: "cpu.pb.gz", Data: []byte("pprof"),
				Start: w.Start.Add(time.Millisecond), End: w.End, Attributes: map[string]string{"samples": "812"}},
			{Kind: "cpu", FileName: "threads.txt", Data: []byte("threads")},
		}, nil
	}}
	cfg := testConfig(srv.url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-dump"}}
	a := startAgent(t, cfg, cpu)
	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 1 })

	srv.anomaly("svc-dump", 1)
	c := srv.finished(t)
	if c.State != capture.StateComplete || c.Error != "" || len(c.Artifacts) != 2 {
		t.Fatalf("capture = %+v", c)
	}
	arts := srv.arts.All()
	if len(arts) != 2 {
		t.Fatalf("artifacts = %+v", arts)
	}
	got := arts[0]
	if got.Kind != "cpu" || got.FileName != "cpu.pb.gz" || got.MediaType != "application/vnd.google.protobuf+gzip" ||
		got.PID != int64(proc.Process.Pid) || got.Start != c.Start+int64(time.Millisecond) || got.End != c.End ||
		got.Partial || got.Attributes["samples"] != "812" || got.Size != 5 {
		t.Errorf("artifact 1 = %+v (capture window [%d, %d])", got, c.Start, c.End)
	}
	if got := arts[1]; got.FileName != "threads.txt" || got.MediaType != "application/octet-stream" || got.Start != c.Start || got.End != c.End {
		t.Errorf("artifact 2 = %+v", got)
	}

	body := get(t, "http://"+a.Addr().String()+"/metrics")
	for _, want := range []string{
		`rootline_agent_dumps_total{outcome="complete"} 1`,
		`rootline_agent_upload_bytes_total 12`,
		`rootline_agent_targets 1`,
		`rootline_profiler_stat{profiler="cpu",stat="dumps"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	hc, u := testClient(u)
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestMaxBytes(t *testing.T) {
	srv := newServer(t, func(c *capture.Config) { c.BudgetBytesPerMinute = 250 })
	proc := child(t)
	cpu := &fakeProfiler{name: "cpu", dumpFn: func(_ context.Context, _ profiler.Target, _ profiler.Window) ([]profiler.Artifact, error) {
		var out []profiler.Artifact
		for i := range 3 {
			out = append(out, profiler.Artifact{Kind: "cpu", FileName: fmt.Sprintf("part-%d", i), Data: make([]byte, 100)})
		}
		return out, nil
	}}
	cfg := testConfig(srv.url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-budget"}}
	startAgent(t, cfg, cpu)
	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 1 })

	srv.anomaly("svc-budget", 1)
	c := srv.finished(t)
	if c.State != capture.StatePartial || len(c.Artifacts) != 2 || !strings.Contains(c.Error, "budget of 250 bytes exceeded: part-2") {
		t.Fatalf("capture = %+v", c)
	}
}

// TestMaxBytesKeepsEvidence: past the budget an artifact is skipped, not
// every one after it, and exports (a snapshot's CTF) go after the evidence
// the server reads.
func TestMaxBytesKeepsEvidence(t *testing.T) {
	srv := newServer(t, func(c *capture.Config) { c.BudgetBytesPerMinute = 250 })
	proc := child(t)
	kernel := &fakeProfiler{name: "kernel", dumpFn: func(_ context.Context, _ profiler.Target, _ profiler.Window) ([]profiler.Artifact, error) {
		return []profiler.Artifact{
			{Kind: "kernel", FileName: "snap", Data: make([]byte, 100)},
			{Kind: "kernel-ctf", FileName: "snap.ctf", Data: make([]byte, 120)},
			{Kind: "kernel", FileName: "big", Data: make([]byte, 200)},
		}, nil
	}}
	jfr := &fakeProfiler{name: "jfr", dumpFn: func(_ context.Context, _ profiler.Target, _ profiler.Window) ([]profiler.Artifact, error) {
		return []profiler.Artifact{{Kind: "jfr", FileName: "rec", Data: make([]byte, 100)}}, nil
	}}
	cfg := testConfig(srv.url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-budget"}}
	startAgent(t, cfg, kernel, jfr)
	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 1 })

	srv.anomaly("svc-budget", 1)
	c := srv.finished(t)
	var names []string
	for _, a := range srv.arts.All() {
		names = append(names, a.FileName)
	}
	slices.Sort(names)
	// snap (100) and rec (100) fit; big (200) and the CTF (120) do not.
	if c.State != capture.StatePartial || strings.Join(names, ",") != "rec,snap" ||
		!strings.Contains(c.Error, "budget of 250 bytes exceeded: big (200 bytes), snap.ctf (120 bytes) not uploaded") {
		t.Fatalf("capture: state %s, artifacts %v, error %q", c.State, names, c.Error)
	}
}

// TestDumpUploadsEachKindWhenDone: a quick profiler's evidence reaches the
// server while a slow one still dumps (a JVM's recording under a GC storm
// takes seconds; the kernel snapshot the verdict reads is ready in well
// under one), and the capture completes once both are in.
func TestDumpUploadsEachKindWhenDone(t *testing.T) {
	srv := newServer(t, nil)
	proc := child(t)
	release := make(chan struct{})
	kernel := &fakeProfiler{name: "kernel"}
	jfr := &fakeProfiler{name: "jfr", dumpFn: func(ctx context.Context, tg profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []profiler.Artifact{{Kind: "jfr", FileName: "rec.jfr", Data: []byte("jfr")}}, nil
	}}
	cfg := testConfig(srv.url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-slow"}}
	startAgent(t, cfg, kernel, jfr)
	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 1 })

	srv.anomaly("svc-slow", 1)
	waitUntil(t, "the kernel's artifact while the recording still dumps", func() bool { return len(srv.arts.All()) == 1 })
	if a := srv.arts.All()[0]; a.Kind != "kernel" {
		t.Fatalf("first artifact %+v, want the kernel's", a)
	}
	if cs := srv.m.Captures(0); len(cs) != 1 || cs[0].State != capture.StateRequested {
		t.Fatalf("captures %+v, want one still requested", cs)
	}
	close(release)
	c := srv.finished(t)
	if c.State != capture.StateComplete || len(c.Artifacts) != 2 {
		t.Fatalf("capture = %+v", c)
	}
}

func TestTargetExitsMidDump(t *testing.T) {
	srv := newServer(t, nil)
	proc := child(t)
	other := child(t)
	cpu := &fakeProfiler{name: "cpu"}
	cpu.dumpFn = func(ctx context.Context, tg profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
		if tg.PID != proc.Process.Pid {
			return []profiler.Artifact{{Kind: "cpu", FileName: "ok", Data: []byte("ok")}}, nil
		}
		// The target dies while it is being dumped.
		_ = proc.Process.Kill()
		_ = proc.Wait()
		return []profiler.Artifact{{Kind: "cpu", FileName: "cut", Data: []byte("half"), Partial: true}},
			fmt.Errorf("read samples of pid %d: %w", tg.PID, profiler.ErrTargetGone)
	}
	cfg := testConfig(srv.url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-dies"}, {PID: other.Process.Pid, Service: "svc-lives"}}
	a := startAgent(t, cfg, cpu)
	waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 2 })

	srv.anomaly("svc-dies", 1)
	c := srv.finished(t)
	if c.State != capture.StatePartial || len(c.Artifacts) != 1 || !strings.Contains(c.Error, "target exited during the dump") {
		t.Fatalf("capture = %+v", c)
	}
	if arts := srv.arts.All(); len(arts) != 1 || !arts[0].Partial {
		t.Fatalf("artifacts = %+v", arts)
	}
	// Discovery notices the exit: the recording is stopped and the target dropped.
	waitUntil(t, "stop of the dead target", func() bool { return slices.Contains(cpu.stoppedPIDs(), proc.Process.Pid) })
	waitUntil(t, "target list update", func() bool { return len(a.processes()) == 1 })

	// The agent keeps serving the other target.
	srv.anomaly("svc-lives", 2)
	waitUntil(t, "second capture", func() bool {
		for _, c := range srv.m.Captures(0) {
			if c.Service == "svc-lives" && c.State == capture.StateComplete {
				return true
			}
		}
		return false
	})
}

// recorder is a minimal stand-in for the server's capture routes, for tests
// that post dump requests themselves (the real server would coalesce them
// before they reach the agent).
type recorder struct {
	mu        sync.Mutex
	uploads   map[string][]string // capture → file names
	completed map[string]agentapi.Completion
}

func newRecorder(t *testing.T) (*recorder, string) {
	r := &recorder{uploads: map[string][]string{}, completed: map[string]agentapi.Completion{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/agents", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, agentapi.RegistrationReply{AgentID: "a1", HeartbeatSeconds: 10})
	})
	mux.HandleFunc("PUT /api/v1/agents/{id}", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, agentapi.RegistrationReply{AgentID: "a1", HeartbeatSeconds: 10})
	})
	mux.HandleFunc("DELETE /api/v1/agents/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /api/v1/captures/{id}/artifacts", func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.uploads[req.PathValue("id")] = append(r.uploads[req.PathValue("id")], req.URL.Query().Get("fileName"))
		r.mu.Unlock()
		writeJSON(w, http.StatusCreated, map[string]any{"id": "x"})
	})
	mux.HandleFunc("POST /api/v1/captures/{id}/complete", func(w http.ResponseWriter, req *http.Request) {
		var c agentapi.Completion
		_ = json.NewDecoder(req.Body).Decode(&c)
		r.mu.Lock()
		r.completed[req.PathValue("id")] = c
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *recorder) done(id string) (agentapi.Completion, []string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.completed[id]
	return c, append([]string(nil), r.uploads[id]...), ok
}

// apiURL names path on a's API through its unix socket, for the helpers
// below (testClient): the test calls as its own user, root or the owner of
// the test's child processes.
func apiURL(a *Agent, path string) string { return "unix:" + a.Socket() + "!" + path }

// testClient returns the client and URL for u: an http(s) URL as it is, or
// an apiURL through the agent's socket.
func testClient(u string) (*http.Client, string) {
	sock, path, ok := strings.Cut(strings.TrimPrefix(u, "unix:"), "!")
	if !strings.HasPrefix(u, "unix:") || !ok {
		return http.DefaultClient, u
	}
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}, "http://agent" + path
}

func postJSON(t *testing.T, u, token string, v any) (int, string) {
	t.Helper()
	hc, u := testClient(u)
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestCoalescesOverlappingDumps(t *testing.T) {
	rec, url := newRecorder(t)
	proc := child(t)
	release := make(chan struct{})
	cpu := &fakeProfiler{name: "cpu"}
	cpu.dumpFn = func(ctx context.Context, tg profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
		<-release
		return []profiler.Artifact{{Kind: "cpu", FileName: fmt.Sprintf("cpu-%d-%d", w.Start.Unix(), w.End.Unix()), Data: []byte("x"), Start: w.Start, End: w.End}}, nil
	}
	cfg := testConfig(url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid}}
	a := startAgent(t, cfg, cpu)
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // before the agent's: a failed test must not leave dumps waiting
	waitUntil(t, "target", func() bool { return len(a.processes()) == 1 })
	dumpURL := apiURL(a, agentapi.DumpPath)
	pid := int64(proc.Process.Pid)
	s := int64(1_000 * time.Second)
	for _, r := range []agentapi.DumpRequest{
		{CaptureID: "first", PID: pid, Start: s, End: s + int64(10*time.Second)},
		{CaptureID: "inside", PID: pid, Start: s + int64(2*time.Second), End: s + int64(5*time.Second)},  // covered: reuses "first"
		{CaptureID: "beyond", PID: pid, Start: s + int64(5*time.Second), End: s + int64(20*time.Second)}, // overlaps, not covered: runs after
	} {
		if code, body := postJSON(t, dumpURL, "", r); code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", r.CaptureID, code, body)
		}
	}
	waitUntil(t, "the first dump", func() bool { return cpu.dumpCount() >= 1 })
	time.Sleep(50 * time.Millisecond)
	if n := cpu.dumpCount(); n != 1 {
		t.Fatalf("dumps while the first runs = %d, want 1 (the others wait)", n)
	}
	releaseAll()
	for id, want := range map[string]string{"first": "cpu-1000-1010", "inside": "cpu-1000-1010", "beyond": "cpu-1005-1020"} {
		waitUntil(t, id, func() bool { _, _, ok := rec.done(id); return ok })
		c, files, _ := rec.done(id)
		if c.Status != "complete" || len(files) != 1 || files[0] != want {
			t.Errorf("%s: completion %+v, uploads %v, want %s", id, c, files, want)
		}
	}
	if n := cpu.dumpCount(); n != 2 {
		t.Errorf("dumps = %d, want 2", n)
	}
}

// startTokenAgent runs an agent with token "tok" and a cpu profiler of one
// child process, registered with serverURL.
func startTokenAgent(t *testing.T, serverURL string) (*Agent, *exec.Cmd) {
	t.Helper()
	proc := child(t)
	cfg := testConfig(serverURL)
	cfg.AuthToken = "tok"
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid}}
	a := startAgent(t, cfg, &fakeProfiler{name: "cpu"})
	waitUntil(t, "target", func() bool { return len(a.processes()) == 1 })
	return a, proc
}

func TestDumpRequestValidation(t *testing.T) {
	_, url := newRecorder(t)
	a, proc := startTokenAgent(t, url)
	pid := int64(proc.Process.Pid)
	now := time.Now().UnixNano()
	ok := agentapi.DumpRequest{CaptureID: "c1", PID: pid, Start: now - int64(time.Second), End: now}
	for _, tc := range []struct {
		name   string
		token  string
		mod    func(*agentapi.DumpRequest)
		status int
		msg    string
	}{
		{name: "no token", status: http.StatusUnauthorized, msg: "bearer token"},
		{name: "wrong token", token: "nope", status: http.StatusUnauthorized, msg: "bearer token"},
		{name: "unknown pid", token: "tok", mod: func(r *agentapi.DumpRequest) { r.PID = 1 << 30 }, status: http.StatusNotFound, msg: "is not a target"},
		{name: "end before start", token: "tok", mod: func(r *agentapi.DumpRequest) { r.End = r.Start - 1 }, status: http.StatusBadRequest, msg: "start before end"},
		{name: "no start", token: "tok", mod: func(r *agentapi.DumpRequest) { r.Start = 0 }, status: http.StatusBadRequest, msg: "start before end"},
		{name: "window too long", token: "tok", mod: func(r *agentapi.DumpRequest) { r.Start = r.End - int64(time.Hour) }, status: http.StatusBadRequest, msg: "longer than"},
		{name: "no capture id", token: "tok", mod: func(r *agentapi.DumpRequest) { r.CaptureID = "" }, status: http.StatusBadRequest, msg: "captureId"},
		{name: "unknown kind", token: "tok", mod: func(r *agentapi.DumpRequest) { r.Kinds = []string{"jfr"} }, status: http.StatusNotFound, msg: "no recording of kinds [jfr]"},
		{name: "relative upload URL", token: "tok", mod: func(r *agentapi.DumpRequest) { r.UploadURL = "/elsewhere" }, status: http.StatusBadRequest, msg: "absolute http(s) URL"},
		{name: "upload URL not http", token: "tok", mod: func(r *agentapi.DumpRequest) { r.UploadURL = "file:///tmp/x" }, status: http.StatusBadRequest, msg: "absolute http(s) URL"},
		{name: "accepted", token: "tok", status: http.StatusAccepted, msg: `"kinds":["cpu"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			if tc.mod != nil {
				tc.mod(&r)
			}
			code, body := postJSON(t, a.DumpURL(), tc.token, r)
			if code != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("got %d %s, want %d containing %q", code, body, tc.status, tc.msg)
			}
		})
	}
}

// TestDumpUploadsToUploadURL: a dump request naming an upload URL (a
// scale-out detector's) sends the capture's artifacts and completion there,
// with the agent's token, and nothing to the server it registered with.
func TestDumpUploadsToUploadURL(t *testing.T) {
	registered, url := newRecorder(t)
	var (
		mu    sync.Mutex
		calls []string // method path authorization
	)
	det := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/complete") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"id": "x"})
	}))
	t.Cleanup(det.Close)
	a, proc := startTokenAgent(t, url)
	now := time.Now().UnixNano()
	req := agentapi.DumpRequest{CaptureID: "c-det", PID: int64(proc.Process.Pid), Start: now - int64(time.Second), End: now,
		UploadURL: det.URL + "/"}
	if code, body := postJSON(t, a.DumpURL(), "tok", req); code != http.StatusAccepted {
		t.Fatalf("dump = %d %s", code, body)
	}
	waitUntil(t, "completion at the upload URL", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) > 0 && strings.HasPrefix(calls[len(calls)-1], "POST /api/v1/captures/c-det/complete ")
	})
	mu.Lock()
	got := append([]string(nil), calls...)
	mu.Unlock()
	want := []string{"POST /api/v1/captures/c-det/artifacts Bearer tok", "POST /api/v1/captures/c-det/complete Bearer tok"}
	if !slices.Equal(got, want) {
		t.Errorf("upload URL got %q, want %q", got, want)
	}
	if _, ups, ok := registered.done("c-det"); ok || len(ups) != 0 {
		t.Errorf("the registration server got uploads %v (completed %v)", ups, ok)
	}
}

func TestProcessAPI(t *testing.T) {
	_, url := newRecorder(t)
	proc := child(t)
	cpu := &fakeProfiler{name: "cpu"}
	a := startAgent(t, testConfig(url), cpu)
	base := apiURL(a, "/api/v1/processes")

	code, body := postJSON(t, base, "", agentapi.Process{PID: int64(proc.Process.Pid), Service: "svc-run", InstanceID: "i-1"})
	var got agentapi.Process
	_ = json.Unmarshal([]byte(body), &got)
	if code != http.StatusCreated || got.Service != "svc-run" || got.InstanceID != "i-1" || !slices.Equal(got.Kinds, []string{"cpu"}) {
		t.Fatalf("POST = %d %s", code, body)
	}
	if !slices.Equal(cpu.startedPIDs(), []int{proc.Process.Pid}) {
		t.Fatalf("started = %v", cpu.startedPIDs())
	}
	if code, body := postJSON(t, base, "", agentapi.Process{PID: 1 << 21}); code != http.StatusNotFound {
		t.Errorf("POST unknown pid = %d %s", code, body)
	}
	if code, msg := deleteReq(t, fmt.Sprintf("%s/%d", base, proc.Process.Pid)); code != http.StatusNoContent || !slices.Equal(cpu.stoppedPIDs(), []int{proc.Process.Pid}) || len(a.processes()) != 0 {
		t.Fatalf("DELETE = %d %s, stopped %v, targets %v", code, msg, cpu.stoppedPIDs(), a.processes())
	}
}

func TestDiscoversOTelProcess(t *testing.T) {
	_, url := newRecorder(t)
	proc := child(t, "OTEL_SERVICE_NAME=svc-x", "OTEL_RESOURCE_ATTRIBUTES=service.name=ignored,service.instance.id=x-1")
	pid := proc.Process.Pid
	// Only the test's child: other processes of the machine are left alone.
	cpu := &fakeProfiler{name: "cpu", supports: func(t profiler.Target) bool { return t.PID == pid }}
	failing := &fakeProfiler{name: "jfr", startErr: fmt.Errorf("attach failed")}
	cfg := testConfig(url)
	cfg.Discover = true
	a := startAgent(t, cfg, cpu, failing)

	var found *agentapi.Process
	// The profiler starts before the target joins the agent's process list:
	// wait for both.
	waitUntil(t, "discovery", func() bool {
		for _, p := range a.processes() {
			if p.PID == int64(pid) {
				found = &p
			}
		}
		return slices.Contains(cpu.startedPIDs(), pid) && found != nil
	})
	if found == nil || found.Service != "svc-x" || found.InstanceID != "x-1" || !slices.Equal(found.Kinds, []string{"cpu"}) {
		t.Fatalf("discovered = %+v", found)
	}
	_ = proc.Process.Kill()
	_ = proc.Wait()
	waitUntil(t, "stop after exit", func() bool { return slices.Contains(cpu.stoppedPIDs(), pid) })
	if n := len(cpu.startedPIDs()); n != 1 {
		t.Errorf("started %d times, want 1", n)
	}
}

func TestBoundsConcurrentDumps(t *testing.T) {
	rec, url := newRecorder(t)
	procs := []*exec.Cmd{child(t), child(t), child(t)}
	release := make(chan struct{})
	var mu sync.Mutex
	running, peak := 0, 0
	cpu := &fakeProfiler{name: "cpu", dumpFn: func(context.Context, profiler.Target, profiler.Window) ([]profiler.Artifact, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return []profiler.Artifact{{Kind: "cpu", FileName: "f", Data: []byte("x")}}, nil
	}}
	cfg := testConfig(url)
	cfg.MaxConcurrentDumps = 2
	for _, p := range procs {
		cfg.Targets = append(cfg.Targets, TargetSpec{PID: p.Process.Pid})
	}
	a := startAgent(t, cfg, cpu)
	waitUntil(t, "targets", func() bool { return len(a.processes()) == 3 })
	now := time.Now().UnixNano()
	for i, p := range procs {
		r := agentapi.DumpRequest{CaptureID: fmt.Sprint("c", i), PID: int64(p.Process.Pid), Start: now - int64(time.Second), End: now}
		if code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", r); code != http.StatusAccepted {
			t.Fatalf("%d %s", code, body)
		}
	}
	waitUntil(t, "two dumps running", func() bool { return cpu.dumpCount() == 2 })
	time.Sleep(50 * time.Millisecond)
	if n := cpu.dumpCount(); n != 2 {
		t.Fatalf("dumps started = %d, want 2 (bound)", n)
	}
	close(release)
	for i := range procs {
		waitUntil(t, "completion", func() bool { _, _, ok := rec.done(fmt.Sprint("c", i)); return ok })
	}
	mu.Lock()
	defer mu.Unlock()
	if peak != 2 {
		t.Errorf("peak concurrent dumps = %d, want 2", peak)
	}
}

// Dumps run on threads at Config.DumpNice; 0 leaves them at the agent's.
func TestDumpNice(t *testing.T) {
	nice := func() int {
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0) // the calling thread
		if err != nil {
			t.Error(err)
		}
		return 20 - prio // the raw syscall answers 20 - nice
	}
	base := nice()
	for _, want := range []int{0, 10} {
		t.Run(fmt.Sprint("nice ", want), func(t *testing.T) {
			srv := newServer(t, nil)
			proc := child(t)
			got := make(chan int, 1)
			cpu := &fakeProfiler{name: "cpu", dumpFn: func(_ context.Context, tg profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
				got <- nice()
				return []profiler.Artifact{{Kind: "cpu", FileName: "cpu.bin", Data: []byte("x")}}, nil
			}}
			cfg := testConfig(srv.url)
			cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-nice"}}
			cfg.DumpNice = want
			startAgent(t, cfg, cpu)
			waitUntil(t, "registration", func() bool { return len(srv.agents()) == 1 && len(srv.agents()[0].Processes) == 1 })
			srv.anomaly("svc-nice", 1)
			if c := srv.finished(t); c.State != capture.StateComplete {
				t.Fatalf("capture = %+v", c)
			}
			exp := max(base, want)
			if n := <-got; n != exp {
				t.Errorf("dump thread's nice = %d, want %d", n, exp)
			}
			if n := nice(); n != base {
				t.Errorf("the test's thread's nice changed to %d", n)
			}
		})
	}
}
