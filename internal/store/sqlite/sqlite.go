// Package sqlite is Rootline's embedded storage backend: spans, artifact
// metadata and metric points in one SQLite database in WAL mode. Artifact
// content goes to a store.BlobStore (by default fsblob in a directory beside
// the database).
//
// SQLite has a single writer, so the Store funnels every write through one
// connection (guarded by a mutex, which also keeps the in-memory id caches
// consistent with what is committed) and serves reads from a separate pool of
// query-only connections; in WAL mode readers never block the writer nor wait
// for it. A background goroutine checkpoints the WAL from its own
// connection.
//
// Spans are stored one row per trace per write batch (a segment, see
// codec.go) plus one narrow search-index row per span; see schema for why.
//
// Layout of Config.Dir:
//
//	rootline.db, rootline.db-wal, rootline.db-shm   the database
//	blobs/<aa>/<sha256>                             artifact content (when Config.Blobs is nil)
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/fsblob"
)

var _ store.Store = (*Store)(nil)

// DBFile is the database file name inside Config.Dir.
const DBFile = "rootline.db"

// Config configures the embedded store.
type Config struct {
	// Dir holds the database file (and the blobs/ directory when Blobs is
	// nil); it is created if missing. One process uses a Dir at a time.
	Dir string
	// Blobs keeps artifact content. Nil means a filesystem blob store in
	// Dir/blobs, the layout every earlier version used. The Store does not
	// close it.
	Blobs store.BlobStore
	// Synchronous is SQLite's synchronous mode: "FULL" (the default) fsyncs
	// the WAL on every commit, so a WriteSpans that returned survives a power
	// loss; "NORMAL" fsyncs only at checkpoints and survives a process crash
	// but may lose the commits since the last checkpoint on power loss (at
	// most ~1 s of them: checkpoints run every 100 ms under heavy ingest,
	// every second otherwise).
	Synchronous string
	// BusyTimeout bounds how long a connection waits for a lock held by
	// another connection (checkpoints, another process). Default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool. Default: GOMAXPROCS, at least 2.
	ReadConns int
	// CacheMiB is SQLite's page cache of the writer, in MiB (default 64);
	// each reader has a quarter of it, less with more than four readers
	// (readerShare).
	CacheMiB int
}

func (c *Config) applyDefaults() error {
	if c.Dir == "" {
		return errors.New("sqlite: Config.Dir is empty")
	}
	if strings.ContainsRune(c.Dir, '?') {
		return fmt.Errorf("sqlite: Config.Dir %q must not contain '?'", c.Dir)
	}
	switch strings.ToUpper(c.Synchronous) {
	case "":
		c.Synchronous = "FULL"
	case "FULL", "NORMAL":
		c.Synchronous = strings.ToUpper(c.Synchronous)
	default:
		return fmt.Errorf("sqlite: Synchronous must be FULL or NORMAL, not %q", c.Synchronous)
	}
	if c.BusyTimeout <= 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.ReadConns <= 0 {
		c.ReadConns = max(runtime.GOMAXPROCS(0), 2)
	}
	if c.CacheMiB <= 0 {
		c.CacheMiB = 64
	}
	return nil
}

// readerShare divides the writer's page cache for each reader (the read
// pool and the two metadata connections): a quarter, less with more than
// four readers, so the readers together never hold more than the writer.
func (c Config) readerShare() int { return max(c.readers(), 4) }

// readers counts the read-only connections.
func (c Config) readers() int {
	n := c.ReadConns
	if n <= 0 {
		n = max(runtime.GOMAXPROCS(0), 2)
	}
	return n + 2
}

// CacheBytes is the most memory the store's page caches take with c's
// settings (defaults resolved): the writer's cache and the readers' shares,
// with the allocator's overhead (a full 64 MiB cache measured 81 MiB of
// resident memory). SQLite allocates outside Go's heap, so Go's memory limit
// does not count it.
func (c Config) CacheBytes() int64 {
	cache := int64(cmp.Or(max(c.CacheMiB, 0), 64)) << 20
	return (cache + int64(c.readers())*(cache/int64(c.readerShare()))) * 5 / 4
}

// Store implements store.Store on SQLite. It is safe for concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	dbPath string
	blobs  store.BlobStore
	lock   *os.File // LockFile, held while open

	// wdb has exactly one connection; wmu serialises write transactions on it
	// and guards the writer-side caches (wcache).
	wdb    *sql.DB
	wmu    sync.Mutex
	wstmt  writeStmts
	wcache writeCache
	wbatch batch
	ckpt   *checkpointer

	rdb  *sql.DB
	mdb  *sql.DB   // metadata lookups made while an rdb query is open
	meta metaCache // id → name lookups for readers

	// blobMu orders blob writes against blob garbage collection: PutArtifact
	// holds it shared from storing the blob until its row is committed, Purge
	// holds it exclusively while it deletes blobs no row refers to. Without it
	// a Put that found its blob already present could lose it to a
	// concurrent Purge.
	blobMu sync.RWMutex

	// namesChecked is set once a purge has looked for services and
	// operations without spans; later purges look only when they deleted
	// spans, at the operations of those spans (purgedOps: op id → service
	// id, guarded by wmu).
	namesChecked atomic.Bool
	purgedOps    map[int64]int64

	closed atomic.Bool
}

// Open opens or creates the store in cfg.Dir. A nil logger discards logs.
func Open(cfg Config, logger *slog.Logger) (*Store, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "sqlite")
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	blobs := cfg.Blobs
	if blobs == nil {
		fs, err := fsblob.Open(filepath.Join(cfg.Dir, "blobs"))
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		blobs = fs
	}
	s := &Store{
		cfg:    cfg,
		log:    logger,
		dbPath: filepath.Join(cfg.Dir, DBFile),
		blobs:  blobs,
		lock:   lock,
	}
	if err := s.open(); err != nil {
		return nil, errors.Join(err, s.closeDBs(), lock.Close())
	}
	logger.Info("opened", "path", s.dbPath, "synchronous", cfg.Synchronous)
	return s, nil
}

func (s *Store) dsn(readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(s.cfg.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+s.cfg.Synchronous+")")
	q.Add("_pragma", "temp_store(MEMORY)")
	cache := s.cfg.CacheMiB * 1024
	if readOnly {
		cache /= s.cfg.readerShare()
		q.Add("_pragma", "query_only(1)")
		q.Add("_pragma", "mmap_size(268435456)")
	} else {
		// Keep the WAL from staying huge after a burst of writes.
		q.Add("_pragma", "journal_size_limit(67108864)")
		// Checkpoints run in the background (checkpointer); the writer's
		// own automatic checkpoint only finishes the job once the WAL is
		// large, so that the WAL can restart from its beginning.
		q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(walAutoCheckpoint)+")")
		// BEGIN IMMEDIATE takes the write lock up front, so a transaction
		// never fails half-way with SQLITE_BUSY on lock upgrade.
		q.Set("_txlock", "immediate")
	}
	q.Add("_pragma", "cache_size(-"+strconv.Itoa(cache)+")")
	return s.dbPath + "?" + q.Encode()
}

func (s *Store) open() error {
	var err error
	s.wdb, err = sql.Open("sqlite", s.dsn(false))
	if err != nil {
		return fmt.Errorf("sqlite: open writer: %w", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)

	ctx := context.Background()
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if err := s.createMetricSchema(ctx); err != nil { // metrics.go
		return err
	}
	if err := s.createIncidentSchema(ctx); err != nil { // incident.go
		return err
	}
	if err := s.wstmt.prepare(ctx, s.wdb); err != nil {
		return err
	}

	// The read pool is opened after the schema exists: query_only
	// connections cannot create it.
	s.rdb, err = sql.Open("sqlite", s.dsn(true))
	if err != nil {
		return fmt.Errorf("sqlite: open readers: %w", err)
	}
	s.rdb.SetMaxOpenConns(s.cfg.ReadConns)
	s.rdb.SetMaxIdleConns(s.cfg.ReadConns)
	s.rdb.SetConnMaxIdleTime(0)
	if err := s.rdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: open readers: %w", err)
	}
	s.mdb, err = sql.Open("sqlite", s.dsn(true))
	if err != nil {
		return fmt.Errorf("sqlite: open readers: %w", err)
	}
	s.mdb.SetMaxOpenConns(2)
	s.mdb.SetConnMaxIdleTime(0)
	s.meta.init()
	if err := s.wcache.load(ctx, s.wdb); err != nil {
		return err
	}
	s.ckpt, err = startCheckpointer(s.dsn(false), s.log)
	return err
}

// schemaVersion is stored in PRAGMA user_version.
const schemaVersion = 1

// walAutoCheckpoint is the WAL size, in pages, at which a commit runs a
// checkpoint itself (SQLite's default is 1000).
const walAutoCheckpoint = 2000

// pageSize is set when the database is created. Every write batch dirties
// about one page per trace in the traces table (its keys are random), and
// the WAL holds whole pages, so smaller pages mean less WAL; 8 KiB pages
// still keep a segment (all spans of a trace in a batch, typically 1-2 KiB)
// off overflow pages. Measured with BenchmarkWriteSpans: 4 KiB pages cost
// more CPU per span, 16 KiB pages 40% more bytes written.
const pageSize = 8192

// schema is version 1. Design notes:
//   - segments hold the spans: one row per trace per write batch, encoded
//     as described in codec.go, appended in id order. Writing one row per
//     trace rather than per span is what makes ingest fast.
//   - span_index is the search index, one narrow row per span, clustered
//     (WITHOUT ROWID) by (service_id, start): a service's spans newest first
//     are one backwards range scan that filters operation, duration and
//     flags inside the index without touching the segments. idx is the
//     span's position in its segment.
//   - flags: bit 0 anomalous, bit 1 error. The partial indexes over
//     anomalous spans are tiny (anomalies are rare); their predicate
//     "flags & 1 = 1" must be repeated verbatim in queries for SQLite to use
//     them.
//   - Services, operations and resources are interned to integer ids.
//   - traces has one row per trace: the ids of its segments (uvarints, in
//     write order) for GetTrace, and for retention the span start min, the
//     latest store.RetentionTime of its spans (last_end) and OR of flags; (flags, last_end) serves both "oldest normal" and
//     "oldest important" scans. It is the only index keyed by trace id:
//     random keys dirty a page per trace per batch, so a second such index
//     (segments by trace id) would cost as much WAL as all the span data.
//   - auto_vacuum is off: deleted pages go to the freelist and SQLite reuses
//     them, so the file does not shrink after a purge but does not grow
//     either until the free pages are used up. The size cap counts pages in
//     use (page_count - freelist_count).
var schema = []string{
	`CREATE TABLE services (
		id   INTEGER PRIMARY KEY,
		name TEXT NOT NULL UNIQUE
	)`,
	`CREATE TABLE operations (
		id         INTEGER PRIMARY KEY,
		service_id INTEGER NOT NULL,
		name       TEXT NOT NULL,
		kind       INTEGER NOT NULL,
		UNIQUE (service_id, name, kind)
	)`,
	`CREATE TABLE resources (
		id   INTEGER PRIMARY KEY,
		data BLOB NOT NULL UNIQUE
	)`,
	`CREATE TABLE segments (
		id       INTEGER PRIMARY KEY,
		trace_id BLOB NOT NULL,
		data     BLOB NOT NULL
	)`,
	`CREATE TABLE span_index (
		service_id INTEGER NOT NULL,
		start      INTEGER NOT NULL,
		segment    INTEGER NOT NULL,
		idx        INTEGER NOT NULL,
		op_id      INTEGER NOT NULL,
		duration   INTEGER NOT NULL,
		flags      INTEGER NOT NULL,
		PRIMARY KEY (service_id, start, segment, idx)
	) WITHOUT ROWID`,
	`CREATE INDEX span_index_anomalous ON span_index (start) WHERE flags & 1 = 1`,
	`CREATE INDEX span_index_anomalous_service ON span_index (service_id, start) WHERE flags & 1 = 1`,
	`CREATE TABLE traces (
		trace_id  BLOB PRIMARY KEY,
		start_min INTEGER NOT NULL,
		last_end  INTEGER NOT NULL,
		flags     INTEGER NOT NULL,
		segments  BLOB NOT NULL
	) WITHOUT ROWID`,
	`CREATE INDEX traces_retention ON traces (flags, last_end)`,
	`CREATE TABLE artifacts (
		id         TEXT PRIMARY KEY,
		kind       TEXT NOT NULL,
		media_type TEXT NOT NULL,
		file_name  TEXT NOT NULL,
		sha256     TEXT NOT NULL,
		size       INTEGER NOT NULL,
		host       TEXT NOT NULL,
		service    TEXT NOT NULL,
		pid        INTEGER NOT NULL,
		start      INTEGER NOT NULL,
		"end"      INTEGER NOT NULL,
		created    INTEGER NOT NULL,
		partial    INTEGER NOT NULL,
		capture_id TEXT NOT NULL,
		attrs      TEXT
	) WITHOUT ROWID`,
	`CREATE INDEX artifacts_sha256 ON artifacts (sha256)`,
	`CREATE INDEX artifacts_created ON artifacts (created)`,
	`CREATE TABLE artifact_spans (
		artifact_id TEXT NOT NULL,
		trace_id    BLOB NOT NULL,
		span_id     INTEGER NOT NULL,
		PRIMARY KEY (artifact_id, trace_id, span_id)
	) WITHOUT ROWID`,
	`CREATE INDEX artifact_spans_trace ON artifact_spans (trace_id)`,
}

func (s *Store) migrate(ctx context.Context) error {
	var version int
	if err := s.wdb.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("sqlite: read schema version: %w", err)
	}
	switch version {
	case schemaVersion:
		return nil
	case 0:
	default:
		return fmt.Errorf("sqlite: %s has schema version %d, this build knows %d", s.dbPath, version, schemaVersion)
	}
	// The page size of a WAL database is fixed; a new, empty one is switched
	// out of WAL, given its page size by VACUUM, and switched back.
	for _, q := range []string{
		"PRAGMA journal_mode = DELETE",
		"PRAGMA page_size = " + strconv.Itoa(pageSize),
		"VACUUM",
		"PRAGMA journal_mode = WAL",
	} {
		if _, err := s.wdb.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqlite: create database: %s: %w", q, err)
		}
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: create schema: %w", err)
	}
	defer tx.Rollback()
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlite: create schema: %w\n%s", err, stmt)
		}
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(schemaVersion)); err != nil {
		return fmt.Errorf("sqlite: create schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: create schema: %w", err)
	}
	s.log.Info("created schema", "version", schemaVersion)
	return nil
}

// Close checkpoints the WAL into the database file and closes the store.
// Calling Close more than once is harmless.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
		s.ckpt = nil
	}
	// Readers are closed first so the checkpoint is not held back by them.
	// (The pointers stay: a reader racing with Close gets "database is
	// closed" from database/sql rather than a nil dereference.)
	errs = append(errs, s.rdb.Close(), s.mdb.Close())
	if s.wdb != nil {
		if _, err := s.wdb.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			errs = append(errs, fmt.Errorf("sqlite: checkpoint: %w", err))
		}
	}
	errs = append(errs, s.closeDBs(), s.lock.Close()) // closing releases the lock
	err := errors.Join(errs...)
	s.log.Info("closed", "err", err)
	return err
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
		s.ckpt = nil
	}
	errs = append(errs, s.wstmt.close())
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
		s.wdb = nil
	}
	// sql.DB.Close is idempotent.
	for _, db := range []*sql.DB{s.rdb, s.mdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// writeTx runs fn in a write transaction on the writer connection; every
// write of the store goes through it. The context is checked before the
// transaction starts; once started, the transaction runs to its end (a
// cancellable context would make the driver start a goroutine per statement,
// and batches must be atomic anyway). The writer's id caches take the ids fn
// staged only if the transaction commits.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(fmt.Errorf("begin: %w", err))
	}
	if err := fn(tx); err != nil {
		s.wcache.rollback()
		return unavailable(errors.Join(err, tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		s.wcache.rollback()
		return unavailable(fmt.Errorf("commit: %w", err))
	}
	s.wcache.commit()
	s.ckpt.notify()
	return nil
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// spanIDInt maps an 8-byte span id to the INTEGER column value.
func spanIDInt(id model.SpanID) int64 {
	return int64(uint64(id[0])<<56 | uint64(id[1])<<48 | uint64(id[2])<<40 | uint64(id[3])<<32 |
		uint64(id[4])<<24 | uint64(id[5])<<16 | uint64(id[6])<<8 | uint64(id[7]))
}

func spanIDFromInt(v int64) model.SpanID {
	u := uint64(v)
	return model.SpanID{byte(u >> 56), byte(u >> 48), byte(u >> 40), byte(u >> 32),
		byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}
}
