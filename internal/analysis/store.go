package analysis

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// StoreSource reads a diagnosis's inputs from a store directly: what runs
// inside the server, or offline on its data directory.
type StoreSource struct {
	Spans store.SpanReader
	// Artifacts may be nil: then no anomaly has artifacts.
	Artifacts store.ArtifactStore
	// CaptureLog returns up to limit entries of the capture log, newest
	// first; nil where there is none.
	CaptureLog func(ctx context.Context, limit int) ([]Capture, error)
}

var _ Source = (*StoreSource)(nil)

// Anomalies implements Source. The artifacts are looked up once per trace,
// in one read per trace where the store can (store.SpanArtifacts).
func (s *StoreSource) Anomalies(ctx context.Context, since time.Time, limit int) ([]Anomaly, error) {
	spans, err := s.Spans.Anomalies(ctx, store.AnomalyQuery{Since: since.UnixNano(), Limit: limit})
	if err != nil {
		return nil, err
	}
	byTrace := map[model.TraceID]map[model.SpanID][]store.Artifact{}
	out := make([]Anomaly, 0, len(spans))
	for _, sp := range spans {
		if sp == nil {
			continue
		}
		arts, ok := byTrace[sp.TraceID]
		if !ok && s.Artifacts != nil {
			if arts, err = store.SpanArtifacts(ctx, s.Artifacts, sp.TraceID); err != nil {
				return nil, err
			}
			byTrace[sp.TraceID] = arts
		}
		out = append(out, Anomaly{Span: sp, Artifacts: arts[sp.SpanID]})
	}
	return out, nil
}

// Trace implements Source.
func (s *StoreSource) Trace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	spans, err := s.Spans.GetTrace(ctx, id)
	if err == nil && len(spans) == 0 {
		err = fmt.Errorf("trace %s: %w", id, store.ErrNotFound)
	}
	return spans, err
}

// Services implements Source.
func (s *StoreSource) Services(ctx context.Context) ([]string, error) {
	return s.Spans.GetServices(ctx)
}

// SearchTraces implements Source.
func (s *StoreSource) SearchTraces(ctx context.Context, service string, from, to time.Time, limit int) ([][]*model.Span, error) {
	return s.Spans.FindTraces(ctx, store.TraceQuery{Service: service, StartMin: from.UnixNano(), StartMax: to.UnixNano(), Limit: limit})
}

// Captures implements Source.
func (s *StoreSource) Captures(ctx context.Context, limit int) ([]Capture, error) {
	if s.CaptureLog == nil {
		return nil, nil
	}
	return s.CaptureLog(ctx, limit)
}

// ArtifactContent implements Source.
func (s *StoreSource) ArtifactContent(ctx context.Context, id string) (io.ReadCloser, error) {
	if s.Artifacts == nil {
		return nil, fmt.Errorf("artifact %s: %w", id, store.ErrNotFound)
	}
	_, rc, err := s.Artifacts.OpenArtifact(ctx, id)
	return rc, err
}
