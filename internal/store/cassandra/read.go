package cassandra

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

const (
	defaultTraceLimit   = 20
	defaultAnomalyLimit = 100
	// pageSize is the rows fetched per page from an index partition.
	pageSize = 500
)

// GetTrace returns every span of a trace, ordered by start then span id.
func (s *Store) GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	iter := s.session.Query(`SELECT data FROM spans WHERE trace_id = ?`, id[:]).WithContext(ctx).PageSize(pageSize).Iter()
	var out []*model.Span
	var data []byte
	for iter.Scan(&data) {
		sp, err := decodeSpan(data)
		if err != nil {
			iter.Close()
			return nil, err
		}
		out = append(out, sp)
	}
	if err := iter.Close(); err != nil {
		return nil, wrap("get trace", err)
	}
	if len(out) == 0 {
		return nil, store.ErrNotFound
	}
	slices.SortFunc(out, func(a, b *model.Span) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), bytes.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return out, nil
}

func decodeSpan(data []byte) (*model.Span, error) {
	spans, err := model.DecodeSpans(data)
	if err != nil {
		return nil, errorf("span row: %w", err)
	}
	if len(spans) != 1 {
		return nil, errorf("span row holds %d spans", len(spans))
	}
	return spans[0], nil
}

// getSpan returns one span, or nil when its row does not exist.
func (s *Store) getSpan(ctx context.Context, t model.TraceID, id model.SpanID) (*model.Span, error) {
	var data []byte
	err := s.session.Query(`SELECT data FROM spans WHERE trace_id = ? AND span_id = ?`, t[:], id[:]).WithContext(ctx).Scan(&data)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("read span", err)
	}
	return decodeSpan(data)
}

// GetServices returns the services with stored spans, sorted.
func (s *Store) GetServices(ctx context.Context) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	iter := s.session.Query(`SELECT service FROM services WHERE part = 0`).WithContext(ctx).PageSize(pageSize).Iter()
	var out []string
	var svc string
	for iter.Scan(&svc) {
		out = append(out, svc)
	}
	if err := iter.Close(); err != nil {
		return nil, wrap("get services", err)
	}
	return out, nil
}

// GetOperations returns a service's operations, sorted by name.
func (s *Store) GetOperations(ctx context.Context, service string) ([]store.Operation, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	iter := s.session.Query(`SELECT operation, kind FROM operations WHERE service = ?`, service).WithContext(ctx).PageSize(pageSize).Iter()
	var out []store.Operation
	var (
		op   string
		kind int8
	)
	for iter.Scan(&op, &kind) {
		out = append(out, store.Operation{Name: op, Kind: model.SpanKind(kind)})
	}
	if err := iter.Close(); err != nil {
		return nil, wrap("get operations", err)
	}
	return out, nil
}

// indexRow is one row of an index: a candidate span and what the index
// knows of it (service and op "" and duration -1 when it does not say).
type indexRow struct {
	start    int64
	trace    model.TraceID
	span     model.SpanID
	service  string
	op       string
	duration int64
	flags    int8
	hasFlags bool
}

// family is a set of index partitions searched together: the partitions of
// one hour, merged newest first.
type family struct {
	scopes []string // bucket scopes listing the hours that may hold rows
	// parts returns the queries of one hour's partitions; each selects
	// start, trace_id, span_id and then the columns scan reads.
	parts func(b int64) []partQuery
}

type partQuery struct {
	cql  string
	args []any
	scan func(it *gocql.Iter, r *indexRow) bool
}

// buckets returns the hours of f's scopes within [lo, hi], newest first.
func (s *Store) buckets(ctx context.Context, scopes []string, lo, hi int64) ([]int64, error) {
	seen := map[int64]bool{}
	var out []int64
	for _, sc := range scopes {
		iter := s.session.Query(`SELECT bucket FROM buckets WHERE scope = ? AND bucket >= ? AND bucket <= ?`, sc, lo, hi).
			WithContext(ctx).PageSize(pageSize).Iter()
		var b int64
		for iter.Scan(&b) {
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
		if err := iter.Close(); err != nil {
			return nil, wrap("list buckets", err)
		}
	}
	slices.SortFunc(out, func(a, b int64) int { return cmp.Compare(b, a) })
	return out, nil
}

// walk calls fn for every index row of f whose start is within [lo, hi],
// newest first, until fn returns false or an error.
func (s *Store) walk(ctx context.Context, f family, lo, hi int64, fn func(r indexRow) (bool, error)) error {
	bs, err := s.buckets(ctx, f.scopes, bucketOf(lo), bucketOf(hi))
	if err != nil {
		return err
	}
	for _, b := range bs {
		more, err := s.walkBucket(ctx, f.parts(b), lo, hi, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// cursor is one partition's iterator with its current row.
type cursor struct {
	it  *gocql.Iter
	q   partQuery
	row indexRow
	ok  bool
}

func (c *cursor) advance() {
	c.row = indexRow{duration: -1}
	c.ok = c.q.scan(c.it, &c.row)
}

// walkBucket merges the partitions of one hour by start, newest first.
func (s *Store) walkBucket(ctx context.Context, parts []partQuery, lo, hi int64, fn func(r indexRow) (bool, error)) (bool, error) {
	cursors := make([]*cursor, 0, len(parts))
	defer func() {
		for _, c := range cursors {
			c.it.Close()
		}
	}()
	for _, p := range parts {
		args := append(append([]any(nil), p.args...), lo, hi)
		c := &cursor{q: p, it: s.session.Query(p.cql+` AND start >= ? AND start <= ?`, args...).WithContext(ctx).PageSize(pageSize).Iter()}
		c.advance()
		cursors = append(cursors, c)
	}
	for {
		var best *cursor
		for _, c := range cursors {
			if c.ok && (best == nil || c.row.start > best.row.start) {
				best = c
			}
		}
		if best == nil {
			break
		}
		more, err := fn(best.row)
		if err != nil || !more {
			return false, err
		}
		best.advance()
	}
	for _, c := range cursors {
		if err := c.it.Close(); err != nil {
			return false, wrap("read index", err)
		}
	}
	cursors = nil
	return true, nil
}

func scanTime(it *gocql.Iter, r *indexRow) bool {
	var tid, sid []byte
	if !it.Scan(&r.start, &tid, &sid, &r.service, &r.op, &r.duration, &r.flags) {
		return false
	}
	r.hasFlags = true
	return setIDs(r, tid, sid)
}

func setIDs(r *indexRow, tid, sid []byte) bool {
	copy(r.trace[:], tid)
	copy(r.span[:], sid)
	return true
}

func timeFamily() family {
	return family{scopes: []string{scopeTime}, parts: func(b int64) []partQuery {
		out := make([]partQuery, timeShards)
		for sh := range timeShards {
			out[sh] = partQuery{
				cql:  `SELECT start, trace_id, span_id, service, operation, duration, flags FROM time_index WHERE bucket = ? AND shard = ?`,
				args: []any{b, int8(sh)}, scan: scanTime,
			}
		}
		return out
	}}
}

func opFamily(svc string, ops []store.Operation, scopes []string) family {
	return family{scopes: scopes, parts: func(b int64) []partQuery {
		out := make([]partQuery, 0, len(ops))
		for _, op := range ops {
			name := op.Name
			out = append(out, partQuery{
				cql:  `SELECT start, trace_id, span_id, duration, flags FROM op_index WHERE service = ? AND operation = ? AND kind = ? AND bucket = ?`,
				args: []any{svc, name, int8(op.Kind), b},
				scan: func(it *gocql.Iter, r *indexRow) bool {
					var tid, sid []byte
					if !it.Scan(&r.start, &tid, &sid, &r.duration, &r.flags) {
						return false
					}
					r.service, r.op, r.hasFlags = svc, name, true
					return setIDs(r, tid, sid)
				},
			})
		}
		return out
	}}
}

func tagFamily(services []string, key, value string) family {
	scopes := make([]string, len(services))
	for i, svc := range services {
		scopes[i] = scopeService(svc)
	}
	return family{scopes: scopes, parts: func(b int64) []partQuery {
		out := make([]partQuery, 0, len(services))
		for _, svc := range services {
			out = append(out, partQuery{
				cql:  `SELECT start, trace_id, span_id, operation, duration, flags FROM tag_index WHERE service = ? AND tag_key = ? AND tag_value = ? AND bucket = ?`,
				args: []any{svc, key, value, b},
				scan: func(it *gocql.Iter, r *indexRow) bool {
					var tid, sid []byte
					if !it.Scan(&r.start, &tid, &sid, &r.op, &r.duration, &r.flags) {
						return false
					}
					r.service, r.hasFlags = svc, true
					return setIDs(r, tid, sid)
				},
			})
		}
		return out
	}}
}

func anomalyFamily() family {
	return family{scopes: []string{scopeAnomaly}, parts: func(b int64) []partQuery {
		return []partQuery{{
			cql:  `SELECT start, trace_id, span_id, service FROM anomaly_index WHERE bucket = ?`,
			args: []any{b},
			scan: func(it *gocql.Iter, r *indexRow) bool {
				var tid, sid []byte
				if !it.Scan(&r.start, &tid, &sid, &r.service) {
					return false
				}
				return setIDs(r, tid, sid)
			},
		}}
	}}
}

// rangeOf turns a query's optional start bounds into an inclusive range.
func rangeOf(min, max int64) (int64, int64) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if min != 0 {
		lo = min
	}
	if max != 0 {
		hi = max
	}
	return lo, hi
}

// family picks the most selective index for q.
func (s *Store) familyFor(ctx context.Context, q store.TraceQuery) (family, error) {
	switch {
	case q.AnomalousOnly:
		return anomalyFamily(), nil
	case len(q.Tags) > 0:
		services := []string{q.Service}
		if q.Service == "" {
			var err error
			if services, err = s.GetServices(ctx); err != nil {
				return family{}, err
			}
		}
		// Any one tag nominates candidates; all are checked on the span.
		key := slices.Min(slices.Collect(func(yield func(string) bool) {
			for k := range q.Tags {
				if !yield(k) {
					return
				}
			}
		}))
		return tagFamily(services, key, q.Tags[key]), nil
	case q.Service != "":
		ops, err := s.GetOperations(ctx, q.Service)
		if err != nil {
			return family{}, err
		}
		if q.Operation != "" {
			ops = slices.DeleteFunc(ops, func(o store.Operation) bool { return o.Name != q.Operation })
			scopes := make([]string, len(ops))
			for i, o := range ops {
				scopes[i] = scopeOp(q.Service, o.Name, o.Kind)
			}
			return opFamily(q.Service, ops, scopes), nil
		}
		return opFamily(q.Service, ops, []string{scopeService(q.Service)}), nil
	}
	return timeFamily(), nil
}

// prefilter rejects a candidate by what its index row says. Index rows of a
// span are rewritten in place when the span is, or are stale copies beside
// an up-to-date one, so a rejection here never loses a match.
func prefilter(r indexRow, q store.TraceQuery) bool {
	if r.service != "" && q.Service != "" && r.service != q.Service {
		return false
	}
	if r.op != "" && q.Operation != "" && r.op != q.Operation {
		return false
	}
	if r.duration >= 0 && (q.DurationMin != 0 && r.duration < q.DurationMin || q.DurationMax != 0 && r.duration > q.DurationMax) {
		return false
	}
	if r.hasFlags && (q.AnomalousOnly && r.flags&flagAnomalous == 0 || q.ErrorOnly && r.flags&flagError == 0) {
		return false
	}
	return true
}

// matches applies every filter of q to one span.
func matches(sp *model.Span, q store.TraceQuery) bool {
	switch {
	case q.Service != "" && sp.Service != q.Service,
		q.Operation != "" && sp.Name != q.Operation,
		q.StartMin != 0 && sp.Start < q.StartMin,
		q.StartMax != 0 && sp.Start > q.StartMax,
		q.DurationMin != 0 && sp.Duration < q.DurationMin,
		q.DurationMax != 0 && sp.Duration > q.DurationMax,
		q.AnomalousOnly && !sp.IsAnomalous(),
		q.ErrorOnly && !sp.IsError():
		return false
	}
	for k, v := range q.Tags {
		if got, ok := sp.Attr(k); !ok || got.String() != v {
			if got, ok := sp.ResourceAttr(k); !ok || got.String() != v {
				return false
			}
		}
	}
	return true
}

// FindTraceIDs returns the traces with a span matching q, ranked by the
// start of their newest matching span.
func (s *Store) FindTraceIDs(ctx context.Context, q store.TraceQuery) ([]model.TraceID, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultTraceLimit
	}
	f, err := s.familyFor(ctx, q)
	if err != nil {
		return nil, err
	}
	lo, hi := rangeOf(q.StartMin, q.StartMax)
	var out []model.TraceID
	found := map[model.TraceID]bool{}
	err = s.walk(ctx, f, lo, hi, func(r indexRow) (bool, error) {
		if found[r.trace] || !prefilter(r, q) {
			return true, nil
		}
		sp, err := s.getSpan(ctx, r.trace, r.span)
		if err != nil {
			return false, err
		}
		if sp == nil || !matches(sp, q) {
			return true, nil
		}
		found[r.trace] = true
		out = append(out, r.trace)
		return len(out) < limit, nil
	})
	return out, err
}

// FindTraces returns the matching traces, each complete.
func (s *Store) FindTraces(ctx context.Context, q store.TraceQuery) ([][]*model.Span, error) {
	ids, err := s.FindTraceIDs(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([][]*model.Span, len(ids))
	err = s.parallel(ctx, len(ids), func(ctx context.Context, i int) error {
		tr, err := s.GetTrace(ctx, ids[i])
		if errors.Is(err, store.ErrNotFound) {
			return nil // purged meanwhile
		}
		out[i] = tr
		return err
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(out, func(t []*model.Span) bool { return len(t) == 0 }), nil
}

// Anomalies returns anomalous spans, newest first.
func (s *Store) Anomalies(ctx context.Context, q store.AnomalyQuery) ([]*model.Span, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultAnomalyLimit
	}
	tq := store.TraceQuery{Service: q.Service, AnomalousOnly: true}
	lo, hi := rangeOf(q.Since, 0)
	var out []*model.Span
	err := s.walk(ctx, anomalyFamily(), lo, hi, func(r indexRow) (bool, error) {
		if !prefilter(r, tq) {
			return true, nil
		}
		sp, err := s.getSpan(ctx, r.trace, r.span)
		if err != nil {
			return false, err
		}
		if sp != nil && matches(sp, tq) && sp.Start >= lo {
			out = append(out, sp)
		}
		return len(out) < limit, nil
	})
	return out, err
}

// Dependencies counts parent→child calls between services among spans that
// started in [start, end]. It reads every trace of the window (one query
// each): a query for dashboards over minutes or hours, not days.
func (s *Store) Dependencies(ctx context.Context, start, end int64) ([]store.DependencyLink, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var traces []model.TraceID
	seen := map[model.TraceID]bool{}
	err := s.walk(ctx, timeFamily(), start, end, func(r indexRow) (bool, error) {
		if !seen[r.trace] {
			seen[r.trace] = true
			traces = append(traces, r.trace)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	type edge struct{ parent, child string }
	var mu sync.Mutex
	counts := map[edge]*store.DependencyLink{}
	err = s.parallel(ctx, len(traces), func(ctx context.Context, i int) error {
		type node struct {
			parent  model.SpanID
			service string
			start   int64
			flags   int8
		}
		iter := s.session.Query(`SELECT span_id, parent_id, service, start, flags FROM spans WHERE trace_id = ?`, traces[i][:]).
			WithContext(ctx).PageSize(pageSize).Iter()
		nodes := map[model.SpanID]node{}
		var (
			sid, pid []byte
			n        node
		)
		for iter.Scan(&sid, &pid, &n.service, &n.start, &n.flags) {
			var id model.SpanID
			copy(id[:], sid)
			n.parent = model.SpanID{}
			copy(n.parent[:], pid)
			nodes[id] = n
		}
		if err := iter.Close(); err != nil {
			return wrap("dependencies", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range nodes {
			p, ok := nodes[c.parent]
			if c.parent.IsZero() || !ok || p.service == c.service || c.start < start || c.start > end {
				continue
			}
			e := edge{p.service, c.service}
			l := counts[e]
			if l == nil {
				l = &store.DependencyLink{Parent: e.parent, Child: e.child}
				counts[e] = l
			}
			l.CallCount++
			if c.flags&flagAnomalous != 0 {
				l.Anomalies++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []store.DependencyLink
	for _, l := range counts {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b store.DependencyLink) int {
		return cmp.Or(cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Child, b.Child))
	})
	return out, nil
}
