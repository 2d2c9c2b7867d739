package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rootline/rootline/internal/store"
)

var _ store.WriteProber = (*Store)(nil)

// unavailable wraps err with store.ErrUnavailable when it is a failure that
// may pass without a restart: no space left (SQLITE_FULL, ENOSPC, EDQUOT), an
// I/O error (SQLITE_IOERR, EIO), a file that cannot be opened for now, or a
// lock held past the busy timeout. SQLite rolls back the failed transaction
// and the connection stays usable, so the next write can succeed once the
// cause is gone. Other errors (a bug, a corrupt file) are returned as they are.
func unavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	transient := false
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM:
			transient = true
		}
	}
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO} {
		if errors.Is(err, e) {
			transient = true
		}
	}
	if !transient {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// probeSchema is a one-row table that ProbeWrite rewrites; like the metric
// schema it is created on every open, so older stores gain it in place.
const probeSchema = `CREATE TABLE IF NOT EXISTS write_probe (id INTEGER PRIMARY KEY, at INTEGER NOT NULL)`

// ProbeWrite commits a one-row write, with the same durability as a batch of
// spans, and reports whether it worked (an error wrapping
// store.ErrUnavailable when the cause may pass). Nothing a reader sees changes.
func (s *Store) ProbeWrite(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO write_probe (id, at) VALUES (1, ?)`, time.Now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: probe write: %w", err)
	}
	return nil
}
