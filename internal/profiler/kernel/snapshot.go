package kernel

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Thread states of an Interval.
const (
	StateRunning  = "running"
	StateRunqueue = "runqueue"
	StateBlocked  = "blocked"
)

// SnapshotVersion is the version of the snapshot format Encode writes:
// version 3 is the binary format (see snapbin.go: interned strings,
// delta-encoded varint records, zstd). Version 2, gzipped JSON
// (EncodeJSON), added the followed wakers (Thread.Depth, Recorded,
// Unrecorded, Since, Kernel; Snapshot.Follow and Truncated), the throttled
// and memory reasons, devices (Interval.Device, Wakeup.Device,
// DiskIO.Device), Wakeup.Causal and the "unthrottle" wakeup context; the
// content of versions 2 and 3 is the same. DecodeSnapshot reads versions
// 1, 2 and 3.
const SnapshotVersion = BinaryVersion

// jsonVersion is the version of the gzipped JSON format (EncodeJSON).
const jsonVersion = 2

// Snapshot is the "kernel" artifact: thread intervals and wakeup edges of a
// process in a window. Encoded in the binary format (Encode, MediaType),
// or, as before version 3, as gzipped JSON (EncodeJSON, MediaTypeJSON);
// times are Unix nanoseconds.
//
// Threads holds the target's threads (Target, Depth 0) and, transitively,
// the threads that woke them: a thread that woke a target thread in the
// window has Depth 1, one that woke a Depth 1 thread Depth 2, and so on up
// to Follow.MaxDepth, at most Follow.MaxThreads of them. Such a waker has
// intervals (Recorded) when the recorder followed it; one it did not follow
// is listed without intervals (Unrecorded says why), its states unknown —
// never made up. Wakers beyond the bounds are listed without intervals too
// (Unrecorded "depth" or "count"), and counted in Truncated, so that every
// Wakeup.Waker of the snapshot is in Threads.
type Snapshot struct {
	Version int    `json:"version"`
	PID     uint32 `json:"pid"`
	Start   int64  `json:"start_ns"`
	End     int64  `json:"end_ns"`
	// Lost is the number of kernel records dropped (ring buffer full)
	// during the window and its preroll, counted from the recorder's
	// per-second samples (so up to a second before them too); a snapshot is
	// exact only when it is 0. The count since the recorder started is the
	// artifact's "lost_total" attribute.
	Lost uint64 `json:"lost"`
	// Events is the number of raw kernel records the snapshot was built from.
	Events    int        `json:"events"`
	Threads   []Thread   `json:"threads"`
	Intervals []Interval `json:"intervals"`
	Wakeups   []Wakeup   `json:"wakeups"`
	DiskIOs   []DiskIO   `json:"disk_ios,omitempty"`
	// Follow gives the bounds the wakers were chosen with (version 2).
	Follow *Follow `json:"follow,omitempty"`
	// Truncated counts the wakers the bounds cut (version 2; nil: none).
	Truncated *Truncation `json:"truncated,omitempty"`
}

// Follow is how a snapshot's wakers were chosen.
type Follow struct {
	// MaxDepth is the largest Thread.Depth with intervals: wakers are
	// followed this many hops back from the target's threads.
	MaxDepth int `json:"max_depth"`
	// MaxThreads bounds the number of non-target threads with intervals.
	MaxThreads int `json:"max_threads"`
	// Recording is whether the recorder was following wakers at all
	// (Config.FollowDepth ≥ 1 or Config.All); false: only the target's own
	// threads have intervals.
	Recording bool `json:"recording"`
}

// Truncation counts the wakers a snapshot's bounds left without intervals.
type Truncation struct {
	// Depth: wakers one hop beyond Follow.MaxDepth (listed, Unrecorded "depth").
	Depth int `json:"depth"`
	// Count: wakers left out because Follow.MaxThreads was reached (listed,
	// Unrecorded "count").
	Count int `json:"count"`
}

// Reasons a non-target thread of a snapshot has no intervals (Thread.Unrecorded).
const (
	// UnrecordedDepth: beyond the follow depth (the snapshot's, or the
	// recorder's when it declined to follow the thread).
	UnrecordedDepth = "depth"
	// UnrecordedCount: the snapshot's thread bound, or the recorder's
	// followed-thread map, was full.
	UnrecordedCount = "count"
	// UnrecordedNotFollowed: the recorder was not following the thread in
	// the window (following is off, or the thread woke the target from a
	// context that does not name it as the cause, or it was followed only
	// after the window, or it recorded no state change in the window).
	UnrecordedNotFollowed = "not-followed"
)

// Thread is a thread that appears in the snapshot: one of the process
// (Target) or a thread that woke one of them, directly or through others.
type Thread struct {
	TID    uint32 `json:"tid"`
	PID    uint32 `json:"pid"`
	Comm   string `json:"comm"`
	Target bool   `json:"target"`
	// Kernel is set for a kernel thread (a worker, a journal commit thread,
	// ksoftirqd…) when a record said so.
	Kernel bool `json:"kernel,omitempty"`
	// Observer is set for a thread of Rootline's own processes on the
	// node (the agent, what shares its cgroup, any process running
	// Rootline's binary: rootline run, a server or demo there): the CPU
	// it holds is the observer's cost, not a program the snapshot's
	// processes compete with in production (Recorder.observer).
	Observer bool `json:"observer,omitempty"`
	// Depth is the thread's distance, in wakeup edges of the window, from
	// the target's threads: 0 for them, 1 for a thread that woke one of
	// them, 2 for a thread that woke a Depth 1 thread…; HolderDepth for a
	// task that only held a CPU a tracked thread was switched off or onto
	// (its RUNNING intervals are those stretches, on that CPU).
	Depth int `json:"depth"`
	// Recorded: the thread's intervals are in the snapshot, from Since on
	// (states before Since are unknown: a followed waker is recorded from
	// the first time it woke a tracked thread, not before). False: it has
	// no intervals, and Unrecorded says why.
	Recorded bool `json:"recorded"`
	// Since is the start of the thread's first interval (Unix ns), 0 if it
	// has none.
	Since int64 `json:"since_ns,omitempty"`
	// Unrecorded is why a thread has no intervals: UnrecordedDepth,
	// UnrecordedCount or UnrecordedNotFollowed; empty when Recorded.
	Unrecorded string `json:"unrecorded,omitempty"`
}

// HolderDepth is Thread.Depth of a task the recorder does not follow that
// held a CPU between two switches of tracked threads there: the next task
// of a switch that took one off the CPU, when the next record of that CPU
// switched from it to a tracked thread. Its intervals say what ran while a
// tracked thread waited in that CPU's run queue.
const HolderDepth = -1

// Interval is a span of time a thread spent in one state. Intervals of a
// thread do not overlap; time before a thread's first recorded event, and
// time it was not followed, is absent (unknown), not an interval.
type Interval struct {
	TID uint32 `json:"tid"`
	// State is StateRunning, StateRunqueue or StateBlocked.
	State string `json:"state"`
	// Reason qualifies the state (Reason* constants). RUNQUEUE: preempted
	// (CPU contention after a preemption), wakeup (CPU contention after a
	// wakeup or an unthrottle), new (a new thread's first wait), throttled
	// (its cgroup's CFS quota ran out: not contention, it would not have run
	// on an idle CPU either). BLOCKED: lock, disk, network, timer,
	// pagefault, memory, syscall, kernel, unknown.
	Reason string `json:"reason,omitempty"`
	// Syscall is the syscall a BLOCKED thread was in.
	Syscall string `json:"syscall,omitempty"`
	// Device is the block device (its name, e.g. "vda1", else "major:minor")
	// of a BLOCKED "disk" interval: the filesystem of the file the syscall
	// waited on, else the device whose request completion ended the wait.
	Device string `json:"device,omitempty"`
	Start  int64  `json:"start_ns"`
	End    int64  `json:"end_ns"`
	// CPU is the CPU of a RUNNING interval (-1 otherwise).
	CPU int `json:"cpu"`
	// Wakeup is the index in Snapshot.Wakeups of the wakeup that ended a
	// BLOCKED interval or a RUNQUEUE "throttled" one (Context "unthrottle"),
	// or started a RUNQUEUE "wakeup" one, or the creation (Context "fork")
	// that started a RUNQUEUE "new" one; -1 if none.
	Wakeup int `json:"wakeup"`
}

// Wakeup contexts (Wakeup.Context).
const (
	CtxNameThread     = "thread"     // Waker woke Wakee from its own context
	CtxNameTimer      = "timer"      // an hrtimer, the TIMER or HRTIMER softirq
	CtxNameNetwork    = "network"    // the NET_RX or NET_TX softirq
	CtxNameDisk       = "disk"       // a block request's completion (irq or BLOCK softirq)
	CtxNameHardirq    = "hardirq"    // another device interrupt
	CtxNameSoftirq    = "softirq"    // another softirq
	CtxNameUnthrottle = "unthrottle" // the CFS bandwidth timer unthrottled Wakee's cgroup
	CtxNameFork       = "fork"       // Waker created Wakee (clone): the RUNQUEUE "new" interval's
)

// Wakeup is a wakeup edge: Waker (Context "thread") or an interrupt context
// woke Wakee at TS.
type Wakeup struct {
	TS    int64  `json:"ts_ns"`
	Wakee uint32 `json:"wakee"`
	// Waker is the thread that woke Wakee (Context "thread"), else the thread
	// the interrupt happened to interrupt (0 for "unthrottle").
	Waker uint32 `json:"waker"`
	// Context is one of the CtxName* constants.
	Context string `json:"context"`
	Detail  string `json:"detail,omitempty"` // softirq vector name, "irq N"
	// Causal: Waker caused the wakeup, and a critical path continues on
	// it: always for Context "thread"; for "network" when the softirq ran
	// in the context of the thread that raised it (a send on a local
	// socket, loopback). False for other interrupt contexts, whose Waker
	// merely ran when the interrupt came. Version 1 snapshots lack it
	// (DecodeSnapshot sets it for "thread").
	Causal bool `json:"causal,omitempty"`
	// Device is the block device whose request completion did a "disk"
	// wakeup, when known.
	Device string `json:"device,omitempty"`
	CPU    int    `json:"cpu"`
	// Enqueued is when Wakee was put on a run queue (sched_wakeup), 0 if not seen.
	Enqueued int64 `json:"enqueued_ns,omitempty"`
}

// DiskIO is a block request a thread of the snapshot submitted, issued to
// the device at Issue and completed at Complete.
type DiskIO struct {
	TID      uint32 `json:"tid"`
	Issue    int64  `json:"issue_ns"`
	Complete int64  `json:"complete_ns"`
	Bytes    uint32 `json:"bytes"`
	// Device is the request's block device (name or "major:minor").
	Device string `json:"device,omitempty"`
}

// EncodeJSON writes s as gzipped JSON, format version 2 (whatever
// s.Version says): what recorders wrote before the binary format, kept for
// tools that want JSON and to test the version 2 readers. Intervals and
// wakeups, the bulk of a snapshot, are written without reflection (their
// strings are identifiers from this package that need no escaping, except
// Detail which is quoted).
func (s *Snapshot) EncodeJSON(w io.Writer) error { return s.encodeJSON(w, sliceIntervals(s.Intervals)) }

// encodeJSON writes s with the intervals of ivs (s.Intervals is not read).
func (s *Snapshot) encodeJSON(w io.Writer, ivs intervalSource) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	threads, err := json.Marshal(s.Threads)
	if err != nil {
		return err
	}
	disk, err := json.Marshal(s.DiskIOs)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 64<<10)
	b = fmt.Appendf(b, `{"version":%d,"pid":%d,"start_ns":%d,"end_ns":%d,"lost":%d,"events":%d,"threads":%s,"intervals":[`,
		jsonVersion, s.PID, s.Start, s.End, s.Lost, s.Events, threads)
	flush := func() error {
		if len(b) < 60<<10 {
			return nil
		}
		_, err := zw.Write(b)
		b = b[:0]
		return err
	}
	for i, n := 0, ivs.Len(); i < n; i++ {
		iv := ivs.At(i)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"tid":`...)
		b = strconv.AppendUint(b, uint64(iv.TID), 10)
		b = append(b, `,"state":"`...)
		b = append(b, iv.State...)
		if iv.Reason != "" {
			b = append(b, `","reason":"`...)
			b = append(b, iv.Reason...)
		}
		if iv.Syscall != "" {
			b = append(b, `","syscall":"`...)
			b = append(b, iv.Syscall...)
		}
		b = append(b, '"')
		if iv.Device != "" {
			b = append(b, `,"device":`...)
			b = strconv.AppendQuote(b, iv.Device)
		}
		b = append(b, `,"start_ns":`...)
		b = strconv.AppendInt(b, iv.Start, 10)
		b = append(b, `,"end_ns":`...)
		b = strconv.AppendInt(b, iv.End, 10)
		b = append(b, `,"cpu":`...)
		b = strconv.AppendInt(b, int64(iv.CPU), 10)
		b = append(b, `,"wakeup":`...)
		b = strconv.AppendInt(b, int64(iv.Wakeup), 10)
		b = append(b, '}')
		if err := flush(); err != nil {
			return err
		}
	}
	b = append(b, `],"wakeups":[`...)
	for i, wk := range s.Wakeups {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"ts_ns":`...)
		b = strconv.AppendInt(b, wk.TS, 10)
		b = append(b, `,"wakee":`...)
		b = strconv.AppendUint(b, uint64(wk.Wakee), 10)
		b = append(b, `,"waker":`...)
		b = strconv.AppendUint(b, uint64(wk.Waker), 10)
		b = append(b, `,"context":"`...)
		b = append(b, wk.Context...)
		b = append(b, '"')
		if wk.Detail != "" {
			b = append(b, `,"detail":`...)
			b = strconv.AppendQuote(b, wk.Detail)
		}
		if wk.Causal {
			b = append(b, `,"causal":true`...)
		}
		if wk.Device != "" {
			b = append(b, `,"device":`...)
			b = strconv.AppendQuote(b, wk.Device)
		}
		b = append(b, `,"cpu":`...)
		b = strconv.AppendInt(b, int64(wk.CPU), 10)
		if wk.Enqueued != 0 {
			b = append(b, `,"enqueued_ns":`...)
			b = strconv.AppendInt(b, wk.Enqueued, 10)
		}
		b = append(b, '}')
		if err := flush(); err != nil {
			return err
		}
	}
	b = append(b, ']')
	if len(s.DiskIOs) > 0 {
		b = append(b, `,"disk_ios":`...)
		b = append(b, disk...)
	}
	if s.Follow != nil {
		f, _ := json.Marshal(s.Follow)
		b = append(b, `,"follow":`...)
		b = append(b, f...)
	}
	if s.Truncated != nil {
		t, _ := json.Marshal(s.Truncated)
		b = append(b, `,"truncated":`...)
		b = append(b, t...)
	}
	b = append(b, "}\n"...)
	if _, err := zw.Write(b); err != nil {
		return err
	}
	return zw.Close()
}

// MaxSnapshotBytes bounds the decompressed size of a gzipped JSON snapshot
// DecodeSnapshot accepts: far above what a recorder's memory budget can
// produce, low enough that a corrupt or hostile artifact cannot exhaust the
// reader's memory. (MaxBinarySnapshotBytes bounds the binary format.)
const MaxSnapshotBytes = 4 << 30

// ErrSnapshotVersion is returned for a snapshot of a version this build
// does not read.
var ErrSnapshotVersion = errors.New("unsupported kernel snapshot version")

// DecodeSnapshot reads a snapshot of version 3 (Encode, the binary format)
// or 1 and 2 (gzipped JSON), telling them apart by their first bytes. A
// version 1 snapshot is returned with the version 2 fields it implies
// (Version stays 1): its target threads have Depth 0 and are Recorded, its
// other threads (direct wakers) Depth 1, Recorded when they have intervals
// (else Unrecorded "not-followed"), and its "thread" wakeups are Causal.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	if IsBinarySnapshot(data) {
		s, err := decodeBinary(data)
		if err != nil {
			return nil, fmt.Errorf("kernel snapshot: %w", err)
		}
		return s, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("kernel snapshot: neither the binary format nor gzipped JSON: %w", err)
	}
	lr := &io.LimitedReader{R: zr, N: MaxSnapshotBytes + 1}
	var s Snapshot
	if err := json.NewDecoder(lr).Decode(&s); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("kernel snapshot: larger than %d bytes decompressed", int64(MaxSnapshotBytes))
		}
		return nil, fmt.Errorf("kernel snapshot: %w", err)
	}
	switch s.Version {
	case 1:
		upgradeV1(&s)
	case 2:
	default:
		return nil, fmt.Errorf("%w %d in gzipped JSON (this build reads 1 and 2 as JSON, 3 as binary)", ErrSnapshotVersion, s.Version)
	}
	return &s, nil
}

// upgradeV1 fills the version 2 fields a version 1 snapshot implies.
func upgradeV1(s *Snapshot) {
	since := map[uint32]int64{}
	for _, iv := range s.Intervals {
		if t, ok := since[iv.TID]; !ok || iv.Start < t {
			since[iv.TID] = iv.Start
		}
	}
	for i := range s.Threads {
		th := &s.Threads[i]
		if !th.Target {
			th.Depth = 1
		}
		var ok bool
		th.Since, ok = since[th.TID]
		th.Recorded = ok || th.Target
		if !th.Recorded {
			th.Unrecorded = UnrecordedNotFollowed
		}
	}
	for i := range s.Wakeups {
		s.Wakeups[i].Causal = s.Wakeups[i].Context == CtxNameThread
	}
}

// Thread returns the thread tid of s, if present.
func (s *Snapshot) Thread(tid uint32) (Thread, bool) {
	for _, t := range s.Threads {
		if t.TID == tid {
			return t, true
		}
	}
	return Thread{}, false
}
