package diagnosis

import "sort"

// Suspects returns the services the incidents still gathering evidence
// (open, or closed within EvidenceWait) rank most suspect: of each, its
// verdict's culprit and then its ranking (own-time growth over the
// baseline, measured; the services whose time grew), at most n per incident; incidents with more
// anomalous requests first. Incidents without a verdict yet add nothing.
// The capture manager keeps a share of its budget for them
// (capture.Config.SuspectShare).
func (t *Tracker) Suspects(n int) []string {
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
	var out []string
	seen := map[string]bool{}
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
			if svc == "" || seen[svc] {
				continue
			}
			seen[svc] = true
			out = append(out, svc)
			k++
		}
	}
	return out
}
