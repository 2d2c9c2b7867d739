package kafka

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/engines"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
)

func span(svc string, i int, d time.Duration) *model.Span {
	return &model.Span{TraceID: model.TraceID{byte(i >> 8), byte(i), 1}, SpanID: model.SpanID{byte(i >> 8), byte(i), 2},
		Service: svc, Name: "op", Start: int64(i) * int64(time.Millisecond), Duration: int64(d)}
}

// TestRecords: one service per record, keyed by it, order kept, records no
// larger than the bound unless one span alone is.
func TestRecords(t *testing.T) {
	var spans []*model.Span
	for i := range 300 {
		spans = append(spans, span([]string{"a", "b", "c"}[i%3], i, time.Millisecond))
	}
	big := span("b", 1000, time.Millisecond)
	big.Attributes = []model.KeyValue{model.String("blob", string(make([]byte, 5000)))}
	spans = append(spans, big)
	ts := time.Unix(100, 0)
	recs := Records(spans, 2000, ts)
	got := map[string][]*model.Span{}
	for _, r := range recs {
		dec, err := model.DecodeSpans(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Value) > 2000+8 && len(dec) != 1 {
			t.Errorf("record of %d bytes holds %d spans", len(r.Value), len(dec))
		}
		if !r.Timestamp.Equal(ts) {
			t.Errorf("timestamp %v", r.Timestamp)
		}
		for _, s := range dec {
			if s.Service != string(r.Key) {
				t.Fatalf("span of %s in a record keyed %s", s.Service, r.Key)
			}
		}
		got[string(r.Key)] = append(got[string(r.Key)], dec...)
	}
	for _, svc := range []string{"a", "b", "c"} {
		var want []*model.Span
		for _, s := range spans {
			if s.Service == svc {
				want = append(want, s)
			}
		}
		if !reflect.DeepEqual(got[svc], want) {
			t.Errorf("service %s: %d spans back, want %d in order", svc, len(got[svc]), len(want))
		}
	}
}

func testConfig(t *testing.T) Config {
	t.Helper()
	brokers := engines.Kafka(t)
	var b [4]byte
	crand.Read(b[:])
	id := hex.EncodeToString(b[:])
	cfg := Config{Brokers: brokers, Topic: "rl-test-" + id, AgentsTopic: "rl-test-agents-" + id, Group: "rl-test-" + id, Partitions: 1}
	cfg.ApplyDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := EnsureTopics(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestProducer: a request is acknowledged once its records are in Kafka,
// where they decode to the spans sent; with no broker it is answered "retry
// later" within the produce timeout.
func TestProducer(t *testing.T) {
	cfg := testConfig(t)
	p, err := NewProducer(cfg, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spans := []*model.Span{span("a", 1, time.Millisecond), span("b", 2, time.Millisecond)}
	spans[0].Start, spans[1].Start = time.Now().UnixNano(), time.Now().UnixNano()
	if err := p.ConsumeSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeSpans(context.Background(), spans); !errors.Is(err, pipeline.ErrShuttingDown) {
		t.Errorf("after Close: %v, want ErrShuttingDown", err)
	}
	recs := readAll(t, cfg, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, r := range recs {
		dec, err := model.DecodeSpans(r.Value)
		if err != nil || len(dec) != 1 || dec[0].Service != string(r.Key) {
			t.Fatalf("record %s: %v %v", r.Key, dec, err)
		}
	}

	// A broker address where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	down := cfg
	down.Brokers, down.ProduceTimeout = []string{dead}, time.Second
	p, err = NewProducer(down, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	start := time.Now()
	err = p.ConsumeSpans(context.Background(), spans)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("with Kafka down: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %v, want about the produce timeout (1s)", took)
	}
}

func readAll(t *testing.T, cfg Config, n int) []*kgo.Record {
	t.Helper()
	opts, _ := cfg.clientOpts()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(cfg.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		out = append(out, cl.PollFetches(ctx).Records()...)
	}
	return out
}

// TestRebuildEquivalence: the windows rebuilt by reading back from a
// committed offset equal those of a detector that consumed the partition
// from its start (the naive reference), for a busy key, a quiet one and one
// seen only early, across several read-back chunks.
func TestRebuildEquivalence(t *testing.T) {
	cfg := testConfig(t)
	opts, _ := cfg.clientOpts()
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(cfg.Topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	det := anomaly.Config{Window: 50, Threshold: 3, MinFill: 5, MaxKeys: 1000}
	ref, _ := anomaly.NewMedian(det, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	const records = 5000
	var batch []*kgo.Record
	for i := range records {
		svc := "busy"
		switch {
		case i%97 == 0:
			svc = "quiet"
		case i < 40:
			svc = "early"
		}
		var spans []*model.Span
		for j := range 1 + rng.IntN(3) {
			spans = append(spans, span(svc, i*4+j, time.Duration(1+rng.IntN(1000))*time.Microsecond))
		}
		pipeline.Detect(ref, pipeline.KeyByOperation, spans)
		batch = append(batch, &kgo.Record{Key: []byte(svc), Value: model.AppendSpans(nil, spans), Timestamp: time.Now()})
	}
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	d := &Detector{cfg: cfg, detCfg: det, keyBy: pipeline.KeyByOperation, optsFn: cfg.clientOpts}
	d.cfg.RebuildRecords = records
	got, _ := anomaly.NewMedian(det, nil)
	n, keys, err := d.rebuild(ctx, 0, 0, records, got)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt %d keys from %d records", keys, n)
	if n >= records {
		t.Errorf("read all %d records: the read-back did not stop once every window was full", n)
	}
	want := map[string]anomaly.KeyState{}
	for _, s := range ref.States() {
		want[s.Key] = s
	}
	for _, s := range got.States() {
		w := want[s.Key]
		if s.Fill != w.Fill || s.Baseline != w.Baseline {
			t.Errorf("%s: fill %d baseline %d, want %d and %d", s.Key, s.Fill, s.Baseline, w.Fill, w.Baseline)
		}
		delete(want, s.Key)
	}
	// "early" was last seen 5000 records back: beyond the read-back once
	// the other windows are full, it starts empty; the others must match.
	delete(want, "early/op")
	for k := range want {
		t.Errorf("key %s not rebuilt", k)
	}
	// The verdicts that follow agree too.
	for _, k := range []string{"busy/op", "quiet/op"} {
		for _, dur := range []int64{1000, 500_000, 5_000_000} {
			if a, b := got.Observe(k, dur), ref.Observe(k, dur); a.Anomalous != b.Anomalous || a.Baseline != b.Baseline {
				t.Errorf("%s %d ns: rebuilt says %+v, reference %+v", k, dur, a, b)
			}
		}
	}
}

// TestDetectorCommitsAfterStore: a detector whose store fails keeps
// retrying the batch and commits nothing until the store takes it; then the
// group's offset covers every record.
func TestDetectorCommitsAfterStore(t *testing.T) {
	cfg := testConfig(t)
	p, err := NewProducer(cfg, time.Hour, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := p.ConsumeSpans(context.Background(), []*model.Span{span(fmt.Sprint("s", i%3), i, time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close(context.Background())
	w := &flakyWriter{fail: 3}
	d, err := NewDetector(cfg, anomaly.DefaultConfig(), pipeline.KeyByOperation, w, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	opts, _ := cfg.clientOpts()
	acl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	deadline := time.Now().Add(time.Minute)
	for {
		offs, err := adm.FetchOffsets(context.Background(), cfg.Group)
		if err == nil {
			if o, ok := offs.Lookup(cfg.Topic, 0); ok && o.At == 10 {
				break
			}
			if o, ok := offs.Lookup(cfg.Topic, 0); ok && o.At > 0 && w.stored() < 10 {
				t.Fatalf("offset %d committed with %d spans stored", o.At, w.stored())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("offsets not committed in a minute; %d spans stored, %d failures", w.stored(), w.failures())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.stored() != 10 || w.failures() != 3 {
		t.Errorf("stored %d spans after %d failures, want 10 after 3", w.stored(), w.failures())
	}
}

// flakyWriter fails its first writes with store.ErrUnavailable, then keeps
// what it is given (a stand-in for the store in a test of the code above it).
type flakyWriter struct {
	mu    sync.Mutex
	fail  int
	fails int
	spans map[model.SpanID]bool
}

func (f *flakyWriter) WriteFlaggedSpans(_ context.Context, spans []*model.Span) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails < f.fail {
		f.fails++
		return store.ErrUnavailable
	}
	if f.spans == nil {
		f.spans = map[model.SpanID]bool{}
	}
	for _, s := range spans {
		f.spans[s.SpanID] = true
	}
	return nil
}

func (f *flakyWriter) stored() int   { f.mu.Lock(); defer f.mu.Unlock(); return len(f.spans) }
func (f *flakyWriter) failures() int { f.mu.Lock(); defer f.mu.Unlock(); return f.fails }

// TestStoreChunks: a batch is written in chunks of whole traces; a chunk
// the store fails is written again, and the chunks it already took are not.
func TestStoreChunks(t *testing.T) {
	var spans []*model.Span
	for i := range 2500 {
		s := span("a", i, time.Millisecond)
		s.TraceID = model.TraceID{byte(i / 3 >> 8), byte(i / 3), 9} // traces of three spans
		spans = append(spans, s)
	}
	w := &chunkWriter{failCall: 2}
	d := &Detector{w: w, log: slog.New(slog.DiscardHandler), m: detectorMetrics{
		spans:        prometheus.NewCounter(prometheus.CounterOpts{Name: "s"}),
		storeRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "r"}),
	}}
	if !d.store(context.Background(), spans) {
		t.Fatal("store gave up")
	}
	// 2500 spans, chunks of 1024 extended to a trace's end: [0,1026),
	// [1026,2052) failed once and written again, [2052,2500).
	wantCalls := [][2]int{{0, 1026}, {1026, 2052}, {1026, 2052}, {2052, 2500}}
	if !reflect.DeepEqual(w.calls, wantCalls) {
		t.Errorf("writes %v, want %v", w.calls, wantCalls)
	}
	if got := counterValue(d.m.spans); got != 2500 {
		t.Errorf("spans stored counter %v, want 2500", got)
	}
	if got := counterValue(d.m.storeRetries); got != 1 {
		t.Errorf("store retries %v, want 1", got)
	}
	for _, tc := range []struct{ n, limit, want int }{{5, 10, 5}, {10, 10, 10}, {11, 10, 11}, {13, 10, 12}, {12, 9, 9}} {
		if got := chunkEnd(spans[:tc.n], tc.limit); got != tc.want {
			t.Errorf("chunkEnd(%d spans, %d) = %d, want %d", tc.n, tc.limit, got, tc.want)
		}
	}
}

// chunkWriter records the span ranges it is asked to write (by the index
// in the span id) and fails its failCall-th write.
type chunkWriter struct {
	failCall int
	calls    [][2]int
}

func (c *chunkWriter) WriteFlaggedSpans(_ context.Context, spans []*model.Span) error {
	first := int(spans[0].SpanID[0])<<8 | int(spans[0].SpanID[1])
	c.calls = append(c.calls, [2]int{first, first + len(spans)})
	if len(c.calls) == c.failCall {
		return store.ErrUnavailable
	}
	return nil
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
