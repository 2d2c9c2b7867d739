package factory

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/s3"
)

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Spans.Type != TypeSQLite || c.Spans.SQLite.Dir != "/data" || c.Spans.SQLite.Synchronous != "FULL" ||
				c.Artifacts.Type != TypeFS || c.Artifacts.FS.Dir != "/data/blobs" || c.Metrics.Type != TypeSQLite {
				t.Fatalf("%+v %+v %+v", c.Spans.SQLite, c.Artifacts.FS, c.Metrics)
			}
		}},
		{name: "own directories and case", cfg: Config{
			Spans:     SpansConfig{Type: "SQLite", SQLite: &SQLiteConfig{Dir: "/db", Synchronous: "normal"}},
			Artifacts: ArtifactsConfig{FS: &FSConfig{Dir: "/blobs"}},
		}, check: func(t *testing.T, c Config) {
			if c.Spans.Type != TypeSQLite || c.Spans.SQLite.Dir != "/db" || c.Spans.SQLite.Synchronous != "NORMAL" || c.Artifacts.FS.Dir != "/blobs" {
				t.Fatalf("%+v %+v", c.Spans.SQLite, c.Artifacts.FS)
			}
		}},
		{name: "unknown span store", cfg: Config{Spans: SpansConfig{Type: "clickhouse"}}, wantErr: `storage.spans.type "clickhouse" is not a span store`},
		{name: "cassandra and s3", cfg: Config{
			Spans:     SpansConfig{Type: "Cassandra", Cassandra: &cassandra.Config{Servers: []string{"db:9042"}}},
			Artifacts: ArtifactsConfig{Type: "s3", S3: &s3.Config{Endpoint: "https://s3.example.com"}},
		}, check: func(t *testing.T, c Config) {
			if c.Spans.Cassandra.Keyspace != "rootline" || c.Spans.Cassandra.Consistency != "LOCAL_QUORUM" || c.Metrics.Type != TypeCassandra ||
				c.Artifacts.S3.Bucket != "rootline" || c.Artifacts.S3.Prefix != "blobs/" {
				t.Fatalf("%+v %+v %+v", c.Spans.Cassandra, c.Artifacts.S3, c.Metrics)
			}
		}},
		{name: "cassandra without servers", cfg: Config{Spans: SpansConfig{Type: "cassandra"}}, wantErr: "servers must name at least one node"},
		{name: "s3 without endpoint", cfg: Config{Artifacts: ArtifactsConfig{Type: "s3"}}, wantErr: "storage.artifacts.s3: endpoint"},
		{name: "section of another backend", cfg: Config{Spans: SpansConfig{Type: "cassandra", SQLite: &SQLiteConfig{}}},
			wantErr: "storage.spans.sqlite section is given"},
		{name: "unknown blob store", cfg: Config{Artifacts: ArtifactsConfig{Type: "gcs"}}, wantErr: `storage.artifacts.type "gcs"`},
		{name: "blob section of another type", cfg: Config{Artifacts: ArtifactsConfig{Type: "s3", FS: &FSConfig{Dir: "/x"}}},
			wantErr: "storage.artifacts.fs section is given"},
		{name: "metrics in sqlite need sqlite spans", cfg: Config{Spans: SpansConfig{Type: "cassandra"}, Metrics: MetricsConfig{Type: TypeSQLite}},
			wantErr: "keeps metrics in the span store's database"},
		{name: "unknown metric store", cfg: Config{Metrics: MetricsConfig{Type: "prometheus"}}, wantErr: `storage.metrics.type "prometheus"`},
		{name: "bad synchronous", cfg: Config{Spans: SpansConfig{SQLite: &SQLiteConfig{Synchronous: "OFF"}}}, wantErr: "FULL or NORMAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.ApplyDefaults("/data")
			err := c.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func openTest(t *testing.T, dir string, opts Options) *Storage {
	t.Helper()
	var c Config
	c.ApplyDefaults(dir)
	st, err := Open(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestOpen: the default backends in the data directory, every write and read
// through the wrapper (flagged spans, timed operations), metrics included.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st := openTest(t, dir, Options{Registerer: reg, Now: func() time.Time { return now }})
	ctx := context.Background()

	future := &model.Span{TraceID: model.TraceID{1}, SpanID: model.SpanID{1}, Service: "svc", Name: "op",
		Start: time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), Duration: 1}
	forged := &model.Span{TraceID: model.TraceID{2}, SpanID: model.SpanID{2}, Service: "svc", Name: "op",
		Start: now.UnixNano(), Duration: 1, Attributes: []model.KeyValue{model.Int(store.AttrClockSkewMs, 1<<40)}}
	if err := st.WriteSpans(ctx, []*model.Span{future, forged}); err != nil {
		t.Fatal(err)
	}
	if len(future.Attributes) != 0 || len(forged.Attributes) != 1 {
		t.Error("WriteSpans modified the caller's spans")
	}
	got, err := st.GetTrace(ctx, future.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got[0].Attr(store.AttrClockSkewMs); !ok || v.Int <= 0 {
		t.Errorf("span stamped 2250: %s = %v, %v; want a large positive value", store.AttrClockSkewMs, v, ok)
	}
	got, err = st.GetTrace(ctx, forged.TraceID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got[0].Attr(store.AttrClockSkewMs); ok {
		t.Error("a client's own rootline.clock_skew_ms was stored")
	}

	if err := st.WriteMetrics(ctx, []store.MetricPoint{{Name: "m", Kind: store.MetricGauge, Time: 1, Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if ms, err := st.FindMetrics(ctx, store.MetricQuery{Name: "m"}); err != nil || len(ms) != 1 {
		t.Fatalf("FindMetrics = %v, %v", ms, err)
	}
	a, err := st.PutArtifact(ctx, store.Artifact{Kind: "cpu"}, bytes.NewReader([]byte("profile")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", a.SHA256[:2], a.SHA256)); err != nil {
		t.Errorf("artifact content not in <data dir>/blobs: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rootline.db")); err != nil {
		t.Errorf("database not in the data dir: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "rootline_store_op_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	for _, op := range []string{"write_spans", "get_trace", "write_metrics", "find_metrics", "put_artifact"} {
		if counts[op] == 0 {
			t.Errorf("rootline_store_op_seconds{op=%q} has no samples (have %v)", op, counts)
		}
	}
	if st.WriteHealth() != nil {
		t.Errorf("WriteHealth = %v after successful writes", st.WriteHealth())
	}
}

// failing is a span writer that fails with err and probes with probeErr;
// only the methods the health test calls are implemented.
type failing struct {
	store.Store
	err, probeErr error
}

func (f *failing) WriteSpans(context.Context, []*model.Span) error { return f.err }
func (f *failing) ProbeWrite(context.Context) error                { return f.probeErr }
func (f *failing) Incidents() store.IncidentStore                  { return nil }

func TestWriteHealth(t *testing.T) {
	f := &failing{}
	st, err := newStorage(f, Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	write := func() error { return st.WriteSpans(ctx, []*model.Span{{Start: time.Now().UnixNano()}}) }

	f.err = errors.New("malformed batch")
	if write() == nil || st.WriteHealth() != nil {
		t.Fatal("an error that is not ErrUnavailable changed the write health")
	}
	f.err = errors.Join(store.ErrUnavailable, errors.New("disk full"))
	if write() == nil || !errors.Is(st.WriteHealth(), store.ErrUnavailable) {
		t.Fatalf("WriteHealth = %v after a write failed for want of space", st.WriteHealth())
	}
	f.probeErr = f.err
	if st.ProbeWrite(ctx) == nil || st.WriteHealth() == nil {
		t.Fatal("a failed probe cleared the write health")
	}
	f.probeErr = nil
	if err := st.ProbeWrite(ctx); err != nil || st.WriteHealth() != nil {
		t.Fatalf("probe %v, WriteHealth %v: want healthy once the probe writes", err, st.WriteHealth())
	}
	f.err = errors.Join(store.ErrUnavailable, errors.New("I/O error"))
	_ = write()
	f.err = nil
	if write() != nil || st.WriteHealth() != nil {
		t.Fatal("a successful write did not clear the write health")
	}
}
