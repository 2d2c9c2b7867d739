package critpath

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// timelineOf is the reference for Decode: the snapshot as the recorder's own
// decoder reads it (encoding/json), indexed the obvious way.
func timelineOf(s *kernel.Snapshot) *Timeline {
	tl := &Timeline{Start: s.Start, End: s.End, PID: s.PID, Lost: s.Lost, byTID: map[uint32]int32{}}
	tl.details.code(nil, nil, nil)
	for _, t := range s.Threads {
		tl.addThread(thread{tid: t.TID, pid: t.PID, comm: t.Comm, target: t.Target})
	}
	for _, w := range s.Wakeups {
		tl.wakeups = append(tl.wakeups, wake{ts: w.TS, waker: w.Waker, ctx: contextCode(w.Context), causal: w.Causal || w.Context == "thread"})
	}
	for _, in := range s.Intervals {
		i := tl.threadIndex(in.TID)
		k := kBlocked
		switch {
		case in.State == kernel.StateRunning:
			k = kRunning
		case in.State == kernel.StateRunqueue && in.Reason == "throttled":
			k = kThrottled
		case in.State == kernel.StateRunqueue:
			k = kRunqueue
		}
		tl.threads[i].ivs = append(tl.threads[i].ivs, iv{start: in.Start, end: in.End, wake: int32(in.Wakeup),
			kind: k, cpu1: cpuCode(int64(in.CPU)), detail: tl.details.code([]byte(in.Reason), []byte(in.Syscall), []byte(in.Device))})
	}
	for i := range tl.threads {
		slices.SortStableFunc(tl.threads[i].ivs, func(a, b iv) int { return compareInt64(a.start, b.start) })
	}
	return tl
}

// sameTimeline compares two timelines by content (detail codes by value).
func sameTimeline(x, y *Timeline) error {
	if x.Start != y.Start || x.End != y.End || x.PID != y.PID || x.Lost != y.Lost {
		return fmt.Errorf("header %d %d %d %d vs %d %d %d %d", x.Start, x.End, x.PID, x.Lost, y.Start, y.End, y.PID, y.Lost)
	}
	if !reflect.DeepEqual(x.wakeups, y.wakeups) {
		return fmt.Errorf("wakeups differ")
	}
	if len(x.threads) != len(y.threads) {
		return fmt.Errorf("%d threads vs %d", len(x.threads), len(y.threads))
	}
	for _, tx := range x.threads {
		ty := y.threads[y.byTID[tx.tid]]
		if tx.tid != ty.tid || tx.pid != ty.pid || tx.comm != ty.comm || tx.target != ty.target || len(tx.ivs) != len(ty.ivs) {
			return fmt.Errorf("thread %+v vs %+v", tx, ty)
		}
		for k := range tx.ivs {
			a, b := tx.ivs[k], ty.ivs[k]
			dx := [3]string{x.details.reason[a.detail], x.details.syscall[a.detail], x.details.device[a.detail]}
			dy := [3]string{y.details.reason[b.detail], y.details.syscall[b.detail], y.details.device[b.detail]}
			if dx != dy {
				return fmt.Errorf("thread %d interval %d: %q vs %q", tx.tid, k, dx, dy)
			}
			a.detail, b.detail = 0, 0
			if a != b {
				return fmt.Errorf("thread %d interval %d: %+v vs %+v", tx.tid, k, a, b)
			}
		}
	}
	return nil
}

// TestDecodeMatchesRecorderDecoder: the JSON format (version 2) decodes
// as encoding/json reads it, its elements through the fast paths.
func TestDecodeMatchesRecorderDecoder(t *testing.T) {
	for seed := range 5 {
		c := genConfig{seed: uint64(seed), procs: 3, threads: 4, dur: 50_000_000, meanRun: 300_000, meanBlock: 600_000,
			meanReq: 3_000_000, meanReqGap: 1_000_000, start: 1_700_000_000_000_000_000, foreignWakers: 0.1}
		s, _ := generate(c)
		s.Lost = uint64(seed)
		s.Wakeups[0].Detail = "irq \"7\" \\ é" // a string that needs escapes
		for i := range s.Wakeups {
			if s.Wakeups[i].Context == "network" && i%2 == 0 {
				s.Wakeups[i].Causal = true
			}
		}
		for i := range s.Intervals {
			if s.Intervals[i].Reason == "disk" && i%3 == 0 {
				s.Intervals[i].Device = "vda1"
			}
		}
		var js bytes.Buffer
		if err := s.EncodeJSON(&js); err != nil {
			t.Fatal(err)
		}
		data := js.Bytes()
		got, err := DecodeBytes(data)
		if err != nil {
			t.Fatal(err)
		}
		// The recorder's layout takes the fast paths, every element but
		// the one wakeup whose detail needs escapes.
		zr, _ := gzip.NewReader(bytes.NewReader(data))
		d := newDecoder(zr)
		if _, err := d.snapshot(); err != nil || d.slow != 1 {
			t.Fatalf("seed %d: %d elements took the slow path (err %v)", seed, d.slow, err)
		}
		ref, err := kernel.DecodeSnapshot(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameTimeline(got, timelineOf(ref)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
