package server

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
