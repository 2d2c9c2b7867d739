package query

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// fakeStore is an in-memory SpanReader and ArtifactStore. It does not filter
// searches: it records the query so tests check what the API asked for.
type fakeStore struct {
	mu sync.Mutex

	traces    map[model.TraceID][]*model.Span
	found     []model.TraceID // FindTraces answer, in this order
	services  []string
	ops       map[string][]store.Operation
	anomalies []*model.Span // Anomalies answer, in this order
	deps      []store.DependencyLink
	arts      []store.Artifact
	content   map[string][]byte
	// seekable makes OpenArtifact return an io.ReadSeeker.
	seekable bool
	// err, when set, is returned by every call.
	err error

	lastQuery        store.TraceQuery
	lastAnomalyQuery store.AnomalyQuery
	lastDeps         [2]int64
	traceArtCalls    int
}

var (
	_ store.SpanReader    = (*fakeStore)(nil)
	_ store.ArtifactStore = (*fakeStore)(nil)
)

func newFakeStore() *fakeStore {
	return &fakeStore{
		traces:  map[model.TraceID][]*model.Span{},
		ops:     map[string][]store.Operation{},
		content: map[string][]byte{},
	}
}

func (f *fakeStore) addTrace(spans ...*model.Span) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := spans[0].TraceID
	f.traces[id] = append(f.traces[id], spans...)
}

func (f *fakeStore) addArtifact(a store.Artifact, content []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arts = append(f.arts, a)
	f.content[a.ID] = content
}

func (f *fakeStore) GetTrace(_ context.Context, id model.TraceID) ([]*model.Span, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	spans, ok := f.traces[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(spans), nil
}

func (f *fakeStore) FindTraces(_ context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastQuery = q
	if f.err != nil {
		return nil, f.err
	}
	var out [][]*model.Span
	for _, id := range f.found {
		out = append(out, slices.Clone(f.traces[id]))
	}
	return out, nil
}

func (f *fakeStore) FindTraceIDs(_ context.Context, q store.TraceQuery) ([]model.TraceID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastQuery = q
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.found), nil
}

func (f *fakeStore) GetServices(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.services), nil
}

func (f *fakeStore) GetOperations(_ context.Context, service string) ([]store.Operation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.ops[service]), nil
}

func (f *fakeStore) Anomalies(_ context.Context, q store.AnomalyQuery) ([]*model.Span, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastAnomalyQuery = q
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.anomalies), nil
}

func (f *fakeStore) Dependencies(_ context.Context, start, end int64) ([]store.DependencyLink, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastDeps = [2]int64{start, end}
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.deps), nil
}

func (f *fakeStore) PutArtifact(context.Context, store.Artifact, io.Reader) (store.Artifact, error) {
	panic("not used by the query API")
}

func (f *fakeStore) LinkArtifact(context.Context, string, []store.SpanRef) error {
	panic("not used by the query API")
}

func (f *fakeStore) GetArtifact(_ context.Context, id string) (store.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Artifact{}, f.err
	}
	for _, a := range f.arts {
		if a.ID == id {
			return a, nil
		}
	}
	return store.Artifact{}, store.ErrNotFound
}

// plainReader hides bytes.Reader's Seek.
type plainReader struct{ io.Reader }

func (plainReader) Close() error { return nil }

type seekReader struct{ *bytes.Reader }

func (seekReader) Close() error { return nil }

func (f *fakeStore) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	a, err := f.GetArtifact(ctx, id)
	if err != nil {
		return a, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := bytes.NewReader(f.content[id])
	if f.seekable {
		return a, seekReader{r}, nil
	}
	return a, plainReader{r}, nil
}

func (f *fakeStore) TraceArtifacts(_ context.Context, id model.TraceID) ([]store.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.traceArtCalls++
	if f.err != nil {
		return nil, f.err
	}
	var out []store.Artifact
	for _, a := range f.arts {
		if slices.ContainsFunc(a.Spans, func(r store.SpanRef) bool { return r.TraceID == id }) {
			out = append(out, a)
		}
	}
	return out, nil
}
