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
		ids, ok := r.next(ctx)
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
	if _, ok := r.next(ctx); ok {
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
	r.postpone([]string{"old"}, time.Now().Add(-2*time.Minute))
	r.finished(capture.Capture{ID: "1", Artifacts: []string{"a1"}})
	r.finished(capture.Capture{ID: "2", Artifacts: []string{"a2"}})
	r.finished(capture.Capture{ID: "3", Artifacts: []string{"s3"}, Suspect: true})
	if len(r.queue) != 0 || len(r.urgent) != 1 {
		t.Fatalf("no incident: %d captures queued, %d urgent; want 0 and the suspect's", len(r.queue), len(r.urgent))
	}
	<-r.urgent
	active = true
	r.undefer()
	r.finished(capture.Capture{ID: "4", Artifacts: []string{"a4"}})
	var got []string
	for len(r.queue) > 0 {
		got = append(got, <-r.queue...)
	}
	if want := []string{"a2", "a1", "a4"}; !slices.Equal(got, want) {
		t.Fatalf("queued %v, want %v (the deferred newest first, the expired one left, then the new one)", got, want)
	}
	if len(r.deferred) != 0 {
		t.Errorf("%d captures still deferred", len(r.deferred))
	}
	var m dto.Metric
	if err := r.done.WithLabelValues("expired").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("expired %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
}
