// Command accuracy scores the runs of bench/accuracy.sh: each run is one
// fault (or a fault-free stretch) the mesh demo injected, with its result
// as `rootline demo --results-dir` wrote it (internal/demo.FaultResult),
// saved as DIR/runs/<run>.json. It writes DIR/summary.md and
// DIR/summary.json: service top-1, cause top-1, both, time from onset to
// verdict, the confusion matrix of causes, the incidents of the fault-free
// runs, and every wrong run with what the verdict said.
//
//	go run ./bench/accuracy DIR
package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/mesh"
)

// Run is one scored run.
type Run struct {
	ID       string  `json:"id"`
	Fault    string  `json:"fault"`
	Class    string  `json:"class"`
	Service  string  `json:"service"`
	Language string  `json:"language"`
	Rate     float64 `json:"rate"`
	// Expected is the ground truth cause ("" for a fault-free run).
	Expected string `json:"expectedCause"`
	// Got are the verdict's service and cause ("" when no incident
	// opened).
	GotService string `json:"gotService"`
	GotCause   string `json:"gotCause"`
	Incident   bool   `json:"incident"`
	// Preexisting: the incident read had opened before the onset (it
	// merged the fault with a slowdown already going on).
	Preexisting bool `json:"preexisting,omitempty"`
	// Incidents opened during the run (all entry points); for a fault-free
	// run, those open at any time during it.
	Incidents int `json:"incidents"`
	// NodeIncidents: of a fault-free run's Incidents, those whose verdict
	// names the node (no service stood out, its CPUs stolen by the host).
	NodeIncidents int  `json:"nodeIncidents,omitempty"`
	ServiceRight  bool `json:"serviceRight"`
	CauseRight    bool `json:"causeRight"`
	// VerdictMs is the time from the onset to the first verdict that
	// named the final verdict's service and cause (-1: none seen).
	VerdictMs int64 `json:"verdictMs"`
	// OpenedMs is the time from the onset to the incident's opening (-1:
	// none, or it opened before the onset): the detection's share of
	// VerdictMs.
	OpenedMs int64 `json:"openedMs"`
	// P95Ms is the entry's p95 latency while the fault was on (over the
	// stretch for a fault-free run), BaseP95Ms the baseline's just before
	// it (else the fault-free run's at the same rate: withBaselines), and
	// Effect their ratio (0 when either is unknown): a fault that barely
	// slowed requests should open no incident.
	P95Ms     float64 `json:"p95Ms"`
	BaseP95Ms float64 `json:"baseP95Ms,omitempty"`
	Effect    float64 `json:"effect,omitempty"`
	// Growth is what the fault added to its service's time per request,
	// GrowthPct that as a share of the entry's median before it, and
	// NoEffect the demo's judgement that it took no measurable effect
	// (demo.FaultResult.Effect; Measured says the demo measured it, as
	// results written before it did not: then Effect decides).
	Measured  bool    `json:"measured,omitempty"`
	GrowthMs  float64 `json:"growthMs,omitempty"`
	GrowthPct float64 `json:"growthPct,omitempty"`
	NoEffect  bool    `json:"noEffect,omitempty"`
	// SmallEffect: it took effect by less than an incident is built for
	// (demo.MinIncident).
	SmallEffect bool `json:"smallEffect,omitempty"`
	// Judged is the demo's judgement of the run, service and cause
	// (demo.FaultResult.CauseCorrect): as ServiceRight and CauseRight
	// except that a fault that took no effect, or a small one, is right
	// when no incident opened. Set for runs with Measured only.
	Judged bool `json:"judged,omitempty"`
	// FreeSeconds is the length of a fault-free run.
	FreeSeconds float64  `json:"freeSeconds,omitempty"`
	Why         []string `json:"why,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// Tally counts fault runs and those right on service, cause and both.
type Tally struct {
	Faulty       int `json:"faultyRuns"`
	ServiceRight int `json:"serviceRight"`
	CauseRight   int `json:"causeRight"`
	BothRight    int `json:"bothRight"`
}

// add counts r and reports whether it was right on both.
func (t *Tally) add(r Run) bool {
	t.Faulty++
	if r.ServiceRight {
		t.ServiceRight++
	}
	if r.CauseRight {
		t.CauseRight++
	}
	if r.ServiceRight && r.CauseRight {
		t.BothRight++
		return true
	}
	return false
}

// Summary is what summary.json holds.
type Summary struct {
	Runs []Run `json:"runs"`
	Tally
	// MedianVerdictMs and MaxVerdictMs are over the runs whose verdict was
	// right on both counts.
	MedianVerdictMs int64 `json:"medianVerdictMs"`
	MaxVerdictMs    int64 `json:"maxVerdictMs"`
	TimedRuns       int   `json:"timedRuns"`
	// VerdictsIn10s counts the timed runs whose verdict came within 10 s
	// of the onset; MedianOpenedMs is the median of their OpenedMs (the
	// detection), over those that have one.
	VerdictsIn10s  int   `json:"verdictsIn10s"`
	MedianOpenedMs int64 `json:"medianOpenedMs"`
	// Confusion counts runs by expected cause, then the verdict's cause
	// ("no incident" when none opened).
	Confusion map[string]map[string]int `json:"confusion"`
	// Effective tallies the runs whose fault took effect at its service by
	// as much as an incident is built for (Run.NoEffect and SmallEffect
	// false), or, for results without that measure, slowed the
	// entry's p95 by at least minEffect against its baseline; Small counts
	// the others (effect known) and SmallQuiet those of them that opened no
	// incident, as a slowdown too small to matter should.
	Effective  Tally `json:"effective"`
	Small      int   `json:"smallRuns"`
	SmallQuiet int   `json:"smallRunsWithoutIncident"`
	// Measured counts the runs whose result has the demo's measure of the
	// effect, JudgedRight those of them it judged right (Run.Judged);
	// NoEffect and SmallEffect split Small by that measure, and
	// SmallRight counts the Small runs whose incident's verdict was right
	// on both counts.
	Measured    int `json:"measuredRuns"`
	JudgedRight int `json:"judgedRight"`
	NoEffect    int `json:"noEffectRuns"`
	SmallEffect int `json:"smallEffectRuns"`
	SmallRight  int `json:"smallRunsRight"`
	// FreeRuns, FreeMinutes and FreeIncidents are the fault-free runs.
	FreeRuns      int     `json:"freeRuns"`
	FreeMinutes   float64 `json:"freeMinutes"`
	FreeIncidents int     `json:"freeIncidents"`
	// FreeNode: of FreeIncidents, those with the node's verdict.
	FreeNode int `json:"freeNodeIncidents"`
}

const noIncident = "no incident"

// minEffect is the growth of the entry's p95 latency (fault over baseline)
// from which a fault counts as one that slowed requests.
const minEffect = 1.25

func main() {
	if len(os.Args) != 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench/accuracy DIR   (DIR/runs/*.json from bench/accuracy.sh)")
		os.Exit(2)
	}
	dir := os.Args[1]
	files, err := filepath.Glob(filepath.Join(dir, "runs", "*.json"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "accuracy: no runs in %s/runs\n", dir)
		os.Exit(1)
	}
	var runs []Run
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "accuracy:", err)
			os.Exit(1)
		}
		var fr demo.FaultResult
		if err := json.Unmarshal(b, &fr); err != nil {
			fmt.Fprintf(os.Stderr, "accuracy: %s: %v\n", f, err)
			os.Exit(1)
		}
		runs = append(runs, Score(strings.TrimSuffix(filepath.Base(f), ".json"), fr))
	}
	withBaselines(runs)
	sum := Summarize(runs)
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	Markdown(f, sum)
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	Markdown(os.Stdout, sum)
}

// Score scores one run's result.
func Score(id string, fr demo.FaultResult) Run {
	f, _ := mesh.ParseFault(fr.Injected)
	r := Run{ID: id, Fault: fr.Injected, Class: f.Name, Service: fr.Service, Language: fr.Language, Rate: fr.Load.Rate,
		Expected: fr.ExpectedCause, Incidents: fr.Incidents, Incident: fr.Incident != nil, VerdictMs: -1, OpenedMs: -1, Error: fr.Error,
		P95Ms: fr.Load.P95Ms}
	if fr.Baseline != nil && fr.Baseline.P95Ms > 0 && r.P95Ms > 0 {
		r.BaseP95Ms, r.Effect = fr.Baseline.P95Ms, r.P95Ms/fr.Baseline.P95Ms
	}
	if g := fr.Effect; g != nil {
		r.Measured, r.GrowthMs, r.NoEffect, r.SmallEffect = true, g.Score, fr.NoEffect, fr.SmallEffect
		r.Judged = fr.Correct && fr.CauseCorrect
		if g.EntryBaseMs > 0 {
			r.GrowthPct = 100 * g.Score / g.EntryBaseMs
		}
	}
	if f.Name == mesh.FaultNone {
		r.FreeSeconds = fr.To.Sub(fr.Onset).Seconds()
		if fr.Incident != nil && fr.Incident.Verdict != nil {
			r.GotService, r.GotCause = fr.Incident.Verdict.Service, fr.Incident.Verdict.Cause
		}
		r.Incidents, r.NodeIncidents = fr.OpenDuring, fr.NodeVerdicts
		if fr.OpenDuring > 0 {
			r.Why = append(r.Why, fmt.Sprintf("%d incidents open with nothing injected (%d opened during the stretch, the others before it)", fr.OpenDuring, fr.Incidents))
			if fr.Incident != nil && fr.Incident.Verdict != nil {
				r.Why = append(r.Why, fmt.Sprintf("verdict %s/%s; load p50 %.1f ms, p99 %.1f ms", r.GotService, r.GotCause, fr.Load.P50Ms, fr.Load.P99Ms))
			}
		}
		return r
	}
	if fr.Incident != nil && fr.Incident.Verdict != nil {
		r.GotService, r.GotCause = fr.Verdict.Service, fr.Verdict.Cause
	}
	if fr.Incident != nil && !fr.Onset.IsZero() && fr.Incident.Opened < fr.Onset.UnixNano() {
		r.Preexisting = true
		r.Why = append(r.Why, fmt.Sprintf("the incident read (%s) opened %.0f s before the onset: the fault merged into a slowdown already going on",
			fr.Incident.ID, float64(fr.Onset.UnixNano()-fr.Incident.Opened)/1e9))
	}
	r.ServiceRight = r.Incident && r.GotService == fr.Service
	r.CauseRight = r.Incident && r.Expected != "" && r.GotCause == r.Expected
	if r.Incident && !r.Preexisting && !fr.Onset.IsZero() {
		r.OpenedMs = (fr.Incident.Opened - fr.Onset.UnixNano()) / 1e6
	}
	if r.Incident {
		for _, at := range fr.Timeline {
			if at.Service == r.GotService && at.Cause == r.GotCause && at.Service != "" {
				r.VerdictMs = at.AfterMs
				break
			}
		}
	}
	switch {
	case !r.Incident:
		r.Why = append(r.Why, fmt.Sprintf("no incident opened (load p50 %.1f ms, p99 %.1f ms; %d anomalous spans, %v by service)",
			fr.Load.P50Ms, fr.Load.P99Ms, fr.Anomalies, fr.ByService))
		switch {
		case r.NoEffect:
			r.Why = append(r.Why, fmt.Sprintf("the fault took no effect at %s (%+.1f ms per request, %.1f %% of the entry's median): right as the demo judges, nothing to find", r.Service, r.GrowthMs, r.GrowthPct))
		case r.SmallEffect:
			r.Why = append(r.Why, fmt.Sprintf("the fault took a small effect at %s (%+.1f ms per request, %.1f %% of the entry's median), under what an incident is built for: right as the demo judges", r.Service, r.GrowthMs, r.GrowthPct))
		}
	case !r.ServiceRight || !r.CauseRight:
		v := fr.Verdict
		r.Why = append(r.Why, fmt.Sprintf("verdict %s/%s (confidence %.2f, %d of %d slow spans with a kernel path, waits %v)",
			v.Service, v.Cause, v.Confidence, v.PathSpans, v.SlowSpans, v.Waits))
		for i, sc := range v.Ranking {
			if i == 3 {
				break
			}
			r.Why = append(r.Why, fmt.Sprintf("ranked %s: +%.1f ms own, +%.1f ms network, +%.1f ms run queue per trace", sc.Service, sc.SelfDeltaMs, sc.NetDeltaMs, sc.LocalDeltaMs))
		}
		for _, m := range v.Missing {
			r.Why = append(r.Why, "missing: "+m)
		}
	}
	return r
}

// withBaselines gives the runs whose result has no baseline of its own
// (results written before the demo kept it) the p95 of the fault-free run
// at the same rate as theirs.
func withBaselines(runs []Run) {
	free := map[float64]float64{}
	for _, r := range runs {
		if r.Class == mesh.FaultNone && r.P95Ms > 0 {
			free[r.Rate] = r.P95Ms
		}
	}
	for i := range runs {
		r := &runs[i]
		if b := free[r.Rate]; r.Class != mesh.FaultNone && r.BaseP95Ms == 0 && b > 0 && r.P95Ms > 0 {
			r.BaseP95Ms, r.Effect = b, r.P95Ms/b
		}
	}
}

// Summarize totals the runs.
func Summarize(runs []Run) Summary {
	slices.SortFunc(runs, func(a, b Run) int { return cmp.Compare(a.ID, b.ID) })
	s := Summary{Runs: runs, Confusion: map[string]map[string]int{}}
	var times, opened []int64
	for _, r := range runs {
		if r.Class == mesh.FaultNone {
			s.FreeRuns++
			s.FreeMinutes += r.FreeSeconds / 60
			s.FreeIncidents += r.Incidents
			s.FreeNode += r.NodeIncidents
			continue
		}
		if s.add(r) && r.VerdictMs >= 0 {
			times = append(times, r.VerdictMs)
			if r.VerdictMs <= 10000 {
				s.VerdictsIn10s++
			}
			if r.OpenedMs >= 0 {
				opened = append(opened, r.OpenedMs)
			}
		}
		took, known := r.Effect >= minEffect, r.Effect > 0
		if r.Measured {
			took, known = !r.NoEffect && !r.SmallEffect, true
		}
		switch {
		case took:
			s.Effective.add(r)
		case known:
			s.Small++
			if r.Incident && r.ServiceRight && r.CauseRight {
				s.SmallRight++
			}
			if !r.Incident {
				s.SmallQuiet++
			}
		}
		if r.Measured {
			s.Measured++
			if r.Judged {
				s.JudgedRight++
			}
			if r.NoEffect {
				s.NoEffect++
			} else if r.SmallEffect {
				s.SmallEffect++
			}
		}
		got := r.GotCause
		if !r.Incident {
			got = noIncident
		}
		exp := cmp.Or(r.Expected, "(none measurable)")
		if s.Confusion[exp] == nil {
			s.Confusion[exp] = map[string]int{}
		}
		s.Confusion[exp][got]++
	}
	s.TimedRuns = len(times)
	if len(times) > 0 {
		slices.Sort(times)
		s.MedianVerdictMs = times[len(times)/2]
		s.MaxVerdictMs = times[len(times)-1]
	}
	if len(opened) > 0 {
		slices.Sort(opened)
		s.MedianOpenedMs = opened[len(opened)/2]
	}
	return s
}

func pct(n, of int) string {
	if of == 0 {
		return "–"
	}
	return fmt.Sprintf("%d/%d (%.0f %%)", n, of, 100*float64(n)/float64(of))
}

// Markdown renders the summary.
func Markdown(w io.Writer, s Summary) {
	fmt.Fprintf(w, "## Diagnosis accuracy: %d fault runs, %d fault-free runs (%.1f min)\n\n", s.Faulty, s.FreeRuns, s.FreeMinutes)
	fmt.Fprintf(w, "| measure | result |\n|---|---|\n")
	fmt.Fprintf(w, "| service top-1 | %s |\n", pct(s.ServiceRight, s.Faulty))
	fmt.Fprintf(w, "| cause top-1 | %s |\n", pct(s.CauseRight, s.Faulty))
	fmt.Fprintf(w, "| service and cause | %s |\n", pct(s.BothRight, s.Faulty))
	if s.TimedRuns > 0 {
		fmt.Fprintf(w, "| onset → verdict (both right), median / max | %s / %s (%d runs) |\n",
			time.Duration(s.MedianVerdictMs)*time.Millisecond, time.Duration(s.MaxVerdictMs)*time.Millisecond, s.TimedRuns)
		fmt.Fprintf(w, "| of those, within 10 s of the onset; onset → incident opened, median | %s; %s |\n",
			pct(s.VerdictsIn10s, s.TimedRuns), time.Duration(s.MedianOpenedMs)*time.Millisecond)
	} else {
		fmt.Fprintf(w, "| onset → verdict (both right), median / max | – (no right verdict came from an incident that opened after its onset) |\n")
	}
	fmt.Fprintf(w, "| incidents in fault-free runs | %d in %.1f min (%d with the node's verdict: its CPUs stolen by the host) |\n", s.FreeIncidents, s.FreeMinutes, s.FreeNode)
	fmt.Fprintf(w, "| of the runs whose fault took effect (its service's time per request grew by ≥ %.0f %% of the entry's median; without that measure, the entry's p95 by ≥ %.0f %%): service, cause, both | %s, %s, %s |\n",
		100*demo.MinIncident, 100*(minEffect-1), pct(s.Effective.ServiceRight, s.Effective.Faulty), pct(s.Effective.CauseRight, s.Effective.Faulty), pct(s.Effective.BothRight, s.Effective.Faulty))
	fmt.Fprintf(w, "| runs whose fault slowed it less (too small to be an incident): without an incident; with a right verdict | %d of %d; %d |\n", s.SmallQuiet, s.Small, s.SmallRight)
	if s.Measured > 0 {
		fmt.Fprintf(w, "| of those, no effect at the service (< %.0f %% of the entry's median) / a small one (< %.0f %%) | %d / %d |\n",
			100*demo.MinEffect, 100*demo.MinIncident, s.NoEffect, s.SmallEffect)
		fmt.Fprintf(w, "| service and cause as the demo judges (a fault without effect, or with less than an incident is built for, right when no incident opened) | %s |\n",
			pct(s.JudgedRight, s.Measured))
	}
	fmt.Fprintln(w)

	// By class and by language.
	for _, by := range []struct {
		name string
		key  func(Run) string
	}{{"fault class", func(r Run) string { return r.Class }}, {"language", func(r Run) string { return r.Language }}} {
		m := map[string]*Tally{}
		var keys []string
		for _, r := range s.Runs {
			if r.Class == mesh.FaultNone {
				continue
			}
			k := by.key(r)
			if m[k] == nil {
				m[k] = &Tally{}
				keys = append(keys, k)
			}
			m[k].add(r)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "| %s | runs | service | cause | both |\n|---|---|---|---|---|\n", by.name)
		for _, k := range keys {
			a := m[k]
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", k, a.Faulty, a.ServiceRight, a.CauseRight, a.BothRight)
		}
		fmt.Fprintln(w)
	}

	// The confusion matrix: expected cause (rows) × the verdict's cause.
	cols := append(slices.Clone(diagnosis.Causes), noIncident)
	var rows []string
	for k := range s.Confusion {
		rows = append(rows, k)
	}
	slices.Sort(rows)
	used := map[string]bool{}
	for _, r := range rows {
		for c := range s.Confusion[r] {
			used[c] = true
		}
	}
	cols = slices.DeleteFunc(cols, func(c string) bool { return !used[c] })
	fmt.Fprintf(w, "Confusion matrix (rows: the injected fault's cause; columns: the verdict's cause):\n\n| expected \\ verdict | %s |\n|---|%s\n",
		strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, r := range rows {
		var cells []string
		for _, c := range cols {
			cells = append(cells, fmt.Sprint(s.Confusion[r][c]))
		}
		fmt.Fprintf(w, "| %s | %s |\n", r, strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "| run | rate | p95 vs baseline; growth at the service | verdict | service | cause | onset → verdict |\n|---|---|---|---|---|---|---|\n")
	for _, r := range s.Runs {
		verdict := noIncident
		if r.Incident {
			verdict = r.GotService + " / " + r.GotCause
		}
		if r.Class == mesh.FaultNone {
			fmt.Fprintf(w, "| %s | %.0f/s | %.1f ms | %d incidents in %.0f s | | | |\n", r.ID, r.Rate, r.P95Ms, r.Incidents, r.FreeSeconds)
			continue
		}
		t := "–"
		if r.VerdictMs >= 0 {
			t = (time.Duration(r.VerdictMs) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		effect := "–"
		if r.Effect > 0 {
			effect = fmt.Sprintf("%.1f / %.1f ms (×%.2f)", r.P95Ms, r.BaseP95Ms, r.Effect)
		}
		if r.Measured {
			effect += fmt.Sprintf("; at %s %+.1f ms (%.1f %%)", r.Service, r.GrowthMs, r.GrowthPct)
			switch {
			case r.NoEffect:
				effect += ", no effect"
			case r.SmallEffect:
				effect += ", small"
			}
		}
		fmt.Fprintf(w, "| %s | %.0f/s | %s | %s | %s | %s (want %s) | %s |\n", r.ID, r.Rate, effect, verdict, mark(r.ServiceRight), mark(r.CauseRight), cmp.Or(r.Expected, "—"), t)
	}
	fmt.Fprintln(w)
	wrong := 0
	for _, r := range s.Runs {
		if len(r.Why) == 0 && r.Error == "" {
			continue
		}
		if wrong == 0 {
			fmt.Fprintf(w, "Wrong or failed runs, and why:\n\n")
		}
		wrong++
		fmt.Fprintf(w, "- **%s**", r.ID)
		if r.Error != "" {
			fmt.Fprintf(w, " (error: %s)", r.Error)
		}
		fmt.Fprintln(w)
		for _, l := range r.Why {
			fmt.Fprintf(w, "  - %s\n", l)
		}
	}
}

func mark(ok bool) string {
	if ok {
		return "right"
	}
	return "WRONG"
}
