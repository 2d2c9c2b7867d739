package critmetrics

import (
	"fmt"
	"io"
	"strings"
)

// WriteSummary prints the report for people: per service and sidecar the
// clusters, the metric kept for each and why, and the KS tests.
func (r *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "CriticalMetrics over %s … %s: %d intervals of %s\n", r.From.Format("2006-01-02 15:04:05"),
		r.To.Format("15:04:05"), r.Intervals, r.Step)
	fmt.Fprintf(w, "clusters: k-Shape, 10+ starts; number chosen by %s\n", r.Criterion)
	for _, s := range r.Services {
		fmt.Fprintf(w, "\n%s\n", s.Name)
		if s.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", s.Error)
		}
		for _, g := range []*Group{s.App, s.Sidecar} {
			if g == nil {
				continue
			}
			fmt.Fprintf(w, "  %s (%s): %d clusters", g.Role, strings.Join(g.Containers, ", "), g.K)
			if len(g.Choices) > 0 {
				var cs []string
				for _, c := range g.Choices {
					cs = append(cs, fmt.Sprintf("k=%d %.2f", c.K, c.Silhouette))
				}
				fmt.Fprintf(w, " (silhouette %s)", strings.Join(cs, ", "))
			}
			fmt.Fprintln(w)
			cost := map[string]MetricInfo{}
			for _, m := range g.Metrics {
				cost[m.Metric] = m
			}
			for i, c := range g.Clusters {
				var mem []string
				for _, m := range c.Members {
					mem = append(mem, fmt.Sprintf("%s %.2f", m.Metric, m.SBD))
				}
				rep := cost[c.Representative]
				fmt.Fprintf(w, "    cluster %d: keep %-16s %9.1f ev/s %8.1f µs/s BPF   members (SBD to centroid): %s\n",
					i+1, c.Representative, rep.EventsPerSecond, rep.CostNsPerSecond/1e3, strings.Join(mem, ", "))
			}
			if len(g.Flat) > 0 {
				fmt.Fprintf(w, "    no shape (constant or no events): %s\n", strings.Join(g.Flat, ", "))
			}
			fmt.Fprintf(w, "    critical: %s\n", strings.Join(g.Critical, ", "))
			fmt.Fprintf(w, "    estimated BPF cost (cost table × recorded events): all %.1f µs/s, critical only %.1f µs/s\n",
				g.CostAllNsPerSecond/1e3, g.CostCriticalNsPerSecond/1e3)
		}
		if len(s.KS) > 0 {
			fmt.Fprintf(w, "  KS service vs sidecar:")
			for _, k := range s.KS {
				mark := "same"
				if k.Different {
					mark = "DIFFERENT"
				}
				fmt.Fprintf(w, " %s D=%.2f p=%.2g %s;", k.Metric, k.D, k.P, mark)
			}
			fmt.Fprintln(w)
		}
		if s.KSNote != "" {
			fmt.Fprintf(w, "  KS: %s\n", s.KSNote)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "\nagent config: %d requests (PUT /api/v1/kmetrics/config); --json prints them, --apply sends them\n", len(r.AgentConfig))
	if a := r.Apply; a != nil {
		fmt.Fprintf(w, "applied: %d of %d requests accepted", a.Applied, len(r.AgentConfig))
		for _, ag := range a.Agents {
			fmt.Fprintf(w, "; %s took %d", ag.Agent, ag.Accepted)
		}
		fmt.Fprintln(w)
		for _, rf := range a.Refused {
			fmt.Fprintf(w, "  refused for %s: %s\n", rf.Container, strings.Join(rf.Errors, "; "))
		}
		if a.Before != nil && a.After != nil {
			fmt.Fprintf(w, "kernel metrics' BPF cost on this host (%d km_* programs, %s each): before %.1f µs/s (%.0f runs/s, %.0f ns/run), after %.1f µs/s (%.0f runs/s, %.0f ns/run)\n",
				a.After.Programs, a.Before.Window, a.Before.NsPerSecond/1e3, a.Before.RunsPerSecond, a.Before.NsPerRun,
				a.After.NsPerSecond/1e3, a.After.RunsPerSecond, a.After.NsPerRun)
		}
		if a.OverheadNote != "" {
			fmt.Fprintf(w, "overhead %s\n", a.OverheadNote)
		}
	}
}
