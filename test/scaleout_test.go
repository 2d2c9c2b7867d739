package test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/engines"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/s3"
)

// scaleOut is one deployment's configuration on the run's engines: its own
// keyspace, bucket, topics and group, so tests do not see each other.
type scaleOut struct {
	config   string // YAML file
	keyspace string
	cass     []string
	s3       s3.Config
}

func newScaleOut(t *testing.T, extraKafka string) *scaleOut {
	t.Helper()
	brokers := engines.Kafka(t)
	cass := engines.Cassandra(t)
	endpoint, region := engines.S3(t)
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	so := &scaleOut{keyspace: "rl_e2e_" + id, cass: cass,
		s3: s3.Config{Endpoint: endpoint, Region: region, Bucket: "rl-e2e-" + id, BucketLookup: "path"}}
	so.s3.ApplyDefaults()
	so.config = filepath.Join(t.TempDir(), "rootline.yaml")
	yaml := fmt.Sprintf(`storage:
  spans:
    type: cassandra
    cassandra:
      servers: [%s]
      keyspace: %s
      timeout: 10s
  artifacts:
    type: s3
    s3:
      endpoint: %s
      region: %s
      bucket: %s
      bucket_lookup: path
kafka:
  brokers: [%s]
  topic: rl-e2e-%s-spans
  agents_topic: rl-e2e-%s-agents
  group: rl-e2e-%s
  partitions: 12
%s`, strings.Join(cass, ", "), so.keyspace, endpoint, region, so.s3.Bucket, strings.Join(brokers, ", "), id, id, id, extraKafka)
	if err := os.WriteFile(so.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// `rootline storage init` creates the keyspace and the bucket; a second
	// run finds nothing to do.
	for i, want := range []string{"schema version 0 → 2", "already, nothing to do"} {
		out, err := exec.Command(rootlineBin(t), "storage", "init", "--config", so.config, "--data-dir", t.TempDir()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("storage init #%d: %v\n%s\nwant it to say %q", i+1, err, out, want)
		}
	}
	return so
}

// start runs one server of the deployment.
func (so *scaleOut) start(t *testing.T, role string, extra ...string) *serverProc {
	t.Helper()
	return startServer(t, t.TempDir(), append([]string{"--config", so.config, "--role", role}, extra...)...)
}

// openStore opens the deployment's span store directly, to check what was
// stored without going through the servers.
func (so *scaleOut) openStore(t *testing.T) *cassandra.Store {
	t.Helper()
	cfg := cassandra.Config{Servers: so.cass, Keyspace: so.keyspace, Timeout: 30 * time.Second}
	cfg.ApplyDefaults()
	blobs, err := s3.Open(context.Background(), so.s3, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cassandra.Open(context.Background(), cfg, blobs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// ackLog records what the servers acknowledged: trace → its span ids.
type ackLog struct {
	mu     sync.Mutex
	traces map[model.TraceID][]model.SpanID
	codes  map[int]int // HTTP status → count; 0: transport error
}

func newAckLog() *ackLog {
	return &ackLog{traces: map[model.TraceID][]model.SpanID{}, codes: map[int]int{}}
}

func (a *ackLog) record(td ptrace.Traces, code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.codes[code]++
	if code != 200 {
		return
	}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		spans := rss.At(i).ScopeSpans().At(0).Spans()
		for j := 0; j < spans.Len(); j++ {
			s := spans.At(j)
			a.traces[model.TraceID(s.TraceID())] = append(a.traces[model.TraceID(s.TraceID())], model.SpanID(s.SpanID()))
		}
	}
}

func (a *ackLog) count(code int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.codes[code]
}

func (a *ackLog) acked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.traces)
}

// meshTrace is a trace of three services out of n: svc-i → svc-(i+7) →
// svc-(i+13), each taking about baseline (a little jitter, so windows have
// a spread). Spans of svc-07 carry pid, so that its anomalies map to the
// agent's target.
func meshTrace(id pcommon.TraceID, i, n int, baseline time.Duration, pid int) ptrace.Traces {
	var specs []spanSpec
	for _, k := range []int{i, i + 7, i + 13} {
		svc := fmt.Sprintf("svc-%02d", k%n)
		sp := spanSpec{service: svc, name: "GET /work", duration: baseline + time.Duration(k%5)*baseline/20}
		if svc == "svc-07" {
			sp.res = map[string]any{"process.pid": pid}
		}
		specs = append(specs, sp)
	}
	return makeTrace(id, time.Now().Add(-time.Second), specs...)
}

// sendLoad sends mesh traces from several clients until stop closes.
func sendLoad(t *testing.T, addr string, clients int, next *atomic.Uint64, pid int, acks *ackLog, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := next.Add(1)
				td := meshTrace(tid(n), int(n%20), 20, 10*time.Millisecond, pid)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				code, _, err := postOTLP(ctx, addr, td)
				cancel()
				if err != nil {
					code = 0
				}
				acks.record(td, code)
				if code != 200 {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	return &wg
}

// waitStored waits until every acknowledged span is stored, then checks
// that each trace holds exactly its acknowledged spans, once each.
func waitStored(t *testing.T, st store.SpanReader, acks *ackLog, within time.Duration) {
	t.Helper()
	acks.mu.Lock()
	want := make(map[model.TraceID][]model.SpanID, len(acks.traces))
	for k, v := range acks.traces {
		want[k] = v
	}
	acks.mu.Unlock()
	deadline := time.Now().Add(within)
	ctx := context.Background()
	for id, spans := range want {
		for {
			got, err := st.GetTrace(ctx, id)
			if err == nil && len(got) >= len(spans) {
				seen := map[model.SpanID]int{}
				for _, s := range got {
					seen[s.SpanID]++
				}
				for _, sid := range spans {
					if seen[sid] != 1 {
						t.Fatalf("trace %v: acknowledged span %v stored %d times", id, sid, seen[sid])
					}
				}
				if len(got) != len(spans) {
					t.Fatalf("trace %v: %d spans stored, %d acknowledged", id, len(got), len(spans))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace %v: %d of %d acknowledged spans stored after %v (err %v)", id, len(got), len(spans), within, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("all %d acknowledged traces stored, each span once", len(want))
}

// detectorOwns reports whether a detector owns the detector key.
func detectorOwns(t *testing.T, d *serverProc, key string) bool {
	t.Helper()
	return d.getJSON(t, "/api/v1/detector?key="+url.QueryEscape(key), nil) == 200
}

// TestScaleOutDetectorKill: one ingester and two detectors over Kafka,
// Cassandra and S3, spans of 20 services. The detector that owns svc-07 is
// killed with SIGKILL mid-run; then svc-07 slows down 100×. Every span
// acknowledged to a client is stored exactly once; the survivor, which
// rebuilt svc-07's detector window from the partition, flags the very first
// slow spans (a cold window would judge none of them: the first min-fill
// spans get no verdict, and the window would then be all slow); and the
// capture of the anomaly reaches the real agent, whose profile is stored in
// S3 and linked to the slow trace.
func TestScaleOutDetectorKill(t *testing.T) {
	bpftest.RequireBPF(t)
	so := newScaleOut(t, "")
	dir := t.TempDir()
	bin := filepath.Join(dir, "spin")
	if out, err := exec.Command("go", "build", "-o", bin, "../bench/spin").CombinedOutput(); err != nil {
		t.Fatalf("build target: %v\n%s", err, out)
	}
	pid := startTarget(t, bin, "--duration", "10m")

	detArgs := []string{"--detector.min-fill", "10", "--capture.pre", "3s", "--capture.post", "0s", "--capture.settle", "500ms",
		"--capture.min-interval", "0"}
	ing := so.start(t, "ingester")
	d1 := so.start(t, "detector", detArgs...)
	d2 := so.start(t, "detector", detArgs...)
	startAgent(t, ing, "--profilers", "cpu", "--target", fmt.Sprintf("pid=%d,service=svc-07", pid))
	for _, d := range []*serverProc{d1, d2} {
		waitFor(t, 60*time.Second, "the detectors to learn the agent from Kafka", func() bool {
			var agents []any
			d.getJSON(t, "/api/v1/agents", &agents)
			return len(agents) == 1
		})
	}

	acks := newAckLog()
	var next atomic.Uint64
	stop := make(chan struct{})
	wg := sendLoad(t, ing.http, 4, &next, pid, acks, stop)
	const key = "svc-07/GET /work"
	var victim, survivor *serverProc
	lastLog := time.Now()
	waitFor(t, 3*time.Minute, "svc-07's window to fill on one detector while both own partitions", func() bool {
		var s1, s2 []struct{ Key string }
		d1.getJSON(t, "/api/v1/detector", &s1)
		d2.getJSON(t, "/api/v1/detector", &s2)
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			acks.mu.Lock()
			t.Logf("%d traces acknowledged (answers %v); detectors hold %d and %d keys", len(acks.traces), acks.codes, len(s1), len(s2))
			acks.mu.Unlock()
		}
		if acks.acked() < 400 || len(s1) == 0 || len(s2) == 0 {
			return false
		}
		switch {
		case detectorOwns(t, d1, key):
			victim, survivor = d1, d2
		case detectorOwns(t, d2, key):
			victim, survivor = d2, d1
		}
		return victim != nil
	})
	before := acks.acked()
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.exited
	t.Logf("SIGKILLed the detector owning %s after %d acknowledged traces", key, before)

	// The slowdown: svc-07 takes 100× as long. Only slow spans of svc-07
	// are sent from now on.
	var slow []model.TraceID
	for i := range 5 {
		id := tid(1_000_000 + uint64(i))
		td := makeTrace(id, time.Now().Add(-2*time.Second), spanSpec{service: "svc-07", name: "GET /work", duration: time.Second,
			res: map[string]any{"process.pid": pid}})
		code, _, err := postOTLP(context.Background(), ing.http, td)
		acks.record(td, code)
		if err != nil || code != 200 {
			t.Fatalf("slow span %d: %d %v", i, code, err)
		}
		slow = append(slow, model.TraceID(id))
	}
	time.Sleep(3 * time.Second) // more load for the other services, while the group rebalances
	close(stop)
	wg.Wait()
	t.Logf("load: %d traces acknowledged (%d after the kill), answers %v", acks.acked(), acks.acked()-before, acks.codes)

	st := so.openStore(t)
	waitStored(t, st, acks, 4*time.Minute)
	for i, id := range slow {
		spans, err := st.GetTrace(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !spans[0].IsAnomalous() {
			t.Errorf("slow svc-07 span #%d (1 s against ~10 ms) was not flagged: the new owner's window started cold", i+1)
		}
	}
	if !strings.Contains(survivor.logs.String(), `"rebuilt_from_records"`) {
		t.Error("the survivor logged no window rebuild")
	}

	// The capture reached the real agent: a CPU profile of the target is
	// stored and linked to the slow trace (read through the ingester's API).
	found := false
	waitFor(t, 2*time.Minute, "the capture's artifact on a slow trace", func() bool {
		for _, id := range slow {
			var arts []artifactJSON
			ing.getJSON(t, "/api/v1/traces/"+id.String()+"/artifacts", &arts)
			for _, a := range arts {
				if a.Kind == "cpu" && a.PID == int64(pid) && a.Size > 0 {
					found = true
				}
			}
		}
		return found
	})
	arts, err := st.TraceArtifacts(context.Background(), slow[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		if _, err := so.openBlob(t).Stat(context.Background(), a.SHA256); err != nil {
			t.Errorf("artifact %s: content not in S3: %v", a.ID, err)
		}
	}
}

func (so *scaleOut) openBlob(t *testing.T) *s3.Store {
	t.Helper()
	b, err := s3.Open(context.Background(), so.s3, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitFor polls cond every 250 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestScaleOutOutages: Kafka, then Cassandra, stopped for 30 s each under
// load. While Kafka is down the ingester answers 503 (retry later), never
// an error a client would not retry; while Cassandra is down it keeps
// acknowledging (Kafka holds the spans) and the detector retries its batch
// until Cassandra is back, while an all-in-one server on the same Cassandra
// answers 503. Both recover by themselves, and every acknowledged span is
// stored exactly once.
func TestScaleOutOutages(t *testing.T) {
	so := newScaleOut(t, "  produce_timeout: 3s\n")
	ing := so.start(t, "ingester")
	so.start(t, "detector")
	aio := startServer(t, t.TempDir(), "--config", so.config, "--role", "all")

	acks, aioAcks := newAckLog(), newAckLog()
	var next atomic.Uint64
	next.Store(5_000_000)
	stop := make(chan struct{})
	wg := sendLoad(t, ing.http, 3, &next, 1, acks, stop)
	wg2 := sendLoad(t, aio.http, 2, &next, 1, aioAcks, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
		wg2.Wait()
	}()
	waitFor(t, time.Minute, "load to be acknowledged", func() bool { return acks.acked() > 50 && aioAcks.acked() > 20 })

	outage := func(engine string, during func()) {
		engines.Stop(t, engine)
		stopped := time.Now()
		during()
		time.Sleep(time.Until(stopped.Add(30 * time.Second)))
		engines.Restart(t, engine)
	}

	// Kafka down: the ingester cannot have its records acknowledged.
	outage("kafka", func() {
		n503 := acks.count(503)
		waitFor(t, 25*time.Second, "the ingester to answer 503 while Kafka is down", func() bool { return acks.count(503) > n503 })
	})
	after := acks.acked()
	waitFor(t, 2*time.Minute, "the ingester to acknowledge again after Kafka's return", func() bool { return acks.acked() > after+20 })
	t.Logf("after the Kafka outage: answers %v", acks.codes)

	// Cassandra down: the ingester keeps acknowledging; the all-in-one
	// server, which writes to Cassandra itself, answers 503.
	var ingDuring, aio503 int
	outage("cassandra", func() {
		n, m := acks.acked(), aioAcks.count(503)
		time.Sleep(20 * time.Second)
		ingDuring, aio503 = acks.acked()-n, aioAcks.count(503)-m
	})
	if ingDuring == 0 {
		t.Error("the ingester acknowledged nothing while Cassandra was down: Kafka should hold the spans")
	}
	if aio503 == 0 {
		t.Error("the all-in-one server on Cassandra never answered 503 while Cassandra was down")
	}
	after = aioAcks.acked()
	waitFor(t, 3*time.Minute, "the all-in-one server to acknowledge again after Cassandra's return", func() bool { return aioAcks.acked() > after+10 })
	close(stop)
	wg.Wait()
	wg2.Wait()
	for _, a := range []*ackLog{acks, aioAcks} {
		for code, n := range a.codes {
			if code != 200 && code != 503 && code != 429 {
				t.Errorf("%d requests answered %d (0: no answer): only 429 and 503 may refuse spans during an outage", n, code)
			}
		}
	}
	t.Logf("ingester answers %v; all-in-one answers %v", acks.codes, aioAcks.codes)
	st := so.openStore(t)
	waitStored(t, st, acks, 5*time.Minute)
	waitStored(t, st, aioAcks, time.Minute)
}
