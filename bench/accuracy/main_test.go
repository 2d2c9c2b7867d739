package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/diagnosis"
)

// TestScore: a run is right on service and cause only with an incident
// whose verdict names both; the time to verdict is the first time the
// timeline showed the final verdict; fault-free runs count incidents.
func TestScore(t *testing.T) {
	onset := time.Unix(1000, 0)
	verdict := func(svc, cause string) *diagnosis.Incident {
		return &diagnosis.Incident{ID: "i", Verdict: &diagnosis.Verdict{Service: svc, Cause: cause}}
	}
	runs := []Run{
		Score("lock@e.1", demo.FaultResult{Injected: "lock@e", Service: "e", ExpectedCause: "lock", Onset: onset,
			Incident: &diagnosis.Incident{ID: "i", Opened: onset.Add(2500 * time.Millisecond).UnixNano(), Verdict: &diagnosis.Verdict{Service: "e", Cause: "lock"}},
			Verdict:  *verdict("e", "lock").Verdict, Timeline: []demo.VerdictAt{{AfterMs: 3000, Incident: "i"}, {AfterMs: 5000, Incident: "i", Service: "e", Cause: "unknown"},
				{AfterMs: 7000, Incident: "i", Service: "e", Cause: "lock"}}}),
		Score("disk@d.1", demo.FaultResult{Injected: "disk@d", Service: "d", ExpectedCause: "disk", Incident: verdict("d", "cpu"), Verdict: *verdict("d", "cpu").Verdict}),
		Score("cpu@f.1", demo.FaultResult{Injected: "cpu@f", Service: "f", ExpectedCause: "cpu"}),
		Score("none.1", demo.FaultResult{Injected: "none=2m", Onset: onset, To: onset.Add(2 * time.Minute), OpenDuring: 1}),
	}
	if r := runs[0]; !r.ServiceRight || !r.CauseRight || r.VerdictMs != 7000 || r.OpenedMs != 2500 {
		t.Errorf("right run scored %+v", r)
	}
	if r := runs[1]; !r.ServiceRight || r.CauseRight || len(r.Why) == 0 {
		t.Errorf("wrong cause scored %+v", r)
	}
	if r := runs[2]; r.ServiceRight || r.Incident || !strings.Contains(strings.Join(r.Why, ""), "no incident") {
		t.Errorf("no incident scored %+v", r)
	}
	s := Summarize(runs)
	if s.Faulty != 3 || s.ServiceRight != 2 || s.CauseRight != 1 || s.BothRight != 1 || s.MedianVerdictMs != 7000 ||
		s.VerdictsIn10s != 1 || s.MedianOpenedMs != 2500 {
		t.Errorf("summary %+v", s)
	}
	if s.FreeRuns != 1 || s.FreeIncidents != 1 || s.FreeMinutes != 2 {
		t.Errorf("fault-free: %d runs, %d incidents, %.1f min", s.FreeRuns, s.FreeIncidents, s.FreeMinutes)
	}
	if s.Confusion["disk"]["cpu"] != 1 || s.Confusion["cpu"][noIncident] != 1 || s.Confusion["lock"]["lock"] != 1 {
		t.Errorf("confusion %v", s.Confusion)
	}
	var b strings.Builder
	Markdown(&b, s)
	for _, want := range []string{"service top-1 | 2/3", "| lock | 0 |", "**disk@d.1**", "| 1/1 (100 %); 2.5s |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	if s.Effective.Faulty != 0 || s.Small != 0 {
		t.Errorf("effect without loads: %+v, %d small", s.Effective, s.Small)
	}

	// The effect of a fault: its p95 over its baseline's, else over the
	// fault-free run's at the same rate.
	load := func(rate, p95 float64) demo.LoadSummary { return demo.LoadSummary{Rate: rate, P95Ms: p95} }
	runs = []Run{
		Score("lock@e.1", demo.FaultResult{Injected: "lock@e", Service: "e", ExpectedCause: "lock", Incident: verdict("e", "lock"),
			Verdict: *verdict("e", "lock").Verdict, Load: load(8, 300), Baseline: &demo.LoadSummary{Rate: 8, P95Ms: 60}}),
		Score("disk@d.1", demo.FaultResult{Injected: "disk@d", Service: "d", ExpectedCause: "disk", Load: load(8, 66)}),
		Score("cpu@f.1", demo.FaultResult{Injected: "cpu@f", Service: "f", ExpectedCause: "cpu", Load: load(15, 90)}),
		Score("none.1", demo.FaultResult{Injected: "none=2m", Onset: onset, To: onset.Add(2 * time.Minute), Load: load(8, 55)}),
	}
	withBaselines(runs)
	s = Summarize(runs)
	byID := map[string]Run{}
	for _, r := range s.Runs {
		byID[r.ID] = r
	}
	if r := byID["lock@e.1"]; r.Effect != 5 || r.BaseP95Ms != 60 {
		t.Errorf("own baseline: %+v", r)
	}
	if r := byID["disk@d.1"]; r.Effect != 1.2 || r.BaseP95Ms != 55 {
		t.Errorf("fault-free baseline: %+v", r)
	}
	if r := byID["cpu@f.1"]; r.Effect != 0 {
		t.Errorf("no baseline at its rate: %+v", r)
	}
	if s.Effective.Faulty != 1 || s.Effective.BothRight != 1 || s.Small != 1 || s.SmallQuiet != 1 {
		t.Errorf("effective %+v, small %d (%d quiet)", s.Effective, s.Small, s.SmallQuiet)
	}
	b.Reset()
	Markdown(&b, s)
	if !strings.Contains(b.String(), "without an incident; with a right verdict | 1 of 1; 0") || !strings.Contains(b.String(), "(×5.00)") {
		t.Errorf("markdown:\n%s", b.String())
	}

	// The demo's measure of the effect at the service, when the result has
	// it, decides over the entry's p95: a fault whose p95 grew ×1.5 from
	// ambient noise but that took no effect at its service is not
	// effective, one at ×1.1 that grew its service by 30 % is, and one
	// that grew it by 10 % took a small effect.
	growth := func(ms, base float64) *analysis.Growth {
		return &analysis.Growth{ServiceScore: analysis.ServiceScore{Score: ms}, EntryBaseMs: base, T: 10}
	}
	runs = []Run{
		Score("cpu-throttle@d.1", demo.FaultResult{Injected: "cpu-throttle@d", Service: "d", ExpectedCause: "cpu-throttle",
			Incident: verdict("g", "network"), Verdict: *verdict("g", "network").Verdict, Incidents: 1,
			Load: load(15, 90), Baseline: &demo.LoadSummary{Rate: 15, P95Ms: 60}, Effect: growth(0.7, 60), NoEffect: true}),
		Score("disk@j.1", demo.FaultResult{Injected: "disk@j", Service: "j", ExpectedCause: "disk", Incident: verdict("j", "disk"),
			Verdict: *verdict("j", "disk").Verdict, Load: load(15, 66), Baseline: &demo.LoadSummary{Rate: 15, P95Ms: 60}, Effect: growth(18, 60)}),
		Score("lock@h.1", demo.FaultResult{Injected: "lock@h", Service: "h", ExpectedCause: "lock", Correct: true, CauseCorrect: true,
			Load: load(15, 66), Baseline: &demo.LoadSummary{Rate: 15, P95Ms: 60}, Effect: growth(6, 60), SmallEffect: true}),
		Score("lock@i.1", demo.FaultResult{Injected: "lock@i", Service: "i", ExpectedCause: "lock", Incident: verdict("i", "lock"),
			Verdict: *verdict("i", "lock").Verdict, Correct: true, CauseCorrect: true, Incidents: 1,
			Load: load(15, 70), Baseline: &demo.LoadSummary{Rate: 15, P95Ms: 60}, Effect: growth(9, 60), SmallEffect: true}),
	}
	s = Summarize(runs)
	if s.Effective.Faulty != 1 || s.Effective.BothRight != 1 || s.Small != 3 || s.SmallQuiet != 1 || s.SmallRight != 1 {
		t.Errorf("measured effect: effective %+v, small %d (%d quiet, %d right)", s.Effective, s.Small, s.SmallQuiet, s.SmallRight)
	}
	// The demo judged d's verdict (an ambient incident's) wrong, h's quiet
	// and i's right; j's result carries no judgement of both (Correct unset).
	if s.Measured != 4 || s.JudgedRight != 2 || s.NoEffect != 1 || s.SmallEffect != 2 {
		t.Errorf("judged: %d measured, %d right, %d without effect, %d small", s.Measured, s.JudgedRight, s.NoEffect, s.SmallEffect)
	}
	b.Reset()
	Markdown(&b, s)
	if !strings.Contains(b.String(), "at d +0.7 ms (1.2 %), no effect") || !strings.Contains(b.String(), "at j +18.0 ms (30.0 %)") ||
		!strings.Contains(b.String(), "at h +6.0 ms (10.0 %), small") {
		t.Errorf("markdown:\n%s", b.String())
	}
}
