package factory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/fsblob"
	"github.com/rootline/rootline/internal/store/s3"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// Options are the process-level inputs of Open.
type Options struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the store's metrics; nil registers none.
	Registerer prometheus.Registerer
	// MaxClockSkew: spans whose end is further than this from the time they
	// are written are flagged and aged from their receive time
	// (store.FlagClockSkew). 0 means store.DefaultMaxClockSkew; negative
	// disables the flagging.
	MaxClockSkew time.Duration
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
}

// Open builds the backends cfg names (after ApplyDefaults and Validate) and
// returns them combined. On error nothing is left open.
func Open(cfg Config, opts Options) (*Storage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxClockSkew == 0 {
		opts.MaxClockSkew = store.DefaultMaxClockSkew
	}
	var c combined

	var blobs store.BlobStore
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch cfg.Artifacts.Type {
	case TypeFS:
		fs, err := fsblob.Open(cfg.Artifacts.FS.Dir)
		if err != nil {
			return nil, fmt.Errorf("open artifact store: %w", err)
		}
		blobs = fs
	case TypeS3:
		b, err := s3.Open(ctx, *cfg.Artifacts.S3, opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("open artifact store: %w", err)
		}
		blobs = b
	}

	switch cfg.Spans.Type {
	case TypeSQLite:
		db, err := sqlite.Open(cfg.Spans.SQLite.StoreConfig(blobs), opts.Logger)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open span store in %s: %w", cfg.Spans.SQLite.Dir, err), c.Close())
		}
		c.SpanWriter, c.SpanReader, c.ArtifactStore, c.Purger = db, db, db, db
		c.prober = db
		c.incidents = db
		c.closers = append(c.closers, db)
		if cfg.Metrics.Type == TypeSQLite {
			c.MetricWriter, c.MetricReader = db, db
		}
	case TypeCassandra:
		db, err := cassandra.Open(ctx, *cfg.Spans.Cassandra, blobs, opts.Logger)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open span store: %w", err), c.Close())
		}
		c.SpanWriter, c.SpanReader, c.ArtifactStore, c.Purger = db, db, db, db
		c.prober = db
		c.incidents = db
		c.closers = append(c.closers, db)
		if cfg.Metrics.Type == TypeCassandra {
			c.MetricWriter, c.MetricReader = db, db
		}
	}
	// The blob store is closed after the span store that writes to it.
	if cl, ok := blobs.(io.Closer); ok {
		c.closers = append(c.closers, cl)
	}
	st, err := newStorage(&c, opts)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return st, nil
}

// combined puts together the backends of each kind of data.
type combined struct {
	store.SpanWriter
	store.SpanReader
	store.ArtifactStore
	store.MetricWriter
	store.MetricReader
	store.Purger
	prober store.WriteProber // nil when the span store cannot probe
	// incidents is nil when the span store keeps none.
	incidents store.IncidentStore
	closers   []io.Closer // in closing order
}

// Incidents returns the incident store, nil when the backends keep none.
func (c *combined) Incidents() store.IncidentStore { return c.incidents }

func (c *combined) Close() error {
	var errs []error
	for _, cl := range c.closers {
		errs = append(errs, cl.Close())
	}
	c.closers = nil
	return errors.Join(errs...)
}

// SpanArtifacts implements store.SpanArtifactReader with the artifact
// store's one-read listing where it has one.
func (c *combined) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	return store.SpanArtifacts(ctx, c.ArtifactStore, id)
}

// ProbeWrite implements store.WriteProber with the span store's probe; a
// span store without one is probed by nothing and reports success.
func (c *combined) ProbeWrite(ctx context.Context) error {
	if c.prober == nil {
		return nil
	}
	return c.prober.ProbeWrite(ctx)
}
