package kernel

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Synthetic event constructors. Process 100 has threads 101 and 102;
// process 200 (thread 200) is outside the target.
func swIn(ts int64, cpu uint16, next uint32) Event {
	return Event{Type: EvSwitch, TS: ts, CPU: cpu, TID2: next, TGID2: tgidOf(next), Syscall: SysUnknown}
}

func swOut(ts int64, cpu uint16, prev uint32, state uint64, syscall int32, detail uint32, next uint32) Event {
	return Event{Type: EvSwitch, TS: ts, CPU: cpu, TID: prev, TGID: tgidOf(prev), Arg: state,
		Syscall: syscall, Detail: detail, TID2: next, TGID2: tgidOf(next)}
}

func preempt(ts int64, cpu uint16, prev, next uint32) Event {
	return Event{Type: EvSwitch, TS: ts, CPU: cpu, TID: prev, TGID: tgidOf(prev), Flags: FlagPreempt,
		Syscall: SysNone, TID2: next, TGID2: tgidOf(next)}
}

func waking(ts int64, wakee, waker uint32, ctx uint8, detail uint32) Event {
	return Event{Type: EvWaking, TS: ts, TID: wakee, TGID: tgidOf(wakee), TID2: waker, TGID2: tgidOf(waker), Ctx: ctx, Detail: detail}
}

func tgidOf(tid uint32) uint32 {
	switch {
	case tid == 0:
		return 0
	case tid/100 == 1:
		return 100
	}
	return tid
}

// render prints intervals compactly: "101 blocked/lock(futex) 10-30 <thread:102".
func render(s *Snapshot) []string {
	var out []string
	for _, iv := range s.Intervals {
		st := iv.State
		if iv.Reason != "" {
			st += "/" + iv.Reason
		}
		if iv.Syscall != "" {
			st += "(" + iv.Syscall + ")"
		}
		line := fmt.Sprintf("%d %s %d-%d", iv.TID, st, iv.Start, iv.End)
		if iv.CPU >= 0 {
			line += fmt.Sprintf(" cpu%d", iv.CPU)
		}
		if iv.Wakeup >= 0 {
			w := s.Wakeups[iv.Wakeup]
			line += fmt.Sprintf(" <%s:%d", w.Context, w.Waker)
			if w.Detail != "" {
				line += ":" + w.Detail
			}
		}
		out = append(out, line)
	}
	return out
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name       string
		events     []Event
		start, end int64
		want       []string
	}{
		{
			name: "futex woken by another thread, then preempted",
			events: []Event{
				swIn(0, 1, 101),
				swOut(10, 1, 101, 1, 202, 0, 0),
				waking(30, 101, 102, CtxThread, 0),
				{Type: EvWakeup, TS: 32, TID: 101, TGID: 100},
				swIn(40, 1, 101),
				preempt(50, 1, 101, 102),
				swOut(60, 1, 102, 1, 0, fileFIFO, 101),
			},
			end: 70,
			want: []string{
				"101 running 0-10 cpu1",
				"101 blocked/lock(futex) 10-30 <thread:102",
				"101 runqueue/wakeup 30-40 <thread:102",
				"101 running 40-50 cpu1",
				"101 runqueue/preempted 50-60",
				"101 running 60-70 cpu1",
				"102 running 50-60 cpu1",
				"102 blocked/syscall(read) 60-70",
			},
		},
		{
			name: "sleep woken by an hrtimer",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 230, 0, 0),
				waking(105, 101, 0, CtxHrtimer, 0),
				swIn(106, 0, 101),
			},
			end: 110,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/timer(clock_nanosleep) 5-105 <timer:0:hrtimer",
				"101 runqueue/wakeup 105-106 <timer:0:hrtimer",
				"101 running 106-110 cpu0",
			},
		},
		{
			name: "socket read woken from NET_RX",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 0, fileSock, 0),
				waking(50, 101, 200, CtxSoftirq, 3),
				swIn(52, 0, 101),
			},
			end: 60,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/network(read) 5-50 <network:200:NET_RX",
				"101 runqueue/wakeup 50-52 <network:200:NET_RX",
				"101 running 52-60 cpu0",
			},
		},
		{
			name: "fsync woken by a block irq; read of a file; page fault",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 2, 74, 0, 0),
				waking(50, 101, 0, CtxBlockIRQ, 24),
				swIn(52, 0, 101),
				swOut(60, 0, 101, 2, 0, fileReg, 0),
				waking(70, 101, 0, CtxSoftirq, 4),
				swIn(71, 0, 101),
				swOut(80, 0, 101, 2, SysNone, 0, 0),
				waking(90, 101, 0, CtxHardirq, 24),
				swIn(91, 0, 101),
			},
			end: 95,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/disk(fsync) 5-50 <disk:0:irq 24",
				"101 runqueue/wakeup 50-52 <disk:0:irq 24",
				"101 running 52-60 cpu0",
				"101 blocked/disk(read) 60-70 <disk:0:BLOCK",
				"101 runqueue/wakeup 70-71 <disk:0:BLOCK",
				"101 running 71-80 cpu0",
				"101 blocked/pagefault 80-90 <hardirq:0:irq 24",
				"101 runqueue/wakeup 90-91 <hardirq:0:irq 24",
				"101 running 91-95 cpu0",
			},
		},
		{
			name: "state 0 without preempt flag (yield) is runnable; TASK_RTLOCK_WAIT blocks",
			events: []Event{
				swIn(0, 0, 101),
				swOut(10, 0, 101, 0, 24, 0, 200),
				swOut(20, 0, 200, 0, SysUnknown, 0, 101),
				swOut(30, 0, 101, taskRTLock, 202, 0, 0),
			},
			end: 40,
			want: []string{
				"101 running 0-10 cpu0",
				"101 runqueue/preempted 10-20",
				"101 running 20-30 cpu0",
				"101 blocked/lock(futex) 30-40",
			},
		},
		{
			name: "window clips intervals; states before the first event are unknown",
			events: []Event{
				swOut(5, 0, 102, 1, 202, 0, 0), // 102 running before: unknown start
				swIn(10, 0, 101),
				swOut(100, 0, 101, 1, 35, 0, 0),
				waking(200, 101, 0, CtxHrtimer, 0),
				swIn(201, 1, 101),
			},
			start: 50, end: 150,
			want: []string{
				"101 running 50-100 cpu0",
				"101 blocked/timer(nanosleep) 100-150",
				"102 blocked/lock(futex) 50-150",
			},
		},
		{
			// A pool's thread idle since before the records (the preroll)
			// is first seen woken: it was asleep until then (only a
			// sleeping task is woken) and off the CPU (its next record is
			// a switch-in), in a syscall not seen. 102 also is first seen
			// woken, but its next record is a switch-out: it was still on
			// the CPU when woken, and nothing is said of it before.
			name: "thread first seen woken: blocked before, in an unknown syscall",
			events: []Event{
				swIn(0, 0, 200),
				waking(40, 101, 200, CtxThread, 0),
				swOut(45, 0, 200, 1, 232, fileSock, 101),
				waking(60, 102, 101, CtxThread, 0),
				swOut(70, 1, 102, 1, 202, 0, 0),
			},
			start: 10, end: 80,
			want: []string{
				"101 blocked/unknown 10-40 <thread:200",
				"101 runqueue/wakeup 40-45 <thread:200",
				"101 running 45-80 cpu0",
				"102 blocked/lock(futex) 70-80",
				"200 blocked/network(epoll_wait) 45-80",
			},
		},
		{
			name: "new thread and exit",
			events: []Event{
				{Type: EvFork, TS: 0, TID: 102, TGID: 100, TID2: 101, TGID2: 100},
				{Type: EvWakeupNew, TS: 1, TID: 102, TGID: 100},
				swIn(4, 1, 102),
				{Type: EvExit, TS: 20, TID: 102, TGID: 100},
				swOut(21, 1, 102, taskDead, SysUnknown, 0, 0),
			},
			end: 30,
			want: []string{
				"102 runqueue/new 0-4 <fork:101",
				"102 running 4-20 cpu1",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := build(tc.events, buildInput{pid: 100, start: tc.start, end: tc.end, comm: func(uint32) string { return "x" }})
			got := render(s)
			if !slices.Equal(got, tc.want) {
				t.Errorf("intervals:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestBuildThreadsAndEdges(t *testing.T) {
	events := []Event{
		swIn(0, 0, 101),
		swOut(10, 0, 101, 1, 202, 0, 200),
		swOut(15, 0, 200, 1, SysUnknown, 0, 0),
		waking(20, 101, 200, CtxThread, 0),
		{Type: EvWakeup, TS: 23, TID: 101, TGID: 100},
		swIn(25, 0, 101),
		{Type: EvBlockRq, TS: 28, Arg: 26, TID: 101, TGID: 100, Detail: 4096},
	}
	comms := map[uint32]string{101: "worker", 200: "holder"}
	s := build(events, buildInput{pid: 100, start: 0, end: 30, offset: 1000, comm: func(tid uint32) string { return comms[tid] }})
	raw := rawEvents(events, s, 0, 30)
	if want := []Thread{{TID: 101, PID: 100, Comm: "worker", Target: true, Recorded: true, Since: 1000},
		{TID: 200, PID: 200, Comm: "holder", Depth: 1, Recorded: true, Since: 1010}}; !slices.Equal(s.Threads, want) {
		t.Errorf("threads = %+v, want %+v", s.Threads, want)
	}
	if len(s.Wakeups) != 1 {
		t.Fatalf("wakeups = %+v, want 1", s.Wakeups)
	}
	w := s.Wakeups[0]
	if w.Waker != 200 || w.Wakee != 101 || w.Context != "thread" || w.TS != 1020 || w.Enqueued != 1023 {
		t.Errorf("wakeup = %+v", w)
	}
	if len(s.DiskIOs) != 1 || s.DiskIOs[0].Bytes != 4096 || s.DiskIOs[0].Issue != 1026 {
		t.Errorf("disk I/Os = %+v", s.DiskIOs)
	}
	if s.Start != 1000 || s.End != 1030 {
		t.Errorf("window = %d-%d, want 1000-1030 (Unix = monotonic + offset)", s.Start, s.End)
	}
	// Raw events: all of them involve 101 or its waker 200.
	if len(raw) != len(events) {
		t.Errorf("raw events = %d, want %d", len(raw), len(events))
	}
}

func TestReportedState(t *testing.T) {
	for _, tc := range []struct {
		ev   Event
		want int64
	}{
		{Event{Flags: FlagPreempt, Arg: 1}, taskReportMx},
		{Event{Arg: 0}, 0},
		{Event{Arg: 1}, 1},
		{Event{Arg: 2}, 2},
		{Event{Arg: taskIdle}, 0x80},
		{Event{Arg: 0x102}, 2}, // TASK_KILLABLE
		{Event{Arg: taskDead}, 0x10},
	} {
		if got := reportedState(&tc.ev); got != tc.want {
			t.Errorf("reportedState(flags %d, state %#x) = %#x, want %#x", tc.ev.Flags, tc.ev.Arg, got, tc.want)
		}
	}
}

// TestSnapshotRoundTrip: Encode's binary format (compressed or not) and
// EncodeJSON's hand-written JSON decode to the same snapshot.
func TestSnapshotRoundTrip(t *testing.T) {
	in := &Snapshot{Version: 2, PID: 7, Start: 1, End: 9, Lost: 2, Events: 3,
		Threads: []Thread{{TID: 7, PID: 7, Comm: `we"ird\name`, Target: true, Recorded: true, Since: 1},
			{TID: 8, PID: 8, Comm: "jbd2/vda1-8", Kernel: true, Depth: 1, Recorded: true, Since: 2},
			{TID: 9, PID: 9, Comm: "x", Depth: 2, Unrecorded: UnrecordedDepth, Observer: true}},
		Intervals: []Interval{{TID: 7, State: StateBlocked, Reason: ReasonDisk, Syscall: "fsync", Device: `v"da1`, Start: 1, End: 5, CPU: -1, Wakeup: 0},
			{TID: 7, State: StateRunning, Start: 5, End: 9, CPU: 1, Wakeup: -1},
			{TID: 8, State: StateRunqueue, Reason: ReasonThrottled, Start: 2, End: 9, CPU: -1, Wakeup: 1}},
		Wakeups: []Wakeup{{TS: 5, Wakee: 7, Waker: 8, Context: "softirq", Detail: "NET_RX", Causal: true, Device: "vda", CPU: 1, Enqueued: 6},
			{TS: 9, Wakee: 8, Context: CtxNameUnthrottle, CPU: 0}},
		DiskIOs:   []DiskIO{{TID: 7, Issue: 2, Complete: 3, Bytes: 4096, Device: "vda1"}},
		Follow:    &Follow{MaxDepth: 1, MaxThreads: 5, Recording: true},
		Truncated: &Truncation{Depth: 1},
	}
	for _, f := range []struct {
		name    string
		encode  func(*Snapshot, io.Writer) error
		version int
	}{
		{"binary", (*Snapshot).Encode, 3},
		{"binary uncompressed", (*Snapshot).EncodeUncompressed, 3},
		{"json", (*Snapshot).EncodeJSON, 2},
	} {
		var buf bytes.Buffer
		if err := f.encode(in, &buf); err != nil {
			t.Fatal(err)
		}
		out, err := DecodeSnapshot(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		in.Version = f.version
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%s round trip:\n got %+v\nwant %+v", f.name, out, in)
		}
	}
}

// TestRingBounds: the ring keeps at most its byte budget, evicting the
// oldest chunks, and window returns the events of a time range in order.
func TestRingBounds(t *testing.T) {
	r := newRing(3*chunkLen*eventBytes, 0)
	var c Comm
	copy(c[:], "t")
	total := 5*chunkLen + 10
	for i := range total {
		ev := Event{Type: EvSwitch, TS: int64(i), TID: 101, TID2: 102}
		r.add(&ev, &c, &c)
	}
	st := r.stats()
	bytes, evicted, added := st.bytes, st.evicted, st.total
	if bytes > 3*chunkLen*eventBytes || added != uint64(total) || evicted != uint64(3*chunkLen) {
		t.Errorf("bytes %d (max %d), evicted %d, added %d", bytes, 3*chunkLen*eventBytes, evicted, added)
	}
	got := r.window(int64(4*chunkLen), int64(4*chunkLen+9))
	if len(got) != 10 || got[0].TS != int64(4*chunkLen) || got[9].TS != int64(4*chunkLen+9) {
		t.Errorf("window: %d events", len(got))
	}
	if old := r.window(0, 100); len(old) != 0 {
		t.Errorf("evicted events returned: %d", len(old))
	}
	if r.comm(101) != "t" || r.comm(7) != "" {
		t.Errorf("comms %q %q", r.comm(101), r.comm(7))
	}
	r.expire(int64(total))
	if b := r.stats().bytes; b != chunkLen*eventBytes {
		t.Errorf("after expiry %d bytes buffered, want the newest chunk only", b)
	}
}

// TestRingOutOfOrder: records of one CPU's ring buffer arrive after newer
// records of another's (the reader drains the rings one after the other);
// a window finds them wherever they sit, and expiry keeps a chunk while
// any of its events is recent.
func TestRingOutOfOrder(t *testing.T) {
	r := newRing(4*chunkLen*eventBytes, 0)
	add := func(ts int64) {
		ev := Event{Type: EvSwitch, TS: ts, TID: 101, TID2: 102}
		r.add(&ev, nil, nil)
	}
	const newer, older = int64(2e9), int64(5e8) // 1.5 s apart
	for i := range chunkLen {
		add(newer - int64(chunkLen) + int64(i))
	}
	add(newer) // a new chunk starts with a newer record…
	for i := range 10 {
		add(older + int64(i)) // …then the other CPU's older ones
	}
	add(newer + 1)
	got := r.window(older, older+9)
	if len(got) != 10 || got[0].TS != older || got[9].TS != older+9 {
		t.Errorf("window of the older records: %d events, want 10 in order", len(got))
	}
	r.expire(newer - 1)
	if got := r.window(older, older+9); len(got) != 10 {
		t.Errorf("after expiring what is older than the newest chunk's newest records: %d events, want 10", len(got))
	}
}

// TestWindowOfSameSnapshot: building a snapshot from windowOf's share of
// the ring gives exactly the snapshot built from every event of the window,
// on random event streams of several processes that wake, preempt and fork
// each other.
func TestWindowOfSameSnapshot(t *testing.T) {
	procOf := func(tid uint32) uint32 { return tid / 100 * 100 }
	threads := []uint32{0, 101, 102, 103, 201, 202, 301, 302, 401, 501, 601, 701}
	pick := func(rng *rand.Rand) uint32 { return threads[rng.IntN(len(threads))] }
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := newRing(64<<20, 0)
		var c Comm
		ts := int64(1_000_000)
		for range 3000 {
			ts += int64(rng.IntN(5000))
			a, b := pick(rng), pick(rng)
			ev := Event{TS: ts, TID: a, TGID: procOf(a), TID2: b, TGID2: procOf(b), CPU: uint16(rng.IntN(2))}
			switch rng.IntN(7) {
			case 0, 1, 2:
				ev.Type, ev.Arg, ev.Syscall = EvSwitch, uint64(rng.IntN(3)), int32(rng.IntN(300))
				if rng.IntN(3) == 0 {
					ev.Flags = FlagPreempt
				}
				ev.Flags |= []uint16{0, 0, FlagPrevUntracked, FlagNextUntracked, FlagThrottled}[rng.IntN(5)]
			case 3:
				ev.Type, ev.Ctx = EvWaking, uint8(rng.IntN(3))
				ev.Flags = []uint16{0, FlagRaiser, FlagWakerFollowed | FlagWakerNew, FlagCutDepth}[rng.IntN(4)]
			case 4:
				ev.Type, ev.TID2, ev.TGID2 = EvWakeup, 0, 0
			case 5:
				ev.Type = EvFork // 401 forked by 1xx: process 400 follows 100
				ev.TID, ev.TGID, ev.TID2, ev.TGID2 = 401, 400, 101, 100
			case 6:
				ev.Type, ev.Arg, ev.Detail = EvBlockRq, uint64(ts-1000), 4096
				ev.TID2, ev.TGID2 = 0, 0
			}
			if ev.TID == 0 {
				ev.TGID = 0
			}
			r.add(&ev, &c, &c)
		}
		from, start, end := int64(1_000_000), ts/3, 2*ts/3
		comm := func(uint32) string { return "x" }
		all := r.window(from, end)
		for _, tc := range []struct {
			name   string
			procs  []uint32
			follow bool
		}{{"pid", []uint32{100}, false}, {"cgroup", []uint32{200}, false}, {"cgroup following forks", []uint32{100}, true}} {
			procs := map[uint32]bool{}
			for _, p := range tc.procs {
				procs[p] = true
			}
			in := buildInput{pid: tc.procs[0], start: start, end: end, comm: comm}
			if tc.follow || tc.name == "cgroup" {
				in.pids = procs
			}
			w := r.windowOf(from, end, procs, tc.follow, defaultFollowDepth)
			got, n := w.events, w.total
			if n != len(all) {
				t.Fatalf("seed %d %s: windowOf counted %d events, window has %d", seed, tc.name, n, len(all))
			}
			if tc.follow && !procs[400] {
				t.Fatalf("seed %d: forked process 400 not followed", seed)
			}
			want := in
			if in.pids != nil {
				want.pids = maps.Clone(procs) // with the followed children
			}
			s1, s2 := build(all, want), build(got, in)
			sameEncoding(t, s1, all, want)
			for _, w := range s1.Wakeups { // every causal waker is listed
				if _, ok := s1.Thread(w.Waker); w.Causal && w.Waker != 0 && !ok {
					t.Fatalf("seed %d %s: waker %d of %+v not in the threads", seed, tc.name, w.Waker, w)
				}
			}
			raw1, raw2 := rawEvents(all, s1, start, end), rawEvents(got, s2, start, end)
			s1.Events, s2.Events = 0, 0
			if !reflect.DeepEqual(s1, s2) || !slices.Equal(raw1, raw2) {
				t.Fatalf("seed %d %s: snapshot from %d of %d events differs:\n got %+v\nwant %+v", seed, tc.name, len(got), len(all), s2, s1)
			}
			if len(got) >= len(all) && tc.name != "cgroup following forks" {
				t.Logf("seed %d %s: nothing filtered (%d events)", seed, tc.name, len(got))
			}
		}
	}
}

func mkfile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// rawEvents returns the events rawFilter selects.
func rawEvents(events []Event, s *Snapshot, start, end int64) []Event {
	keep := rawFilter(s, start, end)
	var raw []Event
	for i := range events {
		if keep(&events[i]) {
			raw = append(raw, events[i])
		}
	}
	return raw
}

// TestBuildStolenTime: the CPU's stolen-time counter at a run's switch-in
// and switch-out (FlagStolen, Arg's high 32 bits) ends the run with a
// RUNQUEUE "steal" interval of their difference, so that RUNNING is the CPU
// time the thread got. A run whose ends are on different CPUs (a lost
// record) or lack the counter keeps its wall time, and the counter wraps.
func TestBuildStolenTime(t *testing.T) {
	stolen := func(ev Event, counter uint32) Event {
		ev.Flags |= FlagStolen
		ev.Arg |= uint64(counter) << 32
		return ev
	}
	const sleeping = 1 // TASK_INTERRUPTIBLE
	events := []Event{
		stolen(swIn(0, 0, 101), 1000),
		stolen(preempt(10, 0, 101, 200), 1004), // 4 of 10 stolen
		stolen(swIn(12, 1, 101), 1<<32-3),
		stolen(swOut(20, 1, 101, sleeping, 202, 0, 0), 2), // wraps: 5 stolen
		waking(22, 101, 0, CtxHrtimer, 0),
		swIn(24, 0, 101),                       // no counter
		stolen(preempt(30, 0, 101, 200), 9000), // the run keeps its 6
		stolen(swIn(31, 0, 101), 50),
		stolen(preempt(35, 1, 101, 200), 60), // another CPU: a record was lost
	}
	s := build(events, buildInput{pid: 100, start: 0, end: 40, comm: func(uint32) string { return "worker" }})
	want := []string{
		"101 running 0-6 cpu0",
		"101 runqueue/steal 6-10",
		"101 runqueue/preempted 10-12",
		"101 running 12-15 cpu1",
		"101 runqueue/steal 15-20",
		"101 blocked/lock(futex) 20-22 <timer:0:hrtimer",
		"101 runqueue/wakeup 22-24 <timer:0:hrtimer",
		"101 running 24-30 cpu0",
		"101 runqueue/preempted 30-31",
		"101 running 31-35 cpu0",
		"101 runqueue/preempted 35-40",
	}
	if got := render(s); !slices.Equal(got, want) {
		t.Errorf("intervals:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLossLog: a snapshot's losses are the count since the last sample at
// or before its window's start; samples older than the ring keeps are
// forgotten but for the newest of them.
func TestLossLog(t *testing.T) {
	var l lossLog
	if got := l.before(5); got != 0 {
		t.Errorf("no samples: %d, want 0", got)
	}
	for i, n := range []uint64{0, 0, 7, 7, 30} {
		l.add(int64(10*(i+1)), n, 25) // samples at 10…50, keep from 25
	}
	for _, c := range []struct {
		mono int64
		want uint64
	}{{5, 0}, {20, 0}, {29, 0}, {30, 7}, {49, 7}, {50, 30}, {99, 30}} {
		if got := l.before(c.mono); got != c.want {
			t.Errorf("before(%d) = %d, want %d", c.mono, got, c.want)
		}
	}
	if len(l.samples) != 4 || l.samples[0].mono != 20 {
		t.Errorf("samples kept %+v, want from 20 (the newest before 25) on", l.samples)
	}
}
