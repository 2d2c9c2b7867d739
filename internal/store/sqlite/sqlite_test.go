package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/storetest"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "ROOTLINE_SQLITE_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	code := m.Run()
	cleanupFixture()
	// Every Store must stop its checkpointer and connection pools on Close.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir}, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Suite{
		Open:  func(t *testing.T) store.Store { return openTest(t, t.TempDir()) },
		Blobs: func(st store.Store) store.BlobStore { return st.(*Store).blobs },
	}.Run(t)
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no dir", Config{}, "Dir is empty"},
		{"question mark", Config{Dir: "/tmp/a?b"}, "must not contain"},
		{"bad synchronous", Config{Dir: "/tmp/x", Synchronous: "OFF"}, "FULL or NORMAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Open: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, Synchronous: "normal"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var sync int
	if err := s.wdb.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil || sync != 1 {
		t.Errorf("synchronous = %d, %v; want 1 (NORMAL)", sync, err)
	}
	var mode string
	if err := s.rdb.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	var ps int
	if err := s.rdb.QueryRow("PRAGMA page_size").Scan(&ps); err != nil || ps != pageSize {
		t.Errorf("page_size = %d, %v; want %d", ps, err, pageSize)
	}
	if _, err := s.rdb.Exec("CREATE TABLE x (y)"); err == nil {
		t.Error("the read pool accepted a write")
	}
}

func testSpans(trace byte, n int, start int64) []*model.Span {
	var spans []*model.Span
	for i := range n {
		spans = append(spans, &model.Span{
			TraceID:    model.TraceID{trace, 1},
			SpanID:     model.SpanID{trace, byte(i), 1},
			Service:    "svc",
			Name:       "op",
			Start:      start + int64(i),
			Duration:   1000,
			Attributes: []model.KeyValue{model.Int("i", int64(i))},
			Resource:   []model.KeyValue{model.String(model.AttrServiceName, "svc")},
		})
	}
	return spans
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	want := testSpans(1, 5, 1e18)
	if err := s.WriteSpans(ctx, want); err != nil {
		t.Fatal(err)
	}
	a, err := s.PutArtifact(ctx, store.Artifact{Kind: "cpu", Spans: []store.SpanRef{{TraceID: want[0].TraceID, SpanID: want[0].SpanID}}},
		strings.NewReader("profile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.dbPath + "-wal"); err == nil && fi.Size() != 0 {
		t.Errorf("WAL holds %d bytes after Close, want it checkpointed and truncated", fi.Size())
	}

	s = openTest(t, dir)
	defer s.Close()
	got, err := s.GetTrace(ctx, want[0].TraceID)
	if err != nil || len(got) != len(want) {
		t.Fatalf("after reopen: %d spans, %v; want %d", len(got), err, len(want))
	}
	// The caches start cold: a new batch must reuse the stored service and
	// operation rather than insert duplicates.
	if err := s.WriteSpans(ctx, testSpans(2, 3, 2e18)); err != nil {
		t.Fatal(err)
	}
	svcs, err := s.GetServices(ctx)
	if err != nil || len(svcs) != 1 {
		t.Errorf("services after reopen = %v, %v", svcs, err)
	}
	ops, err := s.GetOperations(ctx, "svc")
	if err != nil || len(ops) != 1 {
		t.Errorf("operations after reopen = %v, %v", ops, err)
	}
	arts, err := s.TraceArtifacts(ctx, want[0].TraceID)
	if err != nil || len(arts) != 1 || arts[0].ID != a.ID {
		t.Errorf("artifacts after reopen = %v, %v", arts, err)
	}
}

// TestDurabilityAfterKill runs a child process that writes batches and
// reports each acknowledged one on stdout; the child is SIGKILLed while it is
// still writing. Every acknowledged batch must be there after reopening, and
// every batch must be there entirely or not at all.
func TestDurabilityAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=write", "ROOTLINE_SQLITE_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const killAfter = 30
	var acked []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "ack "))
		if err != nil {
			t.Fatalf("helper said %q", sc.Text())
		}
		acked = append(acked, n)
		if len(acked) == killAfter {
			// The child is already writing the next batch.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	// Read what the child printed before it died: those batches were
	// acknowledged too.
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "ack "))
		if err == nil {
			acked = append(acked, n)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want killed by SIGKILL", err)
	}
	if len(acked) < killAfter {
		t.Fatalf("helper acknowledged only %d batches", len(acked))
	}

	s := openTest(t, dir)
	defer s.Close()
	ctx := context.Background()
	for _, n := range acked {
		spans, err := s.GetTrace(ctx, helperTrace(n))
		if err != nil || len(spans) != helperBatch {
			t.Errorf("acknowledged batch %d: %d spans, %v; want %d", n, len(spans), err, helperBatch)
		}
	}
	// Batches past the last acknowledgement: whole or absent.
	last := acked[len(acked)-1]
	for n := last + 1; n <= last+3; n++ {
		spans, err := s.GetTrace(ctx, helperTrace(n))
		if err == nil && len(spans) != helperBatch {
			t.Errorf("unacknowledged batch %d is partly stored: %d of %d spans", n, len(spans), helperBatch)
		}
	}
}

const helperBatch = 200

func helperTrace(n int) model.TraceID {
	return model.TraceID{0xd0, byte(n >> 8), byte(n)}
}

func runHelper(mode string) int {
	switch mode {
	case "write":
		s, err := Open(Config{Dir: os.Getenv("ROOTLINE_SQLITE_TEST_DIR")}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		start := time.Now().UnixNano()
		for n := 1; ; n++ {
			spans := make([]*model.Span, helperBatch)
			for i := range spans {
				spans[i] = &model.Span{
					TraceID: helperTrace(n), SpanID: model.SpanID{byte(i >> 8), byte(i), 1},
					Service: "durable", Name: "op", Start: start + int64(n*helperBatch+i), Duration: 1,
					Attributes: []model.KeyValue{model.String("padding", strings.Repeat("p", 200))},
				}
			}
			if err := s.WriteSpans(context.Background(), spans); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			// Acknowledge exactly as a receiver would: only after return.
			fmt.Printf("ack %d\n", n)
		}
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// TestQueryPlans pins the index each query path uses, so a schema or query
// change that falls back to a scan fails here rather than in production.
func TestQueryPlans(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`SELECT i.start, s.trace_id FROM span_index AS i CROSS JOIN segments AS s ON s.id = i.segment
			WHERE i.service_id = 1 AND i.op_id IN (3, 4) AND i.start >= 1 AND i.start <= 2 AND i.duration >= 5
			ORDER BY i.start DESC`,
			[]string{"SEARCH i USING PRIMARY KEY (service_id=? AND start>? AND start<?)", "SEARCH s USING INTEGER PRIMARY KEY (rowid=?)"}},
		{`SELECT i.start, s.trace_id FROM span_index AS i INDEXED BY span_index_anomalous_service CROSS JOIN segments AS s ON s.id = i.segment
			WHERE i.flags & 1 = 1 AND i.service_id = 1 ORDER BY i.start DESC`,
			[]string{"INDEX span_index_anomalous_service (service_id=?)"}},
		{`SELECT s.id, s.trace_id, s.data, i.idx FROM span_index AS i INDEXED BY span_index_anomalous
			CROSS JOIN segments AS s ON s.id = i.segment WHERE i.flags & 1 = 1 AND i.start >= 5 ORDER BY i.start DESC LIMIT 100`,
			[]string{"INDEX span_index_anomalous (start>?)"}},
		{`SELECT segments FROM traces WHERE trace_id IN (x'00', x'01')`, []string{"SEARCH traces USING PRIMARY KEY (trace_id=?)"}},
		{`SELECT id, trace_id, data FROM segments WHERE id IN (1, 2, 3)`, []string{"SEARCH segments USING INTEGER PRIMARY KEY (rowid=?)"}},
		{`SELECT trace_id FROM traces WHERE flags = 0 AND last_end < 5 ORDER BY last_end LIMIT 10`,
			[]string{"INDEX traces_retention (flags=? AND last_end<?)"}},
		{`SELECT id, trace_id, data FROM segments WHERE id IN (
			SELECT segment FROM span_index WHERE service_id IN (SELECT id FROM services) AND start >= 1 AND start <= 2)`,
			[]string{"SEARCH segments USING INTEGER PRIMARY KEY (rowid=?)", "PRIMARY KEY (service_id=? AND start>? AND start<?)"}},
		{`DELETE FROM span_index WHERE service_id = 1 AND start = 2 AND segment = 3 AND idx = 4`,
			[]string{"PRIMARY KEY (service_id=? AND start=? AND segment=? AND idx=?)"}},
	} {
		rows, err := s.rdb.Query("EXPLAIN QUERY PLAN " + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		for _, want := range tc.want {
			if !strings.Contains(joined, want) || strings.Contains(joined, "TEMP B-TREE") {
				t.Errorf("plan of\n  %s\nis\n  %s\nwant it to contain %q and no temp b-tree", tc.query, joined, want)
			}
		}
	}
}

// TestConcurrentPurge runs purges (age and size) and artifact uploads while
// spans are written and read; under -race it checks the locking between the
// writer, the readers, the blob store and the purger.
func TestConcurrentPurge(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	g := newGen(5, 4, 3)
	base := time.Now().UnixNano()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	stop := make(chan struct{})
	var mu sync.Mutex
	var written []model.TraceID

	wg.Go(func() {
		for i := range 60 {
			var batch []*model.Span
			for j := range 10 {
				batch = append(batch, g.trace(base+int64(i*10+j)*int64(time.Millisecond), 5)...)
			}
			if err := s.WriteSpans(ctx, batch); err != nil {
				errc <- err
				return
			}
			mu.Lock()
			written = append(written, batch[0].TraceID)
			mu.Unlock()
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			var ref store.SpanRef
			if len(written) > 0 {
				ref.TraceID = written[len(written)-1]
			}
			mu.Unlock()
			// Identical content every other time: exercises blob dedupe
			// against blob deletion.
			content := strings.NewReader(fmt.Sprintf("profile %d", i%2))
			if _, err := s.PutArtifact(ctx, store.Artifact{Kind: "cpu", Spans: []store.SpanRef{ref}}, content); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := store.RetentionPolicy{Now: base + int64(i)*20*int64(time.Millisecond), Normal: 1, Anomalous: int64(time.Millisecond)}
			if i%3 == 2 {
				p = store.RetentionPolicy{Now: base, MaxBytes: 1 << 20}
			}
			if _, err := s.Purge(ctx, p); err != nil {
				errc <- err
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.FindTraces(ctx, store.TraceQuery{Service: "service-01", Limit: 5}); err != nil {
					errc <- err
					return
				}
				if _, err := s.Dependencies(ctx, 0, 0); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				var id model.TraceID
				if len(written) > 0 {
					id = written[len(written)/2]
				}
				mu.Unlock()
				if _, err := s.GetTrace(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
					errc <- err
					return
				}
				arts, err := s.TraceArtifacts(ctx, id)
				if err != nil {
					errc <- err
					return
				}
				for _, a := range arts {
					_, rc, err := s.OpenArtifact(ctx, a.ID)
					if errors.Is(err, store.ErrNotFound) {
						continue // purged meanwhile
					}
					if err != nil {
						errc <- err
						return
					}
					rc.Close()
				}
			}
		})
	}
	// Stop the others once the writer is done.
	go func() {
		for {
			mu.Lock()
			n := len(written)
			mu.Unlock()
			if n == 60 {
				break
			}
			select {
			case err := <-errc:
				errc <- err
				close(stop)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(stop)
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// One Store per directory: a second Open fails, naming the holder, until
// the first is closed.
func TestDirLock(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	_, err := Open(Config{Dir: dir}, nil)
	if !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("second Open: %v, want ErrDirInUse naming process %d", err, os.Getpid())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	s.Close()
}
