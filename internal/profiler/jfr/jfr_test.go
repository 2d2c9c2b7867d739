package jfr

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/grafana/jfr-parser/parser"
	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/profiler"
)

// classDir holds Hot.class, compiled once for the package's tests.
var (
	classDir     string
	compileOnce  sync.Once
	compileError error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if classDir != "" {
		_ = os.RemoveAll(classDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// requireJDK skips the test when the JDK tools are missing, unless
// ROOTLINE_REQUIRE_JDK is set (CI machines that have a JDK).
func requireJDK(t testing.TB) {
	t.Helper()
	bpftest.SkipShort(t, "a JVM")
	for _, tool := range []string{"java", "javac", "jcmd", "jfr"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("ROOTLINE_REQUIRE_JDK") != "" {
				t.Fatalf("%s not found but ROOTLINE_REQUIRE_JDK is set", tool)
			}
			t.Skipf("%s not in PATH: the JFR tests need a JDK (11+)", tool)
		}
	}
}

func compileHot(t testing.TB) string {
	t.Helper()
	compileOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rootline-jfr-hot-")
		if err != nil {
			compileError = err
			return
		}
		classDir = dir
		// Readable by the JVM of TestOtherUser.
		if err := os.Chmod(dir, 0o755); err != nil {
			compileError = err
			return
		}
		out, err := exec.Command("javac", "-d", dir, filepath.Join("testdata", "Hot.java")).CombinedOutput()
		if err != nil {
			compileError = fmt.Errorf("javac: %v: %s", err, out)
		}
	})
	if compileError != nil {
		t.Fatal(compileError)
	}
	return classDir
}

type jvm struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
}

// hotOptions say how startHot runs the JVM.
type hotOptions struct {
	cred      *syscall.Credential // run as another user
	jvmArgs   []string
	idle      bool // no worker threads
	container bool // in new pid and mount namespaces with a private /tmp
	sharePID  bool // with container: keep the pid namespace
}

// startHot runs Hot in a JVM and waits until its threads run. The JVM is
// killed when the test ends.
func startHot(t testing.TB, o hotOptions) *jvm {
	t.Helper()
	requireJDK(t)
	dir := compileHot(t)
	// Not -XX:+UseSerialGC: with it JDK 17's sampler failed to walk the
	// C2-compiled hotLoop (2 samples in 5 s instead of 500).
	// -UsePerfData: no hsperfdata files left behind by the killed JVMs.
	argv := append([]string{"java", "-Xmx64m", "-XX:-UsePerfData"}, o.jvmArgs...)
	argv = append(argv, "-cp", dir, "Hot")
	if o.idle {
		argv = append(argv, "idle")
	}
	if o.container {
		// The class directory lives in /tmp, which the private tmpfs hides:
		// bind it to /mnt first (the mounts stay in the new namespace).
		argv[slices.Index(argv, dir)] = "/mnt"
		unshare := []string{"unshare", "--fork", "--kill-child", "--mount", "--propagation", "private"}
		if !o.sharePID {
			unshare = append(unshare, "--pid")
		}
		argv = append(unshare, "sh", "-c",
			"mount --bind "+dir+" /mnt && mount -t tmpfs rootline /tmp && cd / && exec "+strings.Join(argv, " "))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &jvm{cmd: cmd, stdin: stdin, pid: cmd.Process.Pid}
	t.Cleanup(func() {
		// Hot exits when its stdin closes, and a JVM exiting normally
		// removes its attach socket; kill it only if it hangs.
		_ = stdin.Close()
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// Tests that kill the JVM leave its socket behind.
		_ = os.Remove(fmt.Sprintf("/tmp/.java_pid%d", j.pid))
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("Hot did not start: %q %v; stderr: %s", line, err, stderr.String())
	}
	if o.container {
		// The JVM is unshare's only child.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", j.pid, j.pid))
		if _, serr := fmt.Sscan(string(b), &j.pid); err != nil || serr != nil {
			t.Fatalf("finding the JVM under unshare: %v %v", err, serr)
		}
	}
	return j
}

func (j *jvm) target() profiler.Target {
	return profiler.Target{PID: j.pid, Service: "hot", Exe: "java", JVM: true}
}

// kill kills the JVM and reaps it, as a crash would end it.
func (j *jvm) kill(t *testing.T) {
	t.Helper()
	_ = j.cmd.Process.Kill()
	_ = j.cmd.Wait()
}

func newTestProfiler(t *testing.T) *Profiler {
	t.Helper()
	return newProfiler(t, Config{DumpDir: t.TempDir()})
}

// newProfiler returns a profiler with cfg, closed when the test ends.
func newProfiler(t *testing.T, cfg Config) *Profiler {
	t.Helper()
	p := New(cfg, nil)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// recordTwoSeconds starts recording j, waits 2 s and dumps those 2 s.
func recordTwoSeconds(t *testing.T, p *Profiler, j *jvm) []profiler.Artifact {
	t.Helper()
	ctx := context.Background()
	if err := p.Start(ctx, j.target()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	time.Sleep(2 * time.Second)
	arts, err := p.Dump(ctx, j.target(), profiler.Window{Start: time.Now().Add(-2 * time.Second), End: time.Now()})
	if err != nil || len(arts) != 2 || len(arts[0].Data) == 0 {
		t.Fatalf("Dump = %d artifacts, %v", len(arts), err)
	}
	return arts
}

func TestDump(t *testing.T) {
	j := startHot(t, hotOptions{})
	p := newTestProfiler(t)
	ctx := context.Background()
	tg := j.target()
	if !p.Supports(tg) || !p.Supports(profiler.Target{PID: j.pid}) {
		t.Fatal("Supports(JVM) = false")
	}
	begun := time.Now()
	if err := p.Start(ctx, tg); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %s", time.Since(begun))
	if err := p.Start(ctx, tg); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	// The default event settings apply on top of "profile".
	check, err := exec.Command("jcmd", fmt.Sprint(j.pid), "JFR.check", "name="+recordingName, "verbose=true").CombinedOutput()
	if err != nil || !regexp.MustCompile(`\(jdk\.NativeMethodSample\)\s*\[[^]]*enabled=false`).Match(check) ||
		!regexp.MustCompile(`\(jdk\.ExecutionSample\)\s*\[[^]]*period=10 ms`).Match(check) {
		t.Errorf("recording's settings (%v): want profile's 10 ms execution samples and no native-method samples:\n%s", err, check)
	}
	time.Sleep(6 * time.Second)
	w := profiler.Window{Start: time.Now().Add(-5 * time.Second), End: time.Now()}
	begun = time.Now()
	arts, err := p.Dump(ctx, tg, w)
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	t.Logf("Dump took %s", time.Since(begun))
	if len(arts) != 2 {
		t.Fatalf("Dump returned %d artifacts, want 2", len(arts))
	}
	raw, pp := arts[0], arts[1]
	if raw.Kind != "jfr" || raw.MediaType != MediaTypeJFR || raw.FileName != fmt.Sprintf("hot-%d.jfr", j.pid) || raw.Partial {
		t.Errorf("jfr artifact = %+v", withoutData(raw))
	}
	if pp.Kind != "jfr" || pp.MediaType != MediaTypePprof || pp.FileName != fmt.Sprintf("hot-%d.pb.gz", j.pid) || pp.Partial {
		t.Errorf("pprof artifact = %+v", withoutData(pp))
	}
	if raw.Start.After(w.Start.Add(time.Second)) || raw.End.Before(w.End.Add(-time.Second)) {
		t.Errorf("jfr artifact covers %s–%s, window %s–%s", raw.Start, raw.End, w.Start, w.End)
	}
	if pp.Start.Before(w.Start) || pp.End.After(w.End) {
		t.Errorf("pprof artifact covers %s–%s, beyond window %s–%s", pp.Start, pp.End, w.Start, w.End)
	}
	t.Logf("jfr %d bytes, pprof %d bytes, attributes %v", len(raw.Data), len(pp.Data), pp.Attributes)

	t.Run("jfr summary", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "dump.jfr")
		if err := os.WriteFile(f, raw.Data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("jfr", "summary", f).CombinedOutput()
		if err != nil {
			t.Fatalf("jfr summary: %v\n%s", err, out)
		}
		for _, ev := range []string{"jdk.ExecutionSample", "jdk.JavaMonitorEnter", "jdk.ThreadPark"} {
			if !bytes.Contains(out, []byte(ev)) {
				t.Errorf("jfr summary lists no %s:\n%s", ev, out)
			}
		}
	})

	t.Run("pprof", func(t *testing.T) {
		prof, err := profile.Parse(bytes.NewReader(pp.Data))
		if err != nil {
			t.Fatalf("parsing pprof: %v", err)
		}
		types := map[string]int{}
		for i, st := range prof.SampleType {
			types[st.Type] = i
		}
		cpuIdx, ok := types["cpu"]
		if !ok {
			t.Fatalf("no cpu sample type in %v", prof.SampleType)
		}
		monIdx, ok := types["monitor_enter"]
		if !ok {
			t.Fatalf("no monitor_enter sample type in %v", prof.SampleType)
		}
		parkIdx, ok := types["thread_park"]
		if !ok {
			t.Fatalf("no thread_park sample type in %v", prof.SampleType)
		}
		leafCPU := map[string]int64{}
		var lockOnContended, lockTotal, parkOnParked, parkTotal int64
		minT, maxT := int64(1<<62), int64(0)
		for _, s := range prof.Sample {
			tid, ts := s.NumLabel["tid"], s.NumLabel["time_ns"]
			if len(tid) != 1 || tid[0] <= 0 || len(ts) != 1 {
				t.Fatalf("sample labels tid=%v time_ns=%v", tid, ts)
			}
			if ts[0] < w.Start.UnixNano() || ts[0] > w.End.UnixNano() {
				t.Fatalf("sample at %s outside window %s–%s", time.Unix(0, ts[0]), w.Start, w.End)
			}
			minT, maxT = min(minT, ts[0]), max(maxT, ts[0])
			if v := s.Value[cpuIdx]; v > 0 {
				leafCPU[s.Location[0].Line[0].Function.Name] += v
			}
			if v := s.Value[monIdx]; v > 0 {
				lockTotal += v
				if stackHas(s, "Hot.contended") {
					lockOnContended += v
				}
			}
			if v := s.Value[parkIdx]; v > 0 {
				parkTotal += v
				if stackHas(s, "Hot.parked") {
					parkOnParked += v
				}
			}
		}
		top := topN(leafCPU, 3)
		if !slices.Contains(top, "Hot.hotLoop") {
			t.Errorf("top cpu leaf functions %v lack Hot.hotLoop", top)
		}
		if lockTotal == 0 || lockOnContended*2 < lockTotal {
			t.Errorf("monitor_enter: %d ns on Hot.contended of %d ns", lockOnContended, lockTotal)
		}
		if parkTotal == 0 || parkOnParked*2 < parkTotal {
			t.Errorf("thread_park: %d ns on Hot.parked of %d ns", parkOnParked, parkTotal)
		}
		// Samples spread over the window show the tick conversion is right:
		// an offset would have cut the window's start or end.
		if spread := time.Duration(maxT - minT); spread < 3*time.Second {
			t.Errorf("samples span only %s of a 5 s window", spread)
		}
		t.Logf("top cpu leaves %v, monitor_enter %s on Hot.contended, thread_park %s on Hot.parked",
			top, time.Duration(lockOnContended), time.Duration(parkOnParked))
	})

	t.Run("truncated file", func(t *testing.T) {
		// A JVM dying mid-dump leaves a cut file: converting it must fail
		// cleanly, not panic.
		for _, n := range []int{0, 100, len(raw.Data) / 2, len(raw.Data) - 1} {
			res, err := convert(raw.Data[:n], w, 10*time.Millisecond)
			if err == nil {
				t.Errorf("convert(%d of %d bytes) = no error", n, len(raw.Data))
			}
			t.Logf("convert(%d bytes): %d samples, profile %d bytes, %v", n, res.cpuSamples, len(res.profile), err)
		}
		// What Dump returns for a JVM that died mid-write: only the raw file,
		// marked partial (Dump reports ErrTargetGone, not the conversion error).
		arts, err := p.artifacts(tg, w, raw.Data[:len(raw.Data)/2], true)
		if err == nil || len(arts) != 1 || !arts[0].Partial || arts[0].FileName != raw.FileName {
			t.Errorf("artifacts(half a file) = %d artifacts, %v", len(arts), err)
		}
	})

	t.Run("window before the recording", func(t *testing.T) {
		past := profiler.Window{Start: begun.Add(-time.Hour), End: begun.Add(-time.Hour + 10*time.Second)}
		arts, err := p.Dump(ctx, tg, past)
		if !errors.Is(err, ErrNoData) || len(arts) != 0 {
			t.Fatalf("Dump(past window) = %d artifacts, %v; want ErrNoData", len(arts), err)
		}
	})

	st := p.Stats()
	if st["starts"] != 1 || st["dumps"] != 1 || st["bytes_dumped"] != float64(len(raw.Data)) || st["dump_seconds_total"] <= 0 || st["errors"] != 0 {
		t.Errorf("Stats = %v", st)
	}
	// JFR.check, JFR.start and two dumps, all over the attach socket.
	if st["commands_attach"] != 4 || st["commands_jcmd"] != 0 {
		t.Errorf("commands: %v over the attach socket, %v with jcmd; want 4 and 0", st["commands_attach"], st["commands_jcmd"])
	}
	if err := p.Stop(tg); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	out, err := exec.Command("jcmd", fmt.Sprint(j.pid), "JFR.check").CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("name="+recordingName)) {
		t.Errorf("recording still running after Stop (%v):\n%s", err, out)
	}
	if _, err := p.Dump(ctx, tg, w); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("Dump after Stop = %v, want ErrUnknownTarget", err)
	}
}

// TestStartEarly starts recording a JVM the moment it is exec'd, as the agent
// does when `rootline run` registers a service: the SIGQUIT that opens the
// attach listener must wait until the JVM handles it (before, it kills the
// JVM), and a JVM that never handles it (-Xrs) is refused, not killed.
func TestStartEarly(t *testing.T) {
	requireJDK(t)
	dir := compileHot(t)
	for _, tc := range []struct {
		name   string
		flags  []string
		wantOK bool
	}{
		{"starting", nil, true},
		{"reduced signals", []string{"-Xrs"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := append(append([]string{"-Xmx64m", "-XX:-UsePerfData"}, tc.flags...), "-cp", dir, "Hot", "idle")
			cmd := exec.Command("java", argv...)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			var waitErr error
			go func() { waitErr = cmd.Wait(); close(exited) }()
			defer func() {
				_ = stdin.Close()
				select {
				case <-exited:
				case <-time.After(3 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			}()
			p := newTestProfiler(t)
			tg := profiler.Target{PID: cmd.Process.Pid, Service: "early", JVM: true}
			err = p.Start(context.Background(), tg)
			switch {
			case tc.wantOK && err != nil:
				t.Errorf("Start = %v", err)
			case !tc.wantOK && !errors.Is(err, errQuitNotCaught):
				t.Errorf("Start = %v, want %v", err, errQuitNotCaught)
			}
			t.Log(err)
			select {
			case <-exited:
				t.Fatalf("the JVM died: %v", waitErr)
			case <-time.After(500 * time.Millisecond):
			}
		})
	}
}

// TestStaleSocket: a socket left by an earlier process with the JVM's pid
// (nobody listening) is replaced, not taken as the JVM's.
func TestStaleSocket(t *testing.T) {
	j := startHot(t, hotOptions{idle: true})
	path := fmt.Sprintf("/proc/%d/root/tmp/.java_pid%d", j.pid, j.pid)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.Chmod(path, 0o600); err != nil { // as the JVM makes it
		t.Fatal(err)
	}
	p := newTestProfiler(t)
	if err := p.Start(context.Background(), j.target()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st := p.Stats(); st["commands_attach"] == 0 || st["commands_jcmd"] != 0 {
		t.Errorf("commands: %v over the attach socket, %v with jcmd", st["commands_attach"], st["commands_jcmd"])
	}
}

// TestForeignSocket: a socket that is not the JVM's (other owner or open
// mode) is refused, not talked to.
func TestForeignSocket(t *testing.T) {
	j := startHot(t, hotOptions{idle: true})
	path := fmt.Sprintf("/proc/%d/root/tmp/.java_pid%d", j.pid, j.pid)
	l, err := net.Listen("unix", path) // listening, mode 0755: not the JVM's
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = io.WriteString(c, "0\nStarted recording 1\n")
			c.Close()
		}
	}()
	err = newTestProfiler(t).Start(context.Background(), j.target())
	if err == nil || !strings.Contains(err.Error(), "is not the JVM's") {
		t.Fatalf("Start = %v, want the socket refused", err)
	}
}

// TestAttachJcmd drives the recording with the jcmd tool (Attach: jcmd, and
// the fallback when the attach socket cannot be used).
func TestAttachJcmd(t *testing.T) {
	j := startHot(t, hotOptions{})
	p := newProfiler(t, Config{DumpDir: t.TempDir(), Attach: AttachJcmd})
	recordTwoSeconds(t, p, j)
	if st := p.Stats(); st["commands_jcmd"] != 3 || st["commands_attach"] != 0 {
		t.Errorf("commands: %v with jcmd, %v over the attach socket; want 3 and 0", st["commands_jcmd"], st["commands_attach"])
	}
}

// BenchmarkDump measures a 2 s window's dump of a busy JVM with each attach
// mode: wall time and the agent's CPU per dump (its own and its children's,
// i.e. jcmd's JVM), conversion to pprof included.
//
//	go test -run '^$' -bench Dump -benchtime 10x ./internal/profiler/jfr/
func BenchmarkDump(b *testing.B) {
	j := startHot(b, hotOptions{})
	for _, mode := range []string{AttachNative, AttachJcmd} {
		b.Run("attach="+mode, func(b *testing.B) {
			p := New(Config{DumpDir: b.TempDir(), Attach: mode}, nil)
			defer p.Close()
			ctx := context.Background()
			if err := p.Start(ctx, j.target()); err != nil {
				b.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			cpu0 := agentCPU()
			b.ResetTimer()
			for b.Loop() {
				now := time.Now()
				if _, err := p.Dump(ctx, j.target(), profiler.Window{Start: now.Add(-2 * time.Second), End: now}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((agentCPU()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// agentCPU is this process's CPU time plus that of its waited-for children.
func agentCPU() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(v syscall.Timeval) time.Duration { return time.Duration(v.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

func TestPerfdataString(t *testing.T) {
	// A prologue and two entries, little-endian, as HotSpot writes them.
	entry := func(name, val string) []byte {
		e := make([]byte, 20)
		nameOff, dataOff := 20, 20+len(name)+1
		binary.LittleEndian.PutUint32(e[4:], uint32(nameOff))
		binary.LittleEndian.PutUint32(e[8:], uint32(len(val)+1))
		e[12] = 'B'
		binary.LittleEndian.PutUint32(e[16:], uint32(dataOff))
		e = append(append(append(append(e, name...), 0), val...), 0)
		binary.LittleEndian.PutUint32(e[0:], uint32(len(e)))
		return e
	}
	b := make([]byte, 32)
	copy(b, []byte{0xca, 0xfe, 0xc0, 0xc0, 1})
	binary.LittleEndian.PutUint32(b[24:], 32)
	binary.LittleEndian.PutUint32(b[28:], 2)
	b = append(append(b, entry("sun.rt.other", "x")...), entry("sun.rt.jvmCapabilities", "0100")...)
	if v, ok := perfdataString(b, "sun.rt.jvmCapabilities"); !ok || v != "0100" {
		t.Errorf("perfdataString = %q, %v", v, ok)
	}
	if _, ok := perfdataString(b, "missing"); ok {
		t.Error("found a missing entry")
	}
	for n := range len(b) {
		perfdataString(b[:n], "sun.rt.jvmCapabilities") // no panic on a cut buffer
	}
	b[0] = 0
	if _, ok := perfdataString(b, "sun.rt.jvmCapabilities"); ok {
		t.Error("accepted a buffer without the magic")
	}
}

func TestStartErrors(t *testing.T) {
	requireJDK(t)
	p := newTestProfiler(t)
	ctx := context.Background()

	t.Run("unknown pid", func(t *testing.T) {
		err := p.Start(ctx, profiler.Target{PID: 1 << 30, JVM: true})
		if !errors.Is(err, profiler.ErrTargetGone) || !strings.Contains(err.Error(), "no such process") {
			t.Fatalf("Start(unknown pid) = %v", err)
		}
	})

	t.Run("not a JVM", func(t *testing.T) {
		sleep := exec.Command("sleep", "30")
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
		tg := profiler.Target{PID: sleep.Process.Pid, Exe: "/usr/bin/sleep"}
		if p.Supports(tg) {
			t.Error("Supports(sleep) = true")
		}
		if err := p.Start(ctx, tg); !errors.Is(err, profiler.ErrNotSupported) {
			t.Fatalf("Start(sleep) = %v, want ErrNotSupported", err)
		}
		// jcmd's SIGQUIT would have killed it.
		if sleep.ProcessState != nil || sleep.Process.Signal(syscall.Signal(0)) != nil {
			t.Fatal("sleep died")
		}
	})

	t.Run("never started", func(t *testing.T) {
		tg := profiler.Target{PID: os.Getpid()}
		if _, err := p.Dump(ctx, tg, profiler.Window{}); !errors.Is(err, profiler.ErrUnknownTarget) {
			t.Errorf("Dump = %v, want ErrUnknownTarget", err)
		}
		if err := p.Stop(tg); !errors.Is(err, profiler.ErrUnknownTarget) {
			t.Errorf("Stop = %v, want ErrUnknownTarget", err)
		}
	})

	t.Run("attach disabled", func(t *testing.T) {
		argFile := filepath.Join(t.TempDir(), "args")
		if err := os.WriteFile(argFile, []byte("-XX:+DisableAttachMechanism\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			jvmArgs []string
		}{
			// Seen on the command line: refused before jcmd runs, even
			// without perfdata (where jcmd would wait 10 s).
			{"command line", []string{"-XX:-UsePerfData", "-XX:+DisableAttachMechanism"}},
			// Hidden in an @argfile: jcmd reads it from the JVM's perfdata.
			{"jcmd", []string{"-XX:+UsePerfData", "@" + argFile}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				j := startHot(t, hotOptions{jvmArgs: tc.jvmArgs, idle: true})
				err := p.Start(ctx, j.target())
				if !errors.Is(err, ErrAttachDisabled) || !strings.Contains(err.Error(), "attach mechanism is disabled") {
					t.Fatalf("Start = %v, want ErrAttachDisabled", err)
				}
				t.Log(err)
			})
		}
	})
}

func TestTargetGone(t *testing.T) {
	ctx := context.Background()
	t.Run("before dump", func(t *testing.T) {
		j := startHot(t, hotOptions{idle: true})
		p := newTestProfiler(t)
		if err := p.Start(ctx, j.target()); err != nil {
			t.Fatal(err)
		}
		j.kill(t)
		arts, err := p.Dump(ctx, j.target(), profiler.Window{Start: time.Now().Add(-5 * time.Second), End: time.Now()})
		if !errors.Is(err, profiler.ErrTargetGone) || len(arts) != 0 {
			t.Fatalf("Dump = %d artifacts, %v; want ErrTargetGone", len(arts), err)
		}
		if err := p.Stop(j.target()); err != nil {
			t.Fatalf("Stop(gone) = %v", err)
		}
	})
	t.Run("during dump", func(t *testing.T) {
		j := startHot(t, hotOptions{})
		p := newTestProfiler(t)
		if err := p.Start(ctx, j.target()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		done := make(chan struct{})
		var arts []profiler.Artifact
		var err error
		go func() {
			defer close(done)
			arts, err = p.Dump(ctx, j.target(), profiler.Window{Start: time.Now().Add(-time.Minute), End: time.Now()})
		}()
		// Kill while the JVM writes the dump (it takes ~100 ms).
		time.Sleep(30 * time.Millisecond)
		j.kill(t)
		<-done
		switch {
		case err == nil:
			t.Log("the dump finished before the kill")
		case errors.Is(err, profiler.ErrTargetGone):
			for _, a := range arts {
				if !a.Partial {
					t.Errorf("artifact %s not marked partial", a.FileName)
				}
			}
			t.Logf("Dump = %d partial artifacts, %v", len(arts), err)
		default:
			t.Fatalf("Dump = %v, want ErrTargetGone", err)
		}
	})
}

// TestOtherUser records a JVM running as another user: jcmd must run with
// that user's credentials and the JVM must be able to write the dump.
func TestOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a JVM as another user")
	}
	cred := &syscall.Credential{Uid: 4242, Gid: 4242}
	j := startHot(t, hotOptions{cred: cred})
	// t.TempDir's parent is closed to other users; DumpDir's parents must
	// let the JVM's user through.
	dir, err := os.MkdirTemp("", "rootline-jfr-dump-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	recordTwoSeconds(t, newProfiler(t, Config{DumpDir: dir}), j)
}

var parserHeader1GHz = parser.ChunkHeader{StartNanos: 1_700_000_000_000_000_000, StartTicks: 1_000, TicksPerSecond: 1_000_000_000}

// TestContainer records a JVM in its own pid and mount namespaces with a
// private /tmp, as in a container: the JVM cannot see the agent's DumpDir.
func TestContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not in PATH")
	}
	ctx := context.Background()
	t.Run("pid and mount namespaces", func(t *testing.T) {
		j := startHot(t, hotOptions{container: true})
		arts := recordTwoSeconds(t, newTestProfiler(t), j)
		if arts[1].Attributes["execution_samples"] == "0" {
			t.Fatalf("no execution samples: %v", arts[1].Attributes)
		}
		left, _ := filepath.Glob(fmt.Sprintf("/proc/%d/root/tmp/rootline-*.jfr", j.pid))
		if len(left) != 0 {
			t.Errorf("dump files left in the container: %v", left)
		}
	})
	t.Run("mount namespace only", func(t *testing.T) {
		j := startHot(t, hotOptions{container: true, sharePID: true, idle: true})
		// The native attach finds the socket through /proc/<pid>/root.
		p := newTestProfiler(t)
		if err := p.Start(ctx, j.target()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		// jcmd would look for it in the agent's /tmp: refused up front.
		pj := newProfiler(t, Config{DumpDir: t.TempDir(), Attach: AttachJcmd})
		err := pj.Start(ctx, j.target())
		if !errors.Is(err, profiler.ErrNotSupported) {
			t.Fatalf("Start with jcmd = %v, want ErrNotSupported", err)
		}
		t.Log(err)
	})
}

func TestTicks(t *testing.T) {
	h := &parserHeader1GHz
	for _, tc := range []struct {
		name  string
		ticks uint64
		want  int64
	}{
		{"chunk start", 1_000, 1_700_000_000_000_000_000},
		{"one second later", 1_000_001_000, 1_700_000_001_000_000_000},
		{"an hour later (no overflow)", 3600*1_000_000_000 + 1_000, 1_700_003_600_000_000_000},
		{"before chunk start", 0, 1_700_000_000_000_000_000 - 1_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ticksToUnixNs(h, tc.ticks); got != tc.want {
				t.Errorf("ticksToUnixNs(%d) = %d, want %d", tc.ticks, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"10 ms", 10 * time.Millisecond, true},
		{"20 ms", 20 * time.Millisecond, true},
		{"1 s", time.Second, true},
		{"everyChunk", 0, false},
	} {
		if got, ok := parsePeriod(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("parsePeriod(%q) = %s, %v", tc.in, got, ok)
		}
	}
}

func stackHas(s *profile.Sample, fn string) bool {
	for _, l := range s.Location {
		for _, line := range l.Line {
			if line.Function.Name == fn {
				return true
			}
		}
	}
	return false
}

func topN(m map[string]int64, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(m[b], m[a]) })
	return keys[:min(n, len(keys))]
}

func withoutData(a profiler.Artifact) profiler.Artifact {
	a.Data = nil
	return a
}

func TestEventSettingsConfig(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{nil, DefaultConfig().EventSettings},
		{[]string{}, []string{}},
		{[]string{"jdk.ThreadPark#threshold=5ms", "+my.Event#enabled=true"}, []string{"jdk.ThreadPark#threshold=5ms", "+my.Event#enabled=true"}},
		{[]string{"bad", "jdk.ThreadPark#threshold=5ms", "jdk.X#a= b"}, []string{"jdk.ThreadPark#threshold=5ms"}},
	} {
		if err := (Config{EventSettings: tc.in}).Validate(); (err != nil) != (len(tc.want) != len(tc.in) && tc.in != nil) {
			t.Errorf("Validate(%q) = %v", tc.in, err)
		}
		got := New(Config{EventSettings: tc.in}, nil).cfg.EventSettings
		if !slices.Equal(got, tc.want) || got == nil {
			t.Errorf("New(%q).EventSettings = %q, want %q", tc.in, got, tc.want)
		}
	}
}
