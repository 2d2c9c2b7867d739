package cpu_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/cpu"
)

// binDir holds the fixtures built once per test binary run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rootline-cpu-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction(kclock.Refresher)); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testHz is higher than the default so a 3 s run gives enough samples.
const testHz = 499

// buildOnce maps a fixture name to its sync.OnceValues build.
var buildOnce sync.Map

// build compiles a fixture once per test binary run.
func build(t testing.TB, name string, cmd func(out string) *exec.Cmd) string {
	t.Helper()
	f, _ := buildOnce.LoadOrStore(name, sync.OnceValues(func() (string, error) {
		out := filepath.Join(binDir, name)
		c := cmd(out)
		if b, err := c.CombinedOutput(); err != nil {
			return "", errors.New(c.String() + ": " + err.Error() + ": " + string(b))
		}
		return out, nil
	}))
	path, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func buildC(t testing.TB) string {
	if _, err := exec.LookPath("gcc"); err != nil {
		bpftest.Missing(t, "gcc not installed (scripts/deps.sh)")
	}
	return build(t, "hot", func(out string) *exec.Cmd {
		return exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o", out, "testdata/hot.c")
	})
}

func buildGo(t testing.TB) string {
	return build(t, "hotgo", func(out string) *exec.Cmd {
		return exec.Command("go", "build", "-o", out, "./testdata/hotgo")
	})
}

// proc is a running fixture.
type proc struct {
	cmd   *exec.Cmd
	pid   int
	first []string // fields of its first stdout line
}

func startProc(t testing.TB, path string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid}
	t.Cleanup(func() { p.kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: read first line: %v", path, err)
	}
	p.first = strings.Fields(line)
	return p
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

func (p *proc) target(service string) profiler.Target {
	return profiler.Target{PID: p.pid, Service: service}
}

func newSampler(t testing.TB) *cpu.Sampler { return newSamplerHz(t, testHz) }

func newSamplerHz(t testing.TB, hz int) *cpu.Sampler {
	t.Helper()
	bpftest.Require(t, cpu.Available())
	s, err := cpu.New(cpu.Config{FrequencyHz: hz}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func parse(t *testing.T, a profiler.Artifact) *profile.Profile {
	t.Helper()
	p, err := profile.Parse(bytes.NewReader(a.Data))
	if err != nil {
		t.Fatalf("parse %s: %v", a.FileName, err)
	}
	return p
}

func hasFunc(s *profile.Sample, name string) bool {
	for _, l := range s.Location {
		for _, ln := range l.Line {
			if ln.Function != nil && ln.Function.Name == name {
				return true
			}
		}
	}
	return false
}

// share is the fraction of samples with fn anywhere in their stack.
func share(p *profile.Profile, fn string) float64 {
	if len(p.Sample) == 0 {
		return 0
	}
	n := 0
	for _, s := range p.Sample {
		if hasFunc(s, fn) {
			n++
		}
	}
	return float64(n) / float64(len(p.Sample))
}

// topLeaf is the most frequent innermost symbolized function.
func topLeaf(p *profile.Profile) string {
	counts := map[string]int{}
	for _, s := range p.Sample {
		for _, l := range s.Location {
			if len(l.Line) > 0 && l.Line[0].Function != nil {
				counts[l.Line[0].Function.Name]++
				break
			}
		}
	}
	best, n := "", 0
	for k, v := range counts {
		if v > n || (v == n && k < best) {
			best, n = k, v
		}
	}
	return best
}

// perfRecord runs `perf record -F 499 -g -p pid -- sleep d` and returns the
// top symbol of `perf report`; it skips (or fails under
// ROOTLINE_REQUIRE_BPF=1) without perf.
func perfRecord(t *testing.T, pid int, d time.Duration) func() (string, string) {
	t.Helper()
	if _, err := exec.LookPath("perf"); err != nil {
		bpftest.Missing(t, "perf not installed (linux-perf, scripts/deps.sh)")
	}
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command("perf", "record", "-q", "-F", strconv.Itoa(testHz), "-g", "-p", strconv.Itoa(pid),
		"-o", data, "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', -1, 64))
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	return func() (string, string) {
		if err := rec.Wait(); err != nil {
			t.Fatalf("perf record: %v: %s", err, recOut.String())
		}
		out, err := exec.Command("perf", "report", "-i", data, "--stdio", "--no-children",
			"--sort", "sym", "-g", "none", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("perf report: %v: %s", err, out)
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			// "    98.12%  [.] hot_loop"
			if len(f) >= 3 && strings.HasSuffix(f[0], "%") && strings.HasPrefix(f[1], "[") {
				return strings.Join(f[2:], " "), line
			}
		}
		t.Fatalf("no symbol in perf report:\n%s", out)
		return "", ""
	}
}

// TestHotFunction records a C and a Go fixture, checks the hot function is
// in most stacks and that perf agrees on the top symbol.
func TestHotFunction(t *testing.T) {
	for _, tc := range []struct {
		name, hot string
		bin       func(testing.TB) string
	}{
		{"c", "hot_loop", buildC},
		{"go", "main.hotLoop", buildGo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSampler(t)
			p := startProc(t, tc.bin(t))
			tg := p.target("hot-" + tc.name)
			start := time.Now()
			if err := s.Start(context.Background(), tg); err != nil {
				t.Fatal(err)
			}
			perfTop := perfRecord(t, p.pid, 3*time.Second)
			time.Sleep(3 * time.Second)
			end := time.Now()
			arts, err := s.Dump(context.Background(), tg, profiler.Window{Start: start, End: end})
			if err != nil {
				t.Fatal(err)
			}
			if len(arts) != 1 {
				t.Fatalf("got %d artifacts", len(arts))
			}
			a := arts[0]
			if a.Kind != "cpu" || a.MediaType != "application/vnd.google.protobuf+gzip" ||
				a.FileName != "cpu-hot-"+tc.name+"-"+strconv.Itoa(p.pid)+".pb.gz" || a.Partial {
				t.Errorf("artifact = %+v", a)
			}
			prof := parse(t, a)
			if len(prof.Sample) < 100 {
				t.Fatalf("only %d samples in 3 s at %d Hz", len(prof.Sample), testHz)
			}
			if got := prof.SampleType; len(got) != 2 || got[0].Type != "samples" || got[0].Unit != "count" ||
				got[1].Type != "cpu" || got[1].Unit != "nanoseconds" {
				t.Errorf("sample types = %v", got)
			}
			for _, smp := range prof.Sample {
				ts := smp.NumLabel[cpu.LabelTimeNs]
				if len(ts) != 1 || ts[0] < start.UnixNano() || ts[0] > end.UnixNano() {
					t.Fatalf("sample time %v outside [%v, %v]", ts, start, end)
				}
				if len(smp.NumLabel[cpu.LabelTID]) != 1 || len(smp.Label[cpu.LabelThread]) != 1 {
					t.Fatalf("sample labels = %v %v", smp.NumLabel, smp.Label)
				}
				if smp.Value[1] != smp.Value[0]*prof.Period {
					t.Fatalf("values %v, period %d", smp.Value, prof.Period)
				}
			}
			hotShare := share(prof, tc.hot)
			top := topLeaf(prof)
			ourTop, perfLine := perfTop()
			st := s.Stats()
			t.Logf("%s: %d samples (%.0f/s), %s in %.1f%% of stacks, top leaf %s; perf top: %s;"+
				"attributes %v; stats: reader CPU %.4fs, bpf run time %.4fs over %.0f runs, lost %.0f",
				tc.name, len(prof.Sample), float64(len(prof.Sample))/end.Sub(start).Seconds(), tc.hot,
				100*hotShare, top, perfLine, a.Attributes, st["reader_cpu_seconds"],
				st["bpf_run_time_seconds"], st["bpf_run_count"], st["lost"])
			if hotShare <= 0.7 {
				t.Errorf("%s in %.1f%% of stacks, want > 70%%", tc.hot, 100*hotShare)
			}
			if top != tc.hot {
				t.Errorf("top leaf %q, want %q", top, tc.hot)
			}
			if ourTop != top {
				t.Errorf("perf top symbol %q, sampler top %q", ourTop, top)
			}
		})
	}
}

// TestFilter records two threads with different hot functions and checks
// that Filter and the dump window exclude other threads and times.
func TestFilter(t *testing.T) {
	s := newSampler(t)
	p := startProc(t, buildC(t), "2")
	mainTID, _ := strconv.Atoi(p.first[0])
	workerTID, _ := strconv.Atoi(p.first[1])
	if mainTID == 0 || workerTID == 0 {
		t.Fatalf("tids %v", p.first)
	}
	tg := p.target("filter")
	start := time.Now()
	if err := s.Start(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	mid := time.Now()
	time.Sleep(1500 * time.Millisecond)
	end := time.Now()
	arts, err := s.Dump(context.Background(), tg, profiler.Window{Start: start, End: end})
	if err != nil {
		t.Fatal(err)
	}
	all := parse(t, arts[0])

	byMain := cpu.Filter(all, []int{mainTID}, time.Time{}, time.Time{})
	byWorker := cpu.Filter(all, []int{workerTID}, time.Time{}, time.Time{})
	t.Logf("all %d samples, main thread %d (hot_loop %.1f%%), worker %d (other_loop %.1f%%)",
		len(all.Sample), len(byMain.Sample), 100*share(byMain, "hot_loop"),
		len(byWorker.Sample), 100*share(byWorker, "other_loop"))
	if len(byMain.Sample) < 20 || len(byWorker.Sample) < 20 {
		t.Fatalf("too few samples: main %d, worker %d", len(byMain.Sample), len(byWorker.Sample))
	}
	if share(byMain, "other_loop") != 0 || share(byWorker, "hot_loop") != 0 {
		t.Errorf("thread filter leaks: other_loop in main %.2f, hot_loop in worker %.2f",
			share(byMain, "other_loop"), share(byWorker, "hot_loop"))
	}
	if share(byMain, "hot_loop") <= 0.7 || share(byWorker, "other_loop") <= 0.7 {
		t.Errorf("hot functions: main hot_loop %.2f, worker other_loop %.2f",
			share(byMain, "hot_loop"), share(byWorker, "other_loop"))
	}
	if got := len(byMain.Sample) + len(byWorker.Sample); got != len(all.Sample) {
		t.Errorf("main+worker = %d samples, all = %d", got, len(all.Sample))
	}

	late := cpu.Filter(all, nil, mid, time.Time{})
	early := cpu.Filter(all, nil, time.Time{}, mid)
	if len(late.Sample) == 0 || len(early.Sample) == 0 || len(late.Sample)+len(early.Sample) != len(all.Sample) {
		t.Errorf("time filter: early %d + late %d != all %d", len(early.Sample), len(late.Sample), len(all.Sample))
	}
	for _, smp := range late.Sample {
		if smp.NumLabel[cpu.LabelTimeNs][0] < mid.UnixNano() {
			t.Fatalf("sample at %d before %d kept", smp.NumLabel[cpu.LabelTimeNs][0], mid.UnixNano())
		}
	}
	both := cpu.Filter(all, []int{workerTID}, mid, end)
	for _, smp := range both.Sample {
		if smp.NumLabel[cpu.LabelTID][0] != int64(workerTID) || smp.NumLabel[cpu.LabelTimeNs][0] < mid.UnixNano() {
			t.Fatalf("sample %v kept", smp.NumLabel)
		}
	}

	// The dump window itself filters as well.
	arts, err = s.Dump(context.Background(), tg, profiler.Window{Start: mid, End: end})
	if err != nil {
		t.Fatal(err)
	}
	half := parse(t, arts[0])
	if len(half.Sample) == 0 || len(half.Sample) >= len(all.Sample) {
		t.Errorf("window dump: %d samples, full %d", len(half.Sample), len(all.Sample))
	}
	for _, smp := range half.Sample {
		if ts := smp.NumLabel[cpu.LabelTimeNs][0]; ts < mid.UnixNano() || ts > end.UnixNano() {
			t.Fatalf("window dump kept sample at %d", ts)
		}
	}
}

// TestTargetExits kills one target: its dump is partial with ErrTargetGone,
// symbolized from cached maps, and the sampler keeps recording another pid.
func TestTargetExits(t *testing.T) {
	s := newSampler(t)
	gone := startProc(t, buildC(t))
	other := startProc(t, buildGo(t))
	tgGone, tgOther := gone.target("gone"), other.target("other")
	start := time.Now()
	for _, tg := range []profiler.Target{tgGone, tgOther} {
		if err := s.Start(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	gone.kill()

	arts, err := s.Dump(context.Background(), tgGone, profiler.Window{Start: start, End: time.Now()})
	if !errors.Is(err, profiler.ErrTargetGone) {
		t.Fatalf("dump of exited target: err = %v, want ErrTargetGone", err)
	}
	if len(arts) != 1 || !arts[0].Partial {
		t.Fatalf("want one partial artifact, got %+v", arts)
	}
	prof := parse(t, arts[0])
	t.Logf("exited target: %v; hot_loop in %.1f%% of %d samples", err, 100*share(prof, "hot_loop"), len(prof.Sample))
	if share(prof, "hot_loop") <= 0.7 {
		t.Errorf("cached symbolization: hot_loop in %.2f of stacks", share(prof, "hot_loop"))
	}

	// Dumping a window after the exit: nothing to return.
	if _, err := s.Dump(context.Background(), tgGone, profiler.Window{Start: time.Now(), End: time.Now().Add(time.Second)}); !errors.Is(err, profiler.ErrTargetGone) {
		t.Errorf("empty window of exited target: err = %v", err)
	}

	mid := time.Now()
	time.Sleep(time.Second)
	arts, err = s.Dump(context.Background(), tgOther, profiler.Window{Start: mid, End: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if p := parse(t, arts[0]); len(p.Sample) < 20 || share(p, "main.hotLoop") <= 0.7 {
		t.Errorf("other target after exit: %d samples, main.hotLoop %.2f", len(p.Sample), share(p, "main.hotLoop"))
	}
	if err := s.Stop(tgGone); err != nil {
		t.Errorf("stop exited target: %v", err)
	}
	if err := s.Stop(tgOther); err != nil {
		t.Error(err)
	}
	if _, err := s.Dump(context.Background(), tgOther, profiler.Window{Start: mid, End: time.Now()}); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("dump after stop: err = %v", err)
	}
}

func TestUnknownTarget(t *testing.T) {
	s := newSampler(t)
	tg := profiler.Target{PID: os.Getpid()}
	if _, err := s.Dump(context.Background(), tg, profiler.Window{Start: time.Now().Add(-time.Second), End: time.Now()}); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("Dump: err = %v, want ErrUnknownTarget", err)
	}
	if err := s.Stop(tg); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("Stop: err = %v, want ErrUnknownTarget", err)
	}
	if err := s.Start(context.Background(), profiler.Target{PID: 1 << 30}); !errors.Is(err, profiler.ErrTargetGone) {
		t.Errorf("Start of missing pid: err = %v, want ErrTargetGone", err)
	}
	if s.Name() != "cpu" || !s.Supports(tg) || s.Supports(profiler.Target{}) {
		t.Error("Name/Supports")
	}
	// Starting twice is a no-op.
	for range 2 {
		if err := s.Start(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
	}
	if s.Stats()["targets"] != 1 {
		t.Errorf("stats %v", s.Stats())
	}
}
