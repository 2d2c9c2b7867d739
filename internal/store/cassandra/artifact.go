package cassandra

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

const artifactColumns = `id, kind, media_type, file_name, sha256, size, host, service, pid, window_start, window_end, created, partial, capture_id, attributes, spans`

// refBytes is a span reference as stored in an artifact's spans set.
func refBytes(r store.SpanRef) []byte {
	return append(append([]byte(nil), r.TraceID[:]...), r.SpanID[:]...)
}

func refOf(b []byte) (store.SpanRef, bool) {
	var r store.SpanRef
	if len(b) != len(r.TraceID)+len(r.SpanID) {
		return r, false
	}
	copy(r.TraceID[:], b)
	copy(r.SpanID[:], b[len(r.TraceID):])
	return r, true
}

func sortedRefs(refs []store.SpanRef) []store.SpanRef {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b store.SpanRef) int {
		return cmp.Or(bytes.Compare(a.TraceID[:], b.TraceID[:]), bytes.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return slices.Compact(refs)
}

// PutArtifact stores the content in the blob store, then the metadata, the
// blob's reference and the span links. Created is the current time unless
// the caller set it.
func (s *Store) PutArtifact(ctx context.Context, meta store.Artifact, r io.Reader) (store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return store.Artifact{}, err
	}
	meta.ID = newID()
	if meta.Created == 0 {
		meta.Created = time.Now().UnixNano()
	}
	meta.Spans = sortedRefs(meta.Spans)
	digest, size, err := s.blobs.Put(ctx, r)
	if err != nil {
		return store.Artifact{}, fmt.Errorf("cassandra: put artifact content: %w", err)
	}
	meta.SHA256, meta.Size = digest, size
	w := s.newWriteSet()
	refs := make([][]byte, len(meta.Spans))
	for i, ref := range meta.Spans {
		refs[i] = refBytes(ref)
		w.add("l\x00"+string(ref.TraceID[:]), `INSERT INTO artifact_links (trace_id, span_id, artifact_id) VALUES (?, ?, ?)`, 64,
			ref.TraceID[:], ref.SpanID[:], meta.ID)
	}
	w.add("x\x00"+meta.ID, `INSERT INTO artifacts (`+artifactColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, 512,
		meta.ID, meta.Kind, meta.MediaType, meta.FileName, meta.SHA256, meta.Size, meta.Host, meta.Service, meta.PID,
		meta.Start, meta.End, meta.Created, meta.Partial, meta.CaptureID, meta.Attributes, refs)
	w.add("f\x00"+digest, `INSERT INTO blob_refs (sha256, artifact_id) VALUES (?, ?)`, 128, digest, meta.ID)
	if err := s.exec(ctx, w.stmts); err != nil {
		return store.Artifact{}, wrap("put artifact", err)
	}
	// A purge in another process may have deleted this content as the last
	// artifact naming it went, between the Put and the blob_refs row. The
	// artifact is then refused (and its rows removed) rather than left
	// without content; the capture may be asked again.
	if _, err := s.blobs.Stat(ctx, digest); errors.Is(err, store.ErrNotFound) {
		_ = s.deleteArtifact(ctx, meta)
		return store.Artifact{}, fmt.Errorf("cassandra: put artifact: its content was deleted by a concurrent purge: %w", store.ErrUnavailable)
	}
	return meta, nil
}

// LinkArtifact links an existing artifact to more spans.
func (s *Store) LinkArtifact(ctx context.Context, id string, spans []store.SpanRef) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if _, err := s.GetArtifact(ctx, id); err != nil {
		return err
	}
	spans = sortedRefs(spans)
	w := s.newWriteSet()
	refs := make([][]byte, len(spans))
	for i, ref := range spans {
		refs[i] = refBytes(ref)
		w.add("l\x00"+string(ref.TraceID[:]), `INSERT INTO artifact_links (trace_id, span_id, artifact_id) VALUES (?, ?, ?)`, 64,
			ref.TraceID[:], ref.SpanID[:], id)
	}
	// A set union: linking twice is harmless.
	w.stmts = append(w.stmts, statement{part: "x\x00" + id, cql: `UPDATE artifacts` + w.ttl + ` SET spans = spans + ? WHERE id = ?`,
		args: []any{refs, id}, size: 64 + 24*len(refs)})
	return wrap("link artifact", s.exec(ctx, w.stmts))
}

// GetArtifact returns an artifact's metadata, or store.ErrNotFound.
func (s *Store) GetArtifact(ctx context.Context, id string) (store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return store.Artifact{}, err
	}
	var (
		a    store.Artifact
		refs [][]byte
	)
	err := s.session.Query(`SELECT `+artifactColumns+` FROM artifacts WHERE id = ?`, id).WithContext(ctx).Scan(
		&a.ID, &a.Kind, &a.MediaType, &a.FileName, &a.SHA256, &a.Size, &a.Host, &a.Service, &a.PID,
		&a.Start, &a.End, &a.Created, &a.Partial, &a.CaptureID, &a.Attributes, &refs)
	if errors.Is(err, gocql.ErrNotFound) {
		return store.Artifact{}, store.ErrNotFound
	}
	if err != nil {
		return store.Artifact{}, wrap("get artifact", err)
	}
	for _, b := range refs {
		if r, ok := refOf(b); ok {
			a.Spans = append(a.Spans, r)
		}
	}
	a.Spans = sortedRefs(a.Spans)
	if len(a.Attributes) == 0 {
		a.Attributes = nil
	}
	return a, nil
}

// OpenArtifact returns an artifact's metadata and content.
func (s *Store) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	a, err := s.GetArtifact(ctx, id)
	if err != nil {
		return a, nil, err
	}
	rc, err := s.blobs.Open(ctx, a.SHA256)
	if err != nil {
		return a, nil, fmt.Errorf("cassandra: open artifact %s: %w", id, err)
	}
	return a, rc, nil
}

// TraceArtifacts returns the artifacts linked to any span of a trace.
func (s *Store) TraceArtifacts(ctx context.Context, id model.TraceID) ([]store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	iter := s.session.Query(`SELECT artifact_id FROM artifact_links WHERE trace_id = ?`, id[:]).WithContext(ctx).PageSize(pageSize).Iter()
	var ids []string
	var aid string
	for iter.Scan(&aid) {
		if !slices.Contains(ids, aid) {
			ids = append(ids, aid)
		}
	}
	if err := iter.Close(); err != nil {
		return nil, wrap("trace artifacts", err)
	}
	var out []store.Artifact
	for _, aid := range ids {
		a, err := s.GetArtifact(ctx, aid)
		if errors.Is(err, store.ErrNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b store.Artifact) int { return cmp.Compare(a.Created, b.Created) })
	return out, nil
}

// deleteArtifact removes an artifact's rows (not its blob).
func (s *Store) deleteArtifact(ctx context.Context, a store.Artifact) error {
	stmts := []statement{
		{part: "x\x00" + a.ID, cql: `DELETE FROM artifacts WHERE id = ?`, args: []any{a.ID}},
		{part: "f\x00" + a.SHA256, cql: `DELETE FROM blob_refs WHERE sha256 = ? AND artifact_id = ?`, args: []any{a.SHA256, a.ID}},
	}
	for _, r := range a.Spans {
		stmts = append(stmts, statement{part: "l\x00" + string(r.TraceID[:]),
			cql: `DELETE FROM artifact_links WHERE trace_id = ? AND span_id = ? AND artifact_id = ?`, args: []any{r.TraceID[:], r.SpanID[:], a.ID}})
	}
	return s.exec(ctx, stmts)
}

// blobReferenced reports whether any artifact names the blob.
func (s *Store) blobReferenced(ctx context.Context, digest string) (bool, error) {
	var id string
	err := s.session.Query(`SELECT artifact_id FROM blob_refs WHERE sha256 = ? LIMIT 1`, digest).WithContext(ctx).Scan(&id)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, wrap("look up blob references", err)
	}
	return true, nil
}
