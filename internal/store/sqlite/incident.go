package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/rootline/rootline/internal/store"
)

var _ store.IncidentStore = (*Store)(nil)

// incidentSchema holds incidents. Like the metric schema it is created with
// IF NOT EXISTS on every open, so stores created before it gain it in place.
// The document is the producer's JSON; the columns are what queries filter
// on. end_ns is 0 while an incident is open.
var incidentSchema = []string{
	`CREATE TABLE IF NOT EXISTS incidents (
		id            TEXT PRIMARY KEY,
		entry         TEXT NOT NULL,
		entry_service TEXT NOT NULL,
		service       TEXT NOT NULL,
		start_ns      INTEGER NOT NULL,
		end_ns        INTEGER NOT NULL,
		updated_ns    INTEGER NOT NULL,
		doc           BLOB NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS incidents_start ON incidents (start_ns)`,
}

// maxIncidents bounds the incidents one query returns.
const maxIncidents = 1000

func (s *Store) createIncidentSchema(ctx context.Context) error {
	for _, stmt := range incidentSchema {
		if _, err := s.wdb.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlite: create incident schema: %w", err)
		}
	}
	return nil
}

// PutIncident implements store.IncidentStore.
func (s *Store) PutIncident(ctx context.Context, in store.Incident) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if in.ID == "" {
		return errors.New("sqlite: put incident: empty id")
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(context.WithoutCancel(ctx), `INSERT INTO incidents (id, entry, entry_service, service, start_ns, end_ns, updated_ns, doc)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET entry = excluded.entry, entry_service = excluded.entry_service, service = excluded.service,
				start_ns = excluded.start_ns, end_ns = excluded.end_ns, updated_ns = excluded.updated_ns, doc = excluded.doc`,
			in.ID, in.Entry, in.EntryService, in.Service, in.Start, in.End, in.Updated, in.Doc)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: put incident: %w", err)
	}
	return nil
}

const incidentColumns = `id, entry, entry_service, service, start_ns, end_ns, updated_ns, doc`

func scanIncident(sc interface{ Scan(...any) error }) (store.Incident, error) {
	var in store.Incident
	err := sc.Scan(&in.ID, &in.Entry, &in.EntryService, &in.Service, &in.Start, &in.End, &in.Updated, &in.Doc)
	return in, err
}

// GetIncident implements store.IncidentStore.
func (s *Store) GetIncident(ctx context.Context, id string) (store.Incident, error) {
	if err := s.checkOpen(); err != nil {
		return store.Incident{}, err
	}
	in, err := scanIncident(s.rdb.QueryRowContext(ctx, `SELECT `+incidentColumns+` FROM incidents WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return in, fmt.Errorf("incident %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return in, fmt.Errorf("sqlite: get incident: %w", err)
	}
	return in, nil
}

// FindIncidents implements store.IncidentStore.
func (s *Store) FindIncidents(ctx context.Context, q store.IncidentQuery) ([]store.Incident, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxIncidents)
	query := `SELECT ` + incidentColumns + ` FROM incidents WHERE 1 = 1`
	var args []any
	if q.Service != "" {
		query += ` AND (service = ? OR entry_service = ?)`
		args = append(args, q.Service, q.Service)
	}
	if q.Entry != "" {
		query += ` AND entry = ?`
		args = append(args, q.Entry)
	}
	if q.To > 0 {
		query += ` AND start_ns <= ?`
		args = append(args, q.To)
	}
	if q.From > 0 {
		query += ` AND (end_ns = 0 OR end_ns >= ?)`
		args = append(args, q.From)
	}
	query += ` ORDER BY start_ns DESC, id LIMIT ?`
	args = append(args, limit)
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: find incidents: %w", err)
	}
	defer rows.Close()
	var out []store.Incident
	for rows.Next() {
		in, err := scanIncident(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: find incidents: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: find incidents: %w", err)
	}
	return out, nil
}

// purgeIncidents deletes the incidents that closed before before.
func (s *Store) purgeIncidents(ctx context.Context, before int64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	if _, err := s.wdb.ExecContext(ctx, `DELETE FROM incidents WHERE end_ns != 0 AND end_ns < ?`, before); err != nil {
		return fmt.Errorf("purge incidents: %w", err)
	}
	return nil
}
