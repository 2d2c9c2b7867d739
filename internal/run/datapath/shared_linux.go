//go:build linux

package datapath

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/procfs"
)

// One datapath per node.
//
// Every `rootline run` of a node uses the same two large programs — rd_msg
// on the sockhash and rd_recv on the sock_recv_length tracepoint — and the
// same maps, pinned in the BPF file system by the first run and found there
// by the others (pinDir). Each run loads only its small programs (sock_ops
// on its cgroup, the process tracepoints, the Go probes), which write its
// slot into the connections it follows; the shared programs send each
// connection's events to its run's ring (rd_rings[slot]). So the code that
// runs on every socket read and write of the node is there once: it stays
// in the CPU's caches (N copies of it, one per service, did not), and the
// read tracepoint runs once per read instead of once per run.
//
// Runs take a slot under a file lock (lockDir), recording their pid and
// its start time: a slot whose process is gone (a run killed) is taken
// again, under a new generation (rd_gens), so that the connections the
// killed run left in the maps send nothing to the new one; they are
// removed then. The last run to leave unpins everything, and the programs
// detach with its file descriptors. A run killed last leaves the programs
// attached (they cost one load per socket read of the node) until Sweep
// removes them (sweep_linux.go: the next run to start, the agent, the demo).
//
// Runs share only with runs of the same build (the pin directory is named
// after the BPF object and the ring size). Without a BPF file system or a
// writable lock directory, or with every slot taken, a run loads a private
// datapath, as Config.Private asks.

// runObjects are the datapath's maps (the node's shared ones, or the run's
// own copies) and the run's own programs, as loaded.
type runObjects struct {
	runDatapathMaps
	RdFork        *ebpf.Program `ebpf:"rd_fork"`
	RdExit        *ebpf.Program `ebpf:"rd_exit"`
	RdExec        *ebpf.Program `ebpf:"rd_exec"`
	RdSockops     *ebpf.Program `ebpf:"rd_sockops"`
	RdGoRoundtrip *ebpf.Program `ebpf:"rd_go_roundtrip"`
	RdGoReqwrite  *ebpf.Program `ebpf:"rd_go_reqwrite"`
}

// Close closes every map and program (nil ones are skipped).
func (o *runObjects) Close() error {
	return errors.Join(o.runDatapathMaps.Close(), o.RdFork.Close(), o.RdExit.Close(), o.RdExec.Close(),
		o.RdSockops.Close(), o.RdGoRoundtrip.Close(), o.RdGoReqwrite.Close())
}

// sharedPrograms are the programs every run of the node uses: rd_msg on the
// sockhash, and tracepoint programs (by their links: pinned too).
type sharedPrograms struct {
	RdMsg     *ebpf.Program `ebpf:"rd_msg"`
	RdRecv    *ebpf.Program `ebpf:"rd_recv"`
	RdRunexit *ebpf.Program `ebpf:"rd_runexit"`
	RdSeg     *ebpf.Program `ebpf:"rd_seg"`
}

// sharedProgNames name the shared programs' pins (prog_<name>).
var sharedProgNames = []string{"rd_msg", "rd_recv", "rd_runexit", "rd_seg"}

// named returns the shared programs by the names of their pins.
func (s *sharedPrograms) named() map[string]**ebpf.Program {
	return map[string]**ebpf.Program{"rd_msg": &s.RdMsg, "rd_recv": &s.RdRecv, "rd_runexit": &s.RdRunexit,
		"rd_seg": &s.RdSeg}
}

// Close closes the programs (nil ones are skipped).
func (s *sharedPrograms) Close() error {
	return errors.Join(s.RdMsg.Close(), s.RdRecv.Close(), s.RdRunexit.Close(), s.RdSeg.Close())
}

// shared returns the specs of the maps every run of the node uses: all but
// rd_zconn, the zero value each run's programs copy from.
func (s *runDatapathSpecs) shared() []*ebpf.MapSpec {
	m := s.runDatapathMapSpecs
	return []*ebpf.MapSpec{m.RdConns, m.RdSocks, m.RdReqs, m.RdThreads, m.RdGoroutines, m.RdGoreqs,
		m.RdGowrites, m.RdGopids, m.RdScratch, m.RdStats, m.RdRings, m.RdGens, m.RdRunpids, m.RdUnread}
}

// sharedLinked are the shared programs attached to tracepoints.
var sharedLinked = []string{"rd_recv", "rd_runexit", "rd_seg"}

// numSlots is RD_SLOTS (bpf/run_datapath.h).
const numSlots = 64

// statsPerSlot is RD_STAT_N.
const statsPerSlot = 9

// lockDir holds the lock files of shared datapaths.
var lockDir = "/run/rootline"

// owner is an rd_owners entry: the run that holds a slot.
type owner struct {
	PID   uint32
	Gen   uint32
	Start uint64 // the process's start time (/proc/<pid>/stat field 22)
}

// bpffsRoot returns the BPF file system where the node's runs pin the
// datapath they share: /sys/fs/bpf where the system mounts one (systemd
// does, and a Kubernetes pod gets the host's as a hostPath), else
// /run/rootline/bpf, mounted there by the first run that needs it (see
// MountBPFFS). err says why there is none.
func bpffsRoot() (string, error) {
	if isBPFFS("/sys/fs/bpf") {
		return "/sys/fs/bpf", nil
	}
	if err := MountBPFFS(); err != nil {
		return "", err
	}
	return BPFFSDir, nil
}

// BPFFSDir is where runs mount a BPF file system of their own when the
// system has none at /sys/fs/bpf. It is under /run rather than /sys so
// that runs in other mount namespaces that share /run (`ip netns exec`,
// how the demo starts its pods, mounts a fresh /sys) find the same one,
// if it was mounted before their namespace was made.
var BPFFSDir = "/run/rootline/bpf"

func isBPFFS(p string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(p, &fs) == nil && fs.Type == unix.BPF_FS_MAGIC
}

// MountBPFFS mounts a BPF file system at BPFFSDir unless one is there. It
// stays mounted (empty once the last run is gone), as /sys/fs/bpf stays on
// a systemd host. The demo calls it before it starts its pods, so that the
// runs in them share one datapath.
func MountBPFFS() error {
	if isBPFFS(BPFFSDir) {
		return nil
	}
	if err := os.MkdirAll(BPFFSDir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", BPFFSDir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount a BPF file system at %s: %w", BPFFSDir, err)
	}
	return nil
}

// pinName names the shared datapath of this build and ring size.
func pinName(ringBytes int) string {
	h := sha256.New()
	h.Write(_RunDatapathBytes)
	fmt.Fprintf(h, "ring=%d", ringBytes)
	return "dp-" + hex.EncodeToString(h.Sum(nil)[:6])
}

// lockShared takes the lock of a shared datapath (a file lock: released if
// the process dies).
func lockShared(name string) (unlock func(), err error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(lockDir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func (o owner) alive() bool {
	return o.PID != 0 && procfs.Alive(int(o.PID), o.Start)
}

// selfStart is this process's start time (0 if /proc cannot tell).
func selfStart() uint64 {
	st, _ := procfs.StartTime(os.Getpid())
	return st
}

// ownersMap opens (or makes and pins) the slot registry.
func ownersMap(dir string) (*ebpf.Map, error) {
	path := filepath.Join(dir, "rd_owners")
	if m, err := ebpf.LoadPinnedMap(path, nil); err == nil {
		return m, nil
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "rd_owners", Type: ebpf.Array, KeySize: 4,
		ValueSize: uint32(binary.Size(owner{})), MaxEntries: numSlots})
	if err != nil {
		return nil, err
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// claimSlot takes a free slot, or the slot of a run that is gone, for this
// process. reclaimed reports the latter (its leftovers are to be removed).
func claimSlot(owners *ebpf.Map) (slot, gen uint32, reclaimed bool, err error) {
	free := -1
	var freeOwner owner
	for i := range uint32(numSlots) {
		var o owner
		if err := owners.Lookup(i, &o); err != nil {
			return 0, 0, false, err
		}
		if !o.alive() && (free < 0 || (freeOwner.PID == 0 && o.PID != 0)) {
			// A killed run's slot first: what it left behind goes then.
			free, freeOwner = int(i), o
		}
	}
	if free < 0 {
		return 0, 0, false, errors.New("every slot of the shared datapath is taken")
	}
	me := owner{PID: uint32(os.Getpid()), Gen: freeOwner.Gen + 1, Start: selfStart()}
	if me.Gen == 0 {
		me.Gen = 1
	}
	if err := owners.Put(uint32(free), me); err != nil {
		return 0, 0, false, err
	}
	return uint32(free), me.Gen, freeOwner.PID != 0, nil
}

// othersAlive reports whether a run other than the one in slot holds a slot.
func othersAlive(owners *ebpf.Map, slot uint32) bool {
	for i := range uint32(numSlots) {
		var o owner
		if i != slot && owners.Lookup(i, &o) == nil && o.alive() {
			return true
		}
	}
	return false
}

// purgeSlot removes the connections a gone run of slot left in the maps,
// and the requests they held.
func purgeSlot(conns, reqs *ebpf.Map, slot, gen uint32) {
	var key uint64
	var c runDatapathConn
	var stale []uint64
	live := map[uint64]bool{}
	it := conns.Iterate()
	for it.Next(&key, &c) {
		if c.Slot == slot && c.Gen != gen {
			stale = append(stale, key)
		} else {
			live[c.Addr] = true
		}
	}
	for _, k := range stale {
		_ = conns.Delete(k)
	}
	var span uint64
	var r runDatapathReq
	var orphans []uint64
	it = reqs.Iterate()
	for it.Next(&span, &r) {
		if !live[r.Sk] {
			orphans = append(orphans, span)
		}
	}
	for _, k := range orphans {
		_ = reqs.Delete(k)
	}
}

// loadShared loads the shared programs and their links from dir, if a run
// pinned them (all of them, or none).
func loadShared(dir string) (progs sharedPrograms, links map[string]link.Link, ok bool) {
	links = map[string]link.Link{}
	closeAll := func() {
		progs.Close()
		for _, l := range links {
			l.Close()
		}
	}
	for name, p := range progs.named() {
		var err error
		if *p, err = ebpf.LoadPinnedProgram(filepath.Join(dir, "prog_"+name), nil); err != nil {
			closeAll()
			return sharedPrograms{}, nil, false
		}
	}
	for _, name := range sharedLinked {
		l, err := link.LoadPinnedLink(filepath.Join(dir, "link_"+name), nil)
		if err != nil {
			closeAll()
			return sharedPrograms{}, nil, false
		}
		links[name] = l
	}
	return progs, links, true
}

// unpinAll removes a shared datapath's pins (the last run leaving).
func unpinAll(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.Remove(filepath.Join(dir, e.Name()))
	}
	_ = os.Remove(dir)
}
