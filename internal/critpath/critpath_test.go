package critpath

import (
	"fmt"
	"testing"
)

// TestEquivalence checks the fast critical path against the naive reference
// on random timelines: consistent ones (wakers running when they wake) and
// chaotic ones (any thread may be the waker, cycles included), with
// hand-offs, shared threads, runtime pauses, a Go process (with goroutine
// events for some of its requests), wakers without intervals and a low
// depth bound.
func TestEquivalence(t *testing.T) {
	seeds := 16
	if testing.Short() {
		seeds = 8
	}
	viaGoroutine, created, answered, readied := 0, 0, 0, 0
	for seed := range seeds {
		for _, chaos := range []bool{false, true} {
			c := genConfig{seed: uint64(seed), procs: 3, threads: 3, dur: 20_000_000, meanRun: 300_000, meanBlock: 600_000,
				meanReq: 3_000_000, meanReqGap: 1_000_000, start: 1_700_000_000_000_000_000, foreignWakers: 0.1, chaos: chaos}
			t.Run(fmt.Sprintf("seed=%d/chaos=%v", seed, chaos), func(t *testing.T) {
				s, reqs := generate(c)
				tl, err := DecodeBytes(encode(t, s))
				if err != nil {
					t.Fatal(err)
				}
				gevs := generateGoroutines(c, s, reqs)
				reqs = withCalls(c, reqs)
				in := Input{Timeline: tl, Requests: reqs, Pauses: []Pause{
					{PID: 2000, Start: c.start + 2_000_000, End: c.start + 2_500_000},
					{PID: 2000, Start: c.start + 9_000_000, End: c.start + 9_100_000},
				}, Goroutines: gevs}
				cfg := Config{}
				if seed%4 == 1 {
					cfg.MaxDepth = 2
				}
				a := New(in, cfg)
				followed := 0
				for i := range reqs {
					if p, g := a.goroutineOf(&reqs[i]); g != 0 {
						viaGoroutine++
						if len(a.answered[reqKey{reqs[i].TraceID, reqs[i].SpanID}]) > 0 {
							answered++
						}
						for k, evs := 0, p.byG[g]; k+1 < len(evs); k++ {
							if _, _, ok := a.readier(p, g, k, evs[k].TS, evs[k+1].TS, 0); ok {
								readied++
							}
						}
						if p.byG[g][0].TS > reqs[i].Start {
							created++
						}
					}
					p, np := a.Path(i), a.NaivePath(i)
					checkPath(t, a, &p)
					if !equalPaths(p, np) {
						t.Fatalf("request %d (%+v):\nfast  %+v\nnaive %+v", i, reqs[i], p, np)
					}
					followed += len(p.Arrows)
				}
				if followed == 0 {
					t.Fatal("no path followed a wakeup: the generator does not exercise the algorithm")
				}
			})
		}
	}
	if viaGoroutine == 0 || created == 0 || answered == 0 || readied == 0 {
		t.Fatalf("%d requests followed their goroutine, %d one created after they began, %d with responses waiting in their sockets, "+
			"%d waits another goroutine ended: the generator does not exercise goroutine paths", viaGoroutine, created, answered, readied)
	}
}
