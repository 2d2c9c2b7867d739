package kernel

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
)

// threadLine renders a snapshot thread for comparisons: "tid d<depth>
// target|rec|unrec:<why> [kernel]".
func threadLine(th Thread) string {
	s := fmt.Sprintf("%d d%d ", th.TID, th.Depth)
	switch {
	case th.Target:
		s += "target"
	case th.Recorded:
		s += "rec"
	default:
		s += "unrec:" + th.Unrecorded
	}
	if th.Kernel {
		s += " kernel"
	}
	return s
}

// untracked marks the sides of a switch the record does not track.
func untracked(ev Event, flags uint16) Event {
	ev.Flags |= flags
	return ev
}

func TestBuildFollowAndThrottle(t *testing.T) {
	const wakerNew = FlagWakerFollowed | FlagWakerNew
	for _, tc := range []struct {
		name        string
		events      []Event
		start, end  int64
		in          buildInput
		want        []string // intervals (render)
		wantThreads []string
		truncated   *Truncation
	}{
		{
			name: "throttled until the unthrottle, then contention",
			events: []Event{
				swIn(0, 0, 101),
				untracked(Event{Type: EvSwitch, TS: 10, CPU: 0, TID: 101, TGID: 100, Flags: FlagThrottled, TID2: 200, TGID2: 200}, FlagNextUntracked),
				{Type: EvUnthrottle, TS: 50, CPU: 0, TID: 101, TGID: 100},
				untracked(swOut(60, 0, 200, 0, SysUnknown, 0, 101), FlagPrevUntracked),
			},
			end: 70,
			want: []string{
				"101 running 0-10 cpu0",
				"101 runqueue/throttled 10-50 <unthrottle:0:cfs bandwidth",
				"101 runqueue/wakeup 50-60 <unthrottle:0:cfs bandwidth",
				"101 running 60-70 cpu0",
				"200 running 10-60 cpu0", // held the CPU from the switch to it to the switch from it
			},
			wantThreads: []string{"101 d0 target", "200 d-1 rec"},
		},
		{
			name: "an untracked side gets no state, only the CPU it held; a preempted thread is not throttled",
			events: []Event{
				swIn(0, 0, 101),
				untracked(preempt(10, 0, 101, 200), FlagNextUntracked),
				untracked(swOut(20, 0, 200, 1, 0, 0, 101), FlagPrevUntracked),
			},
			end:         30,
			want:        []string{"101 running 0-10 cpu0", "101 runqueue/preempted 10-20", "101 running 20-30 cpu0", "200 running 10-20 cpu0"},
			wantThreads: []string{"101 d0 target", "200 d-1 rec"},
		},
		{
			// The recorder sees no switch between two untracked tasks: when
			// the task switched from is not the one switched to, who held
			// the CPU when is not known, and neither gets an interval.
			name: "an untracked task switched to, another switched from: no holder",
			events: []Event{
				swIn(0, 0, 101),
				untracked(preempt(10, 0, 101, 200), FlagNextUntracked),
				untracked(swOut(20, 0, 300, 1, 0, 0, 101), FlagPrevUntracked),
				// A record of another CPU does not end the holder of CPU 0.
				untracked(preempt(25, 1, 102, 400), FlagNextUntracked),
				untracked(preempt(30, 0, 101, 500), FlagNextUntracked),
				untracked(swOut(40, 0, 500, 1, 0, 0, 101), FlagPrevUntracked),
			},
			end: 50,
			want: []string{"101 running 0-10 cpu0", "101 runqueue/preempted 10-20", "101 running 20-30 cpu0",
				"101 runqueue/preempted 30-40", "101 running 40-50 cpu0", "102 runqueue/preempted 25-50", "500 running 30-40 cpu0"},
			wantThreads: []string{"101 d0 target", "102 d0 target", "500 d-1 rec"},
		},
		{
			name: "a waker followed from its wakeup: running from then, its own waker one hop further",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 20, CPU: 1, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: wakerNew},
				swIn(22, 0, 101),
				{Type: EvSwitch, TS: 30, CPU: 1, TID: 200, TGID: 200, Arg: 1, Syscall: 0, Detail: fileSock, Flags: FlagFollowed | FlagNextUntracked},
				{Type: EvWaking, TS: 40, CPU: 1, TID: 200, TGID: 200, TID2: 300, TGID2: 300, Flags: FlagFollowed | wakerNew},
			},
			end: 50,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/lock(futex) 5-20 <thread:200",
				"101 runqueue/wakeup 20-22 <thread:200",
				"101 running 22-50 cpu0",
				"200 running 20-30 cpu1",
				"200 blocked/network(read) 30-40 <thread:300",
				"200 runqueue/wakeup 40-50 <thread:300",
				"300 running 40-50 cpu1",
			},
			wantThreads: []string{"101 d0 target", "200 d1 rec", "300 d2 rec"},
		},
		{
			// The holder woke a tracked thread while it held the CPU: it is
			// followed from the wakeup, and its own intervals win over the
			// guessed one they overlap (a snapshot's thread has no two
			// intervals at once).
			name: "a holder that turns out a waker: its followed intervals, not the holder's",
			events: []Event{
				swIn(0, 0, 101),
				swIn(0, 1, 102),
				swOut(5, 0, 101, 1, 202, 0, 0),
				untracked(preempt(10, 1, 102, 200), FlagNextUntracked),
				{Type: EvWaking, TS: 12, CPU: 1, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: wakerNew},
				swIn(13, 0, 101),
				untracked(swOut(14, 1, 200, 0, SysUnknown, 0, 102), FlagPrevUntracked|FlagFollowed),
				untracked(preempt(30, 1, 102, 200), FlagNextUntracked),
				untracked(swOut(35, 1, 200, 0, SysUnknown, 0, 102), FlagPrevUntracked),
			},
			end: 40,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/lock(futex) 5-12 <thread:200",
				"101 runqueue/wakeup 12-13 <thread:200",
				"101 running 13-40 cpu0",
				"102 running 0-10 cpu1",
				"102 runqueue/preempted 10-14",
				"102 running 14-30 cpu1",
				"102 runqueue/preempted 30-35",
				"102 running 35-40 cpu1",
				"200 running 12-40 cpu1", // the follow's; the held 10-14 and 30-35 overlap it
			},
			wantThreads: []string{"101 d0 target", "102 d0 target", "200 d1 rec"},
		},
		{
			// Between two records a task may leave a CPU, run on another
			// and come back: two guesses at once keep the earlier.
			name: "a holder guessed on two CPUs at once: the earlier interval stands",
			events: []Event{
				swIn(0, 0, 101),
				swIn(0, 1, 102),
				untracked(preempt(10, 0, 101, 200), FlagNextUntracked),
				untracked(preempt(15, 1, 102, 200), FlagNextUntracked),
				untracked(swOut(20, 0, 200, 0, SysUnknown, 0, 101), FlagPrevUntracked),
				untracked(swOut(25, 1, 200, 0, SysUnknown, 0, 102), FlagPrevUntracked),
			},
			end: 30,
			want: []string{
				"101 running 0-10 cpu0", "101 runqueue/preempted 10-20", "101 running 20-30 cpu0",
				"102 running 0-15 cpu1", "102 runqueue/preempted 15-25", "102 running 25-30 cpu1",
				"200 running 10-20 cpu0",
			},
			wantThreads: []string{"101 d0 target", "102 d0 target", "200 d-1 rec"},
		},
		{
			name: "unfollowed: its state is unknown from then on, late records ignored until followed again",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 10, CPU: 1, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: wakerNew},
				swIn(11, 0, 101),
				{Type: EvUnfollow, TS: 20, TID: 200, Flags: FlagFollowed},
				{Type: EvSwitch, TS: 21, CPU: 1, TID: 200, TGID: 200, Arg: 1, Syscall: 202, Flags: FlagFollowed | FlagNextUntracked},
				swOut(30, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 40, CPU: 1, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: wakerNew},
				swIn(41, 0, 101),
			},
			end: 50,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/lock(futex) 5-10 <thread:200",
				"101 runqueue/wakeup 10-11 <thread:200",
				"101 running 11-30 cpu0",
				"101 blocked/lock(futex) 30-40 <thread:200",
				"101 runqueue/wakeup 40-41 <thread:200",
				"101 running 41-50 cpu0",
				"200 running 10-20 cpu1",
				"200 running 40-50 cpu1",
			},
			wantThreads: []string{"101 d0 target", "200 d1 rec"},
		},
		{
			name: "bounds: depth 1 and one waker; the others listed without intervals",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 10, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: wakerNew},
				swIn(11, 0, 101),
				swOut(12, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 15, TID: 101, TGID: 100, TID2: 400, TGID2: 400, Flags: wakerNew | FlagWakerKthread},
				swIn(16, 0, 101),
				{Type: EvSwitch, TS: 20, CPU: 1, TID: 200, TGID: 200, Arg: 1, Syscall: 202, Flags: FlagFollowed | FlagNextUntracked},
				{Type: EvWaking, TS: 25, CPU: 1, TID: 200, TGID: 200, TID2: 300, TGID2: 300, Flags: FlagFollowed | wakerNew},
			},
			end: 30,
			in:  buildInput{maxDepth: 1, maxThreads: 1},
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/lock(futex) 5-10 <thread:200",
				"101 runqueue/wakeup 10-11 <thread:200",
				"101 running 11-12 cpu0",
				"101 blocked/lock(futex) 12-15 <thread:400",
				"101 runqueue/wakeup 15-16 <thread:400",
				"101 running 16-30 cpu0",
				"200 running 10-20 cpu0",
				"200 blocked/lock(futex) 20-25 <thread:300",
				"200 runqueue/wakeup 25-30 <thread:300",
			},
			wantThreads: []string{"101 d0 target", "200 d1 rec", "400 d1 unrec:count kernel", "300 d2 unrec:depth"},
			truncated:   &Truncation{Depth: 1, Count: 1},
		},
		{
			name: "the recorder's cut, interrupt contexts, a local send's softirq",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 1, 0, fileSock, 0),
				{Type: EvWaking, TS: 10, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: FlagCutDepth},
				swIn(11, 0, 101),
				swOut(12, 0, 101, 1, 0, fileSock, 0),
				{Type: EvWaking, TS: 15, TID: 101, TGID: 100, TID2: 500, TGID2: 500, Ctx: CtxSoftirq, Detail: 3},
				swIn(16, 0, 101),
				swOut(17, 0, 101, 1, 0, fileSock, 0),
				{Type: EvWaking, TS: 20, TID: 101, TGID: 100, TID2: 600, TGID2: 600, Ctx: CtxSoftirq, Detail: 3, Flags: FlagRaiser | FlagCutCount},
				swIn(21, 0, 101),
			},
			end: 25,
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/network(read) 5-10 <thread:200",
				"101 runqueue/wakeup 10-11 <thread:200",
				"101 running 11-12 cpu0",
				"101 blocked/network(read) 12-15 <network:500:NET_RX",
				"101 runqueue/wakeup 15-16 <network:500:NET_RX",
				"101 running 16-17 cpu0",
				"101 blocked/network(read) 17-20 <network:600:NET_RX",
				"101 runqueue/wakeup 20-21 <network:600:NET_RX",
				"101 running 21-25 cpu0",
			},
			// 500 interrupted by the softirq is no cause: not listed.
			wantThreads: []string{"101 d0 target", "200 d1 unrec:depth", "600 d1 unrec:count"},
		},
		{
			name: "the waker of a wakeup before the window, whose wait for a CPU is clipped to it, is listed",
			events: []Event{
				swIn(0, 0, 101),
				swOut(2, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 5, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: FlagWakerFollowed},
				swIn(15, 0, 101),
			},
			start: 10, end: 20,
			want:        []string{"101 runqueue/wakeup 10-15 <thread:200", "101 running 15-20 cpu0"},
			wantThreads: []string{"101 d0 target", "200 d1 unrec:not-followed"},
		},
		{
			name: "records of others before the ring is complete are ignored",
			events: []Event{
				swIn(0, 0, 101),
				{Type: EvSwitch, TS: 2, CPU: 1, TID: 200, TGID: 200, Arg: 1, Syscall: 202, Flags: FlagFollowed | FlagNextUntracked},
				swOut(5, 0, 101, 1, 202, 0, 0),
				{Type: EvWaking, TS: 20, TID: 101, TGID: 100, TID2: 200, TGID2: 200, Flags: FlagWakerFollowed},
				swIn(21, 0, 101),
			},
			end:         30,
			in:          buildInput{complete: 3},
			want:        []string{"101 running 0-5 cpu0", "101 blocked/lock(futex) 5-20 <thread:200", "101 runqueue/wakeup 20-21 <thread:200", "101 running 21-30 cpu0"},
			wantThreads: []string{"101 d0 target", "200 d1 unrec:not-followed"},
		},
		{
			name: "memory stalls, iowait, devices",
			events: []Event{
				swIn(0, 0, 101),
				swOut(5, 0, 101, 2, SysNone, 0, 0),
				{Type: EvSwitch, TS: 5, TID: 101, TGID: 100, Arg: 2, Syscall: SysNone, Flags: FlagMemStall},
				{Type: EvWaking, TS: 10, TID: 101, TGID: 100, Ctx: CtxHardirq, Detail: 9},
				swIn(11, 0, 101),
				{Type: EvSwitch, TS: 12, TID: 101, TGID: 100, Arg: 2, Syscall: 74, Detail: fileReg, Dev: 254<<20 | 1},
				{Type: EvWaking, TS: 20, TID: 101, TGID: 100, Ctx: CtxBlockIRQ, Detail: 24, Dev: 254<<20 | 0},
				swIn(21, 0, 101),
				{Type: EvSwitch, TS: 22, TID: 101, TGID: 100, Arg: 2, Syscall: SysUnknown, Flags: FlagIOWait},
				{Type: EvWaking, TS: 25, TID: 101, TGID: 100, Ctx: CtxBlockIRQ, Detail: 24, Dev: 254<<20 | 0},
				swIn(26, 0, 101),
				{Type: EvBlockRq, TS: 27, Arg: 13, TID: 101, TGID: 100, Detail: 4096, Dev: 254<<20 | 0},
			},
			end: 30,
			in:  buildInput{devName: func(d uint32) string { return map[uint32]string{254 << 20: "vda"}[d] }},
			want: []string{
				"101 running 0-5 cpu0",
				"101 blocked/memory 5-10 <hardirq:0:irq 9",
				"101 runqueue/wakeup 10-11 <hardirq:0:irq 9",
				"101 running 11-12 cpu0",
				"101 blocked/disk(fsync)[] 12-20 <disk:0:irq 24",
				"101 runqueue/wakeup 20-21 <disk:0:irq 24",
				"101 running 21-22 cpu0",
				"101 blocked/disk[] 22-25 <disk:0:irq 24",
				"101 runqueue/wakeup 25-26 <disk:0:irq 24",
				"101 running 26-30 cpu0",
			},
			wantThreads: []string{"101 d0 target"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.pid, in.start, in.end, in.comm = 100, tc.start, tc.end, func(uint32) string { return "x" }
			s := build(tc.events, in)
			sameEncoding(t, s, tc.events, in)
			got := render(s)
			for i, iv := range s.Intervals { // the device, when there is one
				if iv.Reason == ReasonDisk {
					got[i] = withDevice(got[i], iv.Device)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("intervals:\n got %q\nwant %q", got, tc.want)
			}
			var threads []string
			for _, th := range s.Threads {
				threads = append(threads, threadLine(th))
			}
			if !slices.Equal(threads, tc.wantThreads) {
				t.Errorf("threads:\n got %q\nwant %q", threads, tc.wantThreads)
			}
			if (s.Truncated == nil) != (tc.truncated == nil) || s.Truncated != nil && *s.Truncated != *tc.truncated {
				t.Errorf("truncated = %+v, want %+v", s.Truncated, tc.truncated)
			}
			// Every waker of a kept wakeup is listed.
			for _, w := range s.Wakeups {
				if _, ok := s.Thread(w.Waker); w.Causal && !ok {
					t.Errorf("waker %d of %+v not in the threads", w.Waker, w)
				}
			}
		})
	}
}

// withDevice inserts "[device]" after the reason of a rendered interval.
func withDevice(line, dev string) string {
	for i := range len(line) {
		if line[i] == ' ' && i > 0 && bytes.Count([]byte(line[:i]), []byte(" ")) == 1 {
			return line[:i] + "[" + dev + "]" + line[i:]
		}
	}
	return line
}

// TestBuildDevices: disk intervals and disk wakeups and block requests
// name their device.
func TestBuildDevices(t *testing.T) {
	events := []Event{
		swIn(0, 0, 101),
		{Type: EvSwitch, TS: 12, TID: 101, TGID: 100, Arg: 2, Syscall: 74, Detail: fileReg, Dev: 254<<20 | 1},
		{Type: EvWaking, TS: 20, TID: 101, TGID: 100, Ctx: CtxBlockIRQ, Detail: 24, Dev: 254 << 20},
		swIn(21, 0, 101),
		{Type: EvBlockRq, TS: 27, Arg: 13, TID: 101, TGID: 100, Detail: 4096, Dev: 253<<20 | 7},
	}
	names := map[uint32]string{254 << 20: "vda"}
	s := build(events, buildInput{pid: 100, end: 30, comm: func(uint32) string { return "x" },
		devName: func(d uint32) string {
			if n, ok := names[d]; ok {
				return n
			}
			return devNumber(d)
		}})
	if iv := s.Intervals[1]; iv.Reason != ReasonDisk || iv.Device != "254:1" {
		t.Errorf("disk interval %+v, want device 254:1 (the file's)", iv)
	}
	if w := s.Wakeups[0]; w.Device != "vda" || w.Context != CtxNameDisk || w.Causal {
		t.Errorf("wakeup %+v, want a disk wakeup on vda", w)
	}
	if len(s.DiskIOs) != 1 || s.DiskIOs[0].Device != "253:7" {
		t.Errorf("disk I/Os %+v", s.DiskIOs)
	}
}

func TestDevNames(t *testing.T) {
	d := newDevNames()
	d.root = t.TempDir()
	if n := d.name(8<<20 | 1); n != "8:1" {
		t.Errorf("name without sysfs = %q", n)
	}
	if err := mkfile(d.root+"/8:2/uevent", "MAJOR=8\nMINOR=2\nDEVNAME=sda2\nDEVTYPE=partition\n"); err != nil {
		t.Fatal(err)
	}
	if n := d.name(8<<20 | 2); n != "sda2" {
		t.Errorf("name = %q, want sda2", n)
	}
}

// TestDecodeV1: a version 1 snapshot decodes with the version 2 fields it
// implies; a later version is refused; a huge one is bounded.
func TestDecodeV1(t *testing.T) {
	v1 := `{"version":1,"pid":7,"start_ns":1,"end_ns":9,"lost":0,"events":3,
		"threads":[{"tid":7,"pid":7,"comm":"a","target":true},{"tid":8,"pid":8,"comm":"b","target":false},{"tid":9,"pid":9,"comm":"c","target":false}],
		"intervals":[{"tid":7,"state":"blocked","reason":"lock","start_ns":1,"end_ns":5,"cpu":-1,"wakeup":0},{"tid":8,"state":"running","start_ns":2,"end_ns":5,"cpu":0,"wakeup":-1}],
		"wakeups":[{"ts_ns":5,"wakee":7,"waker":8,"context":"thread","cpu":0},{"ts_ns":6,"wakee":7,"waker":9,"context":"softirq","cpu":0}]}`
	s, err := DecodeSnapshot(gz(t, v1))
	if err != nil {
		t.Fatal(err)
	}
	var threads []string
	for _, th := range s.Threads {
		threads = append(threads, threadLine(th))
	}
	if want := []string{"7 d0 target", "8 d1 rec", "9 d1 unrec:not-followed"}; !slices.Equal(threads, want) || s.Version != 1 {
		t.Errorf("version %d threads %q, want %q", s.Version, threads, want)
	}
	if !s.Wakeups[0].Causal || s.Wakeups[1].Causal || s.Threads[1].Since != 2 {
		t.Errorf("wakeups %+v, threads %+v", s.Wakeups, s.Threads)
	}
	if _, err := DecodeSnapshot(gz(t, `{"version":3}`)); !errors.Is(err, ErrSnapshotVersion) {
		t.Errorf("version 3: %v", err)
	}
	if _, err := DecodeSnapshot([]byte("not gzip")); err == nil {
		t.Error("garbage decoded")
	}
}

func gz(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sameEncoding checks that the dump's path (the intervals encoded from the
// builder as they are named) writes what Encode and EncodeJSON write of
// build's snapshot, in both formats.
func sameEncoding(t *testing.T, want *Snapshot, events []Event, in buildInput) {
	t.Helper()
	s, ivs := replay(events, in).snapshot(len(events))
	for _, f := range []struct {
		name    string
		whole   func(*Snapshot, io.Writer) error
		builder func(*Snapshot, io.Writer, intervalSource) error
	}{
		{"binary", (*Snapshot).Encode, func(s *Snapshot, w io.Writer, ivs intervalSource) error { return s.encodeBinary(w, ivs, true) }},
		{"json", (*Snapshot).EncodeJSON, (*Snapshot).encodeJSON},
	} {
		var a, b bytes.Buffer
		if err := f.whole(want, &a); err != nil {
			t.Fatal(err)
		}
		if err := f.builder(s, &b, ivs); err != nil {
			t.Fatal(err)
		}
		da, err := DecodeSnapshot(a.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		db, err := DecodeSnapshot(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(da, db) {
			t.Errorf("%s: encoded from the builder:\n%+v\nfrom build:\n%+v", f.name, db, da)
		}
	}
}
