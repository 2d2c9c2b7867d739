package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// MemArtifacts is an in-memory store.ArtifactStore for unit tests of the code
// above the store (the capture server, the agent). It keeps artifacts in
// insertion order with ids a1, a2, …; it is not a backend and does not run the
// conformance suite.
type MemArtifacts struct {
	mu   sync.Mutex
	arts []store.Artifact
	data map[string][]byte
}

var _ store.ArtifactStore = (*MemArtifacts)(nil)

// PutArtifact implements store.ArtifactStore.
func (m *MemArtifacts) PutArtifact(_ context.Context, meta store.Artifact, r io.Reader) (store.Artifact, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return store.Artifact{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	meta.ID = fmt.Sprintf("a%d", len(m.arts)+1)
	meta.Size = int64(len(b))
	meta.Spans = append([]store.SpanRef(nil), meta.Spans...)
	m.arts = append(m.arts, meta)
	if m.data == nil {
		m.data = map[string][]byte{}
	}
	m.data[meta.ID] = b
	return meta, nil
}

// LinkArtifact implements store.ArtifactStore.
func (m *MemArtifacts) LinkArtifact(_ context.Context, id string, spans []store.SpanRef) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.arts {
		if m.arts[i].ID == id {
			m.arts[i].Spans = append(m.arts[i].Spans, spans...)
			return nil
		}
	}
	return store.ErrNotFound
}

// GetArtifact implements store.ArtifactStore.
func (m *MemArtifacts) GetArtifact(_ context.Context, id string) (store.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.arts {
		if a.ID == id {
			return a, nil
		}
	}
	return store.Artifact{}, store.ErrNotFound
}

// OpenArtifact implements store.ArtifactStore.
func (m *MemArtifacts) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	a, err := m.GetArtifact(ctx, id)
	if err != nil {
		return a, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return a, io.NopCloser(bytes.NewReader(m.data[id])), nil
}

// TraceArtifacts implements store.ArtifactStore.
func (m *MemArtifacts) TraceArtifacts(_ context.Context, id model.TraceID) ([]store.Artifact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Artifact
	for _, a := range m.arts {
		for _, s := range a.Spans {
			if s.TraceID == id {
				out = append(out, a)
				break
			}
		}
	}
	return out, nil
}

// All returns every artifact in insertion order.
func (m *MemArtifacts) All() []store.Artifact {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.Artifact(nil), m.arts...)
}
