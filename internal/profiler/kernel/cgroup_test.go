package kernel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/profiler"
)

// TestDumpCgroupSelectsMembers: a cgroup dump's target threads are those of
// the processes listed in cgroup.procs and of the processes they forked in
// the window, with their real pids; other processes are only wakers.
func TestDumpCgroupSelectsMembers(t *testing.T) {
	base := kclock.Monotonic.Now() - 2*time.Second.Nanoseconds()
	at := func(us int64) int64 { return base + us*1000 }
	// Process 100 (threads 101, 102) is in the cgroup; it forks process 300,
	// which exits before the dump. Process 200 is not in the cgroup; it wakes 101.
	events := []Event{
		swIn(at(1), 0, 101),
		swIn(at(2), 1, 200),
		{Type: EvFork, TS: at(5), TID: 300, TGID: 300, TID2: 101, TGID2: 100},
		swOut(at(10), 0, 101, 1, 202, 0, 300),
		swOut(at(20), 1, 200, 1, 0, fileSock, 102),
		waking(at(30), 101, 300, CtxThread, 0),
		{Type: EvExit, TS: at(35), TID: 300, TGID: 300},
		swOut(at(36), 0, 300, 0x80, SysUnknown, 0, 101),
		swOut(at(50), 1, 102, 1, 0, fileSock, 0),
	}
	src := newFakeSource(events, map[uint32]string{101: "main", 102: "worker", 200: "other", 300: "child"})
	r := NewWithSource(Config{}, src, nil)
	defer r.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	win := profiler.Window{Start: time.Unix(0, at(0)+r.offsetNow()), End: time.Unix(0, at(100)+r.offsetNow())}
	tgt := profiler.Target{PID: 100, Service: "svc"}
	if _, err := r.DumpCgroup(context.Background(), 42, dir, tgt, win); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Fatalf("dump of a cgroup never started: %v", err)
	}
	if err := r.StartCgroup(42); err != nil {
		t.Fatal(err)
	}
	arts, err := r.DumpCgroup(context.Background(), 42, dir, tgt, win)
	if err != nil {
		t.Fatal(err)
	}
	if len(arts) != 1 || arts[0].FileName != "kernel-svc-cgroup-42"+FileExt || arts[0].Attributes["cgroup_id"] != "42" ||
		arts[0].Attributes["processes"] != "2" || arts[0].Partial {
		t.Fatalf("artifacts = %+v", arts)
	}
	snap, err := DecodeSnapshot(arts[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	var targets, others []Thread
	for _, th := range snap.Threads {
		th.Since = 0
		if th.Target {
			targets = append(targets, th)
		} else {
			others = append(others, th)
		}
	}
	want := []Thread{{TID: 101, PID: 100, Comm: "main", Target: true, Recorded: true}, {TID: 102, PID: 100, Comm: "worker", Target: true, Recorded: true},
		{TID: 300, PID: 300, Comm: "child", Target: true, Recorded: true}}
	if snap.PID != 100 || !slices.Equal(targets, want) {
		t.Errorf("snapshot pid %d, target threads %+v, want %+v", snap.PID, targets, want)
	}
	for _, th := range others {
		if th.TID != 200 || th.PID != 200 {
			t.Errorf("non-target thread %+v", th)
		}
	}
	for _, iv := range snap.Intervals {
		if iv.TID == 200 {
			t.Errorf("interval of the process outside the cgroup: %+v", iv)
		}
	}
	if !slices.ContainsFunc(snap.Intervals, func(iv Interval) bool { return iv.TID == 300 && iv.State == StateRunning }) {
		t.Errorf("no RUNNING interval of the forked child: %v", render(snap))
	}

	// The cgroup is removed: what was recorded is still dumped, as partial.
	if err := os.Remove(filepath.Join(dir, "cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	arts, err = r.DumpCgroup(context.Background(), 42, dir, tgt, win)
	if !errors.Is(err, profiler.ErrTargetGone) || len(arts) != 1 || !arts[0].Partial {
		t.Errorf("dump of a removed cgroup: %v, %d artifacts", err, len(arts))
	}
	if r.Stats()["cgroups"] != 1 {
		t.Errorf("stats = %v", r.Stats())
	}
	if err := r.StopCgroup(42); err != nil {
		t.Error(err)
	}
	if err := r.StopCgroup(42); !errors.Is(err, profiler.ErrUnknownTarget) {
		t.Errorf("second StopCgroup: %v", err)
	}
}
