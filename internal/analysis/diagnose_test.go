package analysis_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/analysis/analysistest"
	"github.com/rootline/rootline/internal/model"
)

func TestDiagnose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and sends ~40,000 spans")
	}
	for _, tc := range []struct {
		name        string
		fault       analysistest.Fault
		wantService string
		wantCause   string
	}{
		{"lock in e (own time)", analysistest.Fault{Kind: "self", Service: "e"}, "e", analysis.CauseSelfTime},
		{"delay on calls into f", analysistest.Fault{Kind: "net", Service: "f"}, "f", analysis.CauseNetwork},
		{"cpu starvation of j", analysistest.Fault{Kind: "local", Service: "j"}, "j", analysis.CauseRunQueue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, from := analysistest.RunScenario(t, tc.fault, "")
			v, err := analysis.Diagnose(context.Background(), analysistest.Source(srv), from, time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			logVerdict(t, v)
			if v.Service != tc.wantService || v.Cause != tc.wantCause {
				t.Errorf("verdict %q/%q, want %q/%q", v.Service, v.Cause, tc.wantService, tc.wantCause)
			}
			if v.Confidence < 0.5 || v.ExampleTraceID == "" || v.SlowTraces < 10 || v.BaseTraces < 100 {
				t.Errorf("weak verdict: confidence %.2f, example %q, %d slow, %d base", v.Confidence, v.ExampleTraceID, v.SlowTraces, v.BaseTraces)
			}
		})
	}
}

func logVerdict(t *testing.T, v analysis.Verdict) {
	t.Helper()
	t.Logf("verdict %s / %s, confidence %.2f, %d slow vs %d base traces", v.Service, v.Cause, v.Confidence, v.SlowTraces, v.BaseTraces)
	for _, e := range v.Evidence {
		t.Log("  ", e)
	}
	for _, r := range v.Ranking {
		t.Logf("   %-2s score %6.2f self %+6.2f net %+6.2f local %+6.2f anomalies %d", r.Service, r.Score, r.SelfDeltaMs, r.NetDeltaMs, r.LocalDeltaMs, r.Anomalies)
	}
}

// With a CPU profile linked to the culprit's slow spans, the share of its
// exclusive time its threads spent on CPU tells CPU work from blocking; a
// JFR recording's pprof conversion gives the share from Java's execution
// samples when there is no eBPF profile, and its lock events name a lock
// even when the threads were on CPU.
func TestDiagnoseCPUEvidence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and sends ~13,000 spans per case")
	}
	for _, tc := range []struct {
		name     string
		kind     string  // artifact kind: "cpu" (eBPF) or "jfr" (its pprof conversion)
		onCPU    float64 // share of each slow span's exclusive time in CPU samples
		lock     float64 // share in monitor-enter events (0: the profile has no such type)
		want     string
		evidence string // a line of the verdict's evidence must contain it
	}{
		{"busy", "cpu", 0.9, 0, analysis.CauseCPU, "on CPU for 90% of its exclusive time (20 eBPF CPU profiles)"},
		{"blocked", "cpu", 0.1, 0, analysis.CauseBlocking, "on CPU for 10%"},
		{"busy, JFR only", "jfr", 0.8, 0, analysis.CauseCPU, "(20 JFR execution samples)"},
		{"JFR lock waits", "jfr", 0.6, 0.4, analysis.CauseBlocking, "blocked entering Java monitors for 40% of its exclusive time"},
		{"JFR, short lock waits", "jfr", 0.7, 0.1, analysis.CauseCPU, "blocked entering Java monitors for 10%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, from := analysistest.RunScenario(t, analysistest.Fault{Kind: "self", Service: "e"}, "")
			ctx := context.Background()
			// One profile per anomalous span of e, as a capture would upload
			// (with the raw recording beside a JFR's conversion).
			anoms := analysistest.AttachProfiles(t, srv, "e", tc.kind, func(s *model.Span) io.Reader {
				spans, err := srv.Store().GetTrace(ctx, s.TraceID)
				if err != nil {
					t.Fatal(err)
				}
				start, excl, ok := analysis.SpanTimes(spans, s.SpanID)
				if !ok {
					t.Fatalf("span %s not found", s.SpanID)
				}
				return analysistest.SpanProfile(t, start, excl, tc.onCPU, tc.lock)
			})
			v, err := analysis.Diagnose(ctx, analysistest.Source(srv), from, time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			logVerdict(t, v)
			if v.Service != "e" || v.Cause != tc.want {
				t.Errorf("verdict %q/%q, want e/%q", v.Service, v.Cause, tc.want)
			}
			if !slices.ContainsFunc(v.Evidence, func(e string) bool { return strings.Contains(e, tc.evidence) }) {
				t.Errorf("no evidence line says %q", tc.evidence)
			}
			linked := fmt.Sprintf("evidence captured for e: %d %s artifacts, linked to %d of its %d anomalous spans", len(anoms)*map[string]int{"cpu": 1, "jfr": 2}[tc.kind], tc.kind, len(anoms), len(anoms))
			if !slices.Contains(v.Evidence, linked) {
				t.Errorf("no evidence line %q", linked)
			}
		})
	}
}

func TestDiagnoseEmpty(t *testing.T) {
	srv, _, _ := analysistest.StartServer(t, "")
	v, err := analysis.Diagnose(context.Background(), analysistest.Source(srv), time.Now().Add(-time.Minute), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v.Service != "" || v.Cause != analysis.CauseNone || len(v.Evidence) == 0 {
		t.Errorf("empty store: %+v", v)
	}
}
