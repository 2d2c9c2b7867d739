package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/profiler"
)

// fakeCgroupProfiler is a fakeProfiler that also records cgroups.
type fakeCgroupProfiler struct {
	*fakeProfiler
	cmu        sync.Mutex
	cgroups    map[uint64]bool
	started    []uint64
	cgroupDump []string // "id dir pid"
}

func newFakeCgroupProfiler(name string, supports func(profiler.Target) bool) *fakeCgroupProfiler {
	return &fakeCgroupProfiler{fakeProfiler: &fakeProfiler{name: name, supports: supports}, cgroups: map[uint64]bool{}}
}

func (f *fakeCgroupProfiler) StartCgroup(id uint64) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	f.cgroups[id] = true
	f.started = append(f.started, id)
	return nil
}

func (f *fakeCgroupProfiler) StopCgroup(id uint64) error {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if !f.cgroups[id] {
		return profiler.ErrUnknownTarget
	}
	delete(f.cgroups, id)
	return nil
}

func (f *fakeCgroupProfiler) DumpCgroup(_ context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	f.cmu.Lock()
	f.cgroupDump = append(f.cgroupDump, fmt.Sprintf("%d %s %d", id, dir, t.PID))
	f.cmu.Unlock()
	return []profiler.Artifact{{Kind: f.name, FileName: fmt.Sprintf("%s-cgroup-%d", f.name, id), Data: []byte("x"), Start: w.Start, End: w.End}}, nil
}

func (f *fakeCgroupProfiler) state() (on []uint64, started []uint64, dumps []string) {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	for id := range f.cgroups {
		on = append(on, id)
	}
	return on, append([]uint64(nil), f.started...), append([]string(nil), f.cgroupDump...)
}

func deleteReq(t *testing.T, u string) (int, string) {
	t.Helper()
	hc, u := testClient(u)
	req, _ := http.NewRequest(http.MethodDelete, u, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error
}

func TestParseContainerSpec(t *testing.T) {
	for in, want := range map[string]string{
		"/app":                               "path=/app",
		"path=/a/b,service=s,instance=i":     "path=/a/b,service=s,instance=i",
		"id=42":                              "id=42",
		"path=/x,id=7":                       "path=/x,id=7",
		"/sys/fs/cgroup/unified/x.slice/y-1": "path=/sys/fs/cgroup/unified/x.slice/y-1",
	} {
		c, err := ParseContainerSpec(in)
		if err != nil || c.String() != want {
			t.Errorf("ParseContainerSpec(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                 "empty",
		"id=0":             "positive integer",
		"id=-1":            "positive integer",
		"service=s":        "needs path= or id=",
		"path=/x,color=1":  `unknown key "color"`,
		"path=/x,service=": "not key=value",
	} {
		if _, err := ParseContainerSpec(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseContainerSpec(%q) = %v, want an error containing %q", in, err, msg)
		}
	}
	cfg := DefaultConfig()
	cfg.Containers = []ContainerSpec{{Service: "s"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "containers[0]: needs a cgroup path or id") {
		t.Errorf("Validate = %v", err)
	}
}

// TestContainerAPIValidation: bad container registrations get clear errors
// (no root needed: nothing is created).
func TestContainerAPIValidation(t *testing.T) {
	_, url := newRecorder(t)
	kern := newFakeCgroupProfiler("kernel", nil)
	a := startAgent(t, testConfig(url), kern)
	base := apiURL(a, "/api/v1/containers")
	if a.cgroupRoot == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cases := []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"empty", map[string]any{}, http.StatusBadRequest, "give a cgroup path"},
		{"unknown field", map[string]any{"cgroup": "/x", "pid": 1}, http.StatusBadRequest, "pid"},
		{"no such path", ContainerSpec{Cgroup: "/rootline-no-such-cgroup"}, http.StatusNotFound,
			filepath.Join(a.cgroupRoot, "rootline-no-such-cgroup") + " does not exist"},
		{"no such absolute path", ContainerSpec{Cgroup: filepath.Join(a.cgroupRoot, "rootline-no-such-cgroup")}, http.StatusNotFound, "does not exist"},
		{"dot-dot stays inside", ContainerSpec{Cgroup: "../../etc"}, http.StatusNotFound, filepath.Join(a.cgroupRoot, "etc") + " does not exist"},
		{"a file", ContainerSpec{Cgroup: "/cgroup.procs"}, http.StatusBadRequest, "is not a directory"},
		{"root cgroup", ContainerSpec{Cgroup: "/"}, http.StatusBadRequest, "root cgroup is not a container"},
		{"no such id", ContainerSpec{CgroupID: 1 << 62}, http.StatusNotFound, fmt.Sprintf("no cgroup v2 has id %d", uint64(1<<62))},
	}
	var sfs unix.Statfs_t
	if v1 := "/sys/fs/cgroup/cpu"; unix.Statfs(v1, &sfs) == nil && sfs.Type == unix.CGROUP_SUPER_MAGIC {
		cases = append(cases, struct {
			name   string
			body   any
			status int
			msg    string
		}{"cgroup v1", ContainerSpec{Cgroup: v1}, http.StatusBadRequest, "is not a cgroup v2 directory"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := postJSON(t, base, "", tc.body)
			if code != tc.status || !strings.Contains(body, tc.msg) {
				t.Fatalf("got %d %s, want %d containing %q", code, body, tc.status, tc.msg)
			}
		})
	}
	if code, msg := deleteReq(t, base+"/abc"); code != http.StatusBadRequest || !strings.Contains(msg, "cgroup id") {
		t.Errorf("DELETE abc = %d %s", code, msg)
	}
	if code, msg := deleteReq(t, base+"/12345"); code != http.StatusNotFound || !strings.Contains(msg, "not a registered container") {
		t.Errorf("DELETE unknown = %d %s", code, msg)
	}
	if got := get(t, base); strings.TrimSpace(got) != "[]" {
		t.Errorf("GET = %s", got)
	}

	// Without a cgroup v2 hierarchy, or without a profiler recording cgroups: 501.
	a.cgroupRoot = ""
	if code, body := postJSON(t, base, "", ContainerSpec{Cgroup: "/x"}); code != http.StatusNotImplemented || !strings.Contains(body, "no cgroup v2 hierarchy") {
		t.Errorf("no cgroup2: %d %s", code, body)
	}
	_, url2 := newRecorder(t)
	b := startAgent(t, testConfig(url2), &fakeProfiler{name: "cpu"})
	code, body := postJSON(t, apiURL(b, "/api/v1/containers"), "", ContainerSpec{Cgroup: "/x"})
	if code != http.StatusNotImplemented || !strings.Contains(body, "no profiler of this agent records cgroups") {
		t.Errorf("no cgroup profiler: %d %s", code, body)
	}
}

// TestProcessCgroupNotFollowed: a registered process is recorded by pid,
// never as its cgroup, whatever cgroup it lives in.
func TestProcessCgroupNotFollowed(t *testing.T) {
	_, url := newRecorder(t)
	var dir string
	if root := cgroup2Root(); root != "" { // a non-root cgroup, when we may create one
		dir = filepath.Join(root, fmt.Sprintf("rootline-agent-plain-%d", os.Getpid()))
		if os.Mkdir(dir, 0o755) != nil {
			dir = ""
		} else {
			t.Cleanup(func() { _ = os.Remove(dir) }) // after the child is killed
		}
	}
	proc := child(t)
	if dir != "" {
		joinCgroup(t, dir, proc.Process.Pid)
	}
	kern := newFakeCgroupProfiler("kernel", func(tg profiler.Target) bool { return tg.PID == proc.Process.Pid })
	a := startAgent(t, testConfig(url), kern)
	code, body := postJSON(t, apiURL(a, "/api/v1/processes"), "", agentapi.Process{PID: int64(proc.Process.Pid)})
	if code != http.StatusCreated {
		t.Fatalf("POST = %d %s", code, body)
	}
	on, started, _ := kern.state()
	if len(on)+len(started) != 0 || !slices.Equal(kern.startedPIDs(), []int{proc.Process.Pid}) {
		t.Errorf("cgroups started %v, pids started %v", started, kern.startedPIDs())
	}
}

// makeCgroup creates a cgroup v2 for the test (root needed) and removes it
// at cleanup; register the cleanups of its processes after it.
func makeCgroup(t *testing.T, root, name string) (dir string, id uint64) {
	t.Helper()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	dir = filepath.Join(root, fmt.Sprintf("%s-%d", name, os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup v2 (root needed): %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, st.Ino
}

func joinCgroup(t *testing.T, dir string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestContainerLifecycle: a registered container's processes are targets
// of the cgroup profiler only, a dump of one of them is the container's,
// and unregistering it (or removing the cgroup) ends its recording. Needs
// root (to create a cgroup), not BPF.
func TestContainerLifecycle(t *testing.T) {
	rec, url := newRecorder(t)
	root := cgroup2Root()
	dir, id := makeCgroup(t, root, "rootline-agent-unit")
	proc := child(t)
	joinCgroup(t, dir, proc.Process.Pid)
	pid := proc.Process.Pid
	kern := newFakeCgroupProfiler("kernel", nil)
	cpu := &fakeProfiler{name: "cpu"}
	a := startAgent(t, testConfig(url), kern, cpu)
	base := apiURL(a, "/api/v1/containers")

	rel := strings.TrimPrefix(dir, root)
	code, body := postJSON(t, base, "", ContainerSpec{Cgroup: rel, Service: "svc-ctr", InstanceID: "ctr-1"})
	var got Container
	_ = json.Unmarshal([]byte(body), &got)
	if code != http.StatusCreated || got.CgroupID != id || got.Path != rel || got.Dir != dir ||
		!slices.Equal(got.Kinds, []string{"kernel"}) || !slices.Equal(got.PIDs, []int{pid}) || got.Service != "svc-ctr" {
		t.Fatalf("POST = %d %s", code, body)
	}
	// By id, and by path and id, it is the same container.
	if code, body := postJSON(t, base, "", ContainerSpec{CgroupID: id}); code != http.StatusCreated || !strings.Contains(body, `"path":"`+rel+`"`) {
		t.Errorf("POST by id = %d %s", code, body)
	}
	if code, body := postJSON(t, base, "", ContainerSpec{Cgroup: dir, CgroupID: id + 1}); code != http.StatusBadRequest || !strings.Contains(body, "not "+strconv.FormatUint(id+1, 10)) {
		t.Errorf("POST with the wrong id = %d %s", code, body)
	}
	procs := a.processes()
	want := agentapi.Process{PID: int64(pid), Service: "svc-ctr", InstanceID: "ctr-1", Command: "sleep 30", Kinds: []string{"kernel"}}
	if len(procs) != 1 || fmt.Sprint(procs[0]) != fmt.Sprint(want) {
		t.Fatalf("processes = %+v, want %+v", procs, want)
	}
	if len(kern.startedPIDs())+len(cpu.startedPIDs()) != 0 {
		t.Errorf("profilers started for a container's process: kernel %v, cpu %v", kern.startedPIDs(), cpu.startedPIDs())
	}

	// A dump of the process is the container's.
	now := int64(1_000_000_000_000)
	if code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", agentapi.DumpRequest{CaptureID: "c1", PID: int64(pid), Start: now, End: now + 1e9}); code != http.StatusAccepted {
		t.Fatalf("dump = %d %s", code, body)
	}
	waitUntil(t, "dump", func() bool { _, _, ok := rec.done("c1"); return ok })
	c, files, _ := rec.done("c1")
	_, _, dumps := kern.state()
	if c.Status != agentapi.StatusComplete || !slices.Equal(files, []string{fmt.Sprintf("kernel-cgroup-%d", id)}) ||
		!slices.Equal(dumps, []string{fmt.Sprintf("%d %s %d", id, dir, pid)}) || kern.dumpCount() != 0 {
		t.Errorf("completion %+v, uploads %v, cgroup dumps %v, pid dumps %d", c, files, dumps, kern.dumpCount())
	}

	code, msg := deleteReq(t, fmt.Sprintf("%s/%d", base, id))
	on, _, _ := kern.state()
	if code != http.StatusNoContent || len(on) != 0 || len(a.processes()) != 0 || len(a.Containers()) != 0 {
		t.Fatalf("DELETE = %d %s; cgroups recorded %v, targets %v", code, msg, on, a.processes())
	}

	// A configured container is followed until its cgroup is removed, and the API cannot remove it.
	_, url2 := newRecorder(t)
	cfg := testConfig(url2)
	cfg.Containers = []ContainerSpec{{Cgroup: dir}}
	kern2 := newFakeCgroupProfiler("kernel", nil)
	b := startAgent(t, cfg, kern2)
	waitUntil(t, "configured container", func() bool { return len(b.Containers()) == 1 && len(b.processes()) == 1 })
	if code, msg := deleteReq(t, apiURL(b, fmt.Sprintf("/api/v1/containers/%d", id))); code != http.StatusConflict || !strings.Contains(msg, "--kernel.cgroup") {
		t.Errorf("DELETE configured = %d %s", code, msg)
	}
	_ = proc.Process.Kill()
	_ = proc.Wait()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "removed cgroup forgotten", func() bool { return len(b.Containers()) == 0 && len(b.processes()) == 0 })
	if on, _, _ := kern2.state(); len(on) != 0 {
		t.Errorf("cgroups still recorded: %v", on)
	}
	if err := os.Mkdir(dir, 0o755); err != nil { // for the cleanup, and to be followed again
		t.Fatal(err)
	}
	waitUntil(t, "re-created cgroup followed", func() bool { return len(b.Containers()) == 1 })
}
