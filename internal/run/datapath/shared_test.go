//go:build linux

package datapath

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/rootline/rootline/internal/bpftest"
)

// The tests' runs use ring sizes no other run uses, so that their shared
// datapaths are theirs alone (runs share by build and ring size), whatever
// else runs on the machine.
const (
	testRingShare   = 1 << 15
	testRingReclaim = 1 << 14
	testRingSweep   = 1 << 13
)

// openRun opens a datapath for a fresh cgroup, as `rootline run` does.
func openRun(t *testing.T, name string, cfg Config) *Datapath {
	t.Helper()
	bpftest.RequireRoot(t, "the datapath")
	dir, remove, err := NewCgroup(name)
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	t.Cleanup(func() { _ = remove() })
	cfg.Cgroup = dir
	d, err := Open(cfg)
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	return d
}

// Two runs share one datapath: the same maps and shared programs, each in a
// slot of its own; the last one out unpins it.
func TestSharedDatapath(t *testing.T) {
	a := openRun(t, "rootline-test-share-a", Config{RingBytes: testRingShare})
	defer a.Close()
	if !a.Shared() {
		t.Fatalf("not shared: %v", a.SharedErr)
	}
	b := openRun(t, "rootline-test-share-b", Config{RingBytes: testRingShare})
	defer b.Close()
	if !b.Shared() || a.pin != b.pin {
		t.Fatalf("second run: shared %v, pin %q vs %q (%v)", b.Shared(), b.pin, a.pin, b.SharedErr)
	}
	if a.slot == b.slot {
		t.Errorf("both runs in slot %d", a.slot)
	}
	for m, pair := range map[string][2]*ebpf.Map{
		"rd_conns": {a.objs.RdConns, b.objs.RdConns},
		"rd_socks": {a.objs.RdSocks, b.objs.RdSocks},
		"rd_rings": {a.objs.RdRings, b.objs.RdRings},
	} {
		ia, _ := pair[0].Info()
		ib, _ := pair[1].Info()
		if idA, _ := ia.ID(); idA == 0 || func() bool { idB, _ := ib.ID(); return idA != idB }() {
			t.Errorf("%s is not the same map in both runs", m)
		}
	}
	na, nb := a.shared.named(), b.shared.named()
	for _, p := range sharedProgNames {
		ia, _ := (*na[p]).Info()
		ib, _ := (*nb[p]).Info()
		idA, _ := ia.ID()
		idB, _ := ib.ID()
		if idA != idB {
			t.Errorf("%s: program %d in one run, %d in the other", p, idA, idB)
		}
	}
	// A run asked to be private has its own.
	c := openRun(t, "rootline-test-share-c", Config{RingBytes: testRingShare, Private: true})
	ic, _ := c.objs.RdConns.Info()
	ia, _ := a.objs.RdConns.Info()
	idC, _ := ic.ID()
	idA, _ := ia.ID()
	if c.Shared() || idC == idA {
		t.Error("a private run joined the shared datapath")
	}
	c.Close()

	pin := a.pin
	a.Close()
	if _, err := os.Stat(filepath.Join(pin, "prog_rd_msg")); err != nil {
		t.Fatalf("the first run to leave unpinned the datapath the other still uses: %v", err)
	}
	b.Close()
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("the last run left %s behind (%v)", pin, err)
	}
}

// A slot whose run is gone is taken again under a new generation, and the
// connections the gone run left behind are removed.
func TestSharedDatapathReclaim(t *testing.T) {
	a := openRun(t, "rootline-test-reclaim-a", Config{RingBytes: testRingReclaim})
	defer a.Close()
	if !a.Shared() {
		t.Fatalf("not shared: %v", a.SharedErr)
	}
	// Make a's slot look like a killed run's: a process that has exited.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := a.owners.Put(a.slot, owner{PID: uint32(gone.Process.Pid), Gen: a.gen, Start: 1}); err != nil {
		t.Fatal(err)
	}
	stale := runDatapathConn{Addr: 0xdead0000, Slot: a.slot, Gen: a.gen}
	if err := a.objs.RdConns.Put(uint64(0xdead0000), &stale); err != nil {
		t.Fatal(err)
	}
	b := openRun(t, "rootline-test-reclaim-b", Config{RingBytes: testRingReclaim})
	defer b.Close()
	if b.slot != a.slot || b.gen != a.gen+1 {
		t.Fatalf("reclaim: slot %d gen %d, want slot %d gen %d", b.slot, b.gen, a.slot, a.gen+1)
	}
	var c runDatapathConn
	if err := b.objs.RdConns.Lookup(uint64(0xdead0000), &c); err == nil {
		t.Error("the gone run's connection is still in rd_conns")
	}
}

// Sweep removes a shared datapath whose runs are all gone (the last one
// killed), which detaches its programs, and keeps one a live run holds.
func TestSweep(t *testing.T) {
	a := openRun(t, "rootline-test-sweep-a", Config{RingBytes: testRingSweep})
	defer a.Close()
	if !a.Shared() {
		t.Fatalf("not shared: %v", a.SharedErr)
	}
	// A leftover of another build: a pin directory without a registry.
	other := filepath.Join(filepath.Dir(a.pin), "dp-000000sweep")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := Sweep()
	if errors.Is(err, ErrCannotSweep) {
		bpftest.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.pin); err != nil || slices.Contains(removed, a.pin) {
		t.Fatalf("a live run's datapath was swept (%v): removed %q", err, removed)
	}
	if !slices.Contains(removed, other) {
		t.Errorf("removed %q, want %s among them", removed, other)
	}
	info, _ := a.shared.RdRecv.Info()
	id, _ := info.ID()
	// a's process is gone, as if killed: its datapath goes.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := a.owners.Put(a.slot, owner{PID: uint32(gone.Process.Pid), Gen: a.gen, Start: 1}); err != nil {
		t.Fatal(err)
	}
	if removed, err = Sweep(); err != nil || !slices.Contains(removed, a.pin) {
		t.Fatalf("removed %q (%v), want %s", removed, err, a.pin)
	}
	if _, err := os.Stat(a.pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there: %v", a.pin, err)
	}
	// The killed run's descriptors go with it: then nothing holds the
	// programs (the kernel frees them a moment later).
	a.Close()
	for i := 0; ; i++ {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			break
		}
		p.Close()
		if i == 100 {
			t.Errorf("rd_recv (program %d) is still loaded after the sweep", id)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A run's cgroup that still holds running processes (the command's
// background children) is left at once, saying so; once they are gone it
// can be removed.
func TestCgroupLeftWithRunningProcess(t *testing.T) {
	bpftest.RequireRoot(t, "cgroups")
	dir, remove, err := NewCgroup("rootline-test-left")
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait(); _ = remove() }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	err = remove()
	if err == nil || !strings.Contains(err.Error(), "processes still running in it: 1") {
		t.Fatalf("remove with a running process: %v, want it named", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the cgroup is gone: %v", err)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	if err := remove(); err != nil {
		t.Fatalf("remove after the process exited: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the cgroup is still there: %v", err)
	}
}
