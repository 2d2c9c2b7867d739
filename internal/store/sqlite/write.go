package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// insertSizes are the row counts of the prepared multi-row INSERTs; the
// rows of a batch are cut greedily into statements of these sizes. One
// statement per row would spend more time in database/sql and the driver
// than in SQLite. All sizes are prepared at Open: preparing on the writer
// pool while a transaction holds its only connection would deadlock.
var insertSizes = []int{64, 16, 4, 1}

// multiInsert is one INSERT prepared for each of insertSizes rows.
type multiInsert struct {
	cols  int
	stmts map[int]*sql.Stmt
}

func prepareMulti(ctx context.Context, db *sql.DB, prefix string, cols int, suffix string) (multiInsert, error) {
	m := multiInsert{cols: cols, stmts: make(map[int]*sql.Stmt)}
	row := "(" + placeholders(cols) + ")"
	for _, rows := range insertSizes {
		q := prefix + strings.TrimSuffix(strings.Repeat(row+",", rows), ",") + suffix
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return m, errors.Join(fmt.Errorf("sqlite: prepare: %w\n%s", err, q), m.close())
		}
		m.stmts[rows] = st
	}
	return m, nil
}

// exec inserts the rows whose values are laid out flat in args.
func (m multiInsert) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	for rest := args; len(rest) > 0; {
		n := chunkSize(len(rest) / m.cols)
		if _, err := tx.StmtContext(ctx, m.stmts[n]).ExecContext(ctx, rest[:n*m.cols]...); err != nil {
			return err
		}
		rest = rest[n*m.cols:]
	}
	return nil
}

func (m multiInsert) close() error {
	var errs []error
	for _, st := range m.stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// chunkSize returns the largest prepared statement size that fits n rows.
func chunkSize(n int) int {
	for _, size := range insertSizes {
		if size <= n {
			return size
		}
	}
	return 1
}

// writeStmts are the writer connection's prepared statements. They are used
// only with wmu held.
//
// The multi-row INSERTs use OR FAIL: their keys are unique by construction
// (segment ids are assigned here), and unlike the default ABORT it lets
// SQLite skip the statement journal a multi-row statement would otherwise
// write to undo itself half-way.
type writeStmts struct {
	insSegments multiInsert
	insIndex    multiInsert
	upsTrace    *sql.Stmt
	delIndex    *sql.Stmt
	selSegment  *sql.Stmt
	delSegment  *sql.Stmt
	insService  *sql.Stmt
	insOp       *sql.Stmt
	insResource *sql.Stmt
	selResource *sql.Stmt
}

func (w *writeStmts) prepare(ctx context.Context, db *sql.DB) error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&w.upsTrace, `INSERT INTO traces (trace_id, start_min, last_end, flags, segments) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (trace_id) DO UPDATE SET
				start_min = min(start_min, excluded.start_min),
				last_end = max(last_end, excluded.last_end),
				flags = flags | excluded.flags,
				segments = segments || excluded.segments`},
		{&w.delIndex, `DELETE FROM span_index WHERE service_id = ? AND start = ? AND segment = ? AND idx = ?`},
		{&w.selSegment, `SELECT data FROM segments WHERE id = ?`},
		{&w.delSegment, `DELETE FROM segments WHERE id = ?`},
		{&w.insService, `INSERT INTO services (id, name) VALUES (?, ?)`},
		{&w.insOp, `INSERT INTO operations (id, service_id, name, kind) VALUES (?, ?, ?, ?)`},
		{&w.insResource, `INSERT INTO resources (data) VALUES (?)`},
		{&w.selResource, `SELECT id FROM resources WHERE data = ?`},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return fmt.Errorf("sqlite: prepare: %w\n%s", err, p.sql)
		}
		*p.dst = st
	}
	var err error
	if w.insSegments, err = prepareMulti(ctx, db, `INSERT OR FAIL INTO segments (id, trace_id, data) VALUES `, 3, ``); err != nil {
		return err
	}
	w.insIndex, err = prepareMulti(ctx, db, `INSERT OR FAIL INTO span_index
		(service_id, start, segment, idx, op_id, duration, flags) VALUES `, 7, ``)
	return err
}

func (w *writeStmts) close() error {
	var errs []error
	for _, m := range []multiInsert{w.insSegments, w.insIndex} {
		errs = append(errs, m.close())
	}
	for _, st := range []*sql.Stmt{w.upsTrace, w.delIndex, w.selSegment, w.delSegment, w.insService, w.insOp, w.insResource, w.selResource} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	*w = writeStmts{}
	return errors.Join(errs...)
}

type opKey struct {
	service int64
	name    string
	kind    model.SpanKind
}

// maxCachedResources bounds the writer's resource cache; resources are
// per-process, so this is only reached with heavy process churn, and a miss
// costs one indexed lookup.
const maxCachedResources = 1 << 16

// writeCache maps names to the ids committed in the database, so a batch
// inserts a service, operation or resource only the first time it is seen.
// It is used with wmu held. New ids are staged during a transaction and
// merged only after it commits, so a rolled-back id never leaks into the
// cache.
type writeCache struct {
	services  map[string]int64
	ops       map[opKey]int64
	resources map[string]int64 // by encoded attributes

	newServices  map[string]int64
	newOps       map[opKey]int64
	newResources map[string]int64

	// Segment ids are assigned here rather than by SQLite, so a batch knows
	// them before inserting and can insert segments and index rows in a
	// few multi-row statements.
	nextSegment, newNextSegment int64
	// Service and operation ids are assigned here too, and never go down
	// while the store is open: a purge deletes the rows of services and
	// operations left without spans (purgeUnusedNames), and SQLite would
	// hand the largest deleted id out again, which the readers' metaCache
	// may still map to the old name.
	nextService, newNextService int64
	nextOp, newNextOp           int64

	// Names a purge deleted, removed from the maps above at commit.
	dropServices []string
	dropOps      []opKey
}

func (c *writeCache) load(ctx context.Context, db *sql.DB) error {
	c.services = make(map[string]int64)
	c.ops = make(map[opKey]int64)
	c.resources = make(map[string]int64)
	c.newServices = make(map[string]int64)
	c.newOps = make(map[opKey]int64)
	c.newResources = make(map[string]int64)

	rows, err := db.QueryContext(ctx, `SELECT id, name FROM services`)
	if err != nil {
		return fmt.Errorf("sqlite: load services: %w", err)
	}
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: load services: %w", err)
		}
		c.services[name] = id
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("sqlite: load services: %w", err)
	}

	rows, err = db.QueryContext(ctx, `SELECT id, service_id, name, kind FROM operations`)
	if err != nil {
		return fmt.Errorf("sqlite: load operations: %w", err)
	}
	for rows.Next() {
		var id int64
		var k opKey
		if err := rows.Scan(&id, &k.service, &k.name, &k.kind); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: load operations: %w", err)
		}
		c.ops[k] = id
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("sqlite: load operations: %w", err)
	}
	for _, q := range []struct {
		table string
		next  *int64
	}{{"segments", &c.nextSegment}, {"services", &c.nextService}, {"operations", &c.nextOp}} {
		if err := db.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM `+q.table).Scan(q.next); err != nil {
			return fmt.Errorf("sqlite: load %s ids: %w", q.table, err)
		}
	}
	c.rollback()
	return nil
}

func (c *writeCache) rollback() {
	clear(c.newServices)
	clear(c.newOps)
	clear(c.newResources)
	c.newNextSegment, c.newNextService, c.newNextOp = c.nextSegment, c.nextService, c.nextOp
	c.dropServices, c.dropOps = c.dropServices[:0], c.dropOps[:0]
}

func (c *writeCache) commit() {
	for k, v := range c.newServices {
		c.services[k] = v
	}
	for k, v := range c.newOps {
		c.ops[k] = v
	}
	if len(c.resources)+len(c.newResources) > maxCachedResources {
		clear(c.resources)
	}
	for k, v := range c.newResources {
		c.resources[k] = v
	}
	for _, name := range c.dropServices {
		delete(c.services, name)
	}
	for _, k := range c.dropOps {
		delete(c.ops, k)
	}
	c.nextSegment, c.nextService, c.nextOp = c.newNextSegment, c.newNextService, c.newNextOp
	c.rollback()
}

// batch holds the reusable buffers of WriteSpans (used with wmu held).
type batch struct {
	enc     encoder
	res     []byte
	segs    []segmentBuf
	byID    map[model.TraceID]int // index in segs
	data    []byte                // encoded segments, back to back
	rows    []indexRow
	segArgs []any
	idxArgs []any
	trArgs  []any
}

// segmentBuf collects the spans of one trace within a batch.
type segmentBuf struct {
	trace model.TraceID
	spans []*model.Span
	keys  []spanKeys
}

type indexRow struct {
	service, start, segment, idx, op, duration, flags int64
}

const (
	flagAnomalous = 1
	flagError     = 2
)

func spanFlags(s *model.Span) int64 {
	var f int64
	if s.IsAnomalous() {
		f |= flagAnomalous
	}
	if s.IsError() {
		f |= flagError
	}
	return f
}

// WriteSpans stores a batch in one transaction; it returns after the commit,
// which with Synchronous=FULL means after the WAL is fsynced. A span written
// again (same trace and span id) shadows the earlier copy: readers return
// the newest. The context is checked before the transaction starts; once
// started, the batch is written whole.
func (s *Store) WriteSpans(ctx context.Context, spans []*model.Span) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(spans) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		// The statements run with the transaction's context (see writeTx).
		return s.writeSpans(context.WithoutCancel(ctx), tx, spans)
	})
	if err != nil {
		return fmt.Errorf("sqlite: write spans: %w", err)
	}
	return nil
}

func (s *Store) writeSpans(ctx context.Context, tx *sql.Tx, spans []*model.Span) error {
	b := &s.wbatch
	if b.byID == nil {
		b.byID = make(map[model.TraceID]int)
	}
	clear(b.byID)
	for i := range b.segs {
		clear(b.segs[i].spans) // drop references to earlier batches' spans
		b.segs[i].spans = b.segs[i].spans[:0]
		b.segs[i].keys = b.segs[i].keys[:0]
	}
	b.segs = b.segs[:0]

	// Group by trace, resolving interned ids on the way.
	for _, sp := range spans {
		svc, err := s.serviceID(ctx, tx, sp.Service)
		if err != nil {
			return err
		}
		op, err := s.opID(ctx, tx, svc, sp.Name, sp.Kind)
		if err != nil {
			return err
		}
		res, err := s.resourceID(ctx, tx, sp.Resource)
		if err != nil {
			return err
		}
		i, ok := b.byID[sp.TraceID]
		if !ok {
			i = len(b.segs)
			b.byID[sp.TraceID] = i
			if i < cap(b.segs) {
				b.segs = b.segs[:i+1]
			} else {
				b.segs = append(b.segs, segmentBuf{})
			}
			b.segs[i].trace = sp.TraceID
		}
		seg := &b.segs[i]
		seg.spans = append(seg.spans, sp)
		seg.keys = append(seg.keys, spanKeys{service: svc, op: op, resource: res, flags: spanFlags(sp)})
	}

	// Encode every segment first: the driver copies bound blobs, but the
	// sub-slices of b.data must stay put until the statements ran.
	b.data = b.data[:0]
	ends := make([]int, len(b.segs))
	for i := range b.segs {
		b.data = append(b.data, b.enc.segment(b.segs[i].spans, b.segs[i].keys)...)
		ends[i] = len(b.data)
	}
	b.segArgs, b.trArgs, b.rows = b.segArgs[:0], b.trArgs[:0], b.rows[:0]
	c := &s.wcache
	prev := 0
	for i := range b.segs {
		seg := &b.segs[i]
		id := c.newNextSegment
		c.newNextSegment++
		b.segArgs = append(b.segArgs, id, seg.trace[:], b.data[prev:ends[i]:ends[i]])
		prev = ends[i]
		// last_end is what retention ages a trace by: the latest
		// store.RetentionTime, which is the receive time of spans stamped by
		// a skewed clock.
		startMin, lastEnd, flags := seg.spans[0].Start, store.RetentionTime(seg.spans[0]), int64(0)
		for j, sp := range seg.spans {
			k := &seg.keys[j]
			b.rows = append(b.rows, indexRow{k.service, sp.Start, id, int64(j), k.op, sp.Duration, k.flags})
			startMin, lastEnd, flags = min(startMin, sp.Start), max(lastEnd, store.RetentionTime(sp)), flags|k.flags
		}
		b.trArgs = append(b.trArgs, seg.trace[:], startMin, lastEnd, flags, binary.AppendUvarint(nil, uint64(id)))
	}
	if err := s.wstmt.insSegments.exec(ctx, tx, b.segArgs); err != nil {
		return fmt.Errorf("insert segments: %w", err)
	}
	// One statement per trace: a multi-row upsert would make SQLite keep a
	// statement journal (its DO UPDATE may abort half-way), which costs
	// more than the extra statements.
	up := tx.StmtContext(ctx, s.wstmt.upsTrace)
	for rest := b.trArgs; len(rest) > 0; rest = rest[5:] {
		if _, err := up.ExecContext(ctx, rest[:5]...); err != nil {
			return fmt.Errorf("upsert trace: %w", err)
		}
	}
	// In key order, consecutive inserts land on the same leaf pages.
	slices.SortFunc(b.rows, func(x, y indexRow) int {
		return cmp.Or(cmp.Compare(x.service, y.service), cmp.Compare(x.start, y.start))
	})
	b.idxArgs = b.idxArgs[:0]
	for _, r := range b.rows {
		b.idxArgs = append(b.idxArgs, r.service, r.start, r.segment, r.idx, r.op, r.duration, r.flags)
	}
	if err := s.wstmt.insIndex.exec(ctx, tx, b.idxArgs); err != nil {
		return fmt.Errorf("insert span index: %w", err)
	}
	clear(b.segArgs) // let the buffers of this batch be collected
	clear(b.trArgs)
	return nil
}

func (s *Store) serviceID(ctx context.Context, tx *sql.Tx, name string) (int64, error) {
	c := &s.wcache
	if id, ok := c.services[name]; ok {
		return id, nil
	}
	if id, ok := c.newServices[name]; ok {
		return id, nil
	}
	// The cache holds every committed service (loaded at Open, and only this
	// Store writes), so a miss is a new service.
	id := c.newNextService
	if _, err := tx.StmtContext(ctx, s.wstmt.insService).ExecContext(ctx, id, name); err != nil {
		return 0, fmt.Errorf("insert service: %w", err)
	}
	c.newNextService++
	c.newServices[name] = id
	return id, nil
}

func (s *Store) opID(ctx context.Context, tx *sql.Tx, service int64, name string, kind model.SpanKind) (int64, error) {
	c := &s.wcache
	k := opKey{service, name, kind}
	if id, ok := c.ops[k]; ok {
		return id, nil
	}
	if id, ok := c.newOps[k]; ok {
		return id, nil
	}
	id := c.newNextOp
	if _, err := tx.StmtContext(ctx, s.wstmt.insOp).ExecContext(ctx, id, service, name, int64(kind)); err != nil {
		return 0, fmt.Errorf("insert operation: %w", err)
	}
	c.newNextOp++
	c.newOps[k] = id
	return id, nil
}

// resourceID interns a resource attribute list; 0 stands for none.
func (s *Store) resourceID(ctx context.Context, tx *sql.Tx, kvs []model.KeyValue) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	b := &s.wbatch
	b.res = appendKVs(b.res[:0], kvs)
	c := &s.wcache
	if id, ok := c.resources[string(b.res)]; ok {
		return id, nil
	}
	if id, ok := c.newResources[string(b.res)]; ok {
		return id, nil
	}
	// The resource cache is bounded, so a miss may still be in the table.
	var id int64
	err := tx.StmtContext(ctx, s.wstmt.selResource).QueryRowContext(ctx, b.res).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		r, err := tx.StmtContext(ctx, s.wstmt.insResource).ExecContext(ctx, b.res)
		if err != nil {
			return 0, fmt.Errorf("insert resource: %w", err)
		}
		if id, err = r.LastInsertId(); err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, fmt.Errorf("look up resource: %w", err)
	}
	c.newResources[string(b.res)] = id
	return id, nil
}
