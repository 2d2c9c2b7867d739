package critpath

// State names of a critical path, as the API, the UI and `rootline analyze`
// show them. Every span's summary has all of them (zero when absent).
const (
	Running   = "running"   // on a CPU
	Runqueue  = "runqueue"  // runnable, waiting for a CPU (preempted, or woken and not yet running)
	Throttled = "throttled" // runnable, held off the CPU by its cgroup's CPU quota
	Lock      = "lock"      // blocked on a futex (mutex, condition variable) the path could not follow further
	Disk      = "disk"      // blocked on block I/O
	Network   = "network"   // blocked on the network (woken by the network stack)
	Sleep     = "sleep"     // blocked on a timer (sleeps, timeouts)
	Memory    = "memory"    // blocked in a page fault
	GC        = "gc"        // stopped by the JVM's garbage collector (JFR pause events)
	Unknown   = "unknown"   // the kernel cannot tell (user-space waits, unseen threads, other syscalls)
)

// States lists the state names in display order.
var States = []string{Running, Runqueue, Throttled, Lock, Disk, Network, Sleep, Memory, GC, Unknown}

// state is a state name's index in States.
type state uint8

const (
	stRunning state = iota
	stRunqueue
	stThrottled
	stLock
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
	}
	return cOther
}

// reasonState maps a blocked interval's reason (the recorder's: lock, network,
// disk, timer, pagefault, syscall, kernel, unknown) to the state
// it shows as when the path does not follow it to a waker. Reasons this
// package does not know (a newer recorder) are unknown, never guessed.
func reasonState(reason string) state {
	switch reason {
	case "lock":
		return stLock
	case "network":
		return stNetwork
	case "disk":
		return stDisk
	case "timer":
		return stSleep
	case fmtPageFault:
		return stMemory
	}
	return stUnknown
}

// Kinds of reason codes kept per interval (an index into reasonNames) so that
// an interval stays small; reasonNames grows with the reasons a snapshot
// holds.
type reasonTable struct {
	names []string
	index map[string]uint16
}

// codeBytes is code without allocating for a reason already known.
func (r *reasonTable) codeBytes(b []byte) uint16 {
	if c, ok := r.index[string(b)]; ok {
		return c
	}
	return r.code(string(b))
}

func (r *reasonTable) code(s string) uint16 {
	if c, ok := r.index[s]; ok {
		return c
	}
	if r.index == nil {
		r.index = map[string]uint16{}
	}
	c := uint16(len(r.names))
	r.names = append(r.names, s)
	r.index[s] = c
	return c
}
