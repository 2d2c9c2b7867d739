package kernel

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/profiler"
)

// TestGILWaits: in a CPython process, a thread waiting for the interpreter
// lock while another runs Python code is blocked for reason gil (the futex
// is in _PyRuntime), and a thread waiting on a threading.Lock is blocked for
// reason lock.
func TestGILWaits(t *testing.T) {
	r := newTestRecorder(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		bpftest.Missing(t, "python3 not installed")
	}
	w := startWorkload(t, python, "testdata/gil.py")
	if err := r.Start(context.Background(), profiler.Target{PID: w.pid()}); err != nil {
		t.Fatal(err)
	}
	snap := runAndDump(t, r, w)

	ranges := r.gil.of(uint32(w.pid()))
	t.Logf("_PyRuntime at %#x (ctypes); ranges read from the mappings: %x", w.addr, ranges)
	if w.addr == 0 || !inRanges(ranges, w.addr) {
		t.Fatalf("_PyRuntime at %#x is not in the ranges read: %x", w.addr, ranges)
	}
	gil := isState(StateBlocked, ReasonGIL)
	lock := isState(StateBlocked, ReasonLock)
	for _, l := range []string{"spin1", "spin2", "waiter"} {
		tid := w.tids[l]
		g, k := timeIn(snap, tid, snap.Start, snap.End, gil), timeIn(snap, tid, snap.Start, snap.End, lock)
		t.Logf("%s (%d): gil %v, lock %v, running %v", l, tid, time.Duration(g), time.Duration(k),
			time.Duration(timeIn(snap, tid, snap.Start, snap.End, isState(StateRunning))))
		switch l {
		case "waiter":
			// The holder keeps the lock 400 ms.
			if k < 200*time.Millisecond.Nanoseconds() || g > k {
				t.Errorf("%s: lock %v, gil %v: want the lock's wait (≥ 200 ms) as lock", l, time.Duration(k), time.Duration(g))
			}
		default:
			// Two spinners share the interpreter for 600 ms: each waits
			// for it about half the time.
			if g < 100*time.Millisecond.Nanoseconds() || k > g/5 {
				t.Errorf("%s: gil %v, lock %v: want the interpreter's waits (≥ 100 ms) as gil", l, time.Duration(g), time.Duration(k))
			}
		}
	}
}
