package kernel

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rootline/rootline/internal/profiler"
)

var _ profiler.Holder = (*Recorder)(nil)

// Held is a window of the recording copied by Hold or HoldCgroup: its
// records (those the snapshot of its processes needs), the comms of their
// threads and the count of records dropped around it, as they were at the
// time of the copy. Its Dump builds the same artifacts Dump would have
// built then, however long after: the recorder keeps Config.Retention of
// history, and a dump that waits for a free slot on a busy node would
// otherwise find its window evicted.
type Held struct {
	r           *Recorder
	t           profiler.Target
	spans       []profiler.Span
	start, end  time.Time // the window, end cut at the time of the copy
	sel         *cgroupSel
	needThreads bool
	isAlive     bool
	gone        error // wraps ErrTargetGone when the target had exited

	mStart, mEnd    int64 // CLOCK_MONOTONIC ns
	offset          int64 // Unix ns − CLOCK_MONOTONIC ns at mEnd
	win             windowEvents
	comms           map[uint32]string
	gil             map[uint32][]addrRange // interpreter locks by pid
	lost, lostTotal uint64
	evicted         uint64
	used            atomic.Bool
}

// errHeldUsed: Held.Dump was called twice.
var errHeldUsed = errors.New("kernel: held window already dumped")

// Hold implements profiler.Holder: it copies the records of w for t.PID
// (as Dump selects them) now, for Held.Dump to encode later.
func (r *Recorder) Hold(ctx context.Context, t profiler.Target, w profiler.Window) (profiler.Held, error) {
	h, err := r.hold(ctx, t, w)
	if err != nil {
		r.countErr(err)
		return nil, err
	}
	return h, nil
}

// HoldCgroup is Hold for a cgroup started with StartCgroup (see
// DumpCgroup): the cgroup's processes are those of dir/cgroup.procs now.
func (r *Recorder) HoldCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) (profiler.Held, error) {
	h, err := r.holdCgroup(ctx, id, dir, t, w)
	if err != nil {
		r.countErr(err)
		return nil, err
	}
	return h, nil
}

// countErr counts a failed dump (a target that exited is not a failure).
func (r *Recorder) countErr(err error) {
	r.dumps.Add(1)
	if err != nil && !errors.Is(err, profiler.ErrTargetGone) {
		r.dumpErrs.Add(1)
	}
}

// Bytes implements profiler.Held: the copied records and comms.
func (h *Held) Bytes() int64 {
	return int64(cap(h.win.events))*eventBytes + int64(len(h.comms))*commEntryBytes
}

// commEntryBytes is about what one copied comm costs: a map entry, its
// string header and bytes.
const commEntryBytes = int64(unsafe.Sizeof(uint32(0))+unsafe.Sizeof(""))*2 + int64(len(Comm{}))

// Dump implements profiler.Held: the "kernel" snapshot and its "kernel-ctf"
// export of the copied window. The copy is released.
func (h *Held) Dump(ctx context.Context) ([]profiler.Artifact, error) {
	if h.used.Swap(true) {
		return nil, errHeldUsed
	}
	defer func() { h.win, h.comms = windowEvents{}, nil }()
	if err := ctx.Err(); err != nil {
		h.r.countErr(err)
		return nil, err
	}
	arts, err := h.encode()
	h.r.countErr(err)
	return arts, err
}

// commsOf copies the comms of the threads the events name.
func (r *ring) commsOf(events []Event) map[uint32]string {
	tids := map[uint32]struct{}{}
	for i := range events {
		ev := &events[i]
		if ev.TID != 0 {
			tids[ev.TID] = struct{}{}
		}
		if t2 := ev.task2(); t2 != 0 {
			tids[t2] = struct{}{}
		}
	}
	out := make(map[uint32]string, len(tids))
	r.mu.Lock()
	defer r.mu.Unlock()
	for tid := range tids {
		if e := r.comms[tid]; e != nil {
			out[tid] = commString(&e.comm)
		}
	}
	return out
}

// commString is a comm up to its first NUL.
func commString(c *Comm) string {
	for i, b := range c {
		if b == 0 {
			return string(c[:i])
		}
	}
	return string(c[:])
}
