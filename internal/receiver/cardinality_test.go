package receiver

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
)

func newTestCardinality(cfg CardinalityConfig) (*cardinality, *time.Time) {
	now := time.Unix(1_700_000_000, 0)
	overflow := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"kind"})
	return newCardinality(cfg, func() time.Time { return now }, nil, overflow), &now
}

func spansOf(pairs ...string) []*model.Span {
	var out []*model.Span
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &model.Span{Service: pairs[i], Name: pairs[i+1]})
	}
	return out
}

func names(spans []*model.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Service+"/"+s.Name)
	}
	return out
}

func TestCardinality(t *testing.T) {
	t.Run("new services per minute", func(t *testing.T) {
		c, now := newTestCardinality(CardinalityConfig{MaxNewServicesPerMinute: 2})
		c.logger = discardLogger()
		spans := spansOf("a", "op", "b", "op", "c", "op", "a", "op")
		c.apply(spans)
		if got := fmt.Sprint(names(spans)); got != "[a/op b/op rootline-overflow/op a/op]" {
			t.Fatalf("got %s", got)
		}
		if v := attr(t, spans[2].Attributes, AttrOverflowService); v.Str != "c" {
			t.Errorf("overflow keeps %q", v.Str)
		}
		*now = now.Add(time.Minute)
		spans = spansOf("c", "op")
		c.apply(spans)
		if spans[0].Service != "c" {
			t.Errorf("a minute later c is still overflow: %s", names(spans))
		}
	})
	t.Run("max services, seeded ones included", func(t *testing.T) {
		c, _ := newTestCardinality(CardinalityConfig{MaxServices: 3})
		c.logger = discardLogger()
		c.seedServices([]string{"old1", "old2"})
		spans := spansOf("old1", "x", "new1", "x", "new2", "x")
		c.apply(spans)
		if got := fmt.Sprint(names(spans)); got != "[old1/x new1/x rootline-overflow/x]" {
			t.Fatalf("got %s", got)
		}
	})
	t.Run("operations per service and in all", func(t *testing.T) {
		c, _ := newTestCardinality(CardinalityConfig{MaxOperationsPerService: 2, MaxOperations: 3})
		c.logger = discardLogger()
		spans := spansOf("a", "1", "a", "2", "a", "3", "a", "1", "b", "1", "b", "2")
		c.apply(spans)
		if got := fmt.Sprint(names(spans)); got != "[a/1 a/2 a/rootline-overflow a/1 b/1 b/rootline-overflow]" {
			t.Fatalf("got %s", got)
		}
		if v := attr(t, spans[2].Attributes, AttrOverflowOperation); v.Str != "3" {
			t.Errorf("overflow keeps %q", v.Str)
		}
	})
	t.Run("forgotten after a quiet day", func(t *testing.T) {
		c, now := newTestCardinality(CardinalityConfig{MaxServices: 1, ForgetAfter: time.Hour})
		c.logger = discardLogger()
		c.apply(spansOf("a", "op"))
		spans := spansOf("b", "op")
		c.apply(spans)
		if spans[0].Service != OverflowService {
			t.Fatalf("b got in past the cap: %s", names(spans))
		}
		*now = now.Add(2 * time.Hour)
		spans = spansOf("b", "op")
		c.apply(spans)
		if spans[0].Service != "b" {
			t.Errorf("a was not forgotten: %s", names(spans))
		}
		if c.operations != 1 || len(c.services) != 1 {
			t.Errorf("tracked %d services, %d operations after the sweep", len(c.services), c.operations)
		}
	})
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
