package kernel

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/profiler"
)

// A window held (copied) now and dumped after the ring has evicted its
// records and forgotten its threads' comms gives the snapshot a dump at
// the time of the copy gives.
func TestHeldOutlivesEviction(t *testing.T) {
	base := kclock.Monotonic.Now() - 2*time.Second.Nanoseconds()
	at := func(us int64) int64 { return base + us*1000 }
	events := []Event{
		swIn(at(2), 0, 101),
		swIn(at(3), 1, 102),
		swOut(at(10), 0, 101, 1, 202, 0, 0),
		waking(at(30), 101, 102, CtxThread, 0),
		{Type: EvWakeup, TS: at(31), TID: 101, TGID: 100, TargetCPU: 0},
		swIn(at(40), 0, 101),
		swOut(at(70), 1, 102, 1, 0, fileSock, 0),
		swOut(at(80), 0, 101, 1, 0, fileSock, 0),
	}
	src := newFakeSource(events, map[uint32]string{101: "main", 102: "worker"})
	r := NewWithSource(Config{CTF: true}, src, nil)
	defer r.Close()
	r.mu.Lock()
	r.targets[100] = 1 // pretend pid 100 was started (and has exited)
	r.mu.Unlock()
	win := profiler.Window{Start: time.Unix(0, at(0)+r.offsetNow()), End: time.Unix(0, at(100)+r.offsetNow())}
	tgt := profiler.Target{PID: 100, Service: "svc"}

	now, err := r.Dump(context.Background(), tgt, win)
	if !errors.Is(err, profiler.ErrTargetGone) || len(now) != 2 {
		t.Fatalf("dump: %d artifacts, %v", len(now), err)
	}
	held, err := r.Hold(context.Background(), tgt, win)
	if err != nil {
		t.Fatal(err)
	}
	if n := held.Bytes(); n < int64(len(events))*EventBytes {
		t.Errorf("held bytes = %d, want at least the %d records' %d", n, len(events), int64(len(events))*EventBytes)
	}
	// The ring moves on: everything expires, comms included.
	r.ring.expire(kclock.Monotonic.Now() + time.Hour.Nanoseconds())
	r.ring.mu.Lock()
	for i := range r.ring.lists {
		l := &r.ring.lists[i]
		for len(l.chunks) > 0 {
			l.dropOldest()
		}
	}
	r.ring.mu.Unlock()
	if arts, err := r.Dump(context.Background(), tgt, win); err == nil || errors.Is(err, profiler.ErrTargetGone) && len(arts) > 0 {
		if s, derr := DecodeSnapshot(arts[0].Data); derr != nil || len(s.Intervals) != 0 {
			t.Fatalf("the ring still holds the window after eviction: %v", derr)
		}
	}

	later, err := held.Dump(context.Background())
	if !errors.Is(err, profiler.ErrTargetGone) || len(later) != 2 {
		t.Fatalf("held dump: %d artifacts, %v", len(later), err)
	}
	a, errA := DecodeSnapshot(now[0].Data)
	b, errB := DecodeSnapshot(later[0].Data)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if len(b.Intervals) == 0 || len(a.Intervals) != len(b.Intervals) || len(a.Wakeups) != len(b.Wakeups) || len(a.Threads) != len(b.Threads) {
		t.Fatalf("held snapshot: %d threads, %d intervals, %d wakeups; at the time of the copy: %d, %d, %d",
			len(b.Threads), len(b.Intervals), len(b.Wakeups), len(a.Threads), len(a.Intervals), len(a.Wakeups))
	}
	// The two dumps map the window's Unix times to the monotonic clock at
	// different moments; the wall clock may have slewed (by less than a
	// step) in between, so times agree within a step, the rest exactly.
	for i := range a.Intervals {
		x, y := a.Intervals[i], b.Intervals[i]
		if abs(x.Start-y.Start) > slewTolerance || abs(x.End-y.End) > slewTolerance {
			t.Errorf("interval %d: held %+v, at the copy %+v", i, y, x)
		}
		x.Start, x.End = y.Start, y.End
		if x != y {
			t.Errorf("interval %d: held %+v, at the copy %+v", i, y, x)
		}
	}
	var comms []string
	for _, th := range b.Threads {
		comms = append(comms, th.Comm)
	}
	slices.Sort(comms)
	if !slices.Equal(comms, []string{"main", "worker"}) {
		t.Errorf("held snapshot's comms = %q, want main and worker (copied before the ring forgot them)", comms)
	}
	if later[1].Kind != "kernel-ctf" || len(later[1].Data) == 0 || !later[0].Partial {
		t.Errorf("held artifacts: %s (%d bytes), partial %v", later[1].Kind, len(later[1].Data), later[0].Partial)
	}
	if _, err := held.Dump(context.Background()); !errors.Is(err, errHeldUsed) {
		t.Errorf("second Dump of a held window: %v, want errHeldUsed", err)
	}
}

// slewTolerance is how far two conversions of one Unix time may fall
// apart when the wall clock slews between them (kclock keeps only steps
// above a millisecond).
const slewTolerance = int64(time.Millisecond)

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// sortByTS orders records by time, those of one time in arrival order.
func TestSortByTS(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []int64
	}{
		{"sorted", []int64{1, 2, 3}},
		{"two CPUs' batches", []int64{5, 6, 7, 1, 2, 3, 8, 4}},
		{"ties", []int64{3, 1, 3, 1, 2, 3}},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := make([]Event, len(tc.ts))
			for i, ts := range tc.ts {
				evs[i] = Event{TS: ts, Arg: uint64(i)} // Arg: arrival order
			}
			got := sortByTS(evs)
			want := slices.Clone(evs)
			slices.SortStableFunc(want, func(a, b Event) int { return int(a.TS - b.TS) })
			if !slices.Equal(got, want) {
				t.Errorf("sortByTS = %+v, want %+v", got, want)
			}
		})
	}
}

// offsetNow is Unix ns − CLOCK_MONOTONIC ns as the recorder converts a
// window ending now.
func (r *Recorder) offsetNow() int64 {
	ns := kclock.Monotonic.Now()
	return kclock.MonotonicUnix(ns) - ns
}
