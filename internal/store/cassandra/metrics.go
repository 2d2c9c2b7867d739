package cassandra

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// Metric points are partitioned by series and day; a series row lists the
// days it has points in, so a query and a purge read only those.
const (
	metricBucketNs     = int64(24 * time.Hour)
	defaultMetricLimit = 10000
)

func metricBucket(ts int64) int64 {
	b := ts / metricBucketNs
	if ts%metricBucketNs < 0 {
		b--
	}
	return b
}

// labelsKey is a series' labels as sorted JSON: its identity and sort key.
func labelsKey(l map[string]string) string {
	if l == nil {
		l = map[string]string{}
	}
	b, _ := json.Marshal(l) // sorts keys; a map of strings always marshals
	return string(b)
}

// WriteMetrics stores metric points. A histogram whose bucket counts do not
// fit its bounds is refused before anything is written.
func (s *Store) WriteMetrics(ctx context.Context, points []store.MetricPoint) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	for _, p := range points {
		if p.Kind == store.MetricHistogram && len(p.Buckets) != len(p.Bounds)+1 {
			return errorf("metric %s: %d bucket counts for %d bounds", p.Name, len(p.Buckets), len(p.Bounds))
		}
	}
	w := s.newWriteSet()
	for _, p := range points {
		lk, b := labelsKey(p.Labels), metricBucket(p.Time)
		w.once("mn\x00"+p.Name, "mn", `INSERT INTO metric_names (part, name) VALUES (0, ?)`, p.Name)
		series := "ms\x00" + p.Name + "\x00" + p.Service + "\x00" + lk
		if !w.seen[series+"\x00"+strconv.FormatInt(b, 10)] {
			w.seen[series+"\x00"+strconv.FormatInt(b, 10)] = true
			w.stmts = append(w.stmts, statement{part: "ms\x00" + p.Name,
				cql:  `UPDATE metric_series` + w.ttl + ` SET unit = ?, kind = ?, buckets = buckets + ? WHERE name = ? AND service = ? AND labels = ?`,
				args: []any{p.Unit, int8(p.Kind), []int64{b}, p.Name, p.Service, lk}, size: len(series) + 64})
		}
		counts := make([]int64, len(p.Buckets))
		for i, c := range p.Buckets {
			counts[i] = int64(c)
		}
		w.add("mp"+series+"\x00"+strconv.FormatInt(b, 10),
			`INSERT INTO metric_points (name, service, labels, bucket, ts, start, value, count, sum, bounds, bucket_counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			len(series)+8*(len(p.Bounds)+len(counts))+64,
			p.Name, p.Service, lk, b, p.Time, p.StartTime, p.Value, int64(p.Count), p.Sum, p.Bounds, counts)
	}
	return wrap("write metrics", s.exec(ctx, w.stmts))
}

type seriesRow struct {
	store.MetricSeries
	labels  string
	buckets []int64
}

func (s *Store) metricNames(ctx context.Context) ([]string, error) {
	iter := s.session.Query(`SELECT name FROM metric_names WHERE part = 0`).WithContext(ctx).PageSize(pageSize).Iter()
	var out []string
	var n string
	for iter.Scan(&n) {
		out = append(out, n)
	}
	return out, wrap("list metric names", iter.Close())
}

func (s *Store) seriesOf(ctx context.Context, name, service string) ([]seriesRow, error) {
	cql, args := `SELECT service, labels, unit, kind, buckets FROM metric_series WHERE name = ?`, []any{name}
	if service != "" {
		cql += ` AND service = ?`
		args = append(args, service)
	}
	iter := s.session.Query(cql, args...).WithContext(ctx).PageSize(pageSize).Iter()
	var out []seriesRow
	var r seriesRow
	var kind int8
	for iter.Scan(&r.Service, &r.labels, &r.Unit, &kind, &r.buckets) {
		r.Name, r.Kind = name, store.MetricKind(kind)
		if err := json.Unmarshal([]byte(r.labels), &r.Labels); err != nil {
			iter.Close()
			return nil, errorf("metric labels: %w", err)
		}
		if len(r.Labels) == 0 {
			r.Labels = nil
		}
		slices.Sort(r.buckets)
		out = append(out, r)
		r = seriesRow{}
	}
	return out, wrap("read metric series", iter.Close())
}

// FindMetrics returns the series with points matching q, sorted by name,
// service and labels, their points oldest first; Limit bounds the points.
func (s *Store) FindMetrics(ctx context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultMetricLimit
	}
	names := []string{q.Name}
	if q.Name == "" {
		var err error
		if names, err = s.metricNames(ctx); err != nil {
			return nil, err
		}
	}
	from, to := rangeOf(q.From, q.To)
	var out []store.MetricSeries
	n := 0
	for _, name := range names {
		series, err := s.seriesOf(ctx, name, q.Service)
		if err != nil {
			return nil, err
		}
		for _, sr := range series {
			ms := sr.MetricSeries
			for _, b := range sr.buckets {
				if b < metricBucket(from) || b > metricBucket(to) || n >= limit {
					continue
				}
				iter := s.session.Query(`SELECT ts, start, value, count, sum, bounds, bucket_counts FROM metric_points
					WHERE name = ? AND service = ? AND labels = ? AND bucket = ? AND ts >= ? AND ts <= ? LIMIT ?`,
					name, sr.Service, sr.labels, b, from, to, limit-n).WithContext(ctx).PageSize(pageSize).Iter()
				var (
					p      store.MetricPoint
					count  int64
					counts []int64
				)
				for iter.Scan(&p.Time, &p.StartTime, &p.Value, &count, &p.Sum, &p.Bounds, &counts) {
					p.Count = uint64(count)
					if ms.Kind == store.MetricHistogram {
						p.Buckets = make([]uint64, len(counts))
						for i, c := range counts {
							p.Buckets[i] = uint64(c)
						}
					} else {
						p.Bounds = nil
					}
					ms.Points = append(ms.Points, p)
					n++
					p, counts = store.MetricPoint{}, nil
				}
				if err := iter.Close(); err != nil {
					return nil, wrap("read metric points", err)
				}
			}
			if len(ms.Points) > 0 {
				out = append(out, ms)
			}
		}
	}
	return out, nil
}

// purgeMetrics deletes points older than cutoff, then series and names
// left without points.
func (s *Store) purgeMetrics(ctx context.Context, cutoff int64) error {
	names, err := s.metricNames(ctx)
	if err != nil {
		return err
	}
	cb := metricBucket(cutoff)
	for _, name := range names {
		series, err := s.seriesOf(ctx, name, "")
		if err != nil {
			return err
		}
		left := 0
		for _, sr := range series {
			var gone []int64
			for _, b := range sr.buckets {
				switch {
				case b < cb:
					err = s.session.Query(`DELETE FROM metric_points WHERE name = ? AND service = ? AND labels = ? AND bucket = ?`,
						name, sr.Service, sr.labels, b).WithContext(ctx).Exec()
					gone = append(gone, b)
				case b == cb:
					err = s.session.Query(`DELETE FROM metric_points WHERE name = ? AND service = ? AND labels = ? AND bucket = ? AND ts < ?`,
						name, sr.Service, sr.labels, b, cutoff).WithContext(ctx).Exec()
					if err == nil {
						var e bool
						if e, err = s.empty(ctx, `SELECT ts FROM metric_points WHERE name = ? AND service = ? AND labels = ? AND bucket = ?`,
							name, sr.Service, sr.labels, b); e {
							gone = append(gone, b)
						}
					}
				}
				if err != nil {
					return wrap("purge metric points", err)
				}
			}
			if len(gone) == len(sr.buckets) {
				err = s.session.Query(`DELETE FROM metric_series WHERE name = ? AND service = ? AND labels = ?`, name, sr.Service, sr.labels).
					WithContext(ctx).Exec()
			} else {
				left++
				if len(gone) > 0 {
					err = s.session.Query(`UPDATE metric_series SET buckets = buckets - ? WHERE name = ? AND service = ? AND labels = ?`,
						gone, name, sr.Service, sr.labels).WithContext(ctx).Exec()
				}
			}
			if err != nil {
				return wrap("purge metric series", err)
			}
		}
		if left == 0 {
			if err := s.session.Query(`DELETE FROM metric_names WHERE part = 0 AND name = ?`, name).WithContext(ctx).Exec(); err != nil {
				return wrap("purge metric names", err)
			}
		}
	}
	return nil
}
