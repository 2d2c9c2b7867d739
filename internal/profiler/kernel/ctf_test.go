package kernel

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/profiler"
)

// untarCTF extracts a kernel-ctf artifact into a temporary directory and
// returns the trace directory.
func untarCTF(t *testing.T, data []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	var trace string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if filepath.Base(p) == "metadata" {
				trace = filepath.Dir(p)
			}
		}
	}
	if trace == "" {
		t.Fatal("no metadata file in the CTF archive")
	}
	return trace
}

// babeltrace runs babeltrace2 on a CTF trace directory and returns its text
// output, one line per event.
func babeltrace(t *testing.T, dir string) []string {
	t.Helper()
	bt, err := exec.LookPath("babeltrace2")
	if err != nil {
		t.Skip("babeltrace2 not installed (scripts/deps.sh installs it)")
	}
	out, err := exec.Command(bt, "--clock-gmt", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("babeltrace2: %v\n%s", err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func countEvents(lines []string) map[string]int {
	n := map[string]int{}
	re := regexp.MustCompile(`\) \S+ (\w+): \{`)
	for _, l := range lines {
		if m := re.FindStringSubmatch(l); m != nil {
			n[m[1]]++
		}
	}
	return n
}

// twoThreads is a window of process 100's threads 101 and 102 (a fork, a
// wakeup, a preemption, a socket wait, an exec and an exit) at times at(µs).
func twoThreads(at func(int64) int64) []Event {
	events := []Event{
		{Type: EvFork, TS: at(0), TID: 102, TGID: 100, TID2: 101, TGID2: 100},
		{Type: EvWakeupNew, TS: at(1), TID: 102, TGID: 100, TargetCPU: 1},
		swIn(at(2), 0, 101),
		swIn(at(3), 1, 102),
		swOut(at(10), 0, 101, 1, 202, 0, 0),
		waking(at(30), 101, 102, CtxThread, 0),
		{Type: EvWakeup, TS: at(31), TID: 101, TGID: 100, TargetCPU: 0},
		swIn(at(40), 0, 101),
		preempt(at(50), 0, 101, 200),
		swOut(at(60), 0, 200, 1, SysUnknown, 0, 101),
		swOut(at(70), 1, 102, 1, 0, fileSock, 0),
		waking(at(90), 102, 0, CtxSoftirq, 3),
		swIn(at(95), 1, 102),
		{Type: EvExec, TS: at(96), TID: 102, TGID: 100},
		{Type: EvExit, TS: at(99), TID: 102, TGID: 100},
	}
	for i := range events {
		events[i].Prio = 120
	}
	return events
}

func TestDumpCTFReadByBabeltrace(t *testing.T) {
	base := kclock.Monotonic.Now() - 2*time.Second.Nanoseconds()
	at := func(us int64) int64 { return base + us*1000 }
	events := twoThreads(at)
	src := newFakeSource(events, map[uint32]string{101: "main", 102: "worker", 200: "other"})
	r := NewWithSource(Config{CTF: true}, src, nil)
	defer r.Close()
	pid := os.Getpid() // a live process; the synthetic one is pid 100
	if err := r.Start(context.Background(), profiler.Target{PID: pid}); err != nil {
		t.Fatal(err)
	}
	win := profiler.Window{Start: time.Unix(0, at(0)+r.offsetNow()), End: time.Unix(0, at(100)+r.offsetNow())}
	arts, err := r.Dump(context.Background(), profiler.Target{PID: 999_999_999}, win)
	if !errors.Is(err, profiler.ErrUnknownTarget) || len(arts) != 0 {
		t.Fatalf("dump of a process never recorded: %v, %d artifacts", err, len(arts))
	}
	r.mu.Lock()
	r.targets[100] = 1 // pretend pid 100 was started (and has exited)
	r.mu.Unlock()
	// The requests the window explains: one served by both threads, one
	// by an unknown thread that began before the window.
	win.Spans = []profiler.Span{
		{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Service: "svc", Operation: "GET /x",
			Start: time.Unix(0, at(5)+r.offsetNow()), End: time.Unix(0, at(80)+r.offsetNow()), TIDs: []uint32{101, 102}},
		{TraceID: "4bf92f3577b34da6a3ce929d0e0e4737", SpanID: "00f067aa0ba902b8", ParentSpanID: "00f067aa0ba902b7", Service: "svc",
			Operation: "db", Start: time.Unix(0, at(-50)+r.offsetNow()), End: time.Unix(0, at(20)+r.offsetNow())},
	}
	arts, err = r.Dump(context.Background(), profiler.Target{PID: 100, Service: "svc"}, win)
	if !errors.Is(err, profiler.ErrTargetGone) {
		t.Errorf("dump of an exited target: %v, want an error wrapping ErrTargetGone", err)
	}
	if len(arts) != 2 || arts[0].Kind != "kernel" || arts[1].Kind != "kernel-ctf" {
		t.Fatalf("artifacts = %d", len(arts))
	}
	if arts[0].Attributes["lost"] != "3" || !arts[0].Partial {
		t.Errorf("attributes = %v, partial %v", arts[0].Attributes, arts[0].Partial)
	}
	snap, err := DecodeSnapshot(arts[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	// Wakeups: 102's creation by 101 (fork), 102 waking 101, NET_RX
	// waking 102.
	if len(snap.Threads) != 2 || len(snap.Wakeups) != 3 {
		t.Errorf("snapshot threads %+v wakeups %+v", snap.Threads, snap.Wakeups)
	}

	lines := babeltrace(t, untarCTF(t, arts[1].Data))
	got := countEvents(lines)
	want := map[string]int{
		"sched_switch": 8, "sched_waking": 2, "sched_wakeup": 1, "sched_wakeup_new": 1,
		"sched_process_fork": 1, "sched_process_exec": 1, "sched_process_exit": 1,
		"rootline_thread_state": len(snap.Intervals), "rootline_wakeup": 3, "rootline_thread": len(snap.Threads),
		"rootline_span_begin": 3, "rootline_span_end": 3,
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("babeltrace2: %d %s events, want %d", got[name], name, n)
		}
	}
	text := strings.Join(lines, "\n")
	for _, s := range []string{
		`prev_comm = "main", prev_tid = 101, prev_prio = 120, prev_state = 1, next_comm = "", next_tid = 0`,
		`prev_tid = 101, prev_prio = 120, prev_state = 256, next_comm = "other", next_tid = 200`, // preempted: TASK_REPORT_MAX
		`cpu_id = 1`,
		`state = "blocked", reason = "lock", syscall = "futex", device = "", duration_ns = 20000`,
		`state = "blocked", reason = "network", syscall = "read"`,
		`wakee_tid = 101, waker_tid = 102, waker_comm = "worker", context = "thread", detail = "", causal = 1`,
		`context = "network", detail = "NET_RX", causal = 0`,
		`tid = 101, pid = 100, comm = "main", target = 1, depth = 0, recorded = 1`,
		`rootline_span_begin: { tid = 102, trace_id = "4bf92f3577b34da6a3ce929d0e0e4736", span_id = "00f067aa0ba902b7", parent_span_id = "", service = "svc", operation = "GET /x", partial = 0 }`,
		`rootline_span_begin: { tid = 0, trace_id = "4bf92f3577b34da6a3ce929d0e0e4737", span_id = "00f067aa0ba902b8", parent_span_id = "00f067aa0ba902b7", service = "svc", operation = "db", partial = 1 }`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("babeltrace2 output lacks %q", s)
		}
	}
	if t.Failed() {
		t.Logf("babeltrace2 output:\n%s", text)
	}
}

// TestDumpWithoutCTF: by default a dump is the snapshot alone.
func TestDumpWithoutCTF(t *testing.T) {
	base := kclock.Monotonic.Now() - 2*time.Second.Nanoseconds()
	at := func(us int64) int64 { return base + us*1000 }
	src := newFakeSource(twoThreads(at), map[uint32]string{101: "main", 102: "worker", 200: "other"})
	r := NewWithSource(Config{}, src, nil)
	defer r.Close()
	if err := r.Start(context.Background(), profiler.Target{PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.targets[100] = 1
	r.mu.Unlock()
	win := profiler.Window{Start: time.Unix(0, at(0)+r.offsetNow()), End: time.Unix(0, at(100)+r.offsetNow())}
	arts, err := r.Dump(context.Background(), profiler.Target{PID: 100, Service: "svc"}, win)
	if !errors.Is(err, profiler.ErrTargetGone) {
		t.Errorf("dump of an exited target: %v, want an error wrapping ErrTargetGone", err)
	}
	if len(arts) != 1 || arts[0].Kind != "kernel" || len(arts[0].Data) == 0 {
		t.Fatalf("%d artifacts, want the snapshot alone", len(arts))
	}
}
