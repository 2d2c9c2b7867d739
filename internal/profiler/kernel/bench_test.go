package kernel

import (
	"io"
	"sort"
	"syscall"
	"testing"
	"time"
)

// pingPong returns n switch/waking/wakeup rounds between threads 101 and 102
// of process 100 on one CPU (the shape of `perf bench sched pipe`).
func pingPong(n int) []Event {
	evs := make([]Event, 0, 4*n)
	ts := int64(1_000_000)
	a, b := uint32(101), uint32(102)
	for range n {
		evs = append(evs,
			waking(ts, b, a, CtxThread, 0),
			Event{Type: EvWakeup, TS: ts + 100, TID: b, TGID: 100},
			swOut(ts+500, 0, a, 1, 0, fileFIFO, b),
		)
		ts += 4000
		a, b = b, a
	}
	return evs
}

// BenchmarkDump measures a dump of 300k events: interval building, the
// gzipped JSON snapshot and the CTF export.
func BenchmarkDump(b *testing.B) {
	evs := pingPong(100_000)
	end := evs[len(evs)-1].TS
	comm := func(uint32) string { return "pipe" }
	b.ReportAllocs()
	for b.Loop() {
		s := build(evs, buildInput{pid: 100, start: 0, end: end, comm: comm})
		if err := s.Encode(io.Discard); err != nil {
			b.Fatal(err)
		}
		if err := writeCTF(io.Discard, s, sliceIntervals(s.Intervals), evs, rawFilter(s, 0, end), nil, 0, comm, "h"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(evs)), "events/op")
}

// BenchmarkIngest measures the reader's per-event cost (ring append and
// comm bookkeeping).
func BenchmarkIngest(b *testing.B) {
	r := newRing(128<<20, 0)
	evs := pingPong(1000)
	var c Comm
	copy(c[:], "pipe")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.add(&evs[i%len(evs)], &c, &c)
		i++
	}
}

// BenchmarkDumpOneOfTen measures the dump of one process while the ring holds
// ten equally busy ones (the demo mesh: every service a target, a capture
// asks for one): copying and replaying the whole window (all) against only
// the events the process's snapshot needs (windowOf).
//
//	go test -run '^$' -bench DumpOneOfTen ./internal/profiler/kernel/
func BenchmarkDumpOneOfTen(b *testing.B) {
	r := newRing(1<<30, 0)
	one := pingPong(20_000)
	var c Comm
	copy(c[:], "svc")
	for i := range one {
		for p := range uint32(10) {
			ev := one[i]
			ev.TS += int64(p) * 10 // interleaved
			ev.TID += 1000 * p
			ev.TGID += 1000 * p
			if ev.TID2 != 0 {
				ev.TID2 += 1000 * p
				ev.TGID2 += 1000 * p
			}
			r.add(&ev, &c, &c)
		}
	}
	end := one[len(one)-1].TS + 100
	comm := func(uint32) string { return "svc" }
	for _, variant := range []string{"all", "windowOf"} {
		b.Run("events="+variant, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var evs []Event
				if variant == "all" {
					evs = r.window(0, end)
				} else {
					evs = r.windowOf(0, end, map[uint32]bool{3100: true}, false, 0).events
				}
				s := build(evs, buildInput{pid: 3100, start: 0, end: end, comm: comm})
				if len(s.Threads) != 2 {
					b.Fatalf("%d threads", len(s.Threads))
				}
				if err := s.Encode(io.Discard); err != nil {
					b.Fatal(err)
				}
				if err := writeCTF(io.Discard, s, sliceIntervals(s.Intervals), evs, rawFilter(s, 0, end), nil, 0, comm, "h"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuild measures the interval builder: "timelines" replays the
// records into every thread's intervals and wakeups (the builder's compact
// form), "snapshot" also chooses the threads and turns them into the
// snapshot's Go values (what Encode writes and critpath reads). In records
// per second, of wall time and of the process's CPU time (the builder and
// the garbage collector: the figure that holds on a machine whose other
// work takes CPUs away). The records: ping-pong between two threads of the
// target, every tenth wakeup by a thread of another process, followed.
//
//	go test -run '^$' -bench 'Build$' -benchtime 20x ./internal/profiler/kernel/
func BenchmarkBuild(b *testing.B) {
	evs := followedPingPong(1_000_000)
	end := evs[len(evs)-1].TS
	in := buildInput{pid: 100, start: 0, end: end, comm: func(uint32) string { return "t" }}
	for _, phase := range []string{"timelines", "snapshot"} {
		b.Run(phase, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if phase == "timelines" {
					replay(evs, in)
				} else {
					build(evs, in)
				}
			}
			n := float64(len(evs)) * float64(b.N)
			b.ReportMetric(n/b.Elapsed().Seconds()/1e6, "Mevents/s")
			b.ReportMetric(n/(processCPU()-cpu0).Seconds()/1e6, "Mevents/cpu-s")
		})
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// followedPingPong is pingPong where every tenth round the wakeup comes
// from thread 301 of process 300 (a followed waker), which runs in between.
func followedPingPong(n int) []Event {
	evs := pingPong(n)
	out := make([]Event, 0, len(evs)+len(evs)/10)
	for i, ev := range evs {
		if ev.Type == EvWaking && i%30 == 0 {
			ev.TID2, ev.TGID2, ev.Flags = 301, 300, FlagWakerFollowed
			out = append(out, ev,
				Event{Type: EvSwitch, TS: ev.TS + 1, CPU: 1, TID: 301, TGID: 300, Arg: 1, Syscall: 202, Flags: FlagFollowed | FlagNextUntracked})
			continue
		}
		out = append(out, ev)
	}
	return out
}

// BenchmarkDump500MB builds and encodes the snapshot of 500 MB of buffered
// records (9.4 M events of 56 bytes: what a recorder with MaxBytes of 500
// MB holds when full) in both formats (encode-s: gzipped JSON, version 2;
// encode-v3-s: the binary format a dump writes), then its CTF export,
// reporting each phase's time and the process's peak RSS.
//
//	go test -run '^$' -bench 'Dump500MB' -benchtime 1x ./internal/profiler/kernel/
func BenchmarkDump500MB(b *testing.B) {
	evs := followedPingPong(3_050_000) // 9.4 M records
	mb := float64(len(evs)) * float64(eventBytes) / 1e6
	end := evs[len(evs)-1].TS
	in := buildInput{pid: 100, start: 0, end: end, comm: func(uint32) string { return "t" }}
	for b.Loop() {
		// As a dump does it (Recorder.snapshot): the intervals stay in
		// the builder's form and are named as they are written.
		cpu0, t0 := processCPU(), time.Now()
		s, ivs := replay(evs, in).snapshot(len(evs))
		tBuild, cBuild := time.Since(t0), processCPU()-cpu0
		var js countWriter
		if err := s.encodeJSON(&js, ivs); err != nil {
			b.Fatal(err)
		}
		tEnc := time.Since(t0) - tBuild
		// The binary format (what a dump writes now), next to the JSON
		// one it replaced.
		cpu1, t1 := processCPU(), time.Now()
		var bin countWriter
		if err := s.encodeBinary(&bin, ivs, true); err != nil {
			b.Fatal(err)
		}
		tBin, cBin := time.Since(t1), processCPU()-cpu1
		t0 = t0.Add(tBin)
		var ctf countWriter
		if err := writeCTF(&ctf, s, ivs, evs, rawFilter(s, 0, end), nil, 0, in.comm, "h"); err != nil {
			b.Fatal(err)
		}
		tCTF := time.Since(t0) - tBuild - tEnc
		b.ReportMetric(mb, "MB-records")
		b.ReportMetric(float64(len(evs))/1e6, "Mevents")
		b.ReportMetric(tBuild.Seconds(), "build-s")
		b.ReportMetric(cBuild.Seconds(), "build-cpu-s")
		b.ReportMetric(tEnc.Seconds(), "encode-s")
		b.ReportMetric(tCTF.Seconds(), "ctf-s")
		b.ReportMetric(float64(js.n)/1e6, "json.gz-MB")
		b.ReportMetric(tBin.Seconds(), "encode-v3-s")
		b.ReportMetric(cBin.Seconds(), "encode-v3-cpu-s")
		b.ReportMetric(float64(bin.n)/1e6, "v3-MB")
		b.ReportMetric(float64(ctf.n)/1e6, "ctf.tar.gz-MB")
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		b.ReportMetric(float64(ru.Maxrss)/1024, "maxrss-MiB")
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkSortWindow measures the sort of a copied window's records,
// which arrive from two CPUs' ring buffers in batches (a reader drains one
// CPU's ring, then the other's): the stable sort of the records themselves
// (what windowOf did) against sortByTS's sort of keys.
//
//	go test -run '^$' -bench SortWindow ./internal/profiler/kernel/
func BenchmarkSortWindow(b *testing.B) {
	const n, batch = 500_000, 256
	evs := make([]Event, 0, n)
	for i := 0; len(evs) < n; i += 2 * batch {
		for cpu := range 2 {
			for j := range batch {
				evs = append(evs, Event{TS: int64(i+2*j+cpu) * 1000, CPU: uint16(cpu)})
			}
		}
	}
	for _, variant := range []string{"stable-records", "keys"} {
		b.Run(variant, func(b *testing.B) {
			buf := make([]Event, len(evs))
			for b.Loop() {
				copy(buf, evs)
				if variant == "keys" {
					_ = sortByTS(buf)
				} else {
					sort.SliceStable(buf, func(i, j int) bool { return buf[i].TS < buf[j].TS })
				}
			}
			b.ReportMetric(float64(len(evs)), "events/op")
		})
	}
}
