package kernel

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// observers tells Rootline's own processes on the node: the recorder's
// process, and any process running Rootline's binary (rootline run
// wrapping a service, a server or the demo on the same node), known by the
// executable file being the recorder's own or bearing its name. A snapshot
// marks their threads (Thread.Observer): when one held a CPU a traced
// thread waited for, the wait is what observing cost, not the fault or a
// neighbour the service meets without Rootline.
type observers struct {
	self    int
	selfExe os.FileInfo
	name    string
	proc    string // the proc file system's mount point (tests: a directory)

	mu    sync.Mutex
	cache map[uint32]observerEntry
}

type observerEntry struct {
	is bool
	at time.Time
}

// deletedSuffix ends the link of a process whose executable file was
// removed or replaced since it started.
const deletedSuffix = " (deleted)"

// observerTTL is how long a pid's answer is kept: a pid can be reused.
const observerTTL = 10 * time.Second

// maxObserverCache bounds the cache; it is cleared when full.
const maxObserverCache = 4096

func newObservers(proc string) *observers {
	o := &observers{self: os.Getpid(), proc: proc, cache: map[uint32]observerEntry{}}
	exe := filepath.Join(proc, "self", "exe")
	o.selfExe, _ = os.Stat(exe)
	if p, err := os.Readlink(exe); err == nil {
		// A binary replaced since it started reads "name (deleted)".
		o.name = strings.TrimSuffix(filepath.Base(p), deletedSuffix)
	}
	return o
}

// is reports whether pid is one of Rootline's own processes (false for a
// process gone or unreadable).
func (o *observers) is(pid uint32, now time.Time) bool {
	if pid == 0 {
		return false
	}
	if int(pid) == o.self {
		return true
	}
	o.mu.Lock()
	e, ok := o.cache[pid]
	o.mu.Unlock()
	if ok && now.Sub(e.at) < observerTTL {
		return e.is
	}
	exe := filepath.Join(o.proc, strconv.FormatUint(uint64(pid), 10), "exe")
	is := false
	if fi, err := os.Stat(exe); err == nil && o.selfExe != nil && os.SameFile(fi, o.selfExe) {
		is = true
	} else if p, err := os.Readlink(exe); err == nil && o.name != "" {
		// Another copy of the binary (a container's image): its name.
		// A deleted binary's link ends in " (deleted)".
		is = strings.TrimSuffix(filepath.Base(p), deletedSuffix) == o.name
	}
	o.mu.Lock()
	if len(o.cache) >= maxObserverCache {
		clear(o.cache)
	}
	o.cache[pid] = observerEntry{is: is, at: now}
	o.mu.Unlock()
	return is
}

// mark sets Observer on the threads of s whose process is one of
// Rootline's own, but for the snapshot's own processes (a target is what
// is being explained, whatever it runs).
func (o *observers) mark(s *Snapshot, now time.Time) {
	if o == nil {
		return
	}
	for i := range s.Threads {
		t := &s.Threads[i]
		t.Observer = !t.Kernel && !t.Target && o.is(t.PID, now)
	}
}
