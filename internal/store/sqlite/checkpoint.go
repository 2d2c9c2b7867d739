package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// Background checkpoints are spaced by checkpointInterval while ingest is
// heavy (the last checkpoint found at least busyWALFrames frames in the WAL)
// and by idleCheckpointInterval otherwise. A checkpoint copies every page
// written since the last one, and a trickle of small commits (a mesh whose
// sidecars flush once a second) rewrites the same index pages commit after
// commit: one checkpoint a second instead of ten writes each of them once
// (BenchmarkWriteSpansTrickle: −31 % bytes written). Under heavy ingest the
// short interval keeps the WAL from growing between checkpoints.
const (
	checkpointInterval     = 100 * time.Millisecond
	idleCheckpointInterval = time.Second
	busyWALFrames          = 1000
)

// checkpointer copies the WAL into the database file from its own
// connection and goroutine. SQLite's automatic checkpoint runs inside the
// commit of whichever write crosses the threshold, stalling ingest; here it
// overlaps with the next write transactions instead (WAL allows a checkpoint
// concurrent with one writer). The writer connection runs with
// wal_autocheckpoint=0.
type checkpointer struct {
	db   *sql.DB
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func startCheckpointer(dsn string, log *slog.Logger) (*checkpointer, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open checkpointer: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	c := &checkpointer{
		db:   db,
		log:  log,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// notify tells the checkpointer that a transaction committed. It never
// blocks.
func (c *checkpointer) notify() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	var last time.Time
	interval := checkpointInterval
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		if wait := interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		var busy, frames, done int
		err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done)
		if err != nil {
			c.log.Warn("checkpoint failed", "err", err)
		}
		interval = checkpointInterval
		if frames < busyWALFrames {
			interval = idleCheckpointInterval
		}
	}
}

func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
