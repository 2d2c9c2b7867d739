package diagnosis

import (
	"sort"
	"time"
)

// Suspects returns the services the incidents still gathering evidence
// (open, or closed within EvidenceWait) rank most suspect: of each, its
// verdict's culprit and then its ranking (own-time growth over the
// baseline, measured; the services whose time grew), at most n per incident; incidents with more
// anomalous requests first. Incidents without a verdict yet add nothing.
// The capture manager keeps a share of its budget for them
// (capture.Config.SuspectShare), and captures of a culprit whose verdict
// has none of its kernel paths go as if asked for.
func (t *Tracker) Suspects(n int) []Suspect {
	t.mu.Lock()
	incs := make([]Incident, 0, len(t.open)+len(t.settled))
	for _, tr := range t.open {
		incs = append(incs, tr.inc)
	}
	for _, tr := range t.settled {
		incs = append(incs, tr.inc)
	}
	t.mu.Unlock()
	sort.Slice(incs, func(i, j int) bool {
		if incs[i].Anomalous != incs[j].Anomalous {
			return incs[i].Anomalous > incs[j].Anomalous
		}
		return incs[i].ID < incs[j].ID
	})
	var out []Suspect
	seen := map[string]int{}
	for _, inc := range incs {
		v := inc.Verdict
		if v == nil {
			continue
		}
		cand := make([]string, 0, 1+len(v.Ranking))
		if v.Service != "" {
			cand = append(cand, v.Service)
		}
		for _, r := range v.Ranking {
			// A service whose time did not grow is no suspect (all of
			// the ranking, before a culprit is named): a capture of it
			// would take a slot the culprit needs.
			if r.Score > 0 {
				cand = append(cand, r.Service)
			}
		}
		k := 0
		for _, svc := range cand {
			if k == n {
				break
			}
			if svc == "" {
				continue
			}
			since := time.Unix(0, inc.Start)
			wanting := svc == v.Service && (v.PathSpans == 0 || v.Cause == CauseUnknown)
			if i, ok := seen[svc]; ok {
				// Named by an earlier incident too: the newest start,
				// and wanted by either.
				out[i].Since = time.Unix(0, max(out[i].Since.UnixNano(), inc.Start))
				out[i].Wanting = out[i].Wanting || wanting
				continue
			}
			seen[svc] = len(out)
			out = append(out, Suspect{Service: svc, Since: since, Wanting: wanting})
			k++
		}
	}
	return out
}

// Suspect is a service Suspects names.
type Suspect struct {
	Service string
	// Since is the start of the newest incident that names it.
	Since time.Time
	// Wanting: an incident's verdict names it culprit and has no kernel
	// critical path of its slow spans (or no cause) yet.
	Wanting bool
}
