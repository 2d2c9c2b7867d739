package diagnosis

import (
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/mirage"
)

func TestAdvise(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       Verdict
		scaling mirage.Scaling
		factor  float64
		says    string
	}{
		// 10 spans: 60 of 100 ms of own time waiting, 50 of it throttled:
		// share 0.6, ×(0.9/0.4) = ×2.25 more quota.
		{"throttled", Verdict{Service: "s", Cause: CauseCPUThrottle, PathSpans: 10,
			Waits: map[string]float64{"throttled": 500, "runqueue": 100, "running": 400}}, mirage.ScaleVertical, 2.25, "raise the quota ×2.25"},
		// The same waits in the run queue: replicas.
		{"contention", Verdict{Service: "s", Cause: CauseCPUContention, PathSpans: 10,
			Waits: map[string]float64{"runqueue": 600, "running": 400, "downstream": 5000}}, mirage.ScaleHorizontal, 2.25, "×2.25 as many replicas"},
		{"own work", Verdict{Service: "s", Cause: CauseCPU, PathSpans: 4,
			Waits: map[string]float64{"running": 900, "runqueue": 20}}, mirage.ScaleNone, 0, "CPU profile"},
		{"network", Verdict{Service: "s", Cause: CauseNetwork}, mirage.ScaleNetwork, 0, "the link to it"},
		{"downstream", Verdict{Service: "s", Cause: CauseDownstream}, mirage.ScaleDelegate, 0, "send no spans"},
		{"lock", Verdict{Service: "s", Cause: CauseLock, PathSpans: 3}, mirage.ScaleNone, 0, "waited for a lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := advise(&tc.v)
			if a == nil {
				t.Fatal("no advice")
			}
			if a.Scaling != tc.scaling || (tc.factor > 0 && (a.Factor < tc.factor-1e-6 || a.Factor > tc.factor+1e-6)) ||
				!strings.Contains(a.Explanation, tc.says) || a.Service != "s" {
				t.Errorf("advice %+v, want %s ×%v saying %q", a, tc.scaling, tc.factor, tc.says)
			}
		})
	}
	for _, v := range []Verdict{{}, {Service: "s", Cause: CauseUnknown, PathSpans: 5}, {Service: "s", Cause: CauseCPUThrottle}} {
		if a := advise(&v); a != nil {
			t.Errorf("advice for %+v: %+v, want none", v, a)
		}
	}
}
