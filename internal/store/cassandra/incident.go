package cassandra

import (
	"context"
	"errors"
	"fmt"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/store"
)

var _ store.IncidentStore = (*Store)(nil)

// schemaV2 keeps incidents: the document by id, and an index of every
// incident's filter columns in one partition, newest start first. Incidents
// are few (an operator's outages, purged with anomalous retention once
// closed), so a query reads the index rows and filters them here; the
// documents, the large part, are read by id for the incidents kept only.
var schemaV2 = []string{
	`CREATE TABLE IF NOT EXISTS incidents (id text PRIMARY KEY, entry text, entry_service text, service text,
		start_ns bigint, end_ns bigint, updated_ns bigint, doc blob)`,
	`CREATE TABLE IF NOT EXISTS incident_index (part int, start_ns bigint, id text, entry text, entry_service text,
		service text, end_ns bigint, PRIMARY KEY ((part), start_ns, id)) WITH CLUSTERING ORDER BY (start_ns DESC, id ASC)`,
}

// maxIncidents bounds the incidents one query returns (as the SQLite store).
const maxIncidents = 1000

// PutIncident implements store.IncidentStore. The index row moves when the
// incident's start changed.
func (s *Store) PutIncident(ctx context.Context, in store.Incident) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if in.ID == "" {
		return errors.New("cassandra: put incident: empty id")
	}
	var oldStart int64
	err := s.session.Query(`SELECT start_ns FROM incidents WHERE id = ?`, in.ID).WithContext(ctx).Scan(&oldStart)
	moved := err == nil && oldStart != in.Start
	if err != nil && !errors.Is(err, gocql.ErrNotFound) {
		return wrap("put incident", err)
	}
	b := s.session.NewBatch(gocql.LoggedBatch).WithContext(ctx)
	if moved {
		b.Query(`DELETE FROM incident_index WHERE part = 0 AND start_ns = ? AND id = ?`, oldStart, in.ID)
	}
	b.Query(`INSERT INTO incident_index (part, start_ns, id, entry, entry_service, service, end_ns) VALUES (0, ?, ?, ?, ?, ?, ?)`,
		in.Start, in.ID, in.Entry, in.EntryService, in.Service, in.End)
	b.Query(`INSERT INTO incidents (id, entry, entry_service, service, start_ns, end_ns, updated_ns, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		in.ID, in.Entry, in.EntryService, in.Service, in.Start, in.End, in.Updated, in.Doc)
	return wrap("put incident", s.session.ExecuteBatch(b))
}

const incidentColumns = `id, entry, entry_service, service, start_ns, end_ns, updated_ns, doc`

// GetIncident implements store.IncidentStore.
func (s *Store) GetIncident(ctx context.Context, id string) (store.Incident, error) {
	var in store.Incident
	if err := s.checkOpen(); err != nil {
		return in, err
	}
	err := s.session.Query(`SELECT `+incidentColumns+` FROM incidents WHERE id = ?`, id).WithContext(ctx).
		Scan(&in.ID, &in.Entry, &in.EntryService, &in.Service, &in.Start, &in.End, &in.Updated, &in.Doc)
	if errors.Is(err, gocql.ErrNotFound) {
		return in, fmt.Errorf("incident %s: %w", id, store.ErrNotFound)
	}
	return in, wrap("get incident", err)
}

// incidentRow is an incident's row in incident_index.
type incidentRow struct {
	id, entry, entryService, service string
	start, end                       int64
}

// incidentIndex calls fn with the index rows newest first, while fn says go.
func (s *Store) incidentIndex(ctx context.Context, fn func(r incidentRow) bool) error {
	iter := s.session.Query(`SELECT id, entry, entry_service, service, start_ns, end_ns FROM incident_index WHERE part = 0`).
		WithContext(ctx).PageSize(pageSize).Iter()
	var r incidentRow
	for iter.Scan(&r.id, &r.entry, &r.entryService, &r.service, &r.start, &r.end) {
		if !fn(r) {
			break
		}
	}
	return wrap("read incident index", iter.Close())
}

// FindIncidents implements store.IncidentStore, with the SQLite store's
// order: newest start first, then id.
func (s *Store) FindIncidents(ctx context.Context, q store.IncidentQuery) ([]store.Incident, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxIncidents)
	var ids []string
	err := s.incidentIndex(ctx, func(r incidentRow) bool {
		switch {
		case q.Service != "" && r.service != q.Service && r.entryService != q.Service,
			q.Entry != "" && r.entry != q.Entry,
			q.To > 0 && r.start > q.To,
			q.From > 0 && r.end != 0 && r.end < q.From:
			return true
		}
		ids = append(ids, r.id)
		return len(ids) < limit
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.Incident, 0, len(ids))
	for _, id := range ids {
		in, err := s.GetIncident(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // purged since the index was read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// purgeIncidents deletes the incidents closed before cut.
func (s *Store) purgeIncidents(ctx context.Context, cut int64) error {
	var old []incidentRow
	if err := s.incidentIndex(ctx, func(r incidentRow) bool {
		if r.end != 0 && r.end < cut {
			old = append(old, r)
		}
		return true
	}); err != nil {
		return err
	}
	for _, r := range old {
		b := s.session.NewBatch(gocql.LoggedBatch).WithContext(ctx)
		b.Query(`DELETE FROM incidents WHERE id = ?`, r.id)
		b.Query(`DELETE FROM incident_index WHERE part = 0 AND start_ns = ? AND id = ?`, r.start, r.id)
		if err := s.session.ExecuteBatch(b); err != nil {
			return wrap("purge incidents", err)
		}
	}
	return nil
}
