package demo

import (
	"testing"
	"time"

	"github.com/rootline/rootline/internal/diagnosis"
)

// TestFaultIncident: the fault's incident is the one that opened since its
// onset, not a larger one whose slowdown ended before it (the previous
// fault's, closed just before the onset), nor one already open at the
// onset unless no other opened; none when only another's is there.
func TestFaultIncident(t *testing.T) {
	onset := time.Unix(10_000, 0)
	at := func(s float64) int64 { return onset.Add(time.Duration(s * float64(time.Second))).UnixNano() }
	lingering := diagnosis.Incident{ID: "lingering", Opened: at(-110), End: at(-20), Anomalous: 671}
	open := diagnosis.Incident{ID: "open", Opened: at(-30), Anomalous: 500}
	own := diagnosis.Incident{ID: "own", Opened: at(4), Anomalous: 300}
	small := diagnosis.Incident{ID: "small", Opened: at(6), Anomalous: 20}
	for _, c := range []struct {
		name string
		list []diagnosis.Incident
		want string
	}{
		{"its own beside others", []diagnosis.Incident{lingering, open, small, own}, "own"},
		{"merged into one already open", []diagnosis.Incident{lingering, open}, "open"},
		{"only another's", []diagnosis.Incident{lingering}, ""},
	} {
		got := ""
		if inc := faultIncident(c.list, onset); inc != nil {
			got = inc.ID
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
