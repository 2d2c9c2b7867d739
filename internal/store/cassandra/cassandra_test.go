package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/rootline/rootline/internal/engines"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/fsblob"
	"github.com/rootline/rootline/internal/store/storetest"
)

// keyspaces hands each test a keyspace of its own, created once by Init and
// emptied between subtests (TRUNCATE is much cheaper than a new keyspace).
var (
	ksMu     sync.Mutex
	ksByTest = map[string]Config{}
)

func testConfig(t *testing.T) Config {
	t.Helper()
	servers := engines.Cassandra(t)
	root := strings.SplitN(t.Name(), "/", 2)[0]
	ksMu.Lock()
	defer ksMu.Unlock()
	if cfg, ok := ksByTest[root]; ok {
		return cfg
	}
	var b [4]byte
	rand.Read(b[:])
	cfg := Config{Servers: servers, Keyspace: "rl_test_" + hex.EncodeToString(b[:]), Timeout: 30 * time.Second}
	cfg.ApplyDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := Init(ctx, cfg, nil); err != nil {
		t.Fatalf("Init: %v", err)
	}
	ksByTest[root] = cfg
	return cfg
}

// truncate empties every table of cfg's keyspace.
func truncate(t *testing.T, cfg Config) {
	t.Helper()
	cl, err := cfg.cluster(cfg.Keyspace)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	iter := sess.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, cfg.Keyspace).Iter()
	var name string
	var tables []string
	for iter.Scan(&name) {
		if name != "meta" {
			tables = append(tables, name)
		}
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if err := sess.Query(`TRUNCATE ` + tb).Exec(); err != nil {
			t.Fatalf("truncate %s: %v", tb, err)
		}
	}
}

func openTest(t *testing.T) *Store {
	t.Helper()
	cfg := testConfig(t)
	truncate(t, cfg)
	blobs, err := fsblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), cfg, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Suite{
		Open:  func(t *testing.T) store.Store { return openTest(t) },
		Blobs: func(st store.Store) store.BlobStore { return st.(*Store).blobs },
		// A cluster's size is its operators' to manage (see Purge).
		Lacks: storetest.Lacks{SizeCap: true},
	}.Run(t)
}

// TestInit: Init is idempotent and versioned; Open refuses a keyspace
// without the schema.
func TestInit(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	res, err := Init(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.CreatedKeyspace || res.From != SchemaVersion || res.To != SchemaVersion {
		t.Errorf("second Init = %+v, want nothing done at version %d", res, SchemaVersion)
	}
	empty := cfg
	var b [4]byte
	rand.Read(b[:])
	empty.Keyspace = "rl_none_" + hex.EncodeToString(b[:])
	if _, err := Open(ctx, empty, nil, nil); err == nil {
		t.Error("Open without a blob store succeeded")
	}
	blobs, _ := fsblob.Open(t.TempDir())
	if s, err := Open(ctx, empty, blobs, nil); err == nil {
		s.Close()
		t.Error("Open of a keyspace that does not exist succeeded")
	} else if !strings.Contains(err.Error(), "storage init") {
		t.Errorf("Open of a missing keyspace: %v, want a hint at `rootline storage init`", err)
	}
	// A keyspace whose schema is older (here: its version row removed).
	cl, _ := cfg.cluster(cfg.Keyspace)
	sess, err := cl.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.Query(`INSERT INTO meta (key, value) VALUES ('schema_version', '0')`).Exec(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, cfg, blobs, nil); !errors.Is(err, ErrSchema) {
		if s != nil {
			s.Close()
		}
		t.Errorf("Open of an old schema: %v, want ErrSchema", err)
	}
	if res, err := Init(ctx, cfg, nil); err != nil || res.From != 0 || res.To != SchemaVersion {
		t.Errorf("Init of an old schema = %+v, %v", res, err)
	}
	if err := sess.Query(`INSERT INTO meta (key, value) VALUES ('schema_version', '99')`).Exec(); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(ctx, cfg, nil); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Init of a newer schema: %v, want a refusal", err)
	}
	// A keyspace of version 1 (before incidents) is brought to the current
	// version by the migrations after it only.
	if err := sess.Query(`INSERT INTO meta (key, value) VALUES ('schema_version', ?)`, "1").Exec(); err != nil {
		t.Fatal(err)
	}
	if res, err := Init(ctx, cfg, nil); err != nil || res.From != 1 || res.To != SchemaVersion {
		t.Errorf("Init of a version 1 schema = %+v, %v", res, err)
	}
	s, err := Open(ctx, cfg, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.FindIncidents(ctx, store.IncidentQuery{}); err != nil {
		t.Errorf("incidents after the upgrade: %v", err)
	}
}

// TestTTL: every row is written with the configured TTL.
func TestTTL(t *testing.T) {
	cfg := testConfig(t)
	truncate(t, cfg)
	cfg.TTL = time.Hour
	blobs, _ := fsblob.Open(t.TempDir())
	s, err := Open(context.Background(), cfg, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sp := &model.Span{TraceID: model.TraceID{1}, SpanID: model.SpanID{2}, Service: "svc", Name: "op", Start: time.Now().UnixNano(), Duration: 5}
	if err := s.WriteSpans(context.Background(), []*model.Span{sp}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT TTL(data) FROM spans WHERE trace_id = ? AND span_id = ?`,
		`SELECT TTL(duration) FROM time_index WHERE bucket = ? AND shard = ? AND start = ? AND trace_id = ? AND span_id = ?`,
	} {
		var args []any
		if strings.Contains(q, "time_index") {
			args = []any{bucketOf(sp.Start), shardOf(sp.TraceID), sp.Start, sp.TraceID[:], sp.SpanID[:]}
		} else {
			args = []any{sp.TraceID[:], sp.SpanID[:]}
		}
		var ttl int
		if err := s.session.Query(q, args...).Scan(&ttl); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if ttl <= 3500 || ttl > 3600 {
			t.Errorf("%s: TTL %d s, want about 3600", q, ttl)
		}
	}
}

// TestUnavailable: a store whose nodes cannot be reached answers
// store.ErrUnavailable, so receivers say "retry later".
func TestUnavailable(t *testing.T) {
	cfg := testConfig(t)
	blobs, _ := fsblob.Open(t.TempDir())
	s, err := Open(context.Background(), cfg, blobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	err = s.WriteSpans(ctx, []*model.Span{{TraceID: model.TraceID{9}, SpanID: model.SpanID{9}, Service: "s", Name: "o"}})
	if err == nil {
		t.Fatal("a write with an expired deadline succeeded")
	}
	if !errors.Is(unavailable(gocql.ErrNoConnections), store.ErrUnavailable) {
		t.Error("no connections is not ErrUnavailable")
	}
}
