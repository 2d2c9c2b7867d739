package cassandra

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Purge applies the retention policy as a sweep: it walks the hours of the
// retention index old enough to hold expired traces, reads each trace's
// retention times and flags, and deletes the traces past their period with
// their index rows, artifact links, the artifacts no span refers to any
// more and their content; then forgets operations and services left without
// spans, sweeps orphan blobs and old metric points. The TTL written with
// every row is only a backstop. A size cap (RetentionPolicy.MaxBytes) is
// not applied: a cluster's size is managed by its operators, not by one
// client's view of it.
func (s *Store) Purge(ctx context.Context, p store.RetentionPolicy) (store.PurgeStats, error) {
	var st store.PurgeStats
	if err := s.checkOpen(); err != nil {
		return st, err
	}
	pg := &purge{s: s, p: p, st: &st, names: map[nameKey]map[int64]bool{}, scopes: map[string]map[int64]bool{}}
	cut := int64(math.MinInt64)
	if p.Normal > 0 {
		cut = max(cut, p.Now-p.Normal)
	}
	if p.Anomalous > 0 {
		cut = max(cut, p.Now-p.Anomalous)
	}
	if cut > math.MinInt64 {
		bs, err := s.buckets(ctx, []string{scopeRetention}, math.MinInt64, bucketOf(cut))
		if err != nil {
			return st, err
		}
		for i := len(bs) - 1; i >= 0; i-- { // oldest first
			if err := pg.bucket(ctx, bs[i]); err != nil {
				return st, err
			}
		}
		if err := pg.forgetNames(ctx); err != nil {
			return st, err
		}
	}
	if p.Anomalous > 0 { // closed incidents live as long as anomalous traces
		if err := s.purgeIncidents(ctx, p.Now-p.Anomalous); err != nil {
			return st, err
		}
	}
	if err := s.sweepOrphanBlobs(ctx, &st, p.Now-int64(store.OrphanBlobGrace)); err != nil {
		return st, err
	}
	if p.Normal > 0 {
		if err := s.purgeMetrics(ctx, p.Now-p.Normal); err != nil {
			return st, err
		}
	}
	if st != (store.PurgeStats{}) {
		s.log.Info("purged", "traces", st.Traces, "spans", st.Spans, "artifacts", st.Artifacts, "blob_bytes", st.Bytes,
			"services", st.Services, "operations", st.Operations, "orphan_blobs", st.OrphanBlobs)
	}
	return st, nil
}

type nameKey struct {
	service, op string
	kind        int8
}

type purge struct {
	s  *Store
	p  store.RetentionPolicy
	st *store.PurgeStats
	mu sync.Mutex
	// names: the operations of deleted spans and the hours they were in;
	// scopes: other bucket scopes whose hours may have emptied.
	names  map[nameKey]map[int64]bool
	scopes map[string]map[int64]bool
}

// expired reports whether a trace whose latest retention time is last, and
// which is important (an anomalous or error span) or not, is past its period.
func (pg *purge) expired(last int64, important bool) bool {
	if important {
		return pg.p.Anomalous > 0 && last < pg.p.Now-pg.p.Anomalous
	}
	return pg.p.Normal > 0 && last < pg.p.Now-pg.p.Normal
}

// bucket examines every trace of one hour of the retention index.
func (pg *purge) bucket(ctx context.Context, b int64) error {
	s := pg.s
	iter := s.session.Query(`SELECT trace_id FROM retention_index WHERE bucket = ?`, b).WithContext(ctx).PageSize(pageSize).Iter()
	var traces []model.TraceID
	var tid []byte
	for iter.Scan(&tid) {
		var t model.TraceID
		copy(t[:], tid)
		traces = append(traces, t)
	}
	if err := iter.Close(); err != nil {
		return wrap("purge: read retention index", err)
	}
	kept := make([]bool, len(traces))
	err := s.parallel(ctx, len(traces), func(ctx context.Context, i int) error {
		k, err := pg.trace(ctx, b, traces[i])
		kept[i] = k
		return err
	})
	if err != nil {
		return err
	}
	for _, k := range kept {
		if k {
			return nil
		}
	}
	// Nothing of this hour is left: forget it.
	return wrap("purge: drop retention bucket", s.exec(ctx, []statement{
		{part: "r", cql: `DELETE FROM retention_index WHERE bucket = ?`, args: []any{b}},
		{part: "b", cql: `DELETE FROM buckets WHERE scope = ? AND bucket = ?`, args: []any{scopeRetention, b}},
	}))
}

// trace deletes one trace if it expired; it reports whether the trace still
// has a row in hour b of the retention index.
func (pg *purge) trace(ctx context.Context, b int64, t model.TraceID) (bool, error) {
	s := pg.s
	iter := s.session.Query(`SELECT rt, flags, data FROM spans WHERE trace_id = ?`, t[:]).WithContext(ctx).PageSize(pageSize).Iter()
	var (
		spans     []*model.Span
		last      = int64(math.MinInt64)
		important bool
		rt        int64
		flags     int8
		data      []byte
	)
	for iter.Scan(&rt, &flags, &data) {
		last = max(last, rt)
		important = important || flags != 0
		sp, err := decodeSpan(data)
		if err != nil {
			iter.Close()
			return true, err
		}
		spans = append(spans, sp)
	}
	if err := iter.Close(); err != nil {
		return true, wrap("purge: read trace", err)
	}
	drop := func() (bool, error) {
		return false, wrap("purge: drop retention row", s.session.Query(`DELETE FROM retention_index WHERE bucket = ? AND trace_id = ?`, b, t[:]).
			WithContext(ctx).Exec())
	}
	switch {
	case len(spans) == 0:
		return drop() // a row left by an interrupted purge
	case !pg.expired(last, important):
		if bucketOf(last) > b {
			// The trace is listed in the hour of its latest span too;
			// this older row only makes later purges read it again.
			return drop()
		}
		return true, nil
	}
	return false, pg.deleteTrace(ctx, t, spans)
}

// deleteTrace deletes a trace's index rows, links and artifacts, then its
// span rows (last, so that an interrupted purge finds the trace again).
func (pg *purge) deleteTrace(ctx context.Context, t model.TraceID, spans []*model.Span) error {
	s := pg.s
	var stmts []statement
	del := func(part, cql string, args ...any) {
		stmts = append(stmts, statement{part: part, cql: cql, args: args})
	}
	rbs := map[int64]bool{}
	pg.mu.Lock()
	for _, sp := range spans {
		tid, sid := t[:], sp.SpanID[:]
		b := bucketOf(sp.Start)
		bs := strconv.FormatInt(b, 10)
		kind := int8(sp.Kind)
		del("t\x00"+bs, `DELETE FROM time_index WHERE bucket = ? AND shard = ? AND start = ? AND trace_id = ? AND span_id = ?`,
			b, shardOf(t), sp.Start, tid, sid)
		del("o\x00"+sp.Service+"\x00"+sp.Name+"\x00"+bs,
			`DELETE FROM op_index WHERE service = ? AND operation = ? AND kind = ? AND bucket = ? AND start = ? AND trace_id = ? AND span_id = ?`,
			sp.Service, sp.Name, kind, b, sp.Start, tid, sid)
		for _, kvs := range [][]model.KeyValue{sp.Attributes, sp.Resource} {
			for _, kv := range kvs {
				v := kv.Value.String()
				if len(kv.Key) > maxIndexedTag || len(v) > maxIndexedTag {
					continue
				}
				del("g\x00"+sp.Service+"\x00"+kv.Key+"\x00"+v+"\x00"+bs,
					`DELETE FROM tag_index WHERE service = ? AND tag_key = ? AND tag_value = ? AND bucket = ? AND start = ? AND trace_id = ? AND span_id = ?`,
					sp.Service, kv.Key, v, b, sp.Start, tid, sid)
			}
		}
		if sp.IsAnomalous() {
			del("a\x00"+bs, `DELETE FROM anomaly_index WHERE bucket = ? AND start = ? AND trace_id = ? AND span_id = ?`, b, sp.Start, tid, sid)
			pg.scope(scopeAnomaly, b)
		}
		rbs[bucketOf(store.RetentionTime(sp))] = true
		pg.scope(scopeTime, b)
		nk := nameKey{sp.Service, sp.Name, kind}
		if pg.names[nk] == nil {
			pg.names[nk] = map[int64]bool{}
		}
		pg.names[nk][b] = true
	}
	pg.mu.Unlock()
	for rb := range rbs {
		del("r\x00"+strconv.FormatInt(rb, 10), `DELETE FROM retention_index WHERE bucket = ? AND trace_id = ?`, rb, t[:])
	}
	if err := s.exec(ctx, stmts); err != nil {
		return wrap("purge: delete index rows", err)
	}
	if err := pg.unlinkArtifacts(ctx, t); err != nil {
		return err
	}
	if err := s.session.Query(`DELETE FROM spans WHERE trace_id = ?`, t[:]).WithContext(ctx).Exec(); err != nil {
		return wrap("purge: delete spans", err)
	}
	pg.mu.Lock()
	pg.st.Traces++
	pg.st.Spans += int64(len(spans))
	pg.mu.Unlock()
	return nil
}

func (pg *purge) scope(scope string, b int64) {
	if pg.scopes[scope] == nil {
		pg.scopes[scope] = map[int64]bool{}
	}
	pg.scopes[scope][b] = true
}

// unlinkArtifacts removes a trace's spans from the artifacts linked to them;
// an artifact left without spans is deleted, and its content with it when
// no other artifact names it.
func (pg *purge) unlinkArtifacts(ctx context.Context, t model.TraceID) error {
	s := pg.s
	iter := s.session.Query(`SELECT span_id, artifact_id FROM artifact_links WHERE trace_id = ?`, t[:]).WithContext(ctx).PageSize(pageSize).Iter()
	refs := map[string][][]byte{}
	var (
		sid []byte
		aid string
	)
	for iter.Scan(&sid, &aid) {
		var r store.SpanRef
		r.TraceID = t
		copy(r.SpanID[:], sid)
		refs[aid] = append(refs[aid], refBytes(r))
	}
	if err := iter.Close(); err != nil {
		return wrap("purge: read artifact links", err)
	}
	for aid, rs := range refs {
		if err := s.session.Query(`UPDATE artifacts SET spans = spans - ? WHERE id = ?`, rs, aid).WithContext(ctx).Exec(); err != nil {
			return wrap("purge: unlink artifact", err)
		}
		a, err := s.GetArtifact(ctx, aid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if len(a.Spans) > 0 {
			continue
		}
		if err := s.deleteArtifact(ctx, a); err != nil {
			return wrap("purge: delete artifact", err)
		}
		pg.mu.Lock()
		pg.st.Artifacts++
		pg.mu.Unlock()
		used, err := s.blobReferenced(ctx, a.SHA256)
		if err != nil {
			return err
		}
		if used {
			continue
		}
		if err := s.blobs.Delete(ctx, a.SHA256); err != nil {
			return errorf("purge: delete artifact content: %w", err)
		}
		pg.mu.Lock()
		pg.st.Bytes += a.Size
		pg.mu.Unlock()
	}
	return wrap("purge: delete artifact links", s.session.Query(`DELETE FROM artifact_links WHERE trace_id = ?`, t[:]).WithContext(ctx).Exec())
}

// empty reports whether a query of one partition finds no row.
func (s *Store) empty(ctx context.Context, cql string, args ...any) (bool, error) {
	iter := s.session.Query(cql+` LIMIT 1`, args...).WithContext(ctx).Iter()
	n := iter.NumRows()
	if err := iter.Close(); err != nil {
		return false, wrap("purge: look for rows", err)
	}
	return n == 0, nil
}

// forgetNames drops the hours of the bucket scopes that purging emptied and
// the operations and services left without spans.
func (pg *purge) forgetNames(ctx context.Context) error {
	s := pg.s
	services := map[string]bool{}
	for nk, hours := range pg.names {
		services[nk.service] = true
		scope := scopeOp(nk.service, nk.op, model.SpanKind(nk.kind))
		for b := range hours {
			e, err := s.empty(ctx, `SELECT start FROM op_index WHERE service = ? AND operation = ? AND kind = ? AND bucket = ?`, nk.service, nk.op, nk.kind, b)
			if err != nil {
				return err
			}
			if e {
				if err := s.session.Query(`DELETE FROM buckets WHERE scope = ? AND bucket = ?`, scope, b).WithContext(ctx).Exec(); err != nil {
					return wrap("purge: drop bucket", err)
				}
			}
		}
		if e, err := s.empty(ctx, `SELECT bucket FROM buckets WHERE scope = ?`, scope); err != nil {
			return err
		} else if !e {
			continue
		}
		if err := s.session.Query(`DELETE FROM operations WHERE service = ? AND operation = ? AND kind = ?`, nk.service, nk.op, nk.kind).
			WithContext(ctx).Exec(); err != nil {
			return wrap("purge: forget operation", err)
		}
		pg.st.Operations++
	}
	for svc := range services {
		if e, err := s.empty(ctx, `SELECT operation FROM operations WHERE service = ?`, svc); err != nil {
			return err
		} else if !e {
			continue
		}
		if err := s.exec(ctx, []statement{
			{part: "n", cql: `DELETE FROM services WHERE part = 0 AND service = ?`, args: []any{svc}},
			{part: "b\x00" + scopeService(svc), cql: `DELETE FROM buckets WHERE scope = ?`, args: []any{scopeService(svc)}},
		}); err != nil {
			return wrap("purge: forget service", err)
		}
		pg.st.Services++
	}
	for b := range pg.scopes[scopeAnomaly] {
		if e, err := s.empty(ctx, `SELECT start FROM anomaly_index WHERE bucket = ?`, b); err != nil {
			return err
		} else if e {
			if err := s.session.Query(`DELETE FROM buckets WHERE scope = ? AND bucket = ?`, scopeAnomaly, b).WithContext(ctx).Exec(); err != nil {
				return wrap("purge: drop bucket", err)
			}
		}
	}
	for b := range pg.scopes[scopeTime] {
		all := true
		for sh := range timeShards {
			e, err := s.empty(ctx, `SELECT start FROM time_index WHERE bucket = ? AND shard = ?`, b, int8(sh))
			if err != nil {
				return err
			}
			all = all && e
		}
		if all {
			if err := s.session.Query(`DELETE FROM buckets WHERE scope = ? AND bucket = ?`, scopeTime, b).WithContext(ctx).Exec(); err != nil {
				return wrap("purge: drop bucket", err)
			}
		}
	}
	return nil
}

// sweepOrphanBlobs deletes blobs modified before `before` that no artifact
// names (their artifact's row was never written: a crash between the two).
func (s *Store) sweepOrphanBlobs(ctx context.Context, st *store.PurgeStats, before int64) error {
	var old []store.BlobInfo
	err := s.blobs.List(ctx, func(b store.BlobInfo) error {
		if b.Modified.UnixNano() < before {
			old = append(old, b)
		}
		return nil
	})
	if err != nil {
		return errorf("purge: list blobs: %w", err)
	}
	for _, b := range old {
		used, err := s.blobReferenced(ctx, b.Digest)
		if err != nil {
			return err
		}
		if used {
			continue
		}
		if err := s.blobs.Delete(ctx, b.Digest); err != nil {
			return errorf("purge: delete orphan blob: %w", err)
		}
		st.OrphanBlobs++
		st.Bytes += b.Size
	}
	return nil
}
