package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

const (
	defaultTraceLimit   = 20
	defaultAnomalyLimit = 100
	// maxInParams bounds the ids bound into one "IN (…)" list.
	maxInParams = 500
)

type opInfo struct {
	service int64
	name    string
	kind    model.SpanKind
}

// metaCache resolves the interned ids of span rows for readers. Services,
// operations and resources are never changed and their ids are not reused
// while the store is open (a purge deletes the unused ones and forgets them
// here, purgenames.go), so entries never go stale; a miss reads the row (a span is committed with or after the rows it
// refers to, so the row is always there). Misses are read through their own
// connection pool (Store.mdb): they happen while a span query holds a read
// connection, and taking a second one from the same pool could deadlock when
// every connection is held by such a query.
type metaCache struct {
	mu         sync.RWMutex
	services   map[int64]string
	serviceIDs map[string]int64
	ops        map[int64]opInfo
	resources  map[int64][]model.KeyValue
}

func (m *metaCache) init() {
	m.services = make(map[int64]string)
	m.serviceIDs = make(map[string]int64)
	m.ops = make(map[int64]opInfo)
	m.resources = make(map[int64][]model.KeyValue)
}

func (s *Store) serviceName(ctx context.Context, id int64) (string, error) {
	s.meta.mu.RLock()
	name, ok := s.meta.services[id]
	s.meta.mu.RUnlock()
	if ok {
		return name, nil
	}
	if err := s.mdb.QueryRowContext(ctx, `SELECT name FROM services WHERE id = ?`, id).Scan(&name); err != nil {
		return "", fmt.Errorf("sqlite: service %d: %w", id, err)
	}
	s.meta.mu.Lock()
	s.meta.services[id] = name
	s.meta.serviceIDs[name] = id
	s.meta.mu.Unlock()
	return name, nil
}

// lookupServiceID returns the id of a service name; ok is false if no span
// of that service was ever stored.
func (s *Store) lookupServiceID(ctx context.Context, name string) (id int64, ok bool, err error) {
	s.meta.mu.RLock()
	id, ok = s.meta.serviceIDs[name]
	s.meta.mu.RUnlock()
	if ok {
		return id, true, nil
	}
	err = s.mdb.QueryRowContext(ctx, `SELECT id FROM services WHERE name = ?`, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: look up service: %w", err)
	}
	s.meta.mu.Lock()
	s.meta.services[id] = name
	s.meta.serviceIDs[name] = id
	s.meta.mu.Unlock()
	return id, true, nil
}

func (s *Store) op(ctx context.Context, id int64) (opInfo, error) {
	s.meta.mu.RLock()
	op, ok := s.meta.ops[id]
	s.meta.mu.RUnlock()
	if ok {
		return op, nil
	}
	err := s.mdb.QueryRowContext(ctx, `SELECT service_id, name, kind FROM operations WHERE id = ?`, id).
		Scan(&op.service, &op.name, &op.kind)
	if err != nil {
		return op, fmt.Errorf("sqlite: operation %d: %w", id, err)
	}
	s.meta.mu.Lock()
	s.meta.ops[id] = op
	s.meta.mu.Unlock()
	return op, nil
}

// resource returns the shared, read-only attribute list of a resource id.
func (s *Store) resource(ctx context.Context, id int64) ([]model.KeyValue, error) {
	if id == 0 {
		return nil, nil
	}
	s.meta.mu.RLock()
	kvs, ok := s.meta.resources[id]
	s.meta.mu.RUnlock()
	if ok {
		return kvs, nil
	}
	var data []byte
	if err := s.mdb.QueryRowContext(ctx, `SELECT data FROM resources WHERE id = ?`, id).Scan(&data); err != nil {
		return nil, fmt.Errorf("sqlite: resource %d: %w", id, err)
	}
	kvs, err := decodeKVs(data)
	if err != nil {
		return nil, fmt.Errorf("sqlite: resource %d: %w", id, err)
	}
	s.meta.mu.Lock()
	if len(s.meta.resources) >= maxCachedResources {
		clear(s.meta.resources)
	}
	s.meta.resources[id] = kvs
	s.meta.mu.Unlock()
	return kvs, nil
}

// segRow is one row of the segments table.
type segRow struct {
	id    int64
	trace model.TraceID
	data  []byte
}

// querySegments runs a query selecting (id, trace_id, data) of segments.
func (s *Store) querySegments(ctx context.Context, query string, args ...any) ([]segRow, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query segments: %w", err)
	}
	defer rows.Close()
	var out []segRow
	for rows.Next() {
		var r segRow
		var trace sql.RawBytes
		if err := rows.Scan(&r.id, &trace, &r.data); err != nil {
			return nil, fmt.Errorf("sqlite: scan segment: %w", err)
		}
		if len(trace) != len(r.trace) {
			return nil, fmt.Errorf("%w: trace id of %d bytes", errCorrupt, len(trace))
		}
		copy(r.trace[:], trace)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: query segments: %w", err)
	}
	return out, nil
}

// segmentsByTrace reads every segment of the given traces.
func (s *Store) segmentsByTrace(ctx context.Context, ids []model.TraceID) ([]segRow, error) {
	var segIDs []int64
	for chunk := range slices.Chunk(ids, maxInParams) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id[:]
		}
		rows, err := s.rdb.QueryContext(ctx, `SELECT segments FROM traces WHERE trace_id IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: query traces: %w", err)
		}
		for rows.Next() {
			var list sql.RawBytes
			if err := rows.Scan(&list); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: query traces: %w", err)
			}
			if segIDs, err = appendIDList(segIDs, list); err != nil {
				rows.Close()
				return nil, err
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, fmt.Errorf("sqlite: query traces: %w", err)
		}
	}
	return s.segmentsByID(ctx, segIDs)
}

// segmentsByID reads segments by id.
func (s *Store) segmentsByID(ctx context.Context, ids []int64) ([]segRow, error) {
	var out []segRow
	for chunk := range slices.Chunk(ids, maxInParams) {
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		segs, err := s.querySegments(ctx, `SELECT id, trace_id, data FROM segments WHERE id IN (`+placeholders(len(chunk))+`)`, args...)
		if err != nil {
			return nil, err
		}
		out = append(out, segs...)
	}
	return out, nil
}

// appendIDList decodes a traces.segments list (uvarints) onto dst.
func appendIDList(dst []int64, list []byte) ([]int64, error) {
	for len(list) > 0 {
		v, n := binary.Uvarint(list)
		if n <= 0 {
			return dst, fmt.Errorf("%w: segment list", errCorrupt)
		}
		dst = append(dst, int64(v))
		list = list[n:]
	}
	return dst, nil
}

// decodeNamed decodes a segment and fills in the names behind its ids.
func (s *Store) decodeNamed(ctx context.Context, seg segRow) ([]*model.Span, error) {
	spans, hdrs, err := decodeSegment(seg.trace, seg.data)
	if err != nil {
		return nil, fmt.Errorf("segment %d: %w", seg.id, err)
	}
	kept := spans[:0]
	for i, sp := range spans {
		h := &hdrs[i]
		if sp.Service, err = s.serviceName(ctx, h.service); nameGone(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		op, err := s.op(ctx, h.op)
		if nameGone(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		sp.Name, sp.Kind = op.name, op.kind
		res, err := s.resource(ctx, h.resource)
		if err != nil {
			return nil, err
		}
		sp.Resource = slices.Clone(res)
		kept = append(kept, sp)
	}
	return kept, nil
}

// nameGone reports whether a name lookup found no row. Names are looked up
// through their own connections, after the span rows were read: a purge that
// committed in between deleted the span and then the names it alone used
// (purgenames.go). The span is skipped, as if the purge had come first.
func nameGone(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// spansOf decodes segments into spans grouped by trace. A span stored twice
// (written again) appears once, from its newest segment.
func (s *Store) spansOf(ctx context.Context, segs []segRow) (map[model.TraceID][]*model.Span, error) {
	slices.SortFunc(segs, func(a, b segRow) int { return cmp.Compare(a.id, b.id) })
	type key struct {
		trace model.TraceID
		span  model.SpanID
	}
	pos := make(map[key]int)
	out := make(map[model.TraceID][]*model.Span)
	for _, seg := range segs {
		spans, err := s.decodeNamed(ctx, seg)
		if err != nil {
			return nil, err
		}
		for _, sp := range spans {
			k := key{sp.TraceID, sp.SpanID}
			if i, ok := pos[k]; ok {
				out[sp.TraceID][i] = sp
				continue
			}
			pos[k] = len(out[sp.TraceID])
			out[sp.TraceID] = append(out[sp.TraceID], sp)
		}
	}
	for _, spans := range out {
		sortSpans(spans)
	}
	return out, nil
}

func sortSpans(spans []*model.Span) {
	slices.SortFunc(spans, func(a, b *model.Span) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return slices.Compare(a.SpanID[:], b.SpanID[:])
	})
}

// GetTrace returns the spans of a trace ordered by start time.
func (s *Store) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	segs, err := s.segmentsByTrace(ctx, []model.TraceID{id})
	if err != nil {
		return nil, err
	}
	byTrace, err := s.spansOf(ctx, segs)
	if err != nil {
		return nil, err
	}
	spans := byTrace[id]
	if len(spans) == 0 {
		return nil, fmt.Errorf("trace %s: %w", id, store.ErrNotFound)
	}
	return spans, nil
}

// FindTraces returns the traces matching q, newest first. Every filter of q
// applies to one span (the matching span) and a trace's rank is the start of
// its newest matching span; see FindTraceIDs.
func (s *Store) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	ids, err := s.FindTraceIDs(ctx, q)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	segs, err := s.segmentsByTrace(ctx, ids)
	if err != nil {
		return nil, err
	}
	byTrace, err := s.spansOf(ctx, segs)
	if err != nil {
		return nil, err
	}
	out := make([][]*model.Span, 0, len(ids))
	for _, id := range ids {
		// A trace purged between the two queries is left out.
		if spans := byTrace[id]; len(spans) > 0 {
			out = append(out, spans)
		}
	}
	return out, nil
}

// match is a trace found by a search and the start of its newest matching
// span.
type match struct {
	trace model.TraceID
	start int64
}

// FindTraceIDs returns the ids of the traces that have a span matching every
// filter of q (service, operation, time range, duration range, tags,
// anomalous, error), newest first by that span's start.
//
// With a service, one backwards scan of span_index (clustered by service and
// start) yields the service's spans newest first, filtered on operation,
// duration and flags inside the index; the scan stops as soon as Limit
// distinct traces are found. Tags are checked in Go on the decoded segment of
// each candidate span. AnomalousOnly scans the partial anomalous-span indexes
// instead. Without a service, each service is searched this way for its
// Limit newest traces and the results are merged: a trace among the Limit
// newest overall is among the Limit newest of the service of its newest
// matching span, so the merge is exact.
func (s *Store) FindTraceIDs(ctx context.Context, q store.TraceQuery) ([]model.TraceID, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = defaultTraceLimit
	}
	var services []int64
	if q.Service != "" {
		id, ok, err := s.lookupServiceID(ctx, q.Service)
		if err != nil || !ok {
			return nil, err
		}
		services = []int64{id}
	}

	var matches []match
	switch {
	case q.AnomalousOnly && len(services) == 0:
		// One ordered scan of the (small) anomalous index covers all services.
		var err error
		if matches, err = s.searchSpans(ctx, q, -1); err != nil {
			return nil, err
		}
	case len(services) == 1:
		var err error
		if matches, err = s.searchSpans(ctx, q, services[0]); err != nil {
			return nil, err
		}
	default:
		all, err := s.allServiceIDs(ctx)
		if err != nil {
			return nil, err
		}
		best := make(map[model.TraceID]int64)
		for _, svc := range all {
			ms, err := s.searchSpans(ctx, q, svc)
			if err != nil {
				return nil, err
			}
			for _, m := range ms {
				if cur, ok := best[m.trace]; !ok || m.start > cur {
					best[m.trace] = m.start
				}
			}
		}
		for trace, start := range best {
			matches = append(matches, match{trace, start})
		}
		slices.SortFunc(matches, func(a, b match) int {
			return cmp.Or(cmp.Compare(b.start, a.start), slices.Compare(a.trace[:], b.trace[:]))
		})
		matches = matches[:min(len(matches), q.Limit)]
	}
	ids := make([]model.TraceID, len(matches))
	for i, m := range matches {
		ids[i] = m.trace
	}
	return ids, nil
}

// searchSpans returns up to q.Limit traces with a span of service (-1: any,
// only with AnomalousOnly) matching q, newest first.
func (s *Store) searchSpans(ctx context.Context, q store.TraceQuery, service int64) ([]match, error) {
	var (
		where []string
		args  []any
		index string
	)
	switch {
	case q.AnomalousOnly && service < 0:
		index = " INDEXED BY span_index_anomalous"
		where = append(where, "i.flags & 1 = 1")
	case q.AnomalousOnly:
		index = " INDEXED BY span_index_anomalous_service"
		where = append(where, "i.flags & 1 = 1", "i.service_id = ?")
		args = append(args, service)
	default:
		where = append(where, "i.service_id = ?")
		args = append(args, service)
	}
	if q.Operation != "" {
		ops, err := s.opIDs(ctx, service >= 0, service, q.Operation)
		if err != nil || len(ops) == 0 {
			return nil, err
		}
		where = append(where, "i.op_id IN ("+placeholders(len(ops))+")")
		for _, id := range ops {
			args = append(args, id)
		}
	}
	if q.StartMin != 0 {
		where = append(where, "i.start >= ?")
		args = append(args, q.StartMin)
	}
	if q.StartMax != 0 {
		where = append(where, "i.start <= ?")
		args = append(args, q.StartMax)
	}
	if q.DurationMin != 0 {
		where = append(where, "i.duration >= ?")
		args = append(args, q.DurationMin)
	}
	if q.DurationMax != 0 {
		where = append(where, "i.duration <= ?")
		args = append(args, q.DurationMax)
	}
	if q.ErrorOnly {
		where = append(where, "i.flags & 2 = 2")
	}
	cols := "i.start, s.trace_id"
	if len(q.Tags) > 0 {
		cols += ", s.data, i.idx"
	}
	// CROSS JOIN keeps span_index the outer loop, so rows come in index
	// order and ORDER BY needs no sort.
	query := "SELECT " + cols + " FROM span_index AS i" + index + " CROSS JOIN segments AS s ON s.id = i.segment WHERE " +
		strings.Join(where, " AND ") + " ORDER BY i.start DESC"

	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: find traces: %w", err)
	}
	defer rows.Close()
	var (
		out   []match
		seen  = make(map[model.TraceID]struct{}, q.Limit)
		start int64
		trace sql.RawBytes
		data  sql.RawBytes
		idx   int
		tm    *tagMatcher
	)
	dest := []any{&start, &trace}
	if len(q.Tags) > 0 {
		dest = append(dest, &data, &idx)
		tm = newTagMatcher(q.Tags)
	}
	for len(out) < q.Limit && rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("sqlite: find traces: %w", err)
		}
		var id model.TraceID
		if len(trace) != len(id) {
			return nil, fmt.Errorf("%w: trace id of %d bytes", errCorrupt, len(trace))
		}
		copy(id[:], trace)
		if _, dup := seen[id]; dup {
			continue
		}
		if tm != nil {
			ok, err := s.matchTags(ctx, tm, data, idx)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		seen[id] = struct{}{}
		out = append(out, match{id, start})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: find traces: %w", err)
	}
	return out, nil
}

// matchTags reports whether every tag matches, by text value, a span
// attribute or a resource attribute of the idx-th span of a segment.
func (s *Store) matchTags(ctx context.Context, tm *tagMatcher, data []byte, idx int) (bool, error) {
	resID, err := tm.spanAttrs(data, idx)
	if err != nil {
		return false, err
	}
	var res []model.KeyValue
	for i, hit := range tm.hit {
		if hit {
			continue
		}
		if res == nil {
			if res, err = s.resource(ctx, resID); err != nil || res == nil {
				return false, err
			}
		}
		if !hasAttr(res, tm.keys[i], tm.vals[i]) {
			return false, nil
		}
	}
	return true, nil
}

func hasAttr(kvs []model.KeyValue, key, text string) bool {
	for i := range kvs {
		if kvs[i].Key == key && kvs[i].Value.String() == text {
			return true
		}
	}
	return false
}

func (s *Store) allServiceIDs(ctx context.Context) ([]int64, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id FROM services`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: services: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: services: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// opIDs returns the ids of the operations called name, of one service or of
// any.
func (s *Store) opIDs(ctx context.Context, oneService bool, service int64, name string) ([]int64, error) {
	query := `SELECT id FROM operations WHERE name = ?`
	args := []any{name}
	if oneService {
		query += ` AND service_id = ?`
		args = append(args, service)
	}
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: look up operation: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: look up operation: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// GetServices returns every service name ever stored, sorted.
func (s *Store) GetServices(ctx context.Context) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT name FROM services ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: services: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("sqlite: services: %w", err)
		}
		out = append(out, name)
	}
	return out, rows.Err()
}

// GetOperations returns the operations of a service (of all services if
// service is empty), sorted by name then kind.
func (s *Store) GetOperations(ctx context.Context, service string) ([]store.Operation, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	query := `SELECT DISTINCT o.name, o.kind FROM operations o`
	var args []any
	if service != "" {
		query += ` JOIN services s ON s.id = o.service_id WHERE s.name = ?`
		args = append(args, service)
	}
	query += ` ORDER BY o.name, o.kind`
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: operations: %w", err)
	}
	defer rows.Close()
	var out []store.Operation
	for rows.Next() {
		var op store.Operation
		if err := rows.Scan(&op.Name, &op.Kind); err != nil {
			return nil, fmt.Errorf("sqlite: operations: %w", err)
		}
		out = append(out, op)
	}
	return out, rows.Err()
}

// Anomalies returns anomalous spans newest first, from the partial indexes
// that hold only anomalous spans.
func (s *Store) Anomalies(ctx context.Context, q store.AnomalyQuery) ([]*model.Span, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultAnomalyLimit
	}
	query := `SELECT s.id, s.trace_id, s.data, i.idx FROM span_index AS i INDEXED BY span_index_anomalous
		CROSS JOIN segments AS s ON s.id = i.segment WHERE i.flags & 1 = 1`
	var args []any
	if q.Service != "" {
		id, ok, err := s.lookupServiceID(ctx, q.Service)
		if err != nil || !ok {
			return nil, err
		}
		query = `SELECT s.id, s.trace_id, s.data, i.idx FROM span_index AS i INDEXED BY span_index_anomalous_service
			CROSS JOIN segments AS s ON s.id = i.segment WHERE i.flags & 1 = 1 AND i.service_id = ?`
		args = append(args, id)
	}
	if q.Since != 0 {
		query += ` AND i.start >= ?`
		args = append(args, q.Since)
	}
	query += ` ORDER BY i.start DESC LIMIT ?`
	args = append(args, limit)

	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: anomalies: %w", err)
	}
	type hit struct {
		seg segRow
		idx int
	}
	var hits []hit
	for rows.Next() {
		var h hit
		var trace []byte
		if err := rows.Scan(&h.seg.id, &trace, &h.seg.data, &h.idx); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: anomalies: %w", err)
		}
		copy(h.seg.trace[:], trace)
		hits = append(hits, h)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("sqlite: anomalies: %w", err)
	}
	decoded := make(map[int64][]*model.Span)
	type key struct {
		trace model.TraceID
		span  model.SpanID
	}
	type kept struct {
		at  int   // in out
		seg int64 // the segment it came from
	}
	seen := make(map[key]kept)
	var out []*model.Span
	var inFlight []model.TraceID
	for _, h := range hits {
		spans, ok := decoded[h.seg.id]
		if !ok {
			if spans, err = s.decodeNamed(ctx, h.seg); err != nil {
				return nil, err
			}
			decoded[h.seg.id] = spans
		}
		if h.idx < 0 || h.idx >= len(spans) {
			return nil, fmt.Errorf("%w: span %d of a %d-span segment", errCorrupt, h.idx, len(spans))
		}
		sp := spans[h.idx]
		// A span written twice (a provisional copy while its request was
		// in flight, then its final one) is listed once, from its newest
		// segment, as spansOf reads it.
		k := key{sp.TraceID, sp.SpanID}
		if prev, ok := seen[k]; ok {
			if h.seg.id > prev.seg {
				out[prev.at] = sp
				seen[k] = kept{prev.at, h.seg.id}
			}
			continue
		}
		seen[k] = kept{len(out), h.seg.id}
		out = append(out, sp)
		if sp.InFlight() {
			inFlight = append(inFlight, sp.TraceID)
		}
	}
	if len(inFlight) == 0 {
		return out, nil
	}
	return s.supersede(ctx, out, inFlight)
}

// supersede replaces each provisional span of out (model.AttrInFlight) by
// the newest copy of it stored in its trace, and drops it when that copy is
// not anomalous (its request ended faster than the detector's line, or the
// final copy was judged against a moved baseline). Only the traces of
// provisional spans are read.
func (s *Store) supersede(ctx context.Context, out []*model.Span, traces []model.TraceID) ([]*model.Span, error) {
	segs, err := s.segmentsByTrace(ctx, traces)
	if err != nil {
		return nil, err
	}
	byTrace, err := s.spansOf(ctx, segs)
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, sp := range out {
		if sp.InFlight() {
			for _, c := range byTrace[sp.TraceID] {
				if c.SpanID == sp.SpanID {
					sp = c
					break
				}
			}
			if !sp.IsAnomalous() {
				continue
			}
		}
		kept = append(kept, sp)
	}
	return kept, nil
}

// Dependencies counts, for every span that started in [start, end] (end 0:
// no bound) and whose parent span is stored, the (parent service, child
// service) pairs that differ. The parent may have started before start.
//
// The segments holding spans of the window are found through span_index
// and read once; their headers carry span and parent ids, services, start
// times and flags. A trace's other segments are read only when a parent is
// not among them.
func (s *Store) Dependencies(ctx context.Context, start, end int64) ([]store.DependencyLink, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if end == 0 {
		end = math.MaxInt64
	}
	rows, err := s.querySegments(ctx, `SELECT id, trace_id, data FROM segments WHERE id IN (
		SELECT segment FROM span_index WHERE service_id IN (SELECT id FROM services) AND start >= ? AND start <= ?)`, start, end)
	if err != nil {
		return nil, err
	}
	type child struct {
		trace model.TraceID
		h     header
	}
	var children []child
	loaded := make(map[int64]bool)
	spanSvc := make(map[model.TraceID]map[model.SpanID]int64)
	add := func(rows []segRow, collect bool) error {
		for _, r := range rows {
			if loaded[r.id] {
				continue
			}
			loaded[r.id] = true
			hdrs, err := decodeHeaders(r.data)
			if err != nil {
				return fmt.Errorf("segment %d: %w", r.id, err)
			}
			m := spanSvc[r.trace]
			if m == nil {
				m = make(map[model.SpanID]int64, len(hdrs))
				spanSvc[r.trace] = m
			}
			for _, h := range hdrs {
				m[h.spanID] = h.service
				if collect && !h.parentID.IsZero() && h.start >= start && h.start <= end {
					children = append(children, child{r.trace, h})
				}
			}
		}
		return nil
	}
	if err := add(rows, true); err != nil {
		return nil, err
	}
	// Parents outside the segments read so far: read those traces whole.
	// (Their children in the window are all in segments already read.)
	var missing []model.TraceID
	isMissing := make(map[model.TraceID]bool)
	for _, c := range children {
		if _, ok := spanSvc[c.trace][c.h.parentID]; !ok && !isMissing[c.trace] {
			isMissing[c.trace] = true
			missing = append(missing, c.trace)
		}
	}
	if len(missing) > 0 {
		rows, err := s.segmentsByTrace(ctx, missing)
		if err != nil {
			return nil, err
		}
		if err := add(rows, false); err != nil {
			return nil, err
		}
	}

	type edgeKey struct{ parent, child int64 }
	type spanKey struct {
		trace model.TraceID
		span  model.SpanID
	}
	counts := make(map[edgeKey]*store.DependencyLink)
	counted := make(map[spanKey]bool) // a span written twice counts once
	for _, c := range children {
		parentSvc, ok := spanSvc[c.trace][c.h.parentID]
		if !ok || parentSvc == c.h.service {
			continue
		}
		k := spanKey{c.trace, c.h.spanID}
		if counted[k] {
			continue
		}
		counted[k] = true
		ek := edgeKey{parentSvc, c.h.service}
		e := counts[ek]
		if e == nil {
			e = &store.DependencyLink{}
			counts[ek] = e
		}
		e.CallCount++
		if c.h.flags&flagAnomalous != 0 {
			e.Anomalies++
		}
	}
	out := make([]store.DependencyLink, 0, len(counts))
	for k, e := range counts {
		if e.Parent, err = s.serviceName(ctx, k.parent); nameGone(err) {
			continue // purged meanwhile
		} else if err != nil {
			return nil, err
		}
		if e.Child, err = s.serviceName(ctx, k.child); nameGone(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b store.DependencyLink) int {
		return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Child, b.Child))
	})
	return out, nil
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}
