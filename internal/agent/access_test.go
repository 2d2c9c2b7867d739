package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/bpftest"
)

// socketClientEnv makes the test binary a one-request client of an agent's
// unix socket (socketClientMain), so that a test can call the agent as
// another user.
const socketClientEnv = "ROOTLINE_AGENT_TEST_SOCKET_CLIENT"

// socketClientMain sends one request, described by the environment, to the
// agent's socket and prints the status and the body.
func socketClientMain() int {
	c, err := agentapi.NewAgentClient("unix:"+os.Getenv(socketClientEnv), agentapi.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	var body io.Reader
	if b := os.Getenv("REQ_BODY"); b != "" {
		body = strings.NewReader(b)
	}
	resp, err := c.Do(context.Background(), os.Getenv("REQ_METHOD"), os.Getenv("REQ_PATH"), "application/json", body)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
	return 0
}

const nobody = 65534

// asUser sends one request to the agent's socket from a process running as
// uid (exe is a copy of the test binary that uid may run) and returns the
// status and body.
func asUser(t *testing.T, exe, socket string, uid uint32, method, path, body string) (int, string) {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = []string{socketClientEnv + "=" + socket, "REQ_METHOD=" + method, "REQ_PATH=" + path, "REQ_BODY=" + body}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d: %v\n%s", uid, err, out)
	}
	code, rest, _ := strings.Cut(string(out), " ")
	n, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("client as uid %d: %s", uid, out)
	}
	return n, rest
}

// TestSocketChecksTheCallersUID: on the unix socket a user that is neither
// root nor the owner of a process can neither register it, nor dump it, nor
// see it, nor forget root's registration, nor use the node-wide routes;
// the owner can register, see and forget its own process; root can
// register anyone's. The clients are separate processes running as
// nobody: the agent learns their uid from the kernel (SO_PEERCRED).
func TestSocketChecksTheCallersUID(t *testing.T) {
	bpftest.RequireRoot(t, "runs clients as another user")
	dir := t.TempDir()
	// nobody must reach the test binary's copy and the socket.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "client")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}

	rootProc := child(t)
	theirs := exec.Command("sleep", "30")
	theirs.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := theirs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theirs.Process.Kill(); _ = theirs.Wait() })

	_, url := newRecorder(t)
	cfg := testConfig(url)
	cfg.Socket = filepath.Join(dir, "agent.sock")
	cpu := &fakeProfiler{name: "cpu"}
	a := startAgent(t, cfg, cpu)
	if fi, err := os.Stat(cfg.Socket); err != nil || fi.Mode().Perm() != 0o666 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}

	reg := func(pid int, svc string) string {
		return fmt.Sprintf(`{"pid":%d,"service":%q}`, pid, svc)
	}
	rootPID, theirPID := rootProc.Process.Pid, theirs.Process.Pid
	now := time.Now().UnixNano()
	dump := fmt.Sprintf(`{"captureId":"c1","pid":%d,"start":%d,"end":%d}`, rootPID, now-int64(time.Second), now)

	// Root registers its process (test's own uid, through the socket).
	if code, body := postJSON(t, apiURL(a, "/api/v1/processes"), "", json.RawMessage(reg(rootPID, "root-svc"))); code != http.StatusCreated {
		t.Fatalf("root registering pid %d: %d %s", rootPID, code, body)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		msg                      string
	}{
		{"someone else's process", "POST", "/api/v1/processes", reg(rootPID, "stolen"), http.StatusForbidden, "may not act on pid"},
		{"pid 1", "POST", "/api/v1/processes", reg(1, "init"), http.StatusForbidden, "may not act on pid 1"},
		{"a dump of someone else's process", "POST", "/api/v1/dump", dump, http.StatusForbidden, "may not act on pid"},
		{"forget root's registration", "DELETE", fmt.Sprint("/api/v1/processes/", rootPID), "", http.StatusForbidden, "did not register"},
		{"the containers", "GET", "/api/v1/containers", "", http.StatusForbidden, "for root or a holder of the agent's token"},
		{"register a container", "POST", "/api/v1/containers", `{"cgroup":"/x"}`, http.StatusForbidden, "for root or a holder"},
		{"its own process", "POST", "/api/v1/processes", reg(theirPID, "mine"), http.StatusCreated, `"service":"mine"`},
		{"the list shows its own process only", "GET", "/api/v1/processes", "", http.StatusOK, fmt.Sprintf(`[{"pid":%d,"service":"mine"`, theirPID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := asUser(t, exe, cfg.Socket, nobody, tc.method, tc.path, tc.body)
			if code != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("%s %s as nobody = %d %s, want %d with %q", tc.method, tc.path, code, body, tc.status, tc.msg)
			}
		})
	}
	// The refused registrations changed nothing: root's process keeps its name.
	var names []string
	for _, p := range a.processes() {
		names = append(names, fmt.Sprint(p.PID, "=", p.Service))
	}
	want := []string{fmt.Sprint(rootPID, "=root-svc"), fmt.Sprint(theirPID, "=mine")}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("targets = %v, want %v", names, want)
	}
	if code, body := asUser(t, exe, cfg.Socket, nobody, "DELETE", fmt.Sprint("/api/v1/processes/", theirPID), ""); code != http.StatusNoContent {
		t.Fatalf("nobody forgetting its process: %d %s", code, body)
	}
	if m := get(t, "http://"+a.Addr().String()+"/metrics"); !strings.Contains(m, `rootline_agent_refused_total{request="register"} 2`) ||
		!strings.Contains(m, `rootline_agent_refused_total{request="dump"} 1`) || !strings.Contains(m, `rootline_agent_refused_total{request="forget"} 1`) {
		t.Errorf("refusals not counted:\n%s", m)
	}
}

// TestTCPNeedsTheToken: without a token configured, the /api/ routes over
// TCP answer 403 and point at the socket; /metrics and /healthz stay open.
// With one, they need it.
func TestTCPNeedsTheToken(t *testing.T) {
	_, url := newRecorder(t)
	proc := child(t)
	a := startAgent(t, testConfig(url), &fakeProfiler{name: "cpu"})
	base := "http://" + a.Addr().String()
	for _, path := range []string{"/api/v1/processes", "/api/v1/containers"} {
		code, body := postJSON(t, base+path, "", agentapi.Process{PID: int64(proc.Process.Pid)})
		if code != http.StatusForbidden || !strings.Contains(body, "needs a token") || !strings.Contains(body, a.Socket()) {
			t.Errorf("POST %s over TCP without a token = %d %s, want 403 naming the socket", path, code, body)
		}
	}
	if len(a.processes()) != 0 {
		t.Fatalf("registered over TCP without a token: %v", a.processes())
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %s", path, resp.Status)
		}
	}

	cfg := testConfig(url)
	cfg.AuthToken = "tok"
	b := startAgent(t, cfg, &fakeProfiler{name: "cpu"})
	for _, tc := range []struct {
		token  string
		status int
	}{{"", http.StatusUnauthorized}, {"nope", http.StatusUnauthorized}, {"tok", http.StatusCreated}} {
		if code, body := postJSON(t, "http://"+b.Addr().String()+"/api/v1/processes", tc.token, agentapi.Process{PID: int64(proc.Process.Pid)}); code != tc.status {
			t.Errorf("POST over TCP with token %q = %d %s, want %d", tc.token, code, body, tc.status)
		}
	}
	// On the socket a wrong token is refused, not ignored in favour of the uid.
	if code, body := postJSON(t, apiURL(b, "/api/v1/processes"), "nope", agentapi.Process{PID: int64(proc.Process.Pid)}); code != http.StatusUnauthorized {
		t.Errorf("POST on the socket with a wrong token = %d %s, want 401", code, body)
	}
}

// TestDumpMustNameThisAgentAndService: a dump request that names another
// registration than the agent's, or another service than its target's, is
// refused; it is what a registration made by someone else with this
// agent's dump URL would send.
func TestDumpMustNameThisAgentAndService(t *testing.T) {
	rec, url := newRecorder(t)
	proc := child(t)
	cfg := testConfig(url)
	cfg.Targets = []TargetSpec{{PID: proc.Process.Pid, Service: "svc-a"}}
	a := startAgent(t, cfg, &fakeProfiler{name: "cpu"})
	waitUntil(t, "registration", func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.agentID == "a1" })
	now := time.Now().UnixNano()
	ok := agentapi.DumpRequest{CaptureID: "c1", AgentID: "a1", PID: int64(proc.Process.Pid), Service: "svc-a", Start: now - int64(time.Second), End: now}
	for _, tc := range []struct {
		name   string
		mod    func(*agentapi.DumpRequest)
		status int
		msg    string
	}{
		{"another registration", func(r *agentapi.DumpRequest) { r.AgentID = "forged" }, http.StatusConflict, `dump request for agent "forged"`},
		{"another service", func(r *agentapi.DumpRequest) { r.Service = "svc-b" }, http.StatusNotFound, `is a target of service "svc-a", not "svc-b"`},
		{"this agent and service", nil, http.StatusAccepted, `"captureId":"c1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			if tc.mod != nil {
				tc.mod(&r)
			}
			code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", r)
			var e struct{ Error string }
			if json.Unmarshal([]byte(body), &e) == nil && e.Error != "" {
				body = e.Error
			}
			if code != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("dump = %d %s, want %d with %q", code, body, tc.status, tc.msg)
			}
		})
	}
	waitUntil(t, "the accepted dump", func() bool { _, _, ok := rec.done("c1"); return ok })
}
