package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// purgeUnusedNames deletes the rows of services and operations no stored span
// refers to any more, so that GetServices and GetOperations forget names
// whose spans were all purged (a client that made up thousands of service
// names would otherwise leave them listed forever). It returns how many
// services and operations went.
//
// Services are checked inside the write transaction: "any span of service s"
// is a lookup on span_index's key prefix. Operations are not a key prefix:
// the candidates are the operations of the spans purges deleted since the
// last call (deleteSegments notes them), each checked on the read pool,
// outside the write lock, with a scan of its service's index range that
// stops at the first span left (soon, for an operation still in use, since
// the purged spans were the oldest). The first call since Open checks every
// operation with one scan of span_index instead. Spans written meanwhile are
// found from their segments (segment ids only grow, and the checks start
// after the writer's next id was read), so an operation that got a span
// meanwhile is kept.
func (s *Store) purgeUnusedNames(ctx context.Context) (services, ops int64, err error) {
	s.wmu.Lock()
	since := s.wcache.nextSegment
	touched := s.purgedOps
	s.purgedOps = nil
	s.wmu.Unlock()
	defer func() {
		if err != nil { // check them next time
			s.wmu.Lock()
			s.notePurgedOps(touched)
			s.wmu.Unlock()
		}
	}()

	var candidates []int64
	if !s.namesChecked.Load() {
		live := make(map[int64]bool)
		if err := s.scanInts(ctx, `SELECT DISTINCT op_id FROM span_index`, func(id int64) { live[id] = true }); err != nil {
			return 0, 0, fmt.Errorf("scan live operations: %w", err)
		}
		if err := s.scanInts(ctx, `SELECT id FROM operations`, func(id int64) {
			if !live[id] {
				candidates = append(candidates, id)
			}
		}); err != nil {
			return 0, 0, fmt.Errorf("list operations: %w", err)
		}
	} else {
		for op, service := range touched {
			var one int
			err := s.rdb.QueryRowContext(ctx, `SELECT 1 FROM span_index WHERE service_id = ? AND op_id = ? LIMIT 1`, service, op).Scan(&one)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				candidates = append(candidates, op)
			case err != nil:
				return 0, 0, fmt.Errorf("look for spans of operation %d: %w", op, err)
			}
		}
	}

	var droppedServices, droppedOps []int64
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `DELETE FROM services AS s
			WHERE NOT EXISTS (SELECT 1 FROM span_index AS i WHERE i.service_id = s.id)
			RETURNING id, name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			s.wcache.dropServices = append(s.wcache.dropServices, name)
			droppedServices = append(droppedServices, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// The operations of a service without spans have none either.
		if len(droppedServices) > 0 {
			args := make([]any, len(droppedServices))
			for i, id := range droppedServices {
				args[i] = id
			}
			err := scanIntsTx(ctx, tx, `SELECT id FROM operations WHERE service_id IN (`+placeholders(len(args))+`)`, args,
				func(id int64) { candidates = append(candidates, id) })
			if err != nil {
				return err
			}
		}
		if len(candidates) == 0 {
			return nil
		}
		// Operations that got spans since the scan stay.
		recent, err := queryBlobs(ctx, tx, `SELECT data FROM segments WHERE id >= ?`, since)
		if err != nil {
			return err
		}
		used := make(map[int64]bool)
		for _, data := range recent {
			hdrs, err := decodeHeaders(data)
			if err != nil {
				return err
			}
			for _, h := range hdrs {
				used[h.op] = true
			}
		}
		for _, id := range candidates {
			if used[id] {
				continue
			}
			used[id] = true // listed twice when its service went too
			var k opKey
			err := tx.QueryRowContext(ctx, `DELETE FROM operations WHERE id = ? RETURNING service_id, name, kind`, id).
				Scan(&k.service, &k.name, &k.kind)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			s.wcache.dropOps = append(s.wcache.dropOps, k)
			droppedOps = append(droppedOps, id)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	s.meta.forget(droppedServices, droppedOps)
	return int64(len(droppedServices)), int64(len(droppedOps)), nil
}

// notePurgedOps adds the operations of deleted spans (op id → service id) to
// those purgeUnusedNames checks next; wmu is held.
func (s *Store) notePurgedOps(ops map[int64]int64) {
	if len(ops) == 0 {
		return
	}
	if s.purgedOps == nil {
		s.purgedOps = make(map[int64]int64, len(ops))
	}
	for op, service := range ops {
		s.purgedOps[op] = service
	}
}

// scanInts runs a query of one integer column on the read pool.
func (s *Store) scanInts(ctx context.Context, query string, fn func(int64)) error {
	rows, err := s.rdb.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	return eachInt(rows, fn)
}

// scanIntsTx runs a query of one integer column in tx.
func scanIntsTx(ctx context.Context, tx *sql.Tx, query string, args []any, fn func(int64)) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	return eachInt(rows, fn)
}

func eachInt(rows *sql.Rows, fn func(int64)) error {
	defer rows.Close()
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return err
		}
		fn(v)
	}
	return rows.Err()
}

// forget drops the names of deleted services and operations. Ids are not
// reused while the store is open (writeCache), so a stale entry could only
// waste memory, except serviceIDs: a service that comes back gets a new id.
func (m *metaCache) forget(services, ops []int64) {
	if len(services) == 0 && len(ops) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range services {
		if name, ok := m.services[id]; ok {
			delete(m.services, id)
			if m.serviceIDs[name] == id {
				delete(m.serviceIDs, name)
			}
		}
	}
	for _, id := range ops {
		delete(m.ops, id)
	}
}
