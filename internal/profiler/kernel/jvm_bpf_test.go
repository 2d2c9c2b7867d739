package kernel

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/profiler"
)

// TestJVMGCThreads: in a JVM that collects garbage all the time, the
// collector's threads ("GC Thread#N", "VM Thread") are in the snapshot with
// their states (they are the target's threads), and the Java thread's waits
// for the collections end with wakeups by them: the path of a request held
// by a GC pause runs into the collector's threads.
func TestJVMGCThreads(t *testing.T) {
	r := newTestRecorder(t)
	javac, err := exec.LookPath("javac")
	if err != nil {
		bpftest.Missing(t, "javac not installed (a JDK)")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		bpftest.Missing(t, "java not installed")
	}
	dir := t.TempDir()
	if out, err := exec.Command(javac, "-d", dir, "testdata/GcStorm.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	gcLog := filepath.Join(dir, "gc.log")
	w := startWorkload(t, java, "-XX:+UseParallelGC", "-XX:ParallelGCThreads=2", "-Xmx128m", "-Xlog:gc:file="+gcLog,
		"-cp", dir, "GcStorm", "2000")
	if err := r.Start(context.Background(), profiler.Target{PID: w.pid()}); err != nil {
		t.Fatal(err)
	}
	snap := runAndDump(t, r, w)
	log, _ := os.ReadFile(gcLog)
	pauses := strings.Count(string(log), "Pause")

	gc := map[uint32]string{} // the collector's threads
	for _, th := range snap.Threads {
		if strings.HasPrefix(th.Comm, "GC Thread") || th.Comm == "VM Thread" {
			gc[th.TID] = th.Comm
			if !th.Target || th.PID != uint32(w.pid()) {
				t.Errorf("collector thread %+v is not one of the target's", th)
			}
		}
	}
	var gcRunning int64
	for tid := range gc {
		gcRunning += timeIn(snap, tid, snap.Start, snap.End, isState(StateRunning))
	}
	// Waits of the other threads ended by a collector thread.
	waits, waitTime := 0, int64(0)
	for _, iv := range snap.Intervals {
		if _, isGC := gc[iv.TID]; isGC || iv.State != StateBlocked || iv.Wakeup < 0 {
			continue
		}
		if wk := snap.Wakeups[iv.Wakeup]; wk.Causal && gc[wk.Waker] != "" {
			waits++
			waitTime += iv.End - iv.Start
		}
	}
	t.Logf("%d collections (gc.log); collector threads %v ran %v; %d waits of other threads (%v) ended by them",
		pauses, gc, time.Duration(gcRunning), waits, time.Duration(waitTime))
	if pauses == 0 {
		t.Fatalf("no collection in gc.log:\n%s", log)
	}
	if len(gc) < 2 || gcRunning == 0 {
		t.Errorf("collector threads %v ran %v in the snapshot", gc, time.Duration(gcRunning))
	}
	if waits == 0 {
		t.Error("no wait of a Java thread ended by a collector thread")
	}
}
