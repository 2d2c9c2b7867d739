package kernel

import (
	"io"
	"testing"
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
		s, raw := build(evs, buildInput{pid: 100, start: 0, end: end, comm: comm})
		if err := s.Encode(io.Discard); err != nil {
			b.Fatal(err)
		}
		if err := writeCTF(io.Discard, s, raw, 0, comm, "h"); err != nil {
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
				s, raw := build(evs, buildInput{pid: 3100, start: 0, end: end, comm: comm})
				if len(s.Threads) != 2 {
					b.Fatalf("%d threads", len(s.Threads))
				}
				if err := s.Encode(io.Discard); err != nil {
					b.Fatal(err)
				}
				if err := writeCTF(io.Discard, s, raw, 0, comm, "h"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
