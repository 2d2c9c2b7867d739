package critpath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// ErrBadSnapshot: a kernel snapshot that cannot be followed (intervals that
// overlap or run backwards, wakeup indexes out of range).
var ErrBadSnapshot = errors.New("malformed kernel snapshot")

// Timeline is a kernel snapshot indexed for critical paths: per thread, its
// intervals in time order; the wakeups they point at. Build it once per
// snapshot with NewTimeline; it is read-only afterwards and safe for
// concurrent use.
type Timeline struct {
	Start, End int64 // the snapshot's window, Unix ns
	PID        uint32
	// Lost is the kernel records the recorder dropped before the snapshot:
	// a path over a snapshot with losses may be wrong where they fell.
	Lost uint64

	threads []thread
	byTID   map[uint32]int32
	wakeups []wake
	reasons reasonTable
}

// thread is one thread of a Timeline.
type thread struct {
	tid, pid uint32
	comm     string
	target   bool
	ivs      []iv // in time order, not overlapping
}

// iv is one interval of a thread, kept small (24 bytes): a 500 MB snapshot
// holds millions.
type iv struct {
	start, end int64
	wake       int32 // index in Timeline.wakeups, -1: none
	reason     uint16
	kind       uint8
}

// wake is a wakeup edge.
type wake struct {
	ts    int64
	waker uint32
	ctx   uint8
}

// NewTimeline indexes s. It checks what the critical path relies on (each
// thread's intervals in order and disjoint, wakeup indexes in range) and
// returns an error wrapping ErrBadSnapshot otherwise. Intervals of threads
// the snapshot does not list get a thread of their own (pid 0).
func NewTimeline(s *kernel.Snapshot) (*Timeline, error) {
	tl := &Timeline{Start: s.Start, End: s.End, PID: s.PID, Lost: s.Lost,
		byTID: make(map[uint32]int32, len(s.Threads))}
	for _, t := range s.Threads {
		if _, dup := tl.byTID[t.TID]; dup {
			continue
		}
		tl.byTID[t.TID] = int32(len(tl.threads))
		tl.threads = append(tl.threads, thread{tid: t.TID, pid: t.PID, comm: t.Comm, target: t.Target})
	}
	tl.wakeups = make([]wake, len(s.Wakeups))
	for i, w := range s.Wakeups {
		tl.wakeups[i] = wake{ts: w.TS, waker: w.Waker, ctx: contextCode(w.Context)}
	}
	// One backing array for every thread's intervals. The recorder writes
	// them grouped by thread, each thread's in time order: count, then
	// place, without sorting unless a thread's come out of order.
	for i := range s.Intervals {
		tl.threadIndex(s.Intervals[i].TID)
	}
	counts := make([]int, len(tl.threads))
	for i := range s.Intervals {
		counts[tl.byTID[s.Intervals[i].TID]]++
	}
	all := make([]iv, len(s.Intervals))
	off := 0
	for i := range tl.threads {
		tl.threads[i].ivs = all[off : off : off+counts[i]]
		off += counts[i]
	}
	var lastReason string
	var lastCode uint16
	for i := range s.Intervals {
		in := &s.Intervals[i]
		if in.End < in.Start {
			return nil, fmt.Errorf("%w: interval %d of thread %d ends before it starts", ErrBadSnapshot, i, in.TID)
		}
		if in.Wakeup < -1 || in.Wakeup >= len(s.Wakeups) {
			return nil, fmt.Errorf("%w: interval %d of thread %d: wakeup %d of %d", ErrBadSnapshot, i, in.TID, in.Wakeup, len(s.Wakeups))
		}
		if in.Reason != lastReason || i == 0 {
			lastReason, lastCode = in.Reason, tl.reasons.code(in.Reason)
		}
		th := &tl.threads[tl.byTID[in.TID]]
		th.ivs = append(th.ivs, iv{start: in.Start, end: in.End, wake: int32(in.Wakeup),
			kind: kindOf(in), reason: lastCode})
	}
	for i := range tl.threads {
		th := &tl.threads[i]
		if !slices.IsSortedFunc(th.ivs, func(a, b iv) int { return compareInt64(a.start, b.start) }) {
			slices.SortStableFunc(th.ivs, func(a, b iv) int { return compareInt64(a.start, b.start) })
		}
		for j := 1; j < len(th.ivs); j++ {
			if th.ivs[j].start < th.ivs[j-1].end {
				return nil, fmt.Errorf("%w: thread %d has overlapping intervals at %d", ErrBadSnapshot, th.tid, th.ivs[j].start)
			}
		}
	}
	return tl, nil
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

func kindOf(in *kernel.Interval) uint8 {
	switch in.State {
	case kernel.StateRunning:
		return kRunning
	case kernel.StateRunqueue:
		if in.Reason == reasonThrottled {
			return kThrottled
		}
		return kRunqueue
	}
	return kBlocked
}

// reasonThrottled is the run-queue reason of a thread its cgroup's CPU quota
// holds off the CPU.
const reasonThrottled = "throttled"

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
}

// Thread returns what the timeline knows of tid.
func (tl *Timeline) Thread(tid uint32) (Thread, bool) {
	i, ok := tl.byTID[tid]
	if !ok {
		return Thread{TID: tid}, false
	}
	t := &tl.threads[i]
	return Thread{TID: t.tid, PID: t.pid, Comm: t.comm, Target: t.target}, true
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
