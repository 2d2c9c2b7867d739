package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// purgeChunk is how many traces one purge transaction deletes. A chunk of
// 10-span traces holds the write lock for some tens of milliseconds (see
// BenchmarkPurge), so ingest keeps flowing while a large purge runs.
const purgeChunk = 256

// Purge applies a retention policy, in this order:
//
//  1. Age: traces whose last span ended before Now-Normal (no anomalous or
//     error span) or Now-Anomalous (with one) are deleted with their spans
//     and artifact links.
//  2. Artifacts: an artifact that lost its last link in step 1 is deleted;
//     so is one older than the longest retention whose links all point at
//     traces that do not exist (its spans were never stored or are gone).
//     A blob is deleted with the last artifact row naming it.
//  3. Size: while the store is larger than MaxBytes, the oldest normal
//     traces, then the oldest important ones, then unlinked artifacts are
//     deleted.
//  4. Names: services and operations left without spans are deleted
//     (purgenames.go), when this purge deleted spans or is the first since
//     Open.
//  5. Orphan blobs: blobs no artifact row names, older than
//     store.OrphanBlobGrace before Now (a crash between a blob's Put and
//     its row's commit leaves one), are deleted.
//
// A trace's age runs from last_end, the latest store.RetentionTime of its
// spans: their end, or their receive time when their clock was off.
//
// The size counts the database pages in use ((page_count-freelist_count) ×
// page_size), the WAL file as measured when the size step starts, and the
// bytes of the blobs the artifact rows name. Free pages are not returned to
// the filesystem (no VACUUM, auto_vacuum off): SQLite reuses them for new
// rows, so after a purge the file stops growing rather than shrinking.
// Because deleting rows frees only pages that become empty, a size purge may
// delete somewhat more than the strict minimum.
//
// Every step works in transactions of purgeChunk traces; a purge stops
// between chunks when ctx ends, returning what it removed so far.
func (s *Store) Purge(ctx context.Context, p store.RetentionPolicy) (store.PurgeStats, error) {
	var st store.PurgeStats
	if err := s.checkOpen(); err != nil {
		return st, err
	}
	began := time.Now()
	err := s.purge(ctx, p, &st)
	if st != (store.PurgeStats{}) || err != nil {
		s.log.Info("purged", "traces", st.Traces, "spans", st.Spans, "artifacts", st.Artifacts,
			"blob_bytes", st.Bytes, "services", st.Services, "operations", st.Operations, "orphan_blobs", st.OrphanBlobs,
			"took", time.Since(began), "err", err)
	}
	if err != nil {
		return st, fmt.Errorf("sqlite: purge: %w", err)
	}
	return st, nil
}

func (s *Store) purge(ctx context.Context, p store.RetentionPolicy, st *store.PurgeStats) error {
	if p.Normal > 0 {
		if err := s.purgeAll(ctx, st, "flags = 0 AND last_end < ?", p.Now-p.Normal); err != nil {
			return err
		}
	}
	if p.Anomalous > 0 {
		if err := s.purgeAll(ctx, st, "flags != 0 AND last_end < ?", p.Now-p.Anomalous); err != nil {
			return err
		}
	}
	if grace := max(p.Normal, p.Anomalous); grace > 0 {
		for {
			n, err := s.purgeOrphanArtifacts(ctx, st, p.Now-grace)
			if err != nil {
				return err
			}
			if n < purgeChunk {
				break
			}
		}
	}
	if p.Anomalous > 0 { // closed incidents live as long as anomalous traces (incident.go)
		if err := s.purgeIncidents(ctx, p.Now-p.Anomalous); err != nil {
			return err
		}
	}
	if p.Normal > 0 { // metric points live as long as normal traces (metrics.go)
		if _, err := s.purgeMetrics(ctx, p.Now-p.Normal); err != nil {
			return err
		}
	}
	if p.MaxBytes > 0 {
		if err := s.purgeToSize(ctx, st, p.MaxBytes); err != nil {
			return err
		}
	}
	if st.Spans > 0 || !s.namesChecked.Load() {
		svcs, ops, err := s.purgeUnusedNames(ctx)
		st.Services += svcs
		st.Operations += ops
		if err != nil {
			return fmt.Errorf("purge unused names: %w", err)
		}
		s.namesChecked.Store(true)
	}
	return s.sweepOrphanBlobs(ctx, st, p.Now-int64(store.OrphanBlobGrace))
}

// sweepOrphanBlobs deletes the blobs modified before `before` that no
// artifact row names. PutArtifact writes a blob before its row, so a crash in
// between leaves such a blob; the grace period keeps a blob whose row is
// about to be committed. The candidates are listed without locks;
// dropUnreferencedBlobs then checks each again under blobMu, which a
// PutArtifact holds from its blob's Put to its row's commit.
func (s *Store) sweepOrphanBlobs(ctx context.Context, st *store.PurgeStats, before int64) error {
	named := make(map[string]bool)
	rows, err := s.rdb.QueryContext(ctx, `SELECT DISTINCT sha256 FROM artifacts`)
	if err != nil {
		return fmt.Errorf("sweep orphan blobs: %w", err)
	}
	for rows.Next() {
		var sha string
		if err := rows.Scan(&sha); err != nil {
			rows.Close()
			return fmt.Errorf("sweep orphan blobs: %w", err)
		}
		named[sha] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("sweep orphan blobs: %w", err)
	}
	orphans := make(map[string]int64)
	err = s.blobs.List(ctx, func(b store.BlobInfo) error {
		if !named[b.Digest] && b.Modified.UnixNano() < before {
			orphans[b.Digest] = b.Size
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sweep orphan blobs: %w", err)
	}
	if len(orphans) == 0 {
		return nil
	}
	freed, n, err := s.dropUnreferencedBlobsCount(ctx, orphans)
	st.Bytes += freed
	st.OrphanBlobs += n
	if n > 0 {
		s.log.Info("deleted orphan blobs (content stored without its artifact row)", "blobs", n, "bytes", freed)
	}
	if err != nil {
		return fmt.Errorf("sweep orphan blobs: %w", err)
	}
	return nil
}

// purgeAll deletes, chunk by chunk, every trace matching where.
func (s *Store) purgeAll(ctx context.Context, st *store.PurgeStats, where string, args ...any) error {
	for {
		n, err := s.purgeTraces(ctx, st, purgeChunk, where, args...)
		if err != nil || n < purgeChunk {
			return err
		}
	}
}

// purgeTraces deletes up to limit (at most purgeChunk) of the oldest traces
// matching where, and the artifacts left without links; it returns how many
// traces went.
func (s *Store) purgeTraces(ctx context.Context, st *store.PurgeStats, limit int, where string, args ...any) (int, error) {
	var (
		got   store.PurgeStats
		blobs = make(map[string]int64)
		n     int
	)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		ids, err := queryBlobs(ctx, tx, `SELECT trace_id FROM traces WHERE `+where+` ORDER BY last_end LIMIT `+fmt.Sprint(min(limit, purgeChunk)), args...)
		if err != nil || len(ids) == 0 {
			return err
		}
		n = len(ids)
		in := "(" + placeholders(len(ids)) + ")"
		idArgs := make([]any, len(ids))
		for i := range ids {
			idArgs[i] = ids[i]
		}
		if got.Spans, err = s.deleteSegments(ctx, tx, in, idArgs); err != nil {
			return err
		}
		if got.Traces, err = execCount(ctx, tx, `DELETE FROM traces WHERE trace_id IN `+in, idArgs...); err != nil {
			return err
		}
		arts, err := queryStrings(ctx, tx, `SELECT DISTINCT artifact_id FROM artifact_spans WHERE trace_id IN `+in, idArgs...)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM artifact_spans WHERE trace_id IN `+in, idArgs...); err != nil {
			return err
		}
		for _, id := range arts {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM artifact_spans WHERE artifact_id = ? LIMIT 1`, id).Scan(&one)
			if err == nil {
				continue // still explains a span of a remaining trace
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err := deleteArtifact(ctx, tx, id, blobs); err != nil {
				return err
			}
			got.Artifacts++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	st.Traces += got.Traces
	st.Spans += got.Spans
	st.Artifacts += got.Artifacts
	freed, err := s.dropUnreferencedBlobs(ctx, blobs)
	st.Bytes += freed
	return n, err
}

// deleteSegments deletes the segments of the traces in the IN list, and
// their span_index rows (whose keys are in the segment headers); it returns
// how many spans went.
func (s *Store) deleteSegments(ctx context.Context, tx *sql.Tx, in string, idArgs []any) (int64, error) {
	lists, err := queryBlobs(ctx, tx, `SELECT segments FROM traces WHERE trace_id IN `+in, idArgs...)
	if err != nil {
		return 0, err
	}
	var ids []int64
	for _, l := range lists {
		if ids, err = appendIDList(ids, l); err != nil {
			return 0, err
		}
	}
	del := tx.StmtContext(ctx, s.wstmt.delIndex)
	delSeg := tx.StmtContext(ctx, s.wstmt.delSegment)
	var spans int64
	for _, id := range ids {
		var data []byte
		err := tx.StmtContext(ctx, s.wstmt.selSegment).QueryRowContext(ctx, id).Scan(&data)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, err
		}
		hdrs, err := decodeHeaders(data)
		if err != nil {
			return 0, fmt.Errorf("segment %d: %w", id, err)
		}
		ops := make(map[int64]int64, len(hdrs))
		for i, h := range hdrs {
			if _, err := del.ExecContext(ctx, h.service, h.start, id, i); err != nil {
				return 0, err
			}
			ops[h.op] = h.service
		}
		// Noted before the commit: a rolled-back purge only adds checks.
		s.notePurgedOps(ops)
		if _, err := delSeg.ExecContext(ctx, id); err != nil {
			return 0, err
		}
		spans += int64(len(hdrs))
	}
	return spans, nil
}

// purgeOrphanArtifacts deletes up to purgeChunk artifacts created before
// `before` that are not linked to any stored trace, oldest first (before 0:
// any age).
func (s *Store) purgeOrphanArtifacts(ctx context.Context, st *store.PurgeStats, before int64) (int, error) {
	blobs := make(map[string]int64)
	var n int
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		query := `SELECT id FROM artifacts AS a WHERE NOT EXISTS (
				SELECT 1 FROM artifact_spans AS l JOIN traces AS t ON t.trace_id = l.trace_id
				WHERE l.artifact_id = a.id)`
		var args []any
		if before != 0 {
			query += ` AND created < ?`
			args = append(args, before)
		}
		query += ` ORDER BY created LIMIT ` + fmt.Sprint(purgeChunk)
		ids, err := queryStrings(ctx, tx, query, args...)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM artifact_spans WHERE artifact_id = ?`, id); err != nil {
				return err
			}
			if err := deleteArtifact(ctx, tx, id, blobs); err != nil {
				return err
			}
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, err
	}
	st.Artifacts += int64(n)
	freed, err := s.dropUnreferencedBlobs(ctx, blobs)
	st.Bytes += freed
	return n, err
}

// deleteArtifact deletes an artifact row and notes its blob in blobs.
func deleteArtifact(ctx context.Context, tx *sql.Tx, id string, blobs map[string]int64) error {
	var sha string
	var size int64
	err := tx.QueryRowContext(ctx, `DELETE FROM artifacts WHERE id = ? RETURNING sha256, size`, id).Scan(&sha, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	blobs[sha] = size
	return nil
}

// dropUnreferencedBlobs deletes the blobs no artifact row names any more and
// returns the bytes freed. It runs after the rows' deletion is committed, so a
// crash in between leaves an unreferenced blob (wasted space), never a row
// without content.
func (s *Store) dropUnreferencedBlobs(ctx context.Context, blobs map[string]int64) (int64, error) {
	freed, _, err := s.dropUnreferencedBlobsCount(ctx, blobs)
	return freed, err
}

// dropUnreferencedBlobsCount is dropUnreferencedBlobs that also returns how
// many blobs it deleted.
func (s *Store) dropUnreferencedBlobsCount(ctx context.Context, blobs map[string]int64) (freed, n int64, err error) {
	if len(blobs) == 0 {
		return 0, 0, nil
	}
	s.blobMu.Lock()
	defer s.blobMu.Unlock()
	for sha, size := range blobs {
		var one int
		err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM artifacts WHERE sha256 = ? LIMIT 1`, sha).Scan(&one)
		if err == nil {
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return freed, n, err
		}
		if err := s.blobs.Delete(ctx, sha); err != nil {
			return freed, n, err
		}
		freed += size
		n++
	}
	return freed, n, nil
}

// purgeToSize deletes the oldest data until the store fits in maxBytes.
func (s *Store) purgeToSize(ctx context.Context, st *store.PurgeStats, maxBytes int64) error {
	// The WAL does not shrink by deleting rows; it is counted as a fixed
	// overhead measured once.
	var wal int64
	if fi, err := os.Stat(s.dbPath + "-wal"); err == nil {
		wal = fi.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var traces int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM traces`).Scan(&traces); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		used, err := s.usedBytes(ctx)
		if err != nil {
			return err
		}
		excess := used + wal - maxBytes
		if excess <= 0 {
			return nil
		}
		// Delete about as many traces as the excess is worth (by the mean
		// size of a trace), so a small excess does not cost a full chunk.
		limit := purgeChunk
		if traces > 0 {
			perTrace := max(used/traces, 1)
			limit = int(min(excess/perTrace+1, purgeChunk))
		}
		before := st.Traces
		n, err := s.purgeTraces(ctx, st, limit, "flags = 0")
		if err == nil && n == 0 {
			n, err = s.purgeTraces(ctx, st, limit, "flags != 0")
		}
		if err == nil && n == 0 {
			n, err = s.purgeOrphanArtifacts(ctx, st, 0)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			s.log.Warn("store above its size cap with nothing left to purge", "bytes", used+wal, "max_bytes", maxBytes)
			return nil
		}
		traces -= st.Traces - before
	}
}

// usedBytes is the size of the database pages in use plus the blob bytes
// the artifact rows name.
func (s *Store) usedBytes(ctx context.Context) (int64, error) {
	var pages, free, pageSize, blobs int64
	for _, q := range []struct {
		sql string
		dst *int64
	}{
		{`PRAGMA page_count`, &pages},
		{`PRAGMA freelist_count`, &free},
		{`PRAGMA page_size`, &pageSize},
		{`SELECT coalesce(sum(size), 0) FROM (SELECT max(size) AS size FROM artifacts GROUP BY sha256)`, &blobs},
	} {
		if err := s.rdb.QueryRowContext(ctx, q.sql).Scan(q.dst); err != nil {
			return 0, fmt.Errorf("measure size: %w", err)
		}
	}
	return (pages-free)*pageSize + blobs, nil
}

func queryBlobs(ctx context.Context, tx *sql.Tx, query string, args ...any) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func queryStrings(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func execCount(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	r, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
