package diagnosis

import (
	"cmp"
	"slices"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// Opened is an incident as a replay saw it open (and close).
type Opened struct {
	Incident
	// At is the replay's clock when it opened: when a live tracker given
	// the same spans with the same delay would have opened it.
	At time.Time `json:"at"`
}

// Replay applies the open/close rule of cfg to stored spans as if each had
// arrived delay after it ended (a sender's batching), stepping the rule once
// a second as the live tracker does, and returns the incidents it opened in
// order, each with its end once it closed. No verdict is computed. It is how
// a change of the rule (or of its settings) is measured against spans a
// server already stored: how soon it opens on a fault, whether it opens on a
// stretch where nothing was injected. The spans' anomaly flags are the
// detector's as stored.
func Replay(cfg Config, spans []*model.Span, delay time.Duration) ([]Opened, error) {
	if len(spans) == 0 {
		return nil, cfg.Validate()
	}
	t, err := NewTracker(cfg, nil, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	var clock time.Time
	t.now = func() time.Time { return clock }
	order := slices.Clone(spans)
	slices.SortStableFunc(order, func(a, b *model.Span) int { return cmp.Compare(a.End(), b.End()) })
	var out []Opened
	index := map[string]int{}
	first := time.Unix(0, order[0].End()+int64(delay)).Truncate(time.Second)
	last := time.Unix(0, order[len(order)-1].End()+int64(delay))
	i := 0
	// One step a second, and Quiet past the last span so open incidents
	// may close.
	for sec := first; !sec.After(last.Add(cfg.Quiet + cfg.Window)); sec = sec.Add(time.Second) {
		clock = sec
		j := i
		for j < len(order) && order[j].End()+int64(delay) < sec.Add(time.Second).UnixNano() {
			j++
		}
		if j > i {
			t.OnCommitted(order[i:j])
			i = j
		}
		clock = sec.Add(time.Second - time.Nanosecond)
		for _, inc := range t.step(clock) {
			if k, ok := index[inc.ID]; ok {
				at := out[k].At
				out[k] = Opened{Incident: inc, At: at}
				continue
			}
			index[inc.ID] = len(out)
			out = append(out, Opened{Incident: inc, At: clock})
		}
	}
	return out, nil
}
