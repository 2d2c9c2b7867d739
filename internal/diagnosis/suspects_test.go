package diagnosis

import (
	"slices"
	"testing"

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
		if got := tr.Suspects(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Suspects(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}
