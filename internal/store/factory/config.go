// Package factory builds the storage of a Rootline server from configuration,
// one backend per kind of data, as Jaeger v2 does: spans (with artifact
// metadata and span links), artifact content (blobs) and metric points. Each
// kind has a type and one optional section per backend; defaults are applied
// only to the backend chosen, Validate rejects a section that does not match
// the type, and Open holds the one switch that builds each kind.
//
// A new backend (Cassandra for spans, S3 for blobs, a Kafka stage in front of
// the writer) is a sibling package under internal/store, a section here and a
// case in Open; it runs the storetest suites of the contracts it implements.
//
// Open returns the backends combined behind store.Store with what every
// backend gets for free: clock-skew flagging of spans (store.FlagClockSkew),
// latency of every operation in one histogram, and the store's write health
// for the server's readiness.
package factory

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/s3"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// Backend type names.
const (
	TypeSQLite    = "sqlite"    // spans, artifact metadata and metrics in internal/store/sqlite
	TypeFS        = "fs"        // blobs in a directory, internal/store/fsblob
	TypeCassandra = "cassandra" // spans, artifact metadata and metrics in internal/store/cassandra
	TypeS3        = "s3"        // blobs in an S3-compatible bucket, internal/store/s3
)

// Config chooses and configures the backends. Its zero value, with defaults
// applied, is the embedded store: SQLite in the data directory, blobs in
// <data dir>/blobs.
type Config struct {
	Spans     SpansConfig     `yaml:"spans"`
	Artifacts ArtifactsConfig `yaml:"artifacts"`
	Metrics   MetricsConfig   `yaml:"metrics"`
}

// SpansConfig chooses the span store. Artifact metadata and the links between
// artifacts and spans live in it too, so that a purge of spans deletes them in
// the same transaction.
type SpansConfig struct {
	// Type is "sqlite" (the default) or "cassandra".
	Type      string            `yaml:"type"`
	SQLite    *SQLiteConfig     `yaml:"sqlite,omitempty"`
	Cassandra *cassandra.Config `yaml:"cassandra,omitempty"`
}

// SQLiteConfig configures the embedded SQLite store.
type SQLiteConfig struct {
	// Dir holds rootline.db; default: the server's data directory.
	Dir string `yaml:"dir"`
	// Synchronous is FULL (an acknowledged span survives power loss, the
	// default) or NORMAL (it survives a crash of the server process; faster).
	Synchronous string `yaml:"synchronous"`
	// CacheMiB is the writer's page cache in MiB; each reader has a quarter
	// of it. 0: the server sets 1/32 of its memory limit, 8 to 64 MiB.
	CacheMiB int `yaml:"cache_mib"`
}

// StoreConfig is the sqlite package's configuration of the store in c.
func (c SQLiteConfig) StoreConfig(blobs store.BlobStore) sqlite.Config {
	return sqlite.Config{Dir: c.Dir, Synchronous: c.Synchronous, CacheMiB: c.CacheMiB, Blobs: blobs}
}

// ArtifactsConfig chooses where artifact content (blobs) goes.
type ArtifactsConfig struct {
	// Type is "fs" (the default) or "s3".
	Type string     `yaml:"type"`
	FS   *FSConfig  `yaml:"fs,omitempty"`
	S3   *s3.Config `yaml:"s3,omitempty"`
}

// FSConfig configures the filesystem blob store.
type FSConfig struct {
	// Dir holds the blobs; default: <data dir>/blobs.
	Dir string `yaml:"dir"`
}

// MetricsConfig chooses the store of OTLP metric points.
type MetricsConfig struct {
	// Type is the span store's type (the default): the points live in the
	// span store's database, SQLite or Cassandra.
	Type string `yaml:"type"`
}

// ApplyDefaults fills in the type of every kind left empty and the settings
// of the backends chosen; dataDir is the server's --data-dir. Sections of
// backends not chosen are left alone, for Validate to reject.
func (c *Config) ApplyDefaults(dataDir string) {
	if chosen(&c.Spans.Type, TypeSQLite) {
		c.Spans.SQLite = cmp.Or(c.Spans.SQLite, &SQLiteConfig{})
		c.Spans.SQLite.Dir = cmp.Or(c.Spans.SQLite.Dir, dataDir)
		c.Spans.SQLite.Synchronous = cmp.Or(strings.ToUpper(c.Spans.SQLite.Synchronous), "FULL")
	}
	if c.Spans.Type == TypeCassandra {
		c.Spans.Cassandra = cmp.Or(c.Spans.Cassandra, &cassandra.Config{})
		c.Spans.Cassandra.ApplyDefaults()
	}
	if chosen(&c.Artifacts.Type, TypeFS) {
		c.Artifacts.FS = cmp.Or(c.Artifacts.FS, &FSConfig{})
		if c.Artifacts.FS.Dir == "" && dataDir != "" {
			c.Artifacts.FS.Dir = filepath.Join(dataDir, "blobs")
		}
	}
	if c.Artifacts.Type == TypeS3 {
		c.Artifacts.S3 = cmp.Or(c.Artifacts.S3, &s3.Config{})
		c.Artifacts.S3.ApplyDefaults()
	}
	chosen(&c.Metrics.Type, c.Spans.Type)
}

// chosen sets an empty type to def, lowercases it, and reports whether it is
// def (the backend whose defaults the caller then applies).
func chosen(typ *string, def string) bool {
	*typ = strings.ToLower(cmp.Or(*typ, def))
	return *typ == def
}

// Validate checks a configuration after ApplyDefaults: known types, exactly
// the sections of the backends chosen, and their settings.
func (c Config) Validate() error {
	var errs []error
	sections := func(kind, typ string, set map[string]bool) {
		for name, ok := range set {
			if ok && name != typ {
				errs = append(errs, fmt.Errorf("storage.%s.type is %q but a storage.%s.%s section is given: remove it or set the type to %q",
					kind, typ, kind, name, name))
			}
		}
	}
	switch c.Spans.Type {
	case TypeSQLite:
		if c.Spans.SQLite == nil || c.Spans.SQLite.Dir == "" {
			errs = append(errs, errors.New("storage.spans.sqlite.dir (or --data-dir) must not be empty"))
		} else if s := c.Spans.SQLite.Synchronous; s != "FULL" && s != "NORMAL" {
			errs = append(errs, fmt.Errorf("storage.spans.sqlite.synchronous (--sqlite.synchronous) must be FULL or NORMAL, got %q", s))
		}
	case TypeCassandra:
		if c.Spans.Cassandra == nil {
			errs = append(errs, errors.New("storage.spans.cassandra: missing"))
		} else if err := c.Spans.Cassandra.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("storage.spans.%w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("storage.spans.type %q is not a span store (known: %s, %s)", c.Spans.Type, TypeSQLite, TypeCassandra))
	}
	sections("spans", c.Spans.Type, map[string]bool{TypeSQLite: c.Spans.SQLite != nil, TypeCassandra: c.Spans.Cassandra != nil})

	switch c.Artifacts.Type {
	case TypeFS:
		if c.Artifacts.FS == nil || c.Artifacts.FS.Dir == "" {
			errs = append(errs, errors.New("storage.artifacts.fs.dir (or --data-dir) must not be empty"))
		}
	case TypeS3:
		if c.Artifacts.S3 == nil {
			errs = append(errs, errors.New("storage.artifacts.s3: missing"))
		} else if err := c.Artifacts.S3.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("storage.artifacts.%w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("storage.artifacts.type %q is not a blob store (known: %s, %s)", c.Artifacts.Type, TypeFS, TypeS3))
	}
	sections("artifacts", c.Artifacts.Type, map[string]bool{TypeFS: c.Artifacts.FS != nil, TypeS3: c.Artifacts.S3 != nil})

	switch c.Metrics.Type {
	case TypeSQLite, TypeCassandra:
		if c.Spans.Type != c.Metrics.Type {
			errs = append(errs, fmt.Errorf("storage.metrics.type %q keeps metrics in the span store's database, but storage.spans.type is %q",
				c.Metrics.Type, c.Spans.Type))
		}
	default:
		errs = append(errs, fmt.Errorf("storage.metrics.type %q is not a metric store (known: %s, %s)", c.Metrics.Type, TypeSQLite, TypeCassandra))
	}
	return errors.Join(errs...)
}
