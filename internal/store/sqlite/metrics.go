package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rootline/rootline/internal/store"
)

var (
	_ store.MetricWriter = (*Store)(nil)
	_ store.MetricReader = (*Store)(nil)
)

// metricSchema holds metric points (pushed as OTLP, e.g. the agent's kernel
// metrics). It is created with IF NOT EXISTS on every open rather than in the
// versioned span schema, so stores created before it gain it in place.
// Series are rows of their own so a point carries only its values; labels
// are canonical JSON (sorted keys) and part of a series' identity.
var metricSchema = []string{
	`CREATE TABLE IF NOT EXISTS metric_series (
		id      INTEGER PRIMARY KEY,
		name    TEXT NOT NULL,
		service TEXT NOT NULL,
		labels  TEXT NOT NULL,
		unit    TEXT NOT NULL,
		kind    INTEGER NOT NULL,
		UNIQUE (name, service, labels)
	)`,
	`CREATE TABLE IF NOT EXISTS metric_points (
		series_id INTEGER NOT NULL,
		ts        INTEGER NOT NULL,
		start     INTEGER NOT NULL,
		value     REAL,
		count     INTEGER,
		sum       REAL,
		bounds    TEXT,
		buckets   TEXT
	)`,
	`CREATE INDEX IF NOT EXISTS metric_points_series_ts ON metric_points (series_id, ts)`,
	`CREATE INDEX IF NOT EXISTS metric_points_ts ON metric_points (ts)`,
}

// createMetricSchema runs on the writer connection from open.
func (s *Store) createMetricSchema(ctx context.Context) error {
	for _, stmt := range append(metricSchema[:len(metricSchema):len(metricSchema)], probeSchema) {
		if _, err := s.wdb.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlite: create metric schema: %w", err)
		}
	}
	return nil
}

// WriteMetrics stores a batch of points in one transaction.
func (s *Store) WriteMetrics(ctx context.Context, points []store.MetricPoint) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if len(points) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		return writeMetrics(context.WithoutCancel(ctx), tx, points)
	})
	if err != nil {
		return fmt.Errorf("sqlite: write metrics: %w", err)
	}
	return nil
}

func writeMetrics(ctx context.Context, tx *sql.Tx, points []store.MetricPoint) error {
	series, err := tx.PrepareContext(ctx, `INSERT INTO metric_series (name, service, labels, unit, kind) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (name, service, labels) DO UPDATE SET unit = excluded.unit, kind = excluded.kind RETURNING id`)
	if err != nil {
		return err
	}
	defer series.Close()
	point, err := tx.PrepareContext(ctx, `INSERT INTO metric_points (series_id, ts, start, value, count, sum, bounds, buckets)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer point.Close()
	ids := map[string]int64{}
	for i := range points {
		p := &points[i]
		if p.Name == "" {
			return errors.New("metric point without a name")
		}
		labels, err := json.Marshal(nonNil(p.Labels))
		if err != nil {
			return err
		}
		sk := p.Name + "\x00" + p.Service + "\x00" + string(labels)
		id, ok := ids[sk]
		if !ok {
			if err := series.QueryRowContext(ctx, p.Name, p.Service, string(labels), p.Unit, int(p.Kind)).Scan(&id); err != nil {
				return err
			}
			ids[sk] = id
		}
		var value, sum any
		var count any
		var bounds, buckets any
		if p.Kind == store.MetricHistogram {
			if len(p.Buckets) != 0 && len(p.Buckets) != len(p.Bounds)+1 {
				return fmt.Errorf("metric %s: %d buckets for %d bounds", p.Name, len(p.Buckets), len(p.Bounds))
			}
			count, sum = int64(p.Count), p.Sum
			b, _ := json.Marshal(p.Bounds)
			c, _ := json.Marshal(p.Buckets)
			bounds, buckets = string(b), string(c)
		} else {
			value = p.Value
		}
		if _, err := point.ExecContext(ctx, id, p.Time, p.StartTime, value, count, sum, bounds, buckets); err != nil {
			return err
		}
	}
	return nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// defaultMetricLimit bounds FindMetrics without a limit.
const defaultMetricLimit = 10000

// FindMetrics returns the matching points grouped by series.
func (s *Store) FindMetrics(ctx context.Context, q store.MetricQuery) ([]store.MetricSeries, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultMetricLimit
	}
	histogram := "p.bounds, p.buckets"
	if q.OmitBuckets {
		histogram = "NULL, NULL"
	}
	query := `SELECT s.id, s.name, s.service, s.labels, s.unit, s.kind, p.ts, p.start, p.value, p.count, p.sum, ` + histogram + `
		FROM metric_points p JOIN metric_series s ON s.id = p.series_id WHERE 1 = 1`
	var args []any
	if q.Name != "" {
		query += " AND s.name = ?"
		args = append(args, q.Name)
	}
	if q.Service != "" {
		query += " AND s.service = ?"
		args = append(args, q.Service)
	}
	if q.From != 0 {
		query += " AND p.ts >= ?"
		args = append(args, q.From)
	}
	if q.To != 0 {
		query += " AND p.ts <= ?"
		args = append(args, q.To)
	}
	query += " ORDER BY s.name, s.service, s.labels, p.ts LIMIT ?"
	args = append(args, limit)
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: find metrics: %w", err)
	}
	defer rows.Close()
	var out []store.MetricSeries
	lastID := int64(-1)
	for rows.Next() {
		var (
			id                int64
			name, svc, labels string
			unit              string
			kind              int
			p                 store.MetricPoint
			value, sum        sql.NullFloat64
			count             sql.NullInt64
			bounds, buckets   sql.NullString
		)
		if err := rows.Scan(&id, &name, &svc, &labels, &unit, &kind, &p.Time, &p.StartTime, &value, &count, &sum, &bounds, &buckets); err != nil {
			return nil, fmt.Errorf("sqlite: find metrics: %w", err)
		}
		if id != lastID {
			ms := store.MetricSeries{Name: name, Service: svc, Unit: unit, Kind: store.MetricKind(kind)}
			if err := json.Unmarshal([]byte(labels), &ms.Labels); err != nil {
				return nil, fmt.Errorf("sqlite: metric labels: %w", err)
			}
			out = append(out, ms)
			lastID = id
		}
		p.Value, p.Sum, p.Count = value.Float64, sum.Float64, uint64(count.Int64)
		if bounds.Valid {
			if err := json.Unmarshal([]byte(bounds.String), &p.Bounds); err != nil {
				return nil, fmt.Errorf("sqlite: metric bounds: %w", err)
			}
		}
		if buckets.Valid {
			if err := json.Unmarshal([]byte(buckets.String), &p.Buckets); err != nil {
				return nil, fmt.Errorf("sqlite: metric buckets: %w", err)
			}
		}
		out[len(out)-1].Points = append(out[len(out)-1].Points, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: find metrics: %w", err)
	}
	return out, nil
}

// purgeMetrics deletes points older than before and series left without
// points; Purge calls it with the span retention.
func (s *Store) purgeMetrics(ctx context.Context, before int64) (int64, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	res, err := s.wdb.ExecContext(ctx, `DELETE FROM metric_points WHERE ts < ?`, before)
	if err != nil {
		return 0, fmt.Errorf("purge metric points: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		if _, err := s.wdb.ExecContext(ctx, `DELETE FROM metric_series WHERE NOT EXISTS
			(SELECT 1 FROM metric_points p WHERE p.series_id = metric_series.id)`); err != nil {
			return n, fmt.Errorf("purge metric series: %w", err)
		}
	}
	return n, nil
}
