package cassandra

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

const (
	// bucketNs is the width of an index bucket: an hour of span starts.
	bucketNs = int64(time.Hour)
	// timeShards spreads an hour of the time index over this many
	// partitions, so that one hour of all services is not one hot partition.
	timeShards = 8
	// maxIndexedTag: longer keys or values are not indexed (and so cannot be
	// searched): they are rarely searched and would bloat the index.
	maxIndexedTag = 256
	// maxBatchBytes keeps an unlogged batch under Cassandra's default
	// batch_size_fail_threshold (50 KiB).
	maxBatchBytes = 40 << 10
	maxBatchStmts = 200
)

// Span flags in the flags columns.
const (
	flagAnomalous = 1
	flagError     = 2
)

// Bucket scopes: the buckets table lists, per scope, the hours that hold
// rows of one index partition family.
const (
	scopeTime      = "t"
	scopeAnomaly   = "a"
	scopeRetention = "r"
)

func scopeService(svc string) string { return "s\x1f" + svc }
func scopeOp(svc, op string, kind model.SpanKind) string {
	return "o\x1f" + svc + "\x1f" + op + "\x1f" + strconv.Itoa(int(kind))
}

// bucketOf returns the hour bucket of a Unix ns time (floored, so times
// before 1970 get their own negative buckets).
func bucketOf(ns int64) int64 {
	b := ns / bucketNs
	if ns%bucketNs < 0 {
		b--
	}
	return b
}

func shardOf(t model.TraceID) int8 { return int8(t[15] % timeShards) }

func flagsOf(s *model.Span) int8 {
	var f int8
	if s.IsAnomalous() {
		f |= flagAnomalous
	}
	if s.IsError() {
		f |= flagError
	}
	return f
}

// statement is one CQL write; part groups the statements of one partition
// into a batch (atomic and isolated within the partition).
type statement struct {
	part string
	cql  string
	args []any
	size int
}

type writeSet struct {
	ttl   string // " USING TTL n" or ""
	stmts []statement
	seen  map[string]bool // dedupe of bucket and name rows
}

func (w *writeSet) add(part, cql string, size int, args ...any) {
	w.stmts = append(w.stmts, statement{part: part, cql: cql + w.ttl, args: args, size: size + 64})
}

// once adds a statement unless one with the same key was added.
func (w *writeSet) once(key, part, cql string, args ...any) {
	if w.seen[key] {
		return
	}
	w.seen[key] = true
	w.add(part, cql, len(key), args...)
}

func (s *Store) newWriteSet() *writeSet {
	w := &writeSet{seen: map[string]bool{}}
	if s.ttl > 0 {
		w.ttl = " USING TTL " + strconv.Itoa(s.ttl)
	}
	return w
}

func (w *writeSet) bucket(scope string, b int64) {
	w.once("b\x00"+scope+"\x00"+strconv.FormatInt(b, 10), "b\x00"+scope,
		`INSERT INTO buckets (scope, bucket) VALUES (?, ?)`, scope, b)
}

// WriteSpans stores spans with their index rows. Each trace's spans of the
// batch go to Cassandra in one single-partition batch, which is atomic and
// isolated: readers see all of them or none. Index rows are written first,
// so a reader that finds a span through an index finds its row (or skips a
// candidate whose row is not there yet). Across traces a failed write may
// leave some traces stored; the retry that the failure asks for rewrites
// them identically.
func (s *Store) WriteSpans(ctx context.Context, spans []*model.Span) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(spans) == 0 {
		return nil
	}
	idx, rows := s.newWriteSet(), s.newWriteSet()
	for _, sp := range spans {
		s.indexSpan(idx, sp)
		data := model.AppendSpans(nil, []*model.Span{sp})
		tid, sid, pid := sp.TraceID[:], sp.SpanID[:], sp.ParentSpanID[:]
		rows.add("s\x00"+string(tid),
			`INSERT INTO spans (trace_id, span_id, parent_id, service, operation, kind, start, duration, flags, rt, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			len(data)+len(sp.Service)+len(sp.Name),
			tid, sid, pid, sp.Service, sp.Name, int8(sp.Kind), sp.Start, sp.Duration, flagsOf(sp), store.RetentionTime(sp), data)
	}
	if err := s.exec(ctx, idx.stmts); err != nil {
		return wrap("write span index", err)
	}
	if err := s.exec(ctx, rows.stmts); err != nil {
		return wrap("write spans", err)
	}
	return nil
}

// indexSpan adds the index, bucket and name rows of one span.
func (s *Store) indexSpan(w *writeSet, sp *model.Span) {
	tid, sid := sp.TraceID[:], sp.SpanID[:]
	b, flags, kind := bucketOf(sp.Start), flagsOf(sp), int8(sp.Kind)
	bs := strconv.FormatInt(b, 10)
	sh := shardOf(sp.TraceID)
	w.add("t\x00"+bs+"\x00"+strconv.Itoa(int(sh)),
		`INSERT INTO time_index (bucket, shard, start, trace_id, span_id, service, operation, duration, flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		len(sp.Service)+len(sp.Name)+60, b, sh, sp.Start, tid, sid, sp.Service, sp.Name, sp.Duration, flags)
	w.add("o\x00"+sp.Service+"\x00"+sp.Name+"\x00"+strconv.Itoa(int(kind))+"\x00"+bs,
		`INSERT INTO op_index (service, operation, kind, bucket, start, trace_id, span_id, duration, flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		len(sp.Service)+len(sp.Name)+60, sp.Service, sp.Name, kind, b, sp.Start, tid, sid, sp.Duration, flags)
	tags := map[[2]string]bool{}
	for _, kvs := range [][]model.KeyValue{sp.Attributes, sp.Resource} {
		for _, kv := range kvs {
			v := kv.Value.String()
			if len(kv.Key) > maxIndexedTag || len(v) > maxIndexedTag || tags[[2]string{kv.Key, v}] {
				continue
			}
			tags[[2]string{kv.Key, v}] = true
			w.add("g\x00"+sp.Service+"\x00"+kv.Key+"\x00"+v+"\x00"+bs,
				`INSERT INTO tag_index (service, tag_key, tag_value, bucket, start, trace_id, span_id, operation, duration, flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				len(sp.Service)+len(kv.Key)+len(v)+len(sp.Name)+60, sp.Service, kv.Key, v, b, sp.Start, tid, sid, sp.Name, sp.Duration, flags)
		}
	}
	if flags&flagAnomalous != 0 {
		w.add("a\x00"+bs, `INSERT INTO anomaly_index (bucket, start, trace_id, span_id, service) VALUES (?, ?, ?, ?, ?)`,
			len(sp.Service)+60, b, sp.Start, tid, sid, sp.Service)
		w.bucket(scopeAnomaly, b)
	}
	rb := bucketOf(store.RetentionTime(sp))
	w.once("r\x00"+strconv.FormatInt(rb, 10)+"\x00"+string(tid), "r\x00"+strconv.FormatInt(rb, 10),
		`INSERT INTO retention_index (bucket, trace_id) VALUES (?, ?)`, rb, tid)
	w.bucket(scopeRetention, rb)
	w.bucket(scopeTime, b)
	w.bucket(scopeService(sp.Service), b)
	w.bucket(scopeOp(sp.Service, sp.Name, sp.Kind), b)
	w.once("n\x00"+sp.Service, "n", `INSERT INTO services (part, service) VALUES (0, ?)`, sp.Service)
	w.once("p\x00"+sp.Service+"\x00"+sp.Name+"\x00"+strconv.Itoa(int(kind)), "p\x00"+sp.Service,
		`INSERT INTO operations (service, operation, kind) VALUES (?, ?, ?)`, sp.Service, sp.Name, kind)
}

// exec runs statements grouped into single-partition unlogged batches, at
// most cfg.Parallelism at once, and returns the first error.
func (s *Store) exec(ctx context.Context, stmts []statement) error {
	var batches [][]statement
	byPart := map[string]int{} // partition → index of its open batch
	sizes := map[int]int{}
	for _, st := range stmts {
		i, ok := byPart[st.part]
		if !ok || sizes[i]+st.size > maxBatchBytes || len(batches[i]) >= maxBatchStmts {
			i = len(batches)
			batches = append(batches, nil)
			byPart[st.part] = i
		}
		batches[i] = append(batches[i], st)
		sizes[i] += st.size
	}
	return s.parallel(ctx, len(batches), func(ctx context.Context, i int) error {
		b := batches[i]
		if len(b) == 1 {
			return s.session.Query(b[0].cql, b[0].args...).WithContext(ctx).Exec()
		}
		batch := s.session.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
		for _, st := range b {
			batch.Query(st.cql, st.args...)
		}
		return s.session.ExecuteBatch(batch)
	})
}

// parallel calls fn(0..n-1) with at most cfg.Parallelism calls at once and
// returns the first error (the others are abandoned through ctx).
func (s *Store) parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return fn(ctx, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		workers = min(n, s.cfg.Parallelism)
		next    = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// errorf formats an error of this package.
func errorf(format string, args ...any) error { return fmt.Errorf("cassandra: "+format, args...) }
