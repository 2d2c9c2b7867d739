package test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/jfr"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

// The critical-path tests run real programs whose handlers measure their own
// waits (test/testdata/cpsvc: a C and a Java service) under `rootline run`
// (the syscall supervisor, which gives each SERVER span its threads'
// intervals) with the agent's kernel recorder (and JFR for the JVM), and
// check, through the server's API, the critical path the server computed
// and stored when the capture of each slow span completed: the state the
// ground truth says, at the share it measured, and the request that blocked
// it.

// cpEnv is a server and an agent for the critical-path tests.
type cpEnv struct {
	srv      *serverProc
	agentURL string
	dir      string
}

// newCPEnv's server stores each capture's paths as it completes, incident
// or not: the critical-path tests read the stored paths.
func newCPEnv(t *testing.T, profilers string, agentArgs ...string) *cpEnv {
	t.Helper()
	return newCPEnvServer(t, profilers, []string{"--capture.eager-paths"}, agentArgs...)
}

// newCPEnvServer is newCPEnv with other server flags (none: the default,
// paths computed while an incident is open, as the diagnosis tests need).
func newCPEnvServer(t *testing.T, profilers string, serverArgs []string, agentArgs ...string) *cpEnv {
	t.Helper()
	bpftest.RequireBPF(t)
	dir := t.TempDir()
	srv := startServer(t, filepath.Join(dir, "data"), append([]string{"--detector.min-fill", "10",
		"--capture.pre", "300ms", "--capture.post", "300ms", "--capture.settle", "1s",
		"--capture.min-interval", "0", "--capture.max-per-minute", "0"}, serverArgs...)...)
	anchor := startTarget(t, "sleep", "600")
	startAgent(t, srv, append([]string{"--profilers", profilers, "--target", fmt.Sprint("pid=", anchor)}, agentArgs...)...)
	var agents []struct {
		DumpURL string `json:"dumpUrl"`
	}
	srv.getJSON(t, "/api/v1/agents", &agents)
	return &cpEnv{srv: srv, agentURL: strings.TrimSuffix(agents[0].DumpURL, "/api/v1/dump"), dir: dir}
}

// cpBuild builds the C service once per test.
func cpBuild(t *testing.T, dir string) string {
	t.Helper()
	needTool(t, "gcc")
	bin := filepath.Join(dir, "cpsvc")
	src, _ := filepath.Abs("testdata/cpsvc/cpsvc.c")
	buildOut(t, dir, "gcc", "-O2", "-Wall", "-pthread", "-o", bin, src)
	return bin
}

// run starts argv under `rootline run --mode <mode>` registered with the
// agent as service name, and waits until the agent records it. The
// supervisor (ptrace) gives SERVER spans their threads' intervals, but its
// syscall stops are on the path (a traced thread waits for it at each
// stop); the datapath (ebpf) does not stop threads, and its spans name their
// threads only, which is enough for one thread per request.
func (e *cpEnv) run(t *testing.T, name, mode string, env []string, argv ...string) (port, pid int) {
	t.Helper()
	_, port = startTraced(t, append([]string{"LISTEN=127.0.0.1:0"}, env...), true,
		[]string{"--mode", mode, "--service", name, "--server", "http://" + e.srv.http, "--agent", e.agentURL}, argv...)
	return port, e.waitProcess(t, name)
}

// waitProcess waits until the agent records a process of service name, and
// returns its pid.
func (e *cpEnv) waitProcess(t *testing.T, name string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var agents []struct {
			Processes []struct {
				PID     int64  `json:"pid"`
				Service string `json:"service"`
			} `json:"processes"`
		}
		e.srv.getJSON(t, "/api/v1/agents", &agents)
		for _, p := range agents[0].Processes {
			if p.Service == name {
				return int(p.PID)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never registered with the agent: %+v", name, agents)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitKind waits until the agent records service svc with a profiler of
// kind (the JFR recording starts after the process registers).
func (e *cpEnv) waitKind(t *testing.T, svc, kind string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var agents []struct {
			Processes []struct {
				Service string   `json:"service"`
				Kinds   []string `json:"kinds"`
			} `json:"processes"`
		}
		e.srv.getJSON(t, "/api/v1/agents", &agents)
		for _, p := range agents[0].Processes {
			if p.Service == svc && slices.Contains(p.Kinds, kind) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never recorded %s with %s: %+v", svc, kind, agents)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// cpGet sends GET /work?<q> as a new trace and returns the trace id and the
// handler's measurements.
func cpGet(t *testing.T, port int, q string) (model.TraceID, map[string]int64) {
	t.Helper()
	var id model.TraceID
	_, _ = rand.Read(id[:])
	var span [8]byte
	_, _ = rand.Read(span[:])
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/work?%s", port, q), nil)
	req.Header.Set("traceparent", "00-"+id.String()+"-"+hex.EncodeToString(span[:])+"-01")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", q, err)
		return id, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Errorf("GET %s: %s", q, resp.Status)
	}
	m := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return id, m
}

// baseline sends n fast requests, one at a time: the detector's baseline.
func baseline(t *testing.T, port int, q string, n int) {
	t.Helper()
	for range n {
		cpGet(t, port, q)
	}
	time.Sleep(500 * time.Millisecond) // their spans reach the detector first
}

// waitPath waits until the server stored the critical paths of the capture
// of the trace's span of service svc (a critical-path artifact linked to
// it) and returns that path.
func (e *cpEnv) waitPath(t *testing.T, trace model.TraceID, svc string) (critpath.SpanPath, critpath.TraceResult) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	var res critpath.TraceResult
	for {
		var arts []artifactJSON
		e.srv.getJSON(t, "/api/v1/traces/"+trace.String()+"/artifacts", &arts)
		stored := false
		for _, a := range arts {
			stored = stored || a.Kind == critpath.ArtifactKind
		}
		if stored {
			e.checkSnapshots(t, arts)
			if code := e.srv.getJSON(t, "/api/v1/traces/"+trace.String()+"/critical-path", &res); code != 200 {
				t.Fatalf("critical-path: status %d", code)
			}
			for _, p := range res.Spans {
				if p.Service == svc {
					// A path that is wrong where the recorder dropped records
					// says so in its notes: show them with a failure.
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("critical-path notes of trace %s: %q", trace, res.Notes)
						}
					})
					return p, res
				}
			}
		}
		if time.Now().After(deadline) {
			var caps any
			e.srv.getJSON(t, "/api/v1/captures", &caps)
			t.Fatalf("no critical path of the %s span of trace %s after 120s; artifacts %+v; paths %+v; captures %v", svc, trace, arts, res, caps)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkSnapshots checks the kernel snapshots among arts as a download
// gets them: the binary format (version 3) the agent writes, named and
// typed as such, readable by the recorder's decoder.
func (e *cpEnv) checkSnapshots(t *testing.T, arts []artifactJSON) {
	t.Helper()
	n := 0
	for _, a := range arts {
		if a.Kind != critpath.KernelKind {
			continue
		}
		n++
		if a.MediaType != kernel.MediaType || !strings.HasSuffix(a.FileName, kernel.FileExt) {
			t.Fatalf("kernel snapshot %s is %s %q, want %s *%s", a.ID, a.MediaType, a.FileName, kernel.MediaType, kernel.FileExt)
		}
		resp, err := http.Get(e.srv.api("/api/v1/artifacts/" + a.ID))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != kernel.MediaType {
			t.Fatalf("download of %s: status %d, Content-Type %q, %v", a.ID, resp.StatusCode, resp.Header.Get("Content-Type"), err)
		}
		s, err := kernel.DecodeSnapshot(data)
		if err != nil || s.Version != kernel.SnapshotVersion || len(s.Intervals) == 0 {
			t.Fatalf("snapshot %s (%d bytes): %v", a.ID, len(data), err)
		}
	}
	if n == 0 {
		t.Fatalf("paths stored with no kernel snapshot among the artifacts %+v", arts)
	}
}

// near reports whether got is within frac of want, or within slack ms.
func near(got, want, frac, slack float64) bool {
	return math.Abs(got-want) <= math.Max(frac*want, slack)
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// logPath prints a path for the test log, and its segments if the test
// fails.
func logPath(t *testing.T, p critpath.SpanPath) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, s := range p.Segments {
			t.Logf("  +%9.3f %8.3f ms %6d %-9s wait=%-8s %s %s span=%s blocking=%v", float64(s.Start-p.Start)/1e6, s.Ms, s.TID, s.State, s.Wait, s.Syscall, s.Device, s.SpanID, s.Blocking)
		}
	})
	nonzero := func(m map[string]float64) string {
		var b []string
		for _, s := range critpath.States {
			if m[s] > 0 {
				b = append(b, fmt.Sprintf("%s=%.1f", s, m[s]))
			}
		}
		return strings.Join(b, " ")
	}
	t.Logf("%s %s %.1f ms: states %s; waits %s; blockedBy %+v; %d segments", p.Service, p.Operation, p.Ms,
		nonzero(p.States), nonzero(p.Waits), p.BlockedBy, len(p.Segments))
}

// serverSpanOf returns the span id of the trace's SERVER span of service.
func (e *cpEnv) serverSpanOf(t *testing.T, trace model.TraceID, service string) string {
	t.Helper()
	var tr jaegerResponse
	e.srv.getJSON(t, "/api/traces/"+trace.String(), &tr)
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			if d.Processes[s.ProcessID].ServiceName != service {
				continue
			}
			for _, tg := range s.Tags {
				if tg.Key == "span.kind" && tg.Value == "server" {
					return s.SpanID
				}
			}
		}
	}
	t.Fatalf("trace %s has no SERVER span of %s", trace, service)
	return ""
}

// lockContention sends a request that holds the service's lock for hold
// and, a fifth of that later, one that waits for it; it returns the two
// traces and the waiter's measured wait. On a loaded machine the holder's
// request may reach the lock after the waiter's: then it tries again.
func lockContention(t *testing.T, port int, hold time.Duration) (holder, waiter model.TraceID, waited int64) {
	t.Helper()
	for range 3 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder, _ = cpGet(t, port, fmt.Sprintf("do=lock&hold=%d", hold.Milliseconds()))
		}()
		time.Sleep(hold / 5)
		var m map[string]int64
		waiter, m = cpGet(t, port, "do=lock&hold=1")
		wg.Wait()
		if waited = m["lock_wait_ns"]; waited > int64(hold/4) {
			return holder, waiter, waited
		}
		t.Logf("the waiter waited %.1f ms only (the holder came late); again", ms(waited))
	}
	t.Fatal("the two requests never contended")
	return
}

// checkBlockedBy asserts that the waiter's path runs through the holder's
// span for about the time the waiter measured in the lock.
func (e *cpEnv) checkBlockedBy(t *testing.T, svc string, holder, waiter model.TraceID, waited int64, minBlocked float64) critpath.SpanPath {
	t.Helper()
	p, _ := e.waitPath(t, waiter, svc)
	logPath(t, p)
	holderSpan := e.serverSpanOf(t, holder, svc)
	if ms(waited) < 100 {
		t.Fatalf("the waiter waited %.1f ms only: the requests did not contend", ms(waited))
	}
	if len(p.BlockedBy) == 0 {
		t.Fatalf("the waiter's path names no blocking request (it waited %.1f ms for the lock)", ms(waited))
	}
	b := p.BlockedBy[0]
	if b.TraceID != holder.String() || b.SpanID != holderSpan || b.Service != svc || b.Operation != "GET /work" {
		t.Fatalf("blocked by %+v, want the holder's span %s of trace %s", b, holderSpan, holder)
	}
	// The waiter measured its time in the lock call: its wait, through
	// the holder, then its wait for a CPU once woken.
	if got := afterWait(p, critpath.Lock); !near(got, ms(waited), 0.05, 3) {
		t.Fatalf("lock wait and the run-queue wait after it %.1f ms on the path, the waiter measured %.1f ms", got, ms(waited))
	}
	// How much of the wait the holder's wakeup explains: all of a pthread
	// mutex wait; of a JVM monitor wait, the last park (the JVM's earlier
	// timed parks, 1 ms, 8 ms, 64 ms…, end with their timeouts: lock waits
	// on the waiter's own thread).
	if b.Wait != critpath.Lock || b.Ms > p.Waits[critpath.Lock]+1 || b.Ms < minBlocked*p.Waits[critpath.Lock] {
		t.Fatalf("blocked by the holder %.1f ms (%s) of %.1f ms waiting on the lock", b.Ms, b.Wait, p.Waits[critpath.Lock])
	}
	return p
}

// TestCritpathMutexC: two requests contend for one pthread mutex in a C
// service. The waiter's path runs through the holder's thread while it holds
// the lock: "blocked by" names the holder's span, for the time the waiter
// measured in pthread_mutex_lock. The same paths come out of `rootline
// analyze critical-path`, from the running server and offline.
func TestCritpathMutexC(t *testing.T) {
	e := newCPEnv(t, "kernel")
	bin := cpBuild(t, e.dir)
	port, _ := e.run(t, "cp-c", "ptrace", nil, bin)
	baseline(t, port, "do=fast", 20)
	holder, waiter, waited := lockContention(t, port, 600*time.Millisecond)
	p := e.checkBlockedBy(t, "cp-c", holder, waiter, waited, 0.95)
	onHolder := false
	for _, s := range p.Segments {
		onHolder = onHolder || s.Blocking && s.Wait == critpath.Lock && s.State == critpath.Running
	}
	if !onHolder || len(p.Arrows) == 0 {
		t.Fatalf("no segment of the holder's thread running while the waiter waited, or no wakeup arrow: %+v %+v", p.Segments, p.Arrows)
	}

	// rootline analyze critical-path, from the server, then offline.
	remote := analyzeJSON(t, "--server", "http://"+e.srv.query, "--trace", waiter.String())
	if err := e.srv.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("server exit: %v", err)
	}
	offline := analyzeJSON(t, "--data-dir", e.srv.dir, "--trace", waiter.String())
	for _, got := range []critpath.TraceResult{remote, offline} {
		if len(got.Spans) != 1 || got.Spans[0].SpanID != p.SpanID || got.Spans[0].BlockedBy[0] != p.BlockedBy[0] ||
			got.Spans[0].Waits[critpath.Lock] != p.Waits[critpath.Lock] {
			t.Fatalf("rootline analyze critical-path gave %+v, the API %+v", got.Spans, p)
		}
	}
	out, err := exec.Command(rootlineBin(t), "analyze", "critical-path", "--data-dir", e.srv.dir, "--trace", waiter.String()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "blocked by   cp-c GET /work (trace "+holder.String()) {
		t.Fatalf("text output (%v):\n%s", err, out)
	}
}

func analyzeJSON(t *testing.T, args ...string) critpath.TraceResult {
	t.Helper()
	cmd := exec.Command(rootlineBin(t), append([]string{"analyze", "critical-path", "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootline analyze critical-path %v: %v\n%s", args, err, stderr.String())
	}
	var res critpath.TraceResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return res
}

// TestCritpathMonitorJava: the same contention on a Java monitor
// (synchronized): the JVM parks the waiter on a futex, the holder's thread
// wakes it when it leaves the monitor.
func TestCritpathMonitorJava(t *testing.T) {
	needTool(t, "javac", "java")
	e := newCPEnv(t, "kernel")
	src, _ := filepath.Abs("testdata/cpsvc/JCpSvc.java")
	buildOut(t, e.dir, "javac", "-d", e.dir, src)
	port, _ := e.run(t, "cp-java", "ebpf", nil, "java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", e.dir, "JCpSvc")
	baseline(t, port, "do=fast", 20)
	holder, waiter, waited := lockContention(t, port, 600*time.Millisecond)
	e.checkBlockedBy(t, "cp-java", holder, waiter, waited, 0.5)
}

// TestCritpathGoMutexUnknown: two requests contend for a sync.Mutex in a Go
// program. The waiting goroutine parks in the Go runtime, where the kernel
// does not see it: its path says unknown for that time, never "blocked by"
// (nor lock) made up from what the program's threads did meanwhile.
func TestCritpathGoMutexUnknown(t *testing.T) {
	p, waited := goMutexPath(t, "kernel", "cp-go", "ptrace")
	if len(p.BlockedBy) != 0 {
		t.Fatalf("blocked by %+v: the kernel cannot tell which goroutine held a sync.Mutex", p.BlockedBy)
	}
	if p.Waits[critpath.Unknown] < 0.8*ms(waited) || p.Waits[critpath.Lock] > 0.05*ms(waited) {
		t.Fatalf("unknown %.1f ms, lock %.1f ms, for %.1f ms waited in sync.Mutex.Lock", p.Waits[critpath.Unknown], p.Waits[critpath.Lock], ms(waited))
	}
}

// TestCritpathGoMutex: the same contention with the agent's goroutine
// tracker (a uprobe on the Go runtime): the path follows the waiting
// request's goroutine and says lock, in sync.Mutex.Lock, for the time it
// waited, instead of unknown.
func TestCritpathGoMutex(t *testing.T) {
	p, waited := goMutexPath(t, "kernel,goroutines", "cp-gor", "ebpf")
	if !near(p.Waits[critpath.Lock], ms(waited), 0.1, 5) || p.Waits[critpath.Unknown] > 0.1*ms(waited) {
		t.Fatalf("lock %.1f ms, unknown %.1f ms, for %.1f ms waited in sync.Mutex.Lock", p.Waits[critpath.Lock], p.Waits[critpath.Unknown], ms(waited))
	}
	var named bool
	for _, s := range p.Segments {
		named = named || s.State == critpath.Lock && s.Syscall == "sync.Mutex.Lock"
	}
	if !named {
		t.Fatal("no lock segment names sync.Mutex.Lock")
	}
}

// TestCritpathGoChan: a Go request that hands its work to a worker
// goroutine over a channel and waits for the answer. With the agent's
// goroutine tracker the path follows the worker, which readied the waiting
// goroutine: running for the time the worker spun, not unknown.
func TestCritpathGoChan(t *testing.T) {
	needTool(t, "go")
	e := newCPEnv(t, "kernel,goroutines")
	bin := buildTestdata(t, "cpgo")
	port, _ := e.run(t, "cp-gochan", "ebpf", nil, bin)
	baseline(t, port, "do=fast", 20)
	slow, m := cpGet(t, port, "do=chan&ms=300")
	p, _ := e.waitPath(t, slow, "cp-gochan")
	logPath(t, p)
	t.Logf("measured: %.1f ms waiting on the channel, the worker's thread on CPU %.1f ms of it", ms(m["chan_wait_ns"]), ms(m["cpu_ns"]))
	// Running is the worker's CPU time (its thread's rusage); the rest of
	// the wait it was runnable (a busy machine) or the hand-offs.
	if !near(p.States[critpath.Running], ms(m["cpu_ns"]), 0.1, 5) || p.States[critpath.Unknown] > 0.1*ms(m["chan_wait_ns"]) {
		t.Fatalf("running %.1f ms, unknown %.1f ms, for a worker on CPU %.1f ms while the request waited %.1f ms on its channel",
			p.States[critpath.Running], p.States[critpath.Unknown], ms(m["cpu_ns"]), ms(m["chan_wait_ns"]))
	}
	if len(p.Arrows) == 0 {
		t.Error("no arrow from the worker to the waiting goroutine")
	}
}

// goMutexPath runs the Go test service under `rootline run --mode mode`
// with the agent's profilers, makes two requests contend for its
// sync.Mutex and returns the waiter's path and the time it measured in the
// lock.
func goMutexPath(t *testing.T, profilers, svc, mode string) (critpath.SpanPath, int64) {
	t.Helper()
	needTool(t, "go")
	e := newCPEnv(t, profilers)
	bin := buildTestdata(t, "cpgo")
	port, _ := e.run(t, svc, mode, nil, bin)
	baseline(t, port, "do=fast", 20)
	_, waiter, waited := lockContention(t, port, 600*time.Millisecond)
	p, _ := e.waitPath(t, waiter, svc)
	logPath(t, p)
	t.Logf("measured: %.1f ms in sync.Mutex.Lock", ms(waited))
	return p, waited
}

// TestCritpathThrottled: a CPU-bound request in a cgroup whose CPU quota is
// 10 % of a CPU. The path says throttled (not run-queue contention) for the
// time the thread was off the CPU, and running for the CPU time it measured.
func TestCritpathThrottled(t *testing.T) {
	e := newCPEnv(t, "kernel")
	bin := cpBuild(t, e.dir)
	cg := cpuCgroup(t, "rootline-test-critpath")
	port, _ := e.run(t, "cp-throttled", "ebpf", nil, "sh", "-c", "echo $$ > "+cg+"/cgroup.procs && exec "+bin)
	baseline(t, port, "do=spin&ms=2", 20)
	mustWrite(t, cg+"/cpu.cfs_quota_us", "10000")
	thr0 := throttledTime(t, cg)
	slow, m := cpGet(t, port, "do=spin&ms=40")
	thr := throttledTime(t, cg) - thr0
	mustWrite(t, cg+"/cpu.cfs_quota_us", "-1")
	p, _ := e.waitPath(t, slow, "cp-throttled")
	logPath(t, p)
	off := ms(m["wall_ns"] - m["cpu_ns"])
	t.Logf("measured: wall %.1f ms, on CPU %.1f ms, off CPU %.1f ms; the cgroup was throttled %.1f ms (cpu.stat)", ms(m["wall_ns"]), ms(m["cpu_ns"]), off, ms(thr))
	if ms(thr) < 50 {
		t.Fatalf("cpu.stat says the quota throttled the cgroup %.1f ms only", ms(thr))
	}
	// The kernel's own accounting of the quota's effect.
	if !near(p.States[critpath.Throttled], ms(thr), 0.1, 5) {
		t.Fatalf("throttled %.1f ms on the path, cpu.stat says %.1f ms", p.States[critpath.Throttled], ms(thr))
	}
	// Off the CPU: throttled, waiting for a CPU after the unthrottle (other
	// processes' contention on this machine), or on a CPU the hypervisor
	// gave to another guest (steal: the thread's CPU clock did not advance).
	offPath := p.States[critpath.Throttled] + p.States[critpath.Runqueue] + p.States[critpath.Steal]
	if !near(offPath, off, 0.1, 5) {
		t.Fatalf("throttled+runqueue+steal %.1f ms, the thread was off the CPU %.1f ms", offPath, off)
	}
	if !near(p.States[critpath.Running], ms(m["cpu_ns"]), 0.1, 5) {
		t.Fatalf("running %.1f ms, the thread used %.1f ms of CPU", p.States[critpath.Running], ms(m["cpu_ns"]))
	}
}

// cpuCgroup creates a v1 cpu cgroup without a quota (period 100 ms),
// removed after the test.
func cpuCgroup(t *testing.T, name string) string {
	t.Helper()
	cg := "/sys/fs/cgroup/cpu/" + name
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cgroup.procs"); err != nil {
		t.Fatal("no cgroup v1 cpu controller at /sys/fs/cgroup/cpu (this machine kind has one)")
	}
	if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	mustWrite(t, cg+"/cpu.cfs_period_us", "100000")
	mustWrite(t, cg+"/cpu.cfs_quota_us", "-1")
	return cg
}

// throttledTime reads a v1 cpu cgroup's throttled time (cpu.stat), ns.
func throttledTime(t *testing.T, cg string) int64 {
	t.Helper()
	data, err := os.ReadFile(cg + "/cpu.stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "throttled_time "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Fatalf("no throttled_time in %s/cpu.stat", cg)
	return 0
}

// TestCritpathFsync: a request that writes and fsyncs a file ten times on
// the machine's disk: the path's disk wait is the time it measured in fsync.
func TestCritpathFsync(t *testing.T) {
	e := newCPEnv(t, "kernel")
	bin := cpBuild(t, e.dir)
	port, _ := e.run(t, "cp-fsync", "ebpf", []string{"DIR=" + e.dir}, bin)
	baseline(t, port, "do=fast", 20)
	slow, m := cpGet(t, port, "do=fsync&n=20&kb=4096")
	p, _ := e.waitPath(t, slow, "cp-fsync")
	logPath(t, p)
	t.Logf("measured: %.1f ms in write and fsync, %.1f ms of it in fsync, of %.1f ms", ms(m["io_ns"]), ms(m["fsync_ns"]), ms(m["wall_ns"]))
	if ms(m["fsync_ns"]) < 20 {
		t.Fatalf("fsync took %.1f ms only: no disk wait to find", ms(m["fsync_ns"]))
	}
	// Every disk wait is inside the handler's write and fsync calls, and
	// the fsync storm's waits are disk waits, not something else.
	disk := afterWait(p, critpath.Disk)
	if disk > ms(m["io_ns"])*1.05+1 {
		t.Fatalf("disk wait %.1f ms on the path, more than the %.1f ms the handler spent in write and fsync", disk, ms(m["io_ns"]))
	}
	var other float64
	for _, st := range []string{critpath.Lock, critpath.Network, critpath.Sleep, critpath.Memory, critpath.Unknown} {
		other += p.Waits[st]
	}
	if p.Waits[critpath.Disk] < 0.25*ms(m["fsync_ns"]) || other > 0.1*p.Waits[critpath.Disk] {
		t.Fatalf("disk %.1f ms, other waits %.1f ms, for %.1f ms in fsync", p.Waits[critpath.Disk], other, ms(m["fsync_ns"]))
	}
}

// TestCritpathSleep: a request that sleeps 200 ms.
func TestCritpathSleep(t *testing.T) {
	e := newCPEnv(t, "kernel")
	bin := cpBuild(t, e.dir)
	port, _ := e.run(t, "cp-sleep", "ebpf", nil, bin)
	baseline(t, port, "do=fast", 20)
	slow, m := cpGet(t, port, "do=sleep&ms=200")
	p, _ := e.waitPath(t, slow, "cp-sleep")
	logPath(t, p)
	// The handler's clock_nanosleep returns when its thread runs again: the
	// timer's 200 ms, then the wait for a CPU after the wakeup.
	if !near(p.States[critpath.Sleep], 200, 0.02, 1) || !near(p.Waits[critpath.Sleep], 200, 0.02, 1) {
		t.Fatalf("sleep %.1f ms (waits %.1f), 200 ms asked", p.States[critpath.Sleep], p.Waits[critpath.Sleep])
	}
	if got := afterWait(p, critpath.Sleep); !near(got, ms(m["sleep_ns"]), 0.05, 2) {
		t.Fatalf("sleep and the run-queue wait after it %.1f ms, measured %.1f ms", got, ms(m["sleep_ns"]))
	}
}

// afterWait is the time a path spent waiting on st (the span's own thread
// blocked in it, wherever the path went meanwhile) plus the run-queue waits
// of that thread right after each such wait: what a handler measures around
// the call that blocked.
func afterWait(p critpath.SpanPath, st string) float64 {
	var sum float64
	// The span's own thread: the first on the path working for the span.
	// The path can start on another thread: a span of `rootline run`'s
	// datapath starts when its request reached the socket, and the path
	// follows the span's thread's network wait to whoever sent it.
	own := uint32(0)
	for _, s := range p.Segments {
		if s.SpanID == p.SpanID {
			own = s.TID
			break
		}
	}
	if own == 0 && len(p.Segments) > 0 {
		own = p.Segments[0].TID
	}
	in := false
	for _, s := range p.Segments {
		switch {
		case s.State == st && s.Wait == "" && s.TID == own, s.Wait == st:
			sum += s.Ms
			in = true
		case in && s.TID == own && s.State == critpath.Runqueue && s.Wait == "":
			sum += s.Ms
		default:
			in = false
		}
	}
	return sum
}

// TestCritpathNetwork: a front service calls a back service over loopback,
// which takes 200 ms. The front's path is a network wait for the time its
// call took, and it continues in the callee's trace: through the back
// service's thread, on its SERVER span (a descendant: not "blocked by").
func TestCritpathNetwork(t *testing.T) {
	e := newCPEnv(t, "kernel")
	bin := cpBuild(t, e.dir)
	backPort, _ := e.run(t, "cp-back", "ptrace", nil, bin)
	frontPort, _ := e.run(t, "cp-front", "ptrace", []string{fmt.Sprintf("CALL=127.0.0.1:%d", backPort)}, bin)
	baseline(t, frontPort, "do=call&ms=1", 20)
	slow, m := cpGet(t, frontPort, "do=call&ms=200")
	p, res := e.waitPath(t, slow, "cp-front")
	logPath(t, p)
	t.Logf("measured: the call took %.1f ms of %.1f ms", ms(m["call_ns"]), ms(m["wall_ns"]))
	if got := afterWait(p, critpath.Network); !near(got, ms(m["call_ns"]), 0.1, 5) {
		t.Fatalf("network wait (and the run-queue wait after it) %.1f ms on the path, the call took %.1f ms", got, ms(m["call_ns"]))
	}
	if len(p.BlockedBy) != 0 {
		t.Fatalf("the callee's span is the front's own descendant, not a blocking request: %+v", p.BlockedBy)
	}
	back := e.serverSpanOf(t, slow, "cp-back")
	var inCallee float64
	for _, s := range p.Segments {
		if s.TraceID == slow.String() && s.SpanID == back {
			inCallee += s.Ms
		}
	}
	if inCallee < 0.5*ms(m["call_ns"]) {
		t.Fatalf("the path spends %.1f ms in the callee's span %s (the call took %.1f ms)", inCallee, back, ms(m["call_ns"]))
	}
	t.Logf("%.1f ms of the front's path on the callee's span; the trace has %d paths", inCallee, len(res.Spans))
}

// TestCritpathGCJava: a JVM request that allocates garbage for 400 ms in a
// small heap. Its path is gc for the time the collectors say they took
// (GarbageCollectorMXBean, ms grain), from the JFR recording of the same
// capture.
func TestCritpathGCJava(t *testing.T) {
	needTool(t, "javac", "java", "jcmd")
	e := newCPEnv(t, "kernel,jfr")
	src, _ := filepath.Abs("testdata/cpsvc/JCpSvc.java")
	buildOut(t, e.dir, "javac", "-d", e.dir, src)
	// The attach listener from the start: on a busy machine the JVM may
	// not answer the agent's SIGQUIT in time to open it.
	port, _ := e.run(t, "cp-gc", "ebpf", nil, "java", "-Xmx32m", "-XX:+UseSerialGC", "-XX:+StartAttachListener", "-cp", e.dir, "JCpSvc")
	e.waitKind(t, "cp-gc", "jfr")
	baseline(t, port, "do=fast", 20)
	slow, m := cpGet(t, port, "do=alloc&ms=400")
	p, _ := e.waitPath(t, slow, "cp-gc")
	logPath(t, p)
	t.Logf("measured: the collectors took %.1f ms", ms(m["gc_ns"]))
	if ms(m["gc_ns"]) < 10 {
		t.Fatalf("the collectors took %.1f ms only: no GC storm", ms(m["gc_ns"]))
	}
	if !near(p.States[critpath.GC], ms(m["gc_ns"]), 0.15, 5) {
		e.logPauses(t, slow, p)
		t.Fatalf("gc %.1f ms on the path, the collectors say %.1f ms", p.States[critpath.GC], ms(m["gc_ns"]))
	}
}

// logPauses logs the GC pauses of the trace's JFR recordings around the span.
func (e *cpEnv) logPauses(t *testing.T, trace model.TraceID, p critpath.SpanPath) {
	var arts []artifactJSON
	e.srv.getJSON(t, "/api/v1/traces/"+trace.String()+"/artifacts", &arts)
	for _, a := range arts {
		if a.MediaType != "application/x-jfr" {
			continue
		}
		resp, err := http.Get(e.srv.api("/api/v1/artifacts/" + a.ID))
		if err != nil {
			t.Log(err)
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ps, err := jfr.GCPauses(data)
		var in float64
		for _, x := range ps {
			if x.End > p.Start && x.Start < p.End {
				in += ms(min(x.End, p.End) - max(x.Start, p.Start))
			}
		}
		t.Logf("JFR %s (%d bytes): %d pauses (err %v), %.1f ms of them in the span; first %v last %v", a.ID, len(data), len(ps), err, in,
			ps[:min(1, len(ps))], ps[max(0, len(ps)-1):])
	}
}
