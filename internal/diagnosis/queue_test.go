package diagnosis

import (
	"math"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
)

// TestSplitQueue: the growth of a run-queue wait is split between the CPU
// time that grew and the contention that grew by their Shapley values.
func TestSplitQueue(t *testing.T) {
	for _, c := range []struct {
		name                  string
		c0, r0, c1, r1        float64
		wantOwn, wantC, wantR float64
	}{
		// Own work 2 → 20 ms with the wait per ms 0.5 → 1.5: own
		// (0.5+1.5)/2 × 18 = 18, contention (2+20)/2 × 1 = 11.
		{"own work grew", 2, 1, 20, 30, 18, 38, 12},
		// Running did not grow: all of the wait's growth is contention.
		{"others' demand", 2, 1, 2, 30, 0, 2, 30},
		// The wait did not grow.
		{"no wait growth", 2, 1, 20, 1, 0, 20, 1},
		// No baseline of the wait (r0 = 0): k0 = 0, own = k1/2 × (c1−c0).
		{"no baseline wait", 6, 0, 30, 40, 16, 46, 24},
	} {
		by := map[string]float64{CauseCPU: c.c1, CauseCPUContention: c.r1}
		own := splitQueue(by, c.c0, c.r0)
		if math.Abs(own-c.wantOwn) > 1e-9 || math.Abs(by[CauseCPU]-c.wantC) > 1e-9 || math.Abs(by[CauseCPUContention]-c.wantR) > 1e-9 {
			t.Errorf("%s: moved %v, cpu %v, contention %v; want %v, %v, %v", c.name, own, by[CauseCPU], by[CauseCPUContention], c.wantOwn, c.wantC, c.wantR)
		}
	}
}

// TestSplitQueueGC: with a collector's time known on both sides, the part
// of the wait's growth that goes with the demand that grew is shared
// between the threads' CPU time and the collector's by their growth.
func TestSplitQueueGC(t *testing.T) {
	for _, c := range []struct {
		name                      string
		c0, r0, g0, c1, r1, g1    float64
		wantCPU, wantGC           float64
		wantC, wantR, wantGCAfter float64
	}{
		// No collector time: splitQueue's "own work grew".
		{"no gc", 2, 1, 0, 20, 30, 0, 18, 0, 38, 12, 0},
		// Only the collector grew: demand 12 → 32, wait per ms 5/12 →
		// 25/32, (5/12+25/32)/2 × 20 = 11.979… all to gc.
		{"gc grew", 10, 5, 2, 10, 25, 22, 0, 11.979166666666666, 10, 25 - 11.979166666666666, 22 + 11.979166666666666},
		// Both grew by 30: demand 10 → 70 at 0.5 ms per ms, 30 moved
		// (all of the wait's growth), half each.
		{"both grew", 10, 5, 0, 40, 35, 30, 15, 15, 55, 5, 45},
		// The demand fell: nothing moves.
		{"demand fell", 30, 5, 10, 20, 35, 5, 0, 0, 20, 35, 5},
	} {
		by := map[string]float64{CauseCPU: c.c1, CauseCPUContention: c.r1, CauseGC: c.g1}
		toCPU, toGC := splitQueueGC(by, c.c0, c.r0, c.g0)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if !near(toCPU, c.wantCPU) || !near(toGC, c.wantGC) || !near(by[CauseCPU], c.wantC) || !near(by[CauseCPUContention], c.wantR) || !near(by[CauseGC], c.wantGCAfter) {
			t.Errorf("%s: moved %v to cpu and %v to gc, then cpu %v, contention %v, gc %v; want %v, %v, %v, %v, %v", c.name, toCPU, toGC,
				by[CauseCPU], by[CauseCPUContention], by[CauseGC], c.wantCPU, c.wantGC, c.wantC, c.wantR, c.wantGCAfter)
		}
	}
}

// TestDiagnoseQueueWithOwnWork: a service whose own work grew on a node it
// saturates waits in the run queue for longer than it runs, though nobody
// else asks for more CPU: its cause is cpu. The same run-queue wait with
// no more running than before (another program took the CPUs) is
// cpu-contention. Cart's exclusive time before the onset is 6 ms per trace.
func TestDiagnoseQueueWithOwnWork(t *testing.T) {
	for _, c := range []struct {
		name          string
		running, runq float64
		want          string
	}{
		{"its work grew", 30, 40, CauseCPU},
		{"others took the CPUs", 5, 65, CauseCPUContention},
	} {
		st := openStore(t)
		byTrace, _, end := shopIncident(t, st, 70, 3, true)
		v := diagnoseShop(t, st, byTrace, end, func(s *model.Span) *critpath.SpanPath {
			return segmentsPath(s, critpath.Running, "", c.running, critpath.Runqueue, "", c.runq, critpath.Network, "", 3.0)
		})
		t.Logf("%s: %s/%s\n  %s", c.name, v.Service, v.Cause, strings.Join(v.Evidence, "\n  "))
		if v.Service != "cart" || v.Cause != c.want {
			t.Errorf("%s: verdict %s/%s, want cart/%s", c.name, v.Service, v.Cause, c.want)
		}
	}
}

// TestWeighSpanWaits: without kernel paths of the culprit's spans before
// the onset, the spans' measured run-queue growth goes to the kinds of
// run-queue wait the slow paths show, the rest of the exclusive growth to
// their other states; a run-queue wait that grew with the service's own
// CPU time goes to cpu.
func TestWeighSpanWaits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		top   analysis.ServiceScore
		waits map[string]float64
		via   map[string]map[string]float64 // waits named by the state of the thread waited on
		want  string                        // the largest cause, "" for not weighed
		share float64                       // its share, ±0.02
	}{
		{
			// A noisy neighbour: the slow spans' paths mostly ran (the
			// capture's spans, most of them not slow), but all that grew
			// per trace was the wait for a CPU, behind other programs.
			name:  "the growth is run-queue wait behind others",
			top:   analysis.ServiceScore{SelfDeltaMs: 9.2, LocalDeltaMs: 9.6, SelfBaseMs: 3.2},
			waits: map[string]float64{critpath.Running: 37.7, critpath.Runqueue: 27.1, critpath.Sleep: 21.4, critpath.Network: 0.4},
			want:  CauseCPUContention, share: 1,
		},
		{
			name:  "the growth is the quota's",
			top:   analysis.ServiceScore{SelfDeltaMs: 16, LocalDeltaMs: 15, SelfBaseMs: 2},
			waits: map[string]float64{critpath.Throttled: 50, critpath.Running: 10},
			want:  CauseCPUThrottle, share: 15.0 / 16,
		},
		{
			// A 5 % quota on a Java service (cpu-throttle@e at 15/s, its
			// verdict at 26 s): most of what grew is requests waiting on a
			// monitor whose holder the quota held off, which the paths
			// count as throttled (via); the spans' own run delay grew by
			// only a third of the growth. Weighing the rest over the
			// unnamed lock waits alone made it lock.
			name:  "lock waits behind a throttled holder",
			top:   analysis.ServiceScore{SelfDeltaMs: 2583, LocalDeltaMs: 881, SelfBaseMs: 5},
			waits: map[string]float64{critpath.Throttled: 65, critpath.Lock: 3, critpath.Runqueue: 1.2, critpath.Running: 0.04},
			via:   map[string]map[string]float64{critpath.Lock: {critpath.Throttled: 56}},
			want:  CauseCPUThrottle, share: 0.93,
		},
		{
			// Every run-queue state named by a holder: the threads' own
			// wait is of the holder's kind.
			name:  "only waits named by their holder",
			top:   analysis.ServiceScore{SelfDeltaMs: 100, LocalDeltaMs: 40, SelfBaseMs: 5},
			waits: map[string]float64{critpath.Throttled: 50, critpath.Lock: 50},
			via:   map[string]map[string]float64{critpath.Lock: {critpath.Throttled: 50}},
			want:  CauseCPUThrottle, share: 0.7,
		},
		{
			// More work per request on a busy node: its own running grew,
			// and the wait with it.
			name:  "the wait grew with its own CPU time",
			top:   analysis.ServiceScore{SelfDeltaMs: 20, LocalDeltaMs: 12, SelfBaseMs: 3},
			waits: map[string]float64{critpath.Running: 60, OwnQueue: 10, critpath.Runqueue: 30},
			want:  CauseCPU, share: 0.72,
		},
		{
			name:  "the run-queue wait did not grow: the rest did",
			top:   analysis.ServiceScore{SelfDeltaMs: 15.5, LocalDeltaMs: 0.4, SelfBaseMs: 2},
			waits: map[string]float64{critpath.Lock: 100, critpath.Running: 10, critpath.Runqueue: 2},
			want:  CauseLock, share: 0.88,
		},
		{
			name:  "no waits on the spans (not under rootline run)",
			top:   analysis.ServiceScore{SelfDeltaMs: 15.5, SelfBaseMs: 2},
			waits: map[string]float64{critpath.Runqueue: 100},
		},
		{
			name:  "no run-queue wait in the paths: its kind is unknown",
			top:   analysis.ServiceScore{SelfDeltaMs: 15.5, LocalDeltaMs: 10, SelfBaseMs: 2},
			waits: map[string]float64{critpath.Running: 100},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &Verdict{Service: "b"}
			shares, total, ok := weighSpanWaits(v, tc.waits, tc.via, 0, tc.top)
			if tc.want == "" {
				if ok {
					t.Fatalf("weighed %v, want not weighed", shares)
				}
				return
			}
			if !ok || len(shares) == 0 {
				t.Fatalf("not weighed, want %s", tc.want)
			}
			if shares[0].cause != tc.want || math.Abs(shares[0].share-tc.share) > 0.02 {
				t.Errorf("largest %s %.2f, want %s %.2f (all %v)", shares[0].cause, shares[0].share, tc.want, tc.share, shares)
			}
			if math.Abs(total-tc.top.SelfDeltaMs) > 1e-6 {
				t.Errorf("total %.2f ms, want the exclusive growth %.2f", total, tc.top.SelfDeltaMs)
			}
			if v.byGrowth != "trace" || len(v.Evidence) != 1 {
				t.Errorf("byGrowth %q, evidence %q", v.byGrowth, v.Evidence)
			}
		})
	}
}
