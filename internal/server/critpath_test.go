package server

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rootline/rootline/internal/capture"
)

// TestCritpathRunnerSuspectsFirst: the captures of suspects are analysed
// before those queued earlier, the others in their order.
func TestCritpathRunnerSuspectsFirst(t *testing.T) {
	r, err := newCritpathRunner(nil, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []capture.Capture{
		{ID: "1", Artifacts: []string{"a1"}},
		{ID: "2", Artifacts: []string{"a2"}},
		{ID: "3", Artifacts: []string{"s3"}, Suspect: true},
		{ID: "4"}, // no artifacts: nothing to analyse
		{ID: "5", Artifacts: []string{"s5", "s5b"}, Suspect: true},
		{ID: "6", Artifacts: []string{"a6"}},
	} {
		r.finished(c)
	}
	var got []string
	ctx, cancel := context.WithCancel(context.Background())
	for range 5 {
		ids, _, ok := r.next(ctx)
		if !ok {
			t.Fatal("next ended early")
		}
		got = append(got, ids...)
	}
	want := []string{"s3", "s5", "s5b", "a1", "a2", "a6"}
	if !slices.Equal(got, want) {
		t.Fatalf("analysed %v, want %v", got, want)
	}
	cancel()
	if _, _, ok := r.next(ctx); ok {
		t.Fatal("next went on after its context ended")
	}
}

// TestCritpathRunnerDefers: while no incident is active, a capture's paths
// wait (a suspect's do not); when one opens, the waiting captures younger
// than keep are queued newest first, older ones forgotten; while one is
// active, captures are queued at once.
func TestCritpathRunnerDefers(t *testing.T) {
	r, err := newCritpathRunner(nil, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	active := false
	r.active, r.keep = func() bool { return active }, time.Minute
	now := time.Now()
	r.postpone([]string{"old"}, now.Add(-2*time.Minute))
	r.postpone([]string{"b1"}, now.Add(-30*time.Second))
	r.postpone([]string{"b2"}, now.Add(-20*time.Second))
	r.finished(capture.Capture{ID: "1", Artifacts: []string{"a1"}})
	r.finished(capture.Capture{ID: "2", Artifacts: []string{"a2"}})
	r.finished(capture.Capture{ID: "3", Artifacts: []string{"s3"}, Suspect: true})
	if len(r.queue) != 0 || len(r.urgent) != 1 {
		t.Fatalf("no incident: %d captures queued, %d urgent; want 0 and the suspect's", len(r.queue), len(r.urgent))
	}
	<-r.urgent
	active = true
	// The incident started 10 s ago: a1 and a2 are its own, b1 and b2
	// its baseline.
	r.undefer(now.Add(-10 * time.Second).UnixNano())
	r.finished(capture.Capture{ID: "4", Artifacts: []string{"a4"}})
	drain := func(q chan []string) (got []string) {
		for len(q) > 0 {
			got = append(got, <-q...)
		}
		return got
	}
	if got, want := drain(r.queue), []string{"a2", "a1", "a4"}; !slices.Equal(got, want) {
		t.Fatalf("queued %v, want %v (the incident's deferred newest first, then the new one)", got, want)
	}
	if got, want := drain(r.backlog), []string{"b2", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("backlog %v, want %v (the baseline newest first, the expired one left)", got, want)
	}
	if len(r.deferred) != 0 {
		t.Errorf("%d captures still deferred", len(r.deferred))
	}
	var m dto.Metric
	if err := r.done.WithLabelValues("expired").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("expired %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}

// TestCritpathRunnerPacesBacklog: the backlog goes after the queue and a
// suspect's captures, and not before readyAt; a capture queued meanwhile
// goes at once.
func TestCritpathRunnerPacesBacklog(t *testing.T) {
	r, err := newCritpathRunner(nil, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.backlog <- []string{"b1"}
	r.backlog <- []string{"b2"}
	r.queue <- []string{"q1"}
	r.urgent <- []string{"s1"}
	for _, want := range []struct {
		id    string
		paced bool
	}{{"s1", false}, {"q1", false}, {"b1", true}} {
		ids, paced, ok := r.next(ctx)
		if !ok || len(ids) != 1 || ids[0] != want.id || paced != want.paced {
			t.Fatalf("next: %v paced %v (ok %v), want %s paced %v", ids, paced, ok, want.id, want.paced)
		}
	}
	// As run does after a backlog capture that took 200 ms.
	r.readyAt = time.Now().Add(200 * time.Millisecond)
	go func() {
		time.Sleep(20 * time.Millisecond)
		r.queue <- []string{"q2"}
	}()
	if ids, paced, _ := r.next(ctx); len(ids) != 1 || ids[0] != "q2" || paced {
		t.Fatalf("while the backlog waits: %v paced %v, want q2 at once", ids, paced)
	}
	ids, paced, _ := r.next(ctx)
	if len(ids) != 1 || ids[0] != "b2" || !paced {
		t.Fatalf("next: %v paced %v, want b2 paced", ids, paced)
	}
	if early := time.Until(r.readyAt); early > 0 {
		t.Fatalf("the backlog went %v before readyAt", early)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, ok := r.next(cctx); ok {
		t.Fatal("next went on after its context ended")
	}
}
