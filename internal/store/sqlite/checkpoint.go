package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// checkpointInterval spaces background checkpoints under continuous ingest.
const checkpointInterval = 100 * time.Millisecond

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
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		if wait := checkpointInterval - time.Since(last); wait > 0 {
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
	}
}

func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
