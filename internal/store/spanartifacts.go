package store

import (
	"context"
	"errors"
	"slices"

	"github.com/rootline/rootline/internal/model"
)

// SpanArtifactReader is implemented by artifact stores that list the
// artifacts linked to each span of a trace in one read, without the
// artifacts' own links (their Spans is nil). Readers of many traces'
// evidence need it: TraceArtifacts returns every link of every artifact, and
// a capture linked to hundreds of spans, read once per trace of them, makes
// that quadratic.
type SpanArtifactReader interface {
	SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]Artifact, error)
}

// SpanArtifacts lists the artifacts linked to each span of trace id, oldest
// first: in one read where a implements SpanArtifactReader, else grouped from
// TraceArtifacts (whose artifacts keep their links). An unknown trace has
// none: ErrNotFound is not an error here.
func SpanArtifacts(ctx context.Context, a ArtifactStore, id model.TraceID) (map[model.SpanID][]Artifact, error) {
	if r, ok := a.(SpanArtifactReader); ok {
		out, err := r.SpanArtifacts(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return map[model.SpanID][]Artifact{}, nil
		}
		return out, err
	}
	arts, err := a.TraceArtifacts(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return map[model.SpanID][]Artifact{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[model.SpanID][]Artifact{}
	for _, art := range arts {
		for _, ref := range art.Spans {
			if ref.TraceID == id && !slices.ContainsFunc(out[ref.SpanID], func(x Artifact) bool { return x.ID == art.ID }) {
				out[ref.SpanID] = append(out[ref.SpanID], art)
			}
		}
	}
	return out, nil
}
