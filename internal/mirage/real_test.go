package mirage

import (
	"testing"
	"time"

	"github.com/rootline/rootline/internal/mirage/miragetest"
	"github.com/rootline/rootline/internal/model"
)

func loadSpans(t *testing.T, name string) []*model.Span {
	t.Helper()
	spans, err := miragetest.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return spans
}

// Spans `rootline run` made for 25 requests through front → mid → leaf with
// the leaf's CPU quota cut to 5% of a CPU (test/mirage_test.go, as the
// server stored them): the leaf acts on its CPU, mid and front delegate down
// the chain, per request and over the window; the same spans without the
// wait attributes of the CLIENT spans and the callers' SERVER spans (as an
// SDK would report them, with only the leaf under `rootline run`) give the
// same decisions from the spans' times.
func TestRealChainCPU(t *testing.T) {
	spans := loadSpans(t, "testdata/chain-cpu.json")
	hops := Hops(spans)
	if len(hops) != 75 {
		t.Fatalf("%d hops, want 75 (25 requests × 3 services)", len(hops))
	}
	want := map[string]Decision{
		"m-leaf":  {Cause: CauseLocal},
		"m-mid":   {Cause: CauseRemote, Peer: "127.0.0.1:45243"},
		"m-front": {Cause: CauseRemote, Peer: "127.0.0.1:34095"},
	}
	perHop := map[string]int{}
	for i := range hops {
		h := &hops[i]
		if d := (Config{}).Decide(h); d.Cause == want[h.Service].Cause && d.Peer == want[h.Service].Peer {
			perHop[h.Service]++
		}
	}
	for svc, n := range perHop {
		// Single requests may be noise; the window decides on means.
		if n < 20 {
			t.Errorf("%s: %d of 25 requests decided %v", svc, n, want[svc])
		}
	}

	stripped := make([]*model.Span, 0, len(spans))
	for _, s := range spans {
		s := *s
		if s.Service != "m-leaf" {
			var keep []model.KeyValue
			for _, kv := range s.Attributes {
				switch kv.Key {
				case model.AttrWaitLocalMs, model.AttrWaitNetMs, model.AttrWaitRemoteMs:
				default:
					keep = append(keep, kv)
				}
			}
			s.Attributes = keep
		}
		stripped = append(stripped, &s)
	}
	for _, tc := range []struct {
		name  string
		spans []*model.Span
	}{{"rootline run", spans}, {"derived", stripped}} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWindow(Config{}, time.Minute)
			now := time.Unix(0, tc.spans[len(tc.spans)-1].Start)
			for _, h := range Hops(tc.spans) {
				w.Add(&h, now)
			}
			for svc, d := range want {
				got := w.Summary(svc, now)
				if got.Hops != 25 || got.Decision.Cause != d.Cause || got.Decision.Peer != d.Peer {
					t.Errorf("%s: %d hops, decision %s %q (%s), want %s %q", svc, got.Hops, got.Decision.Cause, got.Decision.Peer, got.Decision.Reason, d.Cause, d.Peer)
				}
			}
			leaf := w.Summary("m-leaf", now).Decision
			// Most of the leaf's own time is CPU wait (it spins 8 ms per
			// request and waits for its quota's next period).
			if share := float64(leaf.Wait) / float64(leaf.Self); share < 0.8 {
				t.Errorf("leaf local wait %s is %.2f of its own time %s", leaf.Wait, share, leaf.Self)
			}
		})
	}
}
