package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

const artifactSelect = `id, kind, media_type, file_name, sha256, size, host, service, pid, start, "end", created, partial, capture_id, attrs`

func newArtifactID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// PutArtifact stores the content in the blob directory, then the metadata
// and its span links in one transaction. Created is set to the current time
// unless the caller set it.
func (s *Store) PutArtifact(ctx context.Context, meta store.Artifact, r io.Reader) (store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return store.Artifact{}, err
	}
	meta.ID = newArtifactID()
	if meta.Created == 0 {
		meta.Created = time.Now().UnixNano()
	}
	attrs, err := encodeAttrs(meta.Attributes)
	if err != nil {
		return store.Artifact{}, err
	}

	s.blobMu.RLock()
	digest, size, err := s.blobs.Put(ctx, r)
	if err != nil {
		s.blobMu.RUnlock()
		return store.Artifact{}, fmt.Errorf("sqlite: put artifact: %w", unavailable(err))
	}
	meta.SHA256, meta.Size = digest, size
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO artifacts (`+artifactSelect+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			meta.ID, meta.Kind, meta.MediaType, meta.FileName, meta.SHA256, meta.Size, meta.Host,
			meta.Service, meta.PID, meta.Start, meta.End, meta.Created, meta.Partial, meta.CaptureID, attrs)
		if err != nil {
			return err
		}
		return insertLinks(ctx, tx, meta.ID, meta.Spans)
	})
	s.blobMu.RUnlock()
	if err != nil {
		// Do not leave a blob no row refers to.
		_, derr := s.dropUnreferencedBlobs(ctx, map[string]int64{digest: size})
		return store.Artifact{}, errors.Join(fmt.Errorf("sqlite: put artifact: %w", err), derr)
	}
	meta.Spans = sortedRefs(meta.Spans)
	return meta, nil
}

func insertLinks(ctx context.Context, tx *sql.Tx, id string, spans []store.SpanRef) error {
	if len(spans) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO artifact_spans (artifact_id, trace_id, span_id) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, ref := range spans {
		if _, err := st.ExecContext(ctx, id, ref.TraceID[:], spanIDInt(ref.SpanID)); err != nil {
			return err
		}
	}
	return nil
}

// LinkArtifact links an artifact to more spans; links that exist are kept.
func (s *Store) LinkArtifact(ctx context.Context, id string, spans []store.SpanRef) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM artifacts WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("artifact %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		return insertLinks(ctx, tx, id, spans)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("sqlite: link artifact: %w", err)
	}
	return err
}

// GetArtifact returns an artifact's metadata with all its span links.
func (s *Store) GetArtifact(ctx context.Context, id string) (store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return store.Artifact{}, err
	}
	arts, err := s.queryArtifacts(ctx, `SELECT `+artifactSelect+` FROM artifacts WHERE id = ?`, id)
	if err != nil {
		return store.Artifact{}, err
	}
	if len(arts) == 0 {
		return store.Artifact{}, fmt.Errorf("artifact %q: %w", id, store.ErrNotFound)
	}
	return arts[0], nil
}

// OpenArtifact returns an artifact's metadata and content.
func (s *Store) OpenArtifact(ctx context.Context, id string) (store.Artifact, io.ReadCloser, error) {
	a, err := s.GetArtifact(ctx, id)
	if err != nil {
		return a, nil, err
	}
	rc, err := s.blobs.Open(ctx, a.SHA256)
	if err != nil {
		return a, nil, fmt.Errorf("sqlite: artifact %q content: %w", id, err)
	}
	return a, rc, nil
}

// TraceArtifacts returns the artifacts linked to any span of a trace, oldest
// first, each with all its links (also those to other traces).
func (s *Store) TraceArtifacts(ctx context.Context, id model.TraceID) ([]store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.queryArtifacts(ctx, `SELECT `+artifactSelect+` FROM artifacts WHERE id IN
		(SELECT artifact_id FROM artifact_spans WHERE trace_id = ?) ORDER BY created, id`, id[:])
}

// SpanArtifacts returns, for each span of a trace, the artifacts linked to
// it, oldest first, in one query: their metadata without their links
// (Spans is nil). It is what a reader of many traces' evidence needs
// (analysis.StoreSource); TraceArtifacts reads every link of every artifact,
// which for a capture linked to hundreds of spans, read once per trace of
// them, is quadratic.
func (s *Store) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT l.span_id, a.id, a.kind, a.media_type, a.file_name, a.sha256, a.size, a.host, a.service,
		a.pid, a.start, a."end", a.created, a.partial, a.capture_id, a.attrs
		FROM artifact_spans AS l JOIN artifacts AS a ON a.id = l.artifact_id WHERE l.trace_id = ? ORDER BY a.created, a.id`, id[:])
	if err != nil {
		return nil, fmt.Errorf("sqlite: span artifacts: %w", err)
	}
	defer rows.Close()
	out := map[model.SpanID][]store.Artifact{}
	for rows.Next() {
		var a store.Artifact
		var span int64
		var attrs sql.NullString
		if err := rows.Scan(&span, &a.ID, &a.Kind, &a.MediaType, &a.FileName, &a.SHA256, &a.Size, &a.Host, &a.Service,
			&a.PID, &a.Start, &a.End, &a.Created, &a.Partial, &a.CaptureID, &attrs); err != nil {
			return nil, fmt.Errorf("sqlite: span artifacts: %w", err)
		}
		if attrs.Valid {
			if err := json.Unmarshal([]byte(attrs.String), &a.Attributes); err != nil {
				return nil, fmt.Errorf("sqlite: artifact %q attributes: %w", a.ID, err)
			}
		}
		sid := spanIDFromInt(span)
		out[sid] = append(out[sid], a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: span artifacts: %w", err)
	}
	return out, nil
}

func (s *Store) queryArtifacts(ctx context.Context, query string, args ...any) ([]store.Artifact, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query artifacts: %w", err)
	}
	var out []store.Artifact
	for rows.Next() {
		var a store.Artifact
		var attrs sql.NullString
		if err := rows.Scan(&a.ID, &a.Kind, &a.MediaType, &a.FileName, &a.SHA256, &a.Size, &a.Host, &a.Service,
			&a.PID, &a.Start, &a.End, &a.Created, &a.Partial, &a.CaptureID, &attrs); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: scan artifact: %w", err)
		}
		if attrs.Valid {
			if err := json.Unmarshal([]byte(attrs.String), &a.Attributes); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: artifact %q attributes: %w", a.ID, err)
			}
		}
		out = append(out, a)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("sqlite: query artifacts: %w", err)
	}
	// Links are read after the artifact rows are closed: one read connection
	// at a time per call.
	for i := range out {
		if out[i].Spans, err = s.artifactLinks(ctx, out[i].ID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) artifactLinks(ctx context.Context, id string) ([]store.SpanRef, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT trace_id, span_id FROM artifact_spans WHERE artifact_id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: artifact links: %w", err)
	}
	defer rows.Close()
	var refs []store.SpanRef
	for rows.Next() {
		var trace []byte
		var span int64
		if err := rows.Scan(&trace, &span); err != nil {
			return nil, fmt.Errorf("sqlite: artifact links: %w", err)
		}
		var ref store.SpanRef
		copy(ref.TraceID[:], trace)
		ref.SpanID = spanIDFromInt(span)
		refs = append(refs, ref)
	}
	return sortedRefs(refs), rows.Err()
}

// sortedRefs orders refs by trace id then span id and drops duplicates, so
// what PutArtifact returns equals what GetArtifact reads back.
func sortedRefs(refs []store.SpanRef) []store.SpanRef {
	if len(refs) == 0 {
		return nil
	}
	out := make([]store.SpanRef, 0, len(refs))
	seen := make(map[store.SpanRef]bool, len(refs))
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.SpanRef) int {
		return cmp.Or(bytes.Compare(a.TraceID[:], b.TraceID[:]), bytes.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return out
}

func encodeAttrs(m map[string]string) (any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("sqlite: artifact attributes: %w", err)
	}
	return string(b), nil
}
