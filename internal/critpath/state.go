package critpath

import "strings"

// State names of a critical path, as the API, the UI and `rootline analyze`
// show them. Every span's summary has all of them (zero when absent).
const (
	Running   = "running"   // on a CPU
	Runqueue  = "runqueue"  // runnable, waiting for a CPU (preempted, or woken and not yet running)
	Throttled = "throttled" // runnable, held off the CPU by its cgroup's CPU quota
	Steal     = "steal"     // on a CPU the hypervisor gave to another virtual CPU (steal time), or to interrupts
	Lock      = "lock"      // blocked on a futex (mutex, condition variable) the path could not follow further
	GIL       = "gil"       // blocked on its runtime's global interpreter lock (CPython's GIL), the path could not follow to its holder
	Disk      = "disk"      // blocked on block I/O
	Network   = "network"   // blocked on the network (woken by the network stack)
	Sleep     = "sleep"     // blocked on a timer (sleeps, timeouts)
	Memory    = "memory"    // blocked in a page fault
	GC        = "gc"        // stopped by the JVM's garbage collector (JFR pause events)
	Unknown   = "unknown"   // the kernel cannot tell (user-space waits, unseen threads, other syscalls)
)

// States lists the state names in display order.
var States = []string{Running, Runqueue, Throttled, Steal, Lock, GIL, Disk, Network, Sleep, Memory, GC, Unknown}

// collectorPrefixes name the garbage-collector threads of HotSpot JVMs as
// the kernel's comm holds them (15 bytes): G1's and the parallel
// collector's workers ("GC Thread#0"), G1's concurrent marking and
// refinement, ZGC's and Shenandoah's workers, and the VM thread, which runs
// the serial collector and every collection's safepoint. Other runtimes
// collect on their program's own threads (Go's GC workers are goroutines;
// CPython frees by reference counting), where it is their own work.
var collectorPrefixes = []string{"GC Thread#", "G1 Conc#", "G1 Refine#", "G1 Main Marker", "G1 Service", "G1 Young RemSet",
	"ZWorker", "ZDirector", "ZDriver", "Shenandoah", "VM Thread"}

// CollectorThread reports whether a thread's name (comm) is a
// garbage-collector thread of its runtime.
func CollectorThread(comm string) bool {
	for _, p := range collectorPrefixes {
		if strings.HasPrefix(comm, p) {
			return true
		}
	}
	return false
}

// state is a state name's index in States.
type state uint8

const (
	stRunning state = iota
	stRunqueue
	stThrottled
	stSteal
	stLock
	stGIL
	stDisk
	stNetwork
	stSleep
	stMemory
	stGC
	stUnknown
	numStates
)

func (s state) String() string { return States[s] }

// Interval kinds of the timeline: what a thread did, before classification
// against its wakeup.
const (
	kRunning uint8 = iota
	kRunqueue
	kThrottled
	kSteal
	kBlocked
)

// Wakeup contexts of the timeline (kernel.Wakeup.Context).
const (
	cThread uint8 = iota
	cTimer
	cNetwork
	cDisk
	cHardirq
	cSoftirq
	cFork // the waker created the thread (its first interval's)
	cOther
)

func contextCode(s string) uint8 {
	switch s {
	case "thread":
		return cThread
	case "timer":
		return cTimer
	case "network":
		return cNetwork
	case "disk":
		return cDisk
	case "hardirq":
		return cHardirq
	case "softirq":
		return cSoftirq
	case "fork":
		return cFork
	}
	return cOther
}

// reasonState maps a blocked interval's reason (the recorder's: lock, gil, network,
// disk, timer, pagefault, memory, syscall, kernel, unknown) to the state
// it shows as when the path does not follow it to a waker. Reasons this
// package does not know (a newer recorder) are unknown, never guessed.
func reasonState(reason string) state {
	switch reason {
	case "lock":
		return stLock
	case "gil":
		return stGIL
	case "network":
		return stNetwork
	case "disk":
		return stDisk
	case "timer":
		return stSleep
	case fmtPageFault, "memory":
		return stMemory
	}
	return stUnknown
}

// details interns what qualifies an interval besides its kind — the
// reason, the syscall and the block device — so that an interval stays
// small: an interval holds a code, an index in these slices.
type details struct {
	reason, syscall, device []string
	st                      []state // reasonState of the reason
	index                   map[string]uint16
	key                     []byte
}

// maxDetails bounds the codes; past it, new combinations share the code of
// their reason alone (losing the syscall and device, never the reason).
const maxDetails = 1<<16 - 1

func (d *details) code(reason, syscall, device []byte) uint16 {
	d.key = append(append(append(append(append(d.key[:0], reason...), 0), syscall...), 0), device...)
	if c, ok := d.index[string(d.key)]; ok {
		return c
	}
	if len(d.reason) >= maxDetails {
		if len(syscall) > 0 || len(device) > 0 {
			return d.code(reason, nil, nil)
		}
		return 0
	}
	if d.index == nil {
		d.index = map[string]uint16{}
	}
	c := uint16(len(d.reason))
	d.reason = append(d.reason, string(reason))
	d.syscall = append(d.syscall, string(syscall))
	d.device = append(d.device, string(device))
	d.st = append(d.st, reasonState(string(reason)))
	d.index[string(d.key)] = c
	return c
}
