package critpath

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/goroutine"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

// genConfig shapes a synthetic snapshot with the structure of a real one:
// processes of worker threads that run, get preempted, block on locks held
// by other threads, on the network, the disk and timers, and are woken by
// the thread that released what they waited for (running at that moment) or
// by an interrupt; requests served by those threads, some handed from one
// thread to another, some sharing a thread.
type genConfig struct {
	seed                uint64
	procs, threads      int   // threads per process
	dur                 int64 // window, ns
	meanRun, meanBlock  int64 // ns
	meanReq, meanReqGap int64 // ns
	start               int64 // Unix ns of the window's start
	// foreignWakers is the share of thread wakeups by a thread the
	// snapshot has no intervals of.
	foreignWakers float64
	// chaos lets a waker be any thread, running or not (inconsistent
	// data, cycles): for the equivalence test, not the benchmark.
	chaos bool
}

type genThread struct {
	tid, pid uint32
	ivs      []kernel.Interval
}

// exp draws an exponential duration of mean m (at least 1 ns).
func exp(rng *rand.Rand, m int64) int64 { return max(1, int64(rng.ExpFloat64()*float64(m))) }

// generate builds the snapshot and the requests.
func generate(c genConfig) (*kernel.Snapshot, []Request) {
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	s := &kernel.Snapshot{Version: kernel.SnapshotVersion, PID: 1000, Start: c.start, End: c.start + c.dur,
		Threads: []kernel.Thread{}, Intervals: []kernel.Interval{}, Wakeups: []kernel.Wakeup{}}
	var ths []*genThread
	for p := range c.procs {
		pid := uint32(1000 + 1000*p)
		for k := range c.threads {
			tid := pid + uint32(k) + 1
			ths = append(ths, &genThread{tid: tid, pid: pid})
			s.Threads = append(s.Threads, kernel.Thread{TID: tid, PID: pid, Comm: "worker", Target: p == 0})
		}
	}
	type pendingWake struct {
		th, iv int // the blocked interval
		reason string
	}
	var pending []pendingWake
	var forks []int // threads created in the window
	reasons := []struct {
		reason string
		weight float64
	}{{kernel.ReasonLock, 0.4}, {kernel.ReasonNetwork, 0.25}, {kernel.ReasonDisk, 0.15}, {kernel.ReasonTimer, 0.1},
		{kernel.ReasonSyscall, 0.05}, {kernel.ReasonPageFault, 0.05}}
	for i, th := range ths {
		t := c.start - exp(rng, c.meanBlock) // states before the window are cut off below
		if i%7 == 3 {
			t = c.start + exp(rng, c.dur/10) // a thread first seen inside the window
			if i%2 == 1 {
				// Created then by another thread: its first interval
				// starts with its creation.
				q := exp(rng, 20_000)
				th.ivs = append(th.ivs, kernel.Interval{TID: th.tid, State: kernel.StateRunqueue, Reason: kernel.ReasonNew, Start: t, End: t + q, CPU: -1, Wakeup: -1})
				forks = append(forks, i)
				t += q
			}
		}
		for t < c.start+c.dur {
			run := exp(rng, c.meanRun)
			th.ivs = append(th.ivs, kernel.Interval{TID: th.tid, State: kernel.StateRunning, Start: t, End: t + run, CPU: rng.IntN(8), Wakeup: -1})
			t += run
			switch x := rng.Float64(); {
			case x < 0.15:
				d := exp(rng, c.meanRun/2)
				reason := kernel.ReasonPreempted
				if rng.IntN(4) == 0 {
					reason = "throttled"
				}
				th.ivs = append(th.ivs, kernel.Interval{TID: th.tid, State: kernel.StateRunqueue, Reason: reason, Start: t, End: t + d, CPU: -1, Wakeup: -1})
				t += d
			default:
				r, acc := kernel.ReasonUnknown, 0.0
				y := rng.Float64()
				for _, rw := range reasons {
					if acc += rw.weight; y < acc {
						r = rw.reason
						break
					}
				}
				d := exp(rng, c.meanBlock)
				th.ivs = append(th.ivs, kernel.Interval{TID: th.tid, State: kernel.StateBlocked, Reason: r, Start: t, End: t + d, CPU: -1, Wakeup: -1})
				pending = append(pending, pendingWake{th: i, iv: len(th.ivs) - 1, reason: r})
				t += d
				q := exp(rng, 20_000)
				th.ivs = append(th.ivs, kernel.Interval{TID: th.tid, State: kernel.StateRunqueue, Reason: kernel.ReasonWakeup, Start: t, End: t + q, CPU: -1, Wakeup: -1})
				t += q
			}
		}
	}
	// runningAt tells whether thread k runs at ts.
	runningAt := func(k int, ts int64) bool {
		ivs := ths[k].ivs
		j := sort.Search(len(ivs), func(j int) bool { return ivs[j].End > ts }) // first ending after ts
		return j < len(ivs) && ivs[j].Start < ts && ivs[j].State == kernel.StateRunning
	}
	for _, pw := range pending {
		th := ths[pw.th]
		iv := &th.ivs[pw.iv]
		w := kernel.Wakeup{TS: iv.End, Wakee: th.tid, Context: "thread"}
		switch pw.reason {
		case kernel.ReasonNetwork:
			if rng.Float64() < 0.6 {
				w.Context = "network"
			}
		case kernel.ReasonDisk, kernel.ReasonPageFault:
			if rng.Float64() < 0.8 {
				w.Context = "disk"
			}
		case kernel.ReasonTimer:
			w.Context = "timer"
		}
		if rng.Float64() < 0.02 {
			w.Context = []string{"hardirq", "softirq"}[rng.IntN(2)]
		}
		if w.Context == "thread" {
			switch {
			case rng.Float64() < c.foreignWakers:
				w.Waker = 900_000 + uint32(rng.IntN(50))
			case c.chaos:
				w.Waker = ths[rng.IntN(len(ths))].tid
			default:
				for range 6 {
					k := rng.IntN(len(ths))
					if k != pw.th && runningAt(k, w.TS) {
						w.Waker = ths[k].tid
						break
					}
				}
			}
			if w.Waker == 0 {
				w.Context = "softirq" // nobody was running: a kernel wakeup
			}
		}
		iv.Wakeup = len(s.Wakeups)
		th.ivs[pw.iv+1].Wakeup = len(s.Wakeups)
		s.Wakeups = append(s.Wakeups, w)
	}
	for _, k := range forks {
		th := ths[k]
		w := kernel.Wakeup{TS: th.ivs[0].Start, Wakee: th.tid, Context: kernel.CtxNameFork, Causal: true}
		for range 6 {
			j := rng.IntN(len(ths))
			if j != k && (c.chaos || runningAt(j, w.TS)) {
				w.Waker = ths[j].tid
				break
			}
		}
		if w.Waker != 0 {
			th.ivs[0].Wakeup = len(s.Wakeups)
			s.Wakeups = append(s.Wakeups, w)
		}
	}
	// Clip to the window, as the recorder does.
	for _, th := range ths {
		for _, iv := range th.ivs {
			iv.Start, iv.End = max(iv.Start, s.Start), min(iv.End, s.End)
			if iv.End > iv.Start {
				s.Intervals = append(s.Intervals, iv)
			}
		}
	}

	// Requests: each thread serves a sequence of them; a fifth are read
	// by another thread of the process first (a hand-off); some overlap
	// the next one on the same thread (an event loop).
	var reqs []Request
	n := uint64(0)
	for i, th := range ths {
		t := c.start + exp(rng, c.meanReqGap)
		for t < c.start+c.dur {
			d := exp(rng, c.meanReq)
			n++
			var tr model.TraceID
			var sp model.SpanID
			binary.BigEndian.PutUint64(tr[8:], n)
			binary.BigEndian.PutUint64(sp[:], n)
			r := Request{TraceID: tr, SpanID: sp, Service: "svc", Operation: "GET /x", PID: th.pid, Start: t, End: t + d}
			switch x := rng.Float64(); {
			case x < 0.2 && c.threads > 1:
				reader := ths[(i/c.threads)*c.threads+rng.IntN(c.threads)]
				h := t + exp(rng, d/10)
				r.Threads = []Activity{{TID: reader.tid, Start: t, End: min(h, t+d)}, {TID: th.tid, Start: min(t+d, h+exp(rng, d/10)), End: t + d}}
			default:
				r.Threads = []Activity{{TID: th.tid, Start: t, End: t + d}}
			}
			// The last of three or more processes is a Go program.
			r.UserScheduled = c.procs >= 3 && int(th.pid) == 1000+1000*(c.procs-1)
			if len(reqs) > 0 && rng.IntN(10) == 0 {
				// A child of an earlier request (a call it made).
				p := &reqs[rng.IntN(len(reqs))]
				r.TraceID, r.Parent = p.TraceID, p.SpanID
			}
			reqs = append(reqs, r)
			if rng.IntN(10) == 0 {
				t += d / 2 // the next one overlaps this one
			} else {
				t += d + exp(rng, c.meanReqGap)
			}
		}
	}
	return s, reqs
}

// generateGoroutines gives half of the user-scheduled requests a goroutine
// whose events move it between the process's threads (running, in a
// syscall), park it with a reason and make it runnable, from just before
// the request starts (on its first thread) to past its end; in chaos mode
// some goroutines share threads at once. Events are in time order.
func generateGoroutines(c genConfig, s *kernel.Snapshot, reqs []Request) []goroutine.Event {
	rng := rand.New(rand.NewPCG(c.seed^0xabcdef, c.seed))
	byPID := map[uint32][]uint32{}
	for _, th := range s.Threads {
		byPID[th.PID] = append(byPID[th.PID], th.TID)
	}
	reasons := []string{"sync.Mutex.Lock", "IO wait", "sleep", "chan receive", "GC assist wait", "select", "preempted"}
	var out []goroutine.Event
	for i, r := range reqs {
		if !r.UserScheduled || len(r.Threads) == 0 || rng.IntN(2) == 0 {
			continue
		}
		g := uint64(100 + i)
		ths := byPID[r.PID]
		t := r.Start - exp(rng, c.meanRun)
		tid := r.Threads[0].TID
		switch {
		case rng.IntN(3) == 0:
			// Created after the request's first byte came (a connection's
			// goroutine), running on its first thread when it reads it.
			t = r.Start + exp(rng, (r.End-r.Start)/4)
			r.Read = t + 1
			reqs[i].Read = r.Read
		case !c.chaos:
			// The first thread runs nothing else from then (no other
			// goroutine's events name it meanwhile: not checked; the
			// chaos runs cover the overlap).
			t = r.Threads[0].Start - 1
		}
		cur := uint32(goroutine.Runnable)
		add := func(ts int64, tid uint32, next uint32, reason string) {
			out = append(out, goroutine.Event{TS: ts, PID: r.PID, TID: tid, Goid: g, Old: cur, New: next, Reason: reason})
			cur = next
		}
		add(t, tid, goroutine.Running, "")
		for t < r.End+c.meanRun {
			t += exp(rng, c.meanRun)
			switch cur {
			case goroutine.Running:
				switch x := rng.IntN(3); x {
				case 0:
					add(t, tid, goroutine.Syscall, "")
				case 1:
					add(t, tid, goroutine.Waiting, reasons[rng.IntN(len(reasons))])
				default:
					add(t, tid, goroutine.Runnable, "")
				}
			case goroutine.Syscall:
				add(t, tid, goroutine.Running, "")
			case goroutine.Waiting:
				add(t, ths[rng.IntN(len(ths))], goroutine.Runnable, "")
			default:
				tid = ths[rng.IntN(len(ths))]
				add(t, tid, goroutine.Running, "")
			}
		}
	}
	slices.SortStableFunc(out, func(x, y goroutine.Event) int { return compareInt64(x.TS, y.TS) })
	return out
}

// withCalls adds to half of the user-scheduled requests a CLIENT span of
// their process inside them whose response waited in the socket for part
// of its end (Request.Answered).
func withCalls(c genConfig, reqs []Request) []Request {
	rng := rand.New(rand.NewPCG(c.seed^0x5eed, c.seed))
	n := len(reqs)
	for i := range n {
		r := reqs[i]
		if !r.UserScheduled || len(r.Threads) == 0 || rng.IntN(2) == 0 || r.End-r.Start < 4 {
			continue
		}
		d := r.End - r.Start
		start := r.Start + rng.Int64N(d/2)
		end := start + 1 + rng.Int64N(r.End-start-1)
		span := r.SpanID
		span[7] ^= 0xcc
		reqs = append(reqs, Request{TraceID: r.TraceID, SpanID: span, Parent: r.SpanID, Service: r.Service, Operation: "call",
			PID: r.PID, Start: start, End: end, Client: true, UserScheduled: true, Answered: start + rng.Int64N(end-start),
			Threads: []Activity{{TID: r.Threads[0].TID, Start: start, End: end}}})
	}
	return reqs
}
