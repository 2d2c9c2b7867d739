package diagnosis

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// TestReplay: stored spans of a steady entry point open nothing; a shift of
// +110 % opens one incident within ShiftFor and the delay of the onset, by
// the shift rule, which closes once the latency is back.
func TestReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var spans []*model.Span
	add := func(from time.Time, seconds, rate int, median time.Duration) {
		for i := range seconds * rate {
			end := from.Add(time.Duration(i) * time.Second / time.Duration(rate))
			spans = append(spans, checkoutRoot(len(spans), end.UnixNano(), float64(median), rng))
		}
	}
	cfg := DefaultConfig()
	add(t0, 180, 15, 50*time.Millisecond)
	steady := len(spans)
	onset := t0.Add(180 * time.Second)
	add(onset, 30, 15, 105*time.Millisecond)
	add(onset.Add(30*time.Second), 60, 15, 50*time.Millisecond)

	if got, err := Replay(cfg, spans[:steady], time.Second); err != nil || len(got) != 0 {
		t.Fatalf("steady traffic: %d incidents (%v), want none", len(got), err)
	}
	got, err := Replay(cfg, spans, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d incidents, want 1: %+v", len(got), got)
	}
	o := got[0]
	if o.Trigger != TriggerShift || o.State != StateClosed || o.Closed == 0 {
		t.Errorf("incident %+v, want one the shift rule opened, closed", o.Incident)
	}
	t.Logf("opened %v after the onset", o.At.Sub(onset))
	if d := o.At.Sub(onset); d < cfg.ShiftFor || d > cfg.ShiftFor+time.Second+cfg.Window/2+time.Second {
		t.Errorf("opened %v after the onset, want within ShiftFor, the delay and half the window", d)
	}
	if o.At.UnixNano() != o.Opened {
		t.Errorf("At %v, Opened %v: the replay's clock is the incident's", o.At, time.Unix(0, o.Opened))
	}
	if _, err := Replay(Config{}, spans, time.Second); err == nil {
		t.Error("a config that cannot work replayed")
	}
}
