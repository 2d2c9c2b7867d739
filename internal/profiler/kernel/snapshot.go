package kernel

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
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

// SnapshotVersion is the version of the snapshot format.
const SnapshotVersion = 1

// Snapshot is the "kernel" artifact: thread intervals and wakeup edges of a
// process in a window. Encoded as gzipped JSON (MediaType); times are Unix
// nanoseconds.
type Snapshot struct {
	Version int    `json:"version"`
	PID     uint32 `json:"pid"`
	Start   int64  `json:"start_ns"`
	End     int64  `json:"end_ns"`
	// Lost is the number of kernel records dropped (ring buffer full) since
	// the recorder started; a snapshot is exact only when it is 0.
	Lost uint64 `json:"lost"`
	// Events is the number of raw kernel records the snapshot was built from.
	Events    int        `json:"events"`
	Threads   []Thread   `json:"threads"`
	Intervals []Interval `json:"intervals"`
	Wakeups   []Wakeup   `json:"wakeups"`
	DiskIOs   []DiskIO   `json:"disk_ios,omitempty"`
}

// Thread is a thread that appears in the snapshot: one of the process
// (Target) or a thread that woke one of them.
type Thread struct {
	TID    uint32 `json:"tid"`
	PID    uint32 `json:"pid"`
	Comm   string `json:"comm"`
	Target bool   `json:"target"`
}

// Interval is a span of time a thread spent in one state. Intervals of a
// thread do not overlap; time before a thread's first recorded event is
// absent (unknown), not an interval.
type Interval struct {
	TID    uint32 `json:"tid"`
	State  string `json:"state"`            // StateRunning, StateRunqueue, StateBlocked
	Reason string `json:"reason,omitempty"` // Reason*; RUNQUEUE: preempted/wakeup/new
	// Syscall is the syscall a BLOCKED thread was in.
	Syscall string `json:"syscall,omitempty"`
	Start   int64  `json:"start_ns"`
	End     int64  `json:"end_ns"`
	// CPU is the CPU of a RUNNING interval (-1 otherwise).
	CPU int `json:"cpu"`
	// Wakeup is the index in Snapshot.Wakeups of the wakeup that ended a
	// BLOCKED interval or started a RUNQUEUE(wakeup) one; -1 if none.
	Wakeup int `json:"wakeup"`
}

// Wakeup is a wakeup edge: Waker (Context "thread") or an interrupt context
// woke Wakee at TS.
type Wakeup struct {
	TS    int64  `json:"ts_ns"`
	Wakee uint32 `json:"wakee"`
	// Waker is the thread that woke Wakee (Context "thread"), else the thread
	// the interrupt happened to interrupt (informational).
	Waker uint32 `json:"waker"`
	// Context is "thread", "timer", "network", "disk", "hardirq" or "softirq".
	Context string `json:"context"`
	Detail  string `json:"detail,omitempty"` // softirq vector name, "irq N"
	CPU     int    `json:"cpu"`
	// Enqueued is when Wakee was put on a run queue (sched_wakeup), 0 if not seen.
	Enqueued int64 `json:"enqueued_ns,omitempty"`
}

// DiskIO is a block request a thread of the process issued.
type DiskIO struct {
	TID      uint32 `json:"tid"`
	Issue    int64  `json:"issue_ns"`
	Complete int64  `json:"complete_ns"`
	Bytes    uint32 `json:"bytes"`
}

// Encode writes s as gzipped JSON. Intervals and wakeups, the bulk of a
// snapshot, are written without reflection (their strings are identifiers
// from this package that need no escaping, except Detail which is quoted).
func (s *Snapshot) Encode(w io.Writer) error {
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
		s.Version, s.PID, s.Start, s.End, s.Lost, s.Events, threads)
	flush := func() error {
		if len(b) < 60<<10 {
			return nil
		}
		_, err := zw.Write(b)
		b = b[:0]
		return err
	}
	for i, iv := range s.Intervals {
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
		b = append(b, `","start_ns":`...)
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
	b = append(b, "}\n"...)
	if _, err := zw.Write(b); err != nil {
		return err
	}
	return zw.Close()
}

// DecodeSnapshot reads a snapshot written by Encode.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.NewDecoder(zr).Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
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
