package diagnosis

import (
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
)

// TestSuspects: the culprit and the ranking of each incident still
// gathering evidence, n per incident, the incident with more anomalous
// requests first, each service once; incidents without a verdict add none,
// and services whose time did not grow (a ranking's score ≤ 0, as when no
// culprit was named yet) are no suspects.
func TestSuspects(t *testing.T) {
	scored := func(score float64, svcs ...string) []analysis.ServiceScore {
		var out []analysis.ServiceScore
		for _, s := range svcs {
			out = append(out, analysis.ServiceScore{Service: s, Score: score})
		}
		return out
	}
	rank := func(svcs ...string) []analysis.ServiceScore { return scored(1, svcs...) }
	tr, err := NewTracker(DefaultConfig(), nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.open["a GET /"] = &tracked{inc: Incident{ID: "1", Anomalous: 40, Verdict: &Verdict{Service: "e", Ranking: rank("e", "j", "i")}}}
	tr.open["x GET /"] = &tracked{inc: Incident{ID: "2", Anomalous: 90, Verdict: &Verdict{Service: "", Ranking: rank("j", "d", "c")}}}
	tr.open["y GET /"] = &tracked{inc: Incident{ID: "3", Anomalous: 500}}
	tr.open["z GET /"] = &tracked{inc: Incident{ID: "5", Anomalous: 400, Verdict: &Verdict{Ranking: append(scored(0, "h"), scored(-1, "b")...)}}}
	tr.settled = append(tr.settled, &tracked{inc: Incident{ID: "4", Anomalous: 10, State: StateClosed, Verdict: &Verdict{Service: "g", Ranking: rank("g")}}})
	cases := []struct {
		n    int
		want []string
	}{
		{0, nil},
		{1, []string{"j", "e", "g"}},
		{2, []string{"j", "d", "e", "i", "g"}},
	}
	for _, tc := range cases {
		var got []string
		for _, s := range tr.Suspects(tc.n) {
			got = append(got, s.Service)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Suspects(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// TestSuspectsWanting: a culprit whose verdict has no kernel path of it, or
// no cause, is wanting; one with paths and a cause, and the ranking's other
// services, are not. Since is the newest start of the incidents naming it.
func TestSuspectsWanting(t *testing.T) {
	tr, err := NewTracker(DefaultConfig(), nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ranked := []analysis.ServiceScore{{Service: "d", Score: 1}}
	tr.open["a GET /"] = &tracked{inc: Incident{ID: "1", Anomalous: 90, Start: 100e9,
		Verdict: &Verdict{Service: "e", Cause: CauseCPU, PathSpans: 12, Ranking: ranked}}}
	tr.open["b GET /"] = &tracked{inc: Incident{ID: "2", Anomalous: 50, Start: 200e9,
		Verdict: &Verdict{Service: "f", Cause: CauseCPUContention, Ranking: ranked}}}
	tr.open["c GET /"] = &tracked{inc: Incident{ID: "3", Anomalous: 40, Start: 300e9,
		Verdict: &Verdict{Service: "g", Cause: CauseUnknown, PathSpans: 3}}}
	got := map[string]Suspect{}
	for _, s := range tr.Suspects(2) {
		got[s.Service] = s
	}
	want := map[string]Suspect{
		"e": {Service: "e", Since: time.Unix(100, 0)},
		"d": {Service: "d", Since: time.Unix(200, 0)},
		"f": {Service: "f", Since: time.Unix(200, 0), Wanting: true},
		"g": {Service: "g", Since: time.Unix(300, 0), Wanting: true},
	}
	if len(got) != len(want) {
		t.Fatalf("suspects %v, want %v", got, want)
	}
	for svc, w := range want {
		if g := got[svc]; g.Wanting != w.Wanting || !g.Since.Equal(w.Since) {
			t.Errorf("%s: %+v, want %+v", svc, g, w)
		}
	}
}
