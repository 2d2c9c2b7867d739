package mesh

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
)

// TestServicesCPUWorkIsCPUTime checks that the demo services' cpu= work is an
// amount of CPU time, not of wall time, in all three languages: a service in a
// cgroup limited to a tenth of a CPU must still spend the full cpu= of CPU on
// every request (its process's CPU time grows by at least that much), and so
// take many times longer in wall time. A spin on the wall clock fails the
// first check: throttled, it burns about a tenth of its cpu= per request.
func TestServicesCPUWorkIsCPUTime(t *testing.T) {
	bpftest.SkipShort(t, "builds and starts the demo services in CPU-limited cgroups")
	bpftest.RequireRoot(t, "cgroup CPU quotas")
	commands := buildCPUServices(t, LangGo, LangJava, LangPython)
	cg, err := newCgroups(fmt.Sprintf("rootline-test-cpuwork-%d", os.Getpid()), nil)
	if err != nil {
		bpftest.Missing(t, "cgroups: "+err.Error())
	}
	t.Cleanup(func() {
		if err := cg.remove(); err != nil {
			t.Errorf("remove cgroups: %v", err)
		}
	})

	const (
		work     = 40 * time.Millisecond
		quota    = 0.1 // CPUs
		requests = 4
	)
	for _, lang := range []string{LangGo, LangJava, LangPython} {
		t.Run(lang, func(t *testing.T) {
			argv := commands[lang]
			if argv == nil {
				bpftest.Missing(t, "no "+lang+" toolchain")
			}
			cmd, base, stderr := startCPUService(t, argv, "WORK=cpu="+work.String())
			// One request before the limit: class loading and compilation
			// of the handler happen at full speed.
			if code, body := svcGet(t, base+"/", nil); code != 200 {
				t.Fatalf("GET / = %d %q (stderr %q)", code, body, stderr.String())
			}
			// The whole process (every thread) moves into the limited cgroup.
			if err := cg.addService(lang); err != nil {
				t.Fatal(err)
			}
			if err := cg.addPID(lang, cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			if _, err := cg.setQuota(lang, quota); err != nil {
				t.Fatal(err)
			}
			cpu0 := procCPU(t, cmd.Process.Pid)
			t0 := time.Now()
			for range requests {
				if code, body := svcGet(t, base+"/", nil); code != 200 {
					t.Fatalf("GET / under the quota = %d %q", code, body)
				}
			}
			wall := time.Since(t0)
			cpu := procCPU(t, cmd.Process.Pid) - cpu0
			t.Logf("%d requests of cpu=%v at %.1f CPU: %v of CPU, %v of wall time", requests, work, quota, cpu, wall.Round(time.Millisecond))
			// The process's CPU time is counted in clock ticks (10 ms): a
			// tenth off the full amount leaves room for that.
			if want := time.Duration(0.9 * float64(requests*work)); cpu < want {
				t.Errorf("the process spent %v of CPU on %d requests of cpu=%v, want ≥ %v: the work is not measured in CPU time", cpu, requests, work, want)
			}
			// At a tenth of a CPU, the requests' CPU takes ten times as long
			// in wall time; half of that is a safe floor.
			if want := time.Duration(float64(requests*work) / quota / 2); wall < want {
				t.Errorf("%d requests of cpu=%v took %v under a %.1f CPU quota, want ≥ %v", requests, work, wall, quota, want)
			}
		})
	}
}

// buildCPUServices builds the demo services of langs into a temporary
// directory and returns their commands; a language whose toolchain is
// missing has none.
func buildCPUServices(t *testing.T, langs ...string) map[string][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	steps := map[string]struct{ build, run []string }{
		LangGo: {[]string{"go", "build", "-o", filepath.Join(dir, "svc-go"), "./demo/services/go"},
			[]string{filepath.Join(dir, "svc-go")}},
		LangJava: {[]string{"javac", "-encoding", "UTF-8", "-d", filepath.Join(dir, "java"), "demo/services/java/Svc.java"},
			[]string{"java", "-XX:TieredStopAtLevel=1", "-cp", filepath.Join(dir, "java"), "Svc"}},
		LangPython: {nil, []string{"python3", filepath.Join(root, "demo/services/python/svc.py")}},
	}
	out := map[string][]string{}
	for _, lang := range langs {
		st := steps[lang]
		tool := st.run[0]
		if st.build != nil {
			tool = st.build[0]
		}
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		if st.build != nil {
			c := exec.Command(st.build[0], st.build[1:]...)
			c.Dir = root
			if b, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(st.build, " "), err, b)
			}
		}
		out[lang] = st.run
	}
	return out
}

// startCPUService starts argv with a LISTEN address and env, and waits until
// it answers; it is killed at the end of the test. It returns the process,
// the service's base URL and its standard error so far.
func startCPUService(t *testing.T, argv []string, env ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	listen := svcFreeAddr(t)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append([]string{"SERVICE_NAME=cpu-work", "LISTEN=" + listen}, env...)...)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	t.Cleanup(svcClient.CloseIdleConnections)
	base := "http://" + listen
	svcWaitUp(t, base+"/healthz")
	return cmd, base, stderr
}

// procCPU is the CPU time (user + system) of every thread of process pid,
// living or exited, from /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which may contain spaces: state is
	// field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		t.Fatalf("short /proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	const clkTck = 100 // USER_HZ, 100 on Linux
	return time.Duration(utime+stime) * time.Second / clkTck
}

// TestGoServiceCPUWorkConcurrent checks the Go service's cpu= accounting
// when its requests outnumber the threads Go runs them on (GOMAXPROCS=1):
// Go's scheduler then runs several requests' spins in turn on one thread,
// whose CPU clock advances for all of them. Each request must still spend
// its own cpu=, so the process's CPU time grows by the sum; a spin that
// read the thread's clock naively would stop early, counting the other
// requests' work as its own.
func TestGoServiceCPUWorkConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the Go demo service")
	}
	const (
		work     = 40 * time.Millisecond
		requests = 4
	)
	cmd, base, _ := startCPUService(t, buildCPUServices(t, LangGo)[LangGo], "GOMAXPROCS=1", "WORK=cpu="+work.String())
	cpu0 := procCPU(t, cmd.Process.Pid)
	errs := make(chan error, requests)
	for range requests {
		go func() {
			resp, err := svcClient.Get(base + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("GET / = %d", resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range requests {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cpu := procCPU(t, cmd.Process.Pid) - cpu0
	t.Logf("%d concurrent requests of cpu=%v on one Go thread: %v of CPU", requests, work, cpu)
	if want := time.Duration(0.9 * float64(requests*work)); cpu < want {
		t.Errorf("the process spent %v of CPU on %d concurrent requests of cpu=%v, want ≥ %v", cpu, requests, work, want)
	}
}
