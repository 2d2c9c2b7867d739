package diagnosis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// maxStoredArtifacts bounds the "critical-path" artifacts one verdict reads
// beyond the sampled traces, and maxStoredBytes what one may inflate to: a
// verdict is computed every few seconds.
const (
	maxStoredArtifacts = 8
	maxStoredBytes     = 64 << 20
)

// storedPaths adds to waits what the stored critical paths of the culprit's
// spans that started in [pathFrom, pathTo] say, for traces not in done, up
// to limit traces: the artifacts are those linked to the culprit's anomalies
// (anoms) in [onset, to], newest first; each path's span is read with its
// trace to restrict the path to the span's exclusive time, as measure does.
// It returns the spans and the traces it read, and the first error met (the
// others are like it).
func (d *Diagnoser) storedPaths(ctx context.Context, waits *waitTally, culprit string, anoms []analysis.Anomaly, onset, to, pathFrom, pathTo int64,
	done map[model.TraceID]bool, limit int, read func(model.TraceID)) (spans, traces int, firstErr error) {
	type ref struct {
		id      string
		created int64
	}
	var arts []ref
	seen := map[string]bool{}
	for _, a := range anoms {
		if a.Span == nil || a.Span.Service != culprit || a.Span.Start < onset || a.Span.Start > to {
			continue
		}
		for _, art := range a.Artifacts {
			if art.Kind == critpath.ArtifactKind && !seen[art.ID] {
				seen[art.ID] = true
				arts = append(arts, ref{art.ID, cmp.Or(art.Created, art.End)})
			}
		}
	}
	slices.SortFunc(arts, func(x, y ref) int { return cmp.Compare(y.created, x.created) })
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, art := range arts[:min(len(arts), maxStoredArtifacts)] {
		if traces >= limit || ctx.Err() != nil {
			break
		}
		st, err := d.readStored(ctx, art.id)
		if err != nil {
			note(fmt.Errorf("stored critical paths %s: %w", art.id, err))
			continue
		}
		byTrace := map[string][]*critpath.SpanPath{}
		for i := range st.Paths {
			p := &st.Paths[i]
			if p.Service == culprit && p.Start >= pathFrom && p.Start <= pathTo {
				byTrace[p.TraceID] = append(byTrace[p.TraceID], p)
			}
		}
		ids := make([]string, 0, len(byTrace))
		for id := range byTrace {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if traces >= limit || ctx.Err() != nil {
				break
			}
			tid, err := model.ParseTraceID(id)
			if err != nil || done[tid] {
				continue
			}
			done[tid] = true
			t, err := d.Source.Trace(ctx, tid)
			if err != nil {
				note(err)
				continue
			}
			byID := map[model.SpanID]*model.Span{}
			for _, s := range t {
				byID[s.SpanID] = s
			}
			ch := childrenOf(t)
			n := 0
			for _, p := range byTrace[id] {
				sid, err := model.ParseSpanID(p.SpanID)
				if err != nil || byID[sid] == nil || byID[sid].Kind == model.KindClient {
					continue
				}
				waits.addSpan(p, byID[sid], ch)
				n++
			}
			if n > 0 {
				spans += n
				traces++
				if read != nil {
					read(tid)
				}
			}
		}
	}
	return spans, traces, firstErr
}

// readStored reads a "critical-path" artifact's document, from the cache
// when it was read before.
func (d *Diagnoser) readStored(ctx context.Context, id string) (*critpath.Stored, error) {
	if st, size, ok := d.Cache.Get(id); ok {
		if size > maxStoredBytes {
			return nil, fmt.Errorf("larger than %d bytes inflated", maxStoredBytes)
		}
		return st, nil
	}
	rc, err := d.Source.ArtifactContent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	st, size, err := critpath.DecodeStored(rc, maxStoredBytes)
	switch {
	case errors.Is(err, critpath.ErrStoredTooLarge):
		return nil, fmt.Errorf("larger than %d bytes inflated", maxStoredBytes)
	case errors.Is(err, critpath.ErrStoredVersion):
		return nil, critpath.ErrStoredVersion
	case err != nil:
		return nil, err
	}
	d.Cache.Add(id, st, size)
	return st, nil
}

// tracePaths adds to waits the critical paths of culprit's spans (not
// CLIENT) that started in [from, to] in trace id, each cut to the span's
// exclusive time, and returns how many it added.
func (d *Diagnoser) tracePaths(ctx context.Context, waits *waitTally, culprit string, id model.TraceID, from, to int64) (int, error) {
	res, err := d.Paths.Trace(ctx, id)
	switch {
	case errors.Is(err, critpath.ErrNoSnapshot), errors.Is(err, store.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	t, err := d.Source.Trace(ctx, id)
	if err != nil {
		return 0, err
	}
	byID := map[model.SpanID]*model.Span{}
	for _, s := range t {
		byID[s.SpanID] = s
	}
	ch := childrenOf(t)
	n := 0
	for i := range res.Spans {
		p := &res.Spans[i]
		sid, err := model.ParseSpanID(p.SpanID)
		if err != nil {
			continue
		}
		s := byID[sid]
		if s == nil || s.Service != culprit || s.Kind == model.KindClient || s.Start < from || s.Start > to {
			continue
		}
		waits.addSpan(p, s, ch)
		n++
	}
	return n, nil
}
