package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gocql/gocql"
)

// SchemaVersion is the version of the tables this package reads and writes.
const SchemaVersion = 2

// migrations[v-1] brings a keyspace from version v-1 to v. Statements are
// idempotent (IF NOT EXISTS), so a migration interrupted half-way is simply
// run again.
var migrations = [][]string{schemaV1, schemaV2}

// schemaV1: see the package comment for what each table is for. Index
// tables cluster newest first, so a search reads the newest spans of an
// hour first and stops once it has its traces.
var schemaV1 = []string{
	`CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text)`,
	`CREATE TABLE IF NOT EXISTS spans (
		trace_id blob, span_id blob, parent_id blob, service text, operation text, kind tinyint,
		start bigint, duration bigint, flags tinyint, rt bigint, data blob,
		PRIMARY KEY (trace_id, span_id))`,
	`CREATE TABLE IF NOT EXISTS time_index (
		bucket bigint, shard tinyint, start bigint, trace_id blob, span_id blob,
		service text, operation text, duration bigint, flags tinyint,
		PRIMARY KEY ((bucket, shard), start, trace_id, span_id))
		WITH CLUSTERING ORDER BY (start DESC, trace_id ASC, span_id ASC)`,
	`CREATE TABLE IF NOT EXISTS op_index (
		service text, operation text, kind tinyint, bucket bigint, start bigint, trace_id blob, span_id blob,
		duration bigint, flags tinyint,
		PRIMARY KEY ((service, operation, kind, bucket), start, trace_id, span_id))
		WITH CLUSTERING ORDER BY (start DESC, trace_id ASC, span_id ASC)`,
	`CREATE TABLE IF NOT EXISTS tag_index (
		service text, tag_key text, tag_value text, bucket bigint, start bigint, trace_id blob, span_id blob,
		operation text, duration bigint, flags tinyint,
		PRIMARY KEY ((service, tag_key, tag_value, bucket), start, trace_id, span_id))
		WITH CLUSTERING ORDER BY (start DESC, trace_id ASC, span_id ASC)`,
	`CREATE TABLE IF NOT EXISTS anomaly_index (
		bucket bigint, start bigint, trace_id blob, span_id blob, service text,
		PRIMARY KEY ((bucket), start, trace_id, span_id))
		WITH CLUSTERING ORDER BY (start DESC, trace_id ASC, span_id ASC)`,
	`CREATE TABLE IF NOT EXISTS retention_index (bucket bigint, trace_id blob, PRIMARY KEY ((bucket), trace_id))`,
	`CREATE TABLE IF NOT EXISTS buckets (scope text, bucket bigint, PRIMARY KEY ((scope), bucket))
		WITH CLUSTERING ORDER BY (bucket DESC)`,
	`CREATE TABLE IF NOT EXISTS services (part int, service text, PRIMARY KEY ((part), service))`,
	`CREATE TABLE IF NOT EXISTS operations (service text, operation text, kind tinyint, PRIMARY KEY ((service), operation, kind))`,
	`CREATE TABLE IF NOT EXISTS artifacts (
		id text PRIMARY KEY, kind text, media_type text, file_name text, sha256 text, size bigint,
		host text, service text, pid bigint, window_start bigint, window_end bigint, created bigint,
		partial boolean, capture_id text, attributes map<text, text>, spans set<blob>)`,
	`CREATE TABLE IF NOT EXISTS artifact_links (trace_id blob, span_id blob, artifact_id text,
		PRIMARY KEY ((trace_id), span_id, artifact_id))`,
	`CREATE TABLE IF NOT EXISTS blob_refs (sha256 text, artifact_id text, PRIMARY KEY ((sha256), artifact_id))`,
	`CREATE TABLE IF NOT EXISTS metric_names (part int, name text, PRIMARY KEY ((part), name))`,
	`CREATE TABLE IF NOT EXISTS metric_series (name text, service text, labels text, unit text, kind tinyint,
		buckets set<bigint>, PRIMARY KEY ((name), service, labels))`,
	`CREATE TABLE IF NOT EXISTS metric_points (name text, service text, labels text, bucket bigint, ts bigint,
		start bigint, value double, count bigint, sum double, bounds list<double>, bucket_counts list<bigint>,
		PRIMARY KEY ((name, service, labels, bucket), ts))`,
}

// ErrSchema is returned by Open when the keyspace's schema is missing or of
// another version.
var ErrSchema = errors.New("cassandra: schema missing or of another version; run `rootline storage init`")

func (s *Store) checkSchema(ctx context.Context) error {
	v, err := schemaVersion(ctx, s.session)
	if err != nil {
		return err
	}
	if v != SchemaVersion {
		return fmt.Errorf("%w (keyspace %s has version %d, this build needs %d)", ErrSchema, s.cfg.Keyspace, v, SchemaVersion)
	}
	return nil
}

// schemaVersion reads the version recorded in meta; 0 when there is none.
func schemaVersion(ctx context.Context, sess *gocql.Session) (int, error) {
	var v string
	err := sess.Query(`SELECT value FROM meta WHERE key = 'schema_version'`).WithContext(ctx).Scan(&v)
	var re gocql.RequestError
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return 0, nil
	case errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid:
		return 0, nil // no meta table: nothing was created yet
	case err != nil:
		return 0, wrap("read schema version", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("cassandra: schema version %q is not a number", v)
	}
	return n, nil
}

// InitResult says what Init did.
type InitResult struct {
	CreatedKeyspace bool
	From, To        int // schema versions before and after
}

// Init creates the keyspace (when missing, with cfg's replication) and brings
// its tables to SchemaVersion. It is idempotent: run against an up-to-date
// keyspace it changes nothing. It refuses a keyspace of a newer version.
func Init(ctx context.Context, cfg Config, logger *slog.Logger) (InitResult, error) {
	var res InitResult
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cl, err := cfg.cluster("")
	if err != nil {
		return res, err
	}
	sess, err := cl.CreateSession()
	if err != nil {
		return res, fmt.Errorf("cassandra: connect to %v: %w", cfg.Servers, unavailable(err))
	}
	defer sess.Close()
	var name string
	err = sess.Query(`SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`, cfg.Keyspace).WithContext(ctx).Scan(&name)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		logger.Info("creating keyspace", "keyspace", cfg.Keyspace, "replication", replication(cfg))
		if err := sess.Query(`CREATE KEYSPACE IF NOT EXISTS ` + cfg.Keyspace + ` WITH replication = ` + replication(cfg)).
			WithContext(ctx).Exec(); err != nil {
			return res, wrap("create keyspace", err)
		}
		res.CreatedKeyspace = true
	case err != nil:
		return res, wrap("look up keyspace", err)
	}
	sess.Close()
	// A host selection policy belongs to one session: build the
	// configuration again for the keyspace's session.
	if cl, err = cfg.cluster(cfg.Keyspace); err != nil {
		return res, err
	}
	if sess, err = cl.CreateSession(); err != nil {
		return res, fmt.Errorf("cassandra: connect to keyspace %s: %w", cfg.Keyspace, unavailable(err))
	}
	defer sess.Close()
	if res.From, err = schemaVersion(ctx, sess); err != nil {
		return res, err
	}
	if res.From > SchemaVersion {
		return res, fmt.Errorf("cassandra: keyspace %s has schema version %d, newer than this build's %d: upgrade Rootline", cfg.Keyspace, res.From, SchemaVersion)
	}
	for v := res.From + 1; v <= SchemaVersion; v++ {
		logger.Info("applying schema version", "keyspace", cfg.Keyspace, "version", v, "statements", len(migrations[v-1]))
		for _, stmt := range migrations[v-1] {
			if err := sess.Query(stmt).WithContext(ctx).Exec(); err != nil {
				return res, wrap(fmt.Sprintf("schema version %d: %s", v, firstLine(stmt)), err)
			}
		}
		if err := sess.Query(`INSERT INTO meta (key, value) VALUES ('schema_version', ?)`, strconv.Itoa(v)).WithContext(ctx).Exec(); err != nil {
			return res, wrap("record schema version", err)
		}
	}
	res.To = SchemaVersion
	return res, nil
}

// replication is the CQL replication map of cfg.
func replication(cfg Config) string {
	if len(cfg.Datacenters) == 0 {
		return fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", cfg.ReplicationFactor)
	}
	parts := []string{"'class': 'NetworkTopologyStrategy'"}
	for _, dc := range slices.Sorted(maps.Keys(cfg.Datacenters)) {
		parts = append(parts, fmt.Sprintf("'%s': %d", strings.ReplaceAll(dc, "'", "''"), cfg.Datacenters[dc]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
