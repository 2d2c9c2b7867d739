package demo

import (
	"testing"

	"github.com/rootline/rootline/internal/diagnosis"
)

// TestJudge: a fault is right when the server's verdict names its service
// (and cause, for CauseCorrect); the demo's own ranking without an incident
// is not; a fault that took no effect is right only without an incident,
// one that took a small effect also without one.
func TestJudge(t *testing.T) {
	inc := func(svc, cause string) *diagnosis.Incident {
		return &diagnosis.Incident{ID: "i", Verdict: &diagnosis.Verdict{Service: svc, Cause: cause}}
	}
	for _, c := range []struct {
		name               string
		fr                 FaultResult
		correct, causeGood bool
		mark               string
	}{
		{"right", FaultResult{Incident: inc("h", "gc"), Incidents: 1}, true, true, "correct"},
		{"cause wrong", FaultResult{Incident: inc("h", "lock"), Incidents: 1}, true, false, "service right, cause WRONG (want gc)"},
		{"another service", FaultResult{Incident: inc("e", "gc"), Incidents: 1}, false, false, "WRONG"},
		{"no incident, the ranking names it", FaultResult{}, false, false, "MISSED (no incident)"},
		{"no effect, quiet", FaultResult{NoEffect: true}, true, true, "no effect (no incident, correct)"},
		{"no effect, an incident", FaultResult{NoEffect: true, Incident: inc("e", "cpu"), Incidents: 1}, false, false, "no effect (1 incidents opened)"},
		{"small, quiet", FaultResult{SmallEffect: true}, true, true, "small effect (no incident, correct)"},
		{"small, right", FaultResult{SmallEffect: true, Incident: inc("h", "gc"), Incidents: 1}, true, true, "correct"},
		{"small, wrong", FaultResult{SmallEffect: true, Incident: inc("e", "cpu"), Incidents: 1}, false, false, "WRONG"},
	} {
		fr := c.fr
		fr.Injected, fr.Service, fr.ExpectedCause = "gc@h", "h", "gc"
		if fr.Incident != nil {
			fr.Verdict = *fr.Incident.Verdict
		} else {
			fr.Verdict = diagnosis.Verdict{Service: "h", Cause: diagnosis.CauseUnknown} // the demo's own ranking
		}
		judge(&fr)
		if fr.Correct != c.correct || fr.CauseCorrect != c.causeGood {
			t.Errorf("%s: correct %v, cause %v; want %v, %v", c.name, fr.Correct, fr.CauseCorrect, c.correct, c.causeGood)
		}
		if m := checkMark(fr); m != c.mark {
			t.Errorf("%s: mark %q, want %q", c.name, m, c.mark)
		}
	}
}
