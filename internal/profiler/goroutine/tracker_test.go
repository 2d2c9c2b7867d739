//go:build linux && amd64

package goroutine

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
)

// TestLayout reads the runtime.g offsets and wait reasons of this test
// binary's own Go runtime.
func TestLayout(t *testing.T) {
	bin := buildLockee(t)
	l, err := ReadLayout(bin)
	if err != nil {
		t.Fatal(err)
	}
	if l.GoidOff == 0 || l.WaitReasonOff == 0 || l.Casgstatus == 0 {
		t.Fatalf("layout %+v", l)
	}
	var mutex bool
	for _, r := range l.WaitReasons {
		mutex = mutex || r == "sync.Mutex.Lock"
	}
	if !mutex {
		t.Fatalf("no sync.Mutex.Lock among the wait reasons %q", l.WaitReasons)
	}
	stripped := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.Command("go", "build", "-ldflags=-w", "-o", stripped, "./testdata/lockee").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if _, err := ReadLayout(stripped); err == nil {
		t.Fatal("a binary without DWARF gave a layout")
	}
}

// TestTrackMutexWait: the goroutine that waits for a sync.Mutex held across
// a 40 ms sleep is seen waiting with reason sync.Mutex.Lock for about that
// long, then running.
func TestTrackMutexWait(t *testing.T) {
	bpftest.RequireBPF(t)
	bin := buildLockee(t)
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("lockee: %q %v", line, err)
	}
	tr, err := New()
	bpftest.Require(t, err)
	defer tr.Close()
	pid := uint32(cmd.Process.Pid)
	if err := tr.Add(pid); err != nil {
		t.Fatal(err)
	}
	waitStart := map[uint64]int64{}
	var waits []time.Duration
	deadline := time.Now().Add(5 * time.Second)
	var e Event
	for len(waits) < 5 && time.Now().Before(deadline) {
		if err := tr.Read(&e); err != nil {
			t.Fatal(err)
		}
		if e.PID != pid {
			t.Fatalf("event of process %d, tracking %d", e.PID, pid)
		}
		switch {
		case e.New == Waiting && e.Reason == "sync.Mutex.Lock":
			waitStart[e.Goid] = e.TS
		case e.Old == Waiting && e.New == Runnable:
			if s, ok := waitStart[e.Goid]; ok {
				waits = append(waits, time.Duration(e.TS-s))
				delete(waitStart, e.Goid)
			}
		}
	}
	t.Logf("sync.Mutex.Lock waits: %v", waits)
	if len(waits) < 5 {
		t.Fatalf("%d mutex waits seen in 5 s, want 5", len(waits))
	}
	for _, w := range waits {
		if w < 25*time.Millisecond || w > 200*time.Millisecond {
			t.Errorf("a mutex wait of %v, the holder slept 40 ms", w)
		}
	}
	if n, err := tr.Lost(); err != nil || n != 0 {
		t.Errorf("lost %d (%v)", n, err)
	}
	if err := tr.Remove(pid); err != nil {
		t.Fatal(err)
	}
}

func buildLockee(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockee")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/lockee").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
