package critpath

import "errors"

// ErrBadSnapshot: a kernel snapshot that cannot be followed (intervals that
// overlap or run backwards, wakeup indexes out of range).
var ErrBadSnapshot = errors.New("malformed kernel snapshot")

// Timeline is a kernel snapshot indexed for critical paths: per thread, its
// intervals in time order; the wakeups they point at. Decode builds it; it is
// read-only afterwards and safe for concurrent use.
type Timeline struct {
	Start, End int64 // the snapshot's window, Unix ns
	PID        uint32
	// Lost is the kernel records the recorder dropped during the snapshot's
	// window: a path over a snapshot with losses may be wrong where they
	// fell.
	Lost uint64

	threads []thread
	byTID   map[uint32]int32
	wakeups []wake
	details details
}

// thread is one thread of a Timeline.
type thread struct {
	tid, pid uint32
	comm     string
	target   bool
	observer bool // kernel.Thread.Observer
	ivs      []iv // in time order, not overlapping
}

// iv is one interval of a thread, kept small (24 bytes): a 500 MB snapshot
// holds millions.
type iv struct {
	start, end int64
	wake       int32  // index in Timeline.wakeups, -1: none
	detail     uint16 // index in Timeline.details: reason, syscall, device
	kind       uint8
	// cpu1 is 1 + the CPU of a running interval, 0 when unknown (not
	// running, or a CPU past 254).
	cpu1 uint8
}

// cpuCode is iv.cpu1 for CPU cpu (-1: none).
func cpuCode(cpu int64) uint8 {
	if cpu < 0 || cpu > 254 {
		return 0
	}
	return uint8(cpu + 1)
}

// wake is a wakeup edge.
type wake struct {
	ts    int64
	waker uint32
	ctx   uint8
	// causal: the waker caused the wakeup and the path continues on it
	// (a thread's wakeup; a network softirq run in the sending thread's
	// context, on loopback).
	causal bool
}

// threadIndex returns tid's index, adding a thread for a tid the snapshot's
// thread list lacks.
func (tl *Timeline) threadIndex(tid uint32) int32 {
	if i, ok := tl.byTID[tid]; ok {
		return i
	}
	i := int32(len(tl.threads))
	tl.byTID[tid] = i
	tl.threads = append(tl.threads, thread{tid: tid})
	return i
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Thread describes a thread of the timeline.
type Thread struct {
	TID, PID uint32
	Comm     string
	// Target: one of the recorded processes' threads (not only a waker).
	Target bool
	// Observer: a thread of Rootline's own processes (kernel.Thread.Observer).
	Observer bool
}

// Thread returns what the timeline knows of tid.
func (tl *Timeline) Thread(tid uint32) (Thread, bool) {
	i, ok := tl.byTID[tid]
	if !ok {
		return Thread{TID: tid}, false
	}
	t := &tl.threads[i]
	return Thread{TID: t.tid, PID: t.pid, Comm: t.comm, Target: t.target, Observer: t.observer}, true
}

// Intervals is the number of intervals indexed.
func (tl *Timeline) Intervals() int {
	n := 0
	for i := range tl.threads {
		n += len(tl.threads[i].ivs)
	}
	return n
}

// PIDs returns the processes of the timeline's threads, target processes
// first.
func (tl *Timeline) PIDs() []uint32 {
	seen := map[uint32]bool{}
	var out []uint32
	for _, want := range []bool{true, false} {
		for i := range tl.threads {
			t := &tl.threads[i]
			if t.target == want && t.pid != 0 && !seen[t.pid] {
				seen[t.pid] = true
				out = append(out, t.pid)
			}
		}
	}
	return out
}
