package kernel

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestObservers: a process is Rootline's own when it is the recorder's,
// runs the recorder's executable file or a copy of it by its name; the
// snapshot's own processes and kernel threads are never marked; answers are
// cached for observerTTL (a pid can be reused).
func TestObservers(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(bin, "copy"), 0o755))
	for _, f := range []string{"rootline", "copy/rootline", "python3"} {
		must(os.WriteFile(filepath.Join(bin, f), []byte(f), 0o755))
	}
	proc := filepath.Join(dir, "proc")
	link := func(pid, target string) {
		must(os.MkdirAll(filepath.Join(proc, pid), 0o755))
		_ = os.Remove(filepath.Join(proc, pid, "exe"))
		must(os.Symlink(filepath.Join(bin, target), filepath.Join(proc, pid, "exe")))
	}
	link("self", "rootline")
	link("100", "rootline")      // rootline run, the demo's server
	link("101", "copy/rootline") // a container's copy of the binary
	link("102", "python3")       // a service
	link("103", "rootline")      // a target running the binary
	o := newObservers(proc)
	now := time.Unix(1000, 0)
	s := &Snapshot{Threads: []Thread{
		{TID: 1, PID: uint32(os.Getpid())},
		{TID: 100, PID: 100}, {TID: 101, PID: 101}, {TID: 102, PID: 102},
		{TID: 103, PID: 103, Target: true},
		{TID: 104, PID: 104}, // gone
		{TID: 105, PID: 100, Kernel: true},
		{TID: 106},
	}}
	o.mark(s, now)
	want := map[uint32]bool{1: true, 100: true, 101: true}
	for _, th := range s.Threads {
		if th.Observer != want[th.TID] {
			t.Errorf("thread %d (pid %d): observer %v, want %v", th.TID, th.PID, th.Observer, want[th.TID])
		}
	}
	// pid 102 becomes rootline: the cached answer holds for observerTTL.
	link("102", "rootline")
	if o.is(102, now.Add(observerTTL/2)) {
		t.Error("pid 102: the cached answer was not used")
	}
	if !o.is(102, now.Add(observerTTL)) {
		t.Error("pid 102: not asked again after observerTTL")
	}
	// The agent's own binary replaced since it started (a rebuild): its
	// link and the others' end in " (deleted)"; the name still matches.
	gone := filepath.Join(bin, "gone", "rootline (deleted)")
	must(os.MkdirAll(filepath.Dir(gone), 0o755))
	must(os.WriteFile(gone, nil, 0o755))
	_ = os.Remove(filepath.Join(proc, "self", "exe"))
	must(os.Symlink(gone, filepath.Join(proc, "self", "exe")))
	link("107", "copy/rootline")
	if o2 := newObservers(proc); o2.name != "rootline" || !o2.is(107, now) {
		t.Errorf("after a rebuild: name %q, pid 107 observer %v", o2.name, o2.is(107, now))
	}
	var nilObs *observers
	nilObs.mark(s, now) // no recorder observers: nothing to do
}
