package diagnosis

import (
	"math"
	"strings"
	"testing"

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
