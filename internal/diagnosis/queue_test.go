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
		want  string  // the largest cause, "" for not weighed
		share float64 // its share, ±0.02
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
			shares, total, ok := weighSpanWaits(v, tc.waits, 0, tc.top)
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
