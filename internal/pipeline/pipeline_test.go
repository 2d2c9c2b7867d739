package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gateWriter is a SpanWriter whose commits wait for the test to open a gate,
// so queueing behaviour can be observed deterministically.
type gateWriter struct {
	mu      sync.Mutex
	calls   [][]*model.Span
	entered chan int // receives len(batch) when a commit starts
	gate    chan struct{}
	once    sync.Once
	err     error
}

// open lets every present and future commit through.
func (g *gateWriter) open() { g.once.Do(func() { close(g.gate) }) }

func newGateWriter() *gateWriter {
	return &gateWriter{entered: make(chan int, 100), gate: make(chan struct{}, 100)}
}

func (g *gateWriter) WriteSpans(_ context.Context, spans []*model.Span) error {
	g.entered <- len(spans)
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, append([]*model.Span(nil), spans...))
	return g.err
}

type sinkRecorder struct {
	mu    sync.Mutex
	spans []*model.Span
}

func (s *sinkRecorder) OnCommitted(spans []*model.Span) {
	s.mu.Lock()
	s.spans = append(s.spans, spans...)
	s.mu.Unlock()
}

func spans(n int, service, name string, d time.Duration) []*model.Span {
	out := make([]*model.Span, n)
	for i := range out {
		out[i] = &model.Span{TraceID: model.TraceID{1}, SpanID: model.SpanID{byte(i + 1)}, Service: service, Name: name, Start: 1, Duration: int64(d)}
	}
	return out
}

func start(t *testing.T, cfg Config, w *gateWriter, det anomaly.Detector, sinks ...Sink) *Pipeline {
	t.Helper()
	p, err := New(cfg, w, det, sinks, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.Run(); close(done) }()
	t.Cleanup(func() {
		w.open()
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
		<-done
	})
	return p
}

func consumeAsync(p *Pipeline, s []*model.Span) chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.ConsumeSpans(context.Background(), s) }()
	return ch
}

func TestGroupCommitAndDurableAck(t *testing.T) {
	w := newGateWriter()
	p := start(t, DefaultConfig(), w, nil)

	first := consumeAsync(p, spans(3, "a", "op", time.Millisecond))
	if n := <-w.entered; n != 3 {
		t.Fatalf("first commit has %d spans, want 3", n)
	}
	// While the first commit is in flight, five more requests queue up.
	var rest []chan error
	for range 5 {
		rest = append(rest, consumeAsync(p, spans(2, "a", "op", time.Millisecond)))
	}
	waitFor(t, func() bool { return p.QueuedSpans() == 13 })
	select {
	case err := <-first:
		t.Fatalf("acknowledged before commit: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.gate <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The five queued requests are committed together in one transaction.
	if n := <-w.entered; n != 10 {
		t.Fatalf("group commit has %d spans, want 10", n)
	}
	w.gate <- struct{}{}
	for _, ch := range rest {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if got := p.QueuedSpans(); got != 0 {
		t.Fatalf("queued = %d after commits", got)
	}
}

func TestBackpressure(t *testing.T) {
	w := newGateWriter()
	cfg := DefaultConfig()
	cfg.QueueSpans = 10
	p := start(t, cfg, w, nil)

	a := consumeAsync(p, spans(6, "a", "op", 1))
	<-w.entered // commit of a in flight; a still counts as queued
	b := consumeAsync(p, spans(4, "a", "op", 1))
	waitFor(t, func() bool { return p.QueuedSpans() == 10 })
	for _, tc := range []struct {
		name string
		n    int
	}{{"one more span", 1}, {"a large batch", 50}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := p.ConsumeSpans(context.Background(), spans(tc.n, "a", "op", 1)); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("err = %v, want ErrQueueFull", err)
			}
		})
	}
	w.gate <- struct{}{}
	<-w.entered
	w.gate <- struct{}{}
	if err := errors.Join(<-a, <-b); err != nil {
		t.Fatal(err)
	}
	// With the queue empty, even an oversized request is admitted.
	big := consumeAsync(p, spans(25, "a", "op", 1))
	<-w.entered
	w.gate <- struct{}{}
	if err := <-big; err != nil {
		t.Fatalf("oversized request on an empty queue: %v", err)
	}
}

// TestBackpressureInBytes: a queue bounded in bytes refuses what would take
// it over, however few spans that is, and admits an oversized request when
// it is empty.
func TestBackpressureInBytes(t *testing.T) {
	w := newGateWriter()
	cfg := DefaultConfig()
	small := spans(2, "a", "op", 1)
	cfg.QueueBytes = SpanBytes(small) * 3
	p := start(t, cfg, w, nil)

	a := consumeAsync(p, small)
	<-w.entered
	b := consumeAsync(p, spans(2, "a", "op", 1))
	waitFor(t, func() bool { return p.QueuedSpans() == 4 })
	fat := spans(1, "a", "op", 1)
	fat[0].SetAttr(model.String("payload", strings.Repeat("x", 10_000)))
	if err := p.ConsumeSpans(context.Background(), fat); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a 10 KB span past a %d B queue: err = %v, want ErrQueueFull", cfg.QueueBytes, err)
	}
	w.gate <- struct{}{}
	<-w.entered
	w.gate <- struct{}{}
	if err := errors.Join(<-a, <-b); err != nil {
		t.Fatal(err)
	}
	c := consumeAsync(p, fat)
	<-w.entered
	w.gate <- struct{}{}
	if err := <-c; err != nil {
		t.Fatalf("oversized request on an empty queue: %v", err)
	}
	waitFor(t, func() bool { return p.qbytes.Load() == 0 })
}

func TestSpanBytes(t *testing.T) {
	res := []model.KeyValue{model.String("service.name", "svc"), model.String("host.name", "h")}
	mk := func(attr string) *model.Span {
		s := &model.Span{Service: "svc", Name: "op", Resource: res[:2:2]}
		s.SetAttr(model.String("k", attr))
		return s
	}
	one := SpanBytes([]*model.Span{mk("")})
	two := SpanBytes([]*model.Span{mk(""), mk("")})
	if two >= 2*one {
		t.Errorf("two spans sharing a resource cost %d, one %d: the resource counted twice", two, one)
	}
	if d := SpanBytes([]*model.Span{mk(strings.Repeat("x", 1000))}) - one; d != 1000 {
		t.Errorf("1000 more bytes of value cost %d", d)
	}
}

func TestDetectionAnnotatesAndFeedsSinks(t *testing.T) {
	w := newGateWriter()
	w.open()
	det, err := anomaly.NewMedian(anomaly.Config{Window: 50, Threshold: 3, MinFill: 20, MaxKeys: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &sinkRecorder{}
	p := start(t, DefaultConfig(), w, det, rec)
	ctx := context.Background()
	if err := p.ConsumeSpans(ctx, spans(30, "svc", "GET /", 10*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	other := spans(1, "svc", "other-op", 100*time.Millisecond) // different key: no history
	slow := spans(1, "svc", "GET /", 31*time.Millisecond)      // > 3 × 10 ms
	edge := spans(1, "svc", "GET /", 30*time.Millisecond)      // = 3 × 10 ms: not anomalous
	if err := p.ConsumeSpans(ctx, append(append(other, slow...), edge...)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    *model.Span
		want bool
	}{{"new key", other[0], false}, {"slow", slow[0], true}, {"at threshold", edge[0], false}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.IsAnomalous(); got != tc.want {
				t.Fatalf("anomalous = %v, want %v (attrs %+v)", got, tc.want, tc.s.Attributes)
			}
			if !tc.want {
				return
			}
			base, _ := tc.s.Attr(model.AttrBaselineMs)
			thr, _ := tc.s.Attr(model.AttrThreshold)
			if base.Float != 10 || thr.Float != 3 || !tc.s.IsError() {
				t.Fatalf("baseline %v threshold %v error %v", base.Float, thr.Float, tc.s.IsError())
			}
		})
	}
	// Requests are answered before the sinks see the commit.
	waitFor(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.spans) >= 33
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 33 {
		t.Fatalf("sink saw %d spans, want 33", len(rec.spans))
	}
}

func TestWriteErrorReachesEveryRequestOfTheGroup(t *testing.T) {
	w := newGateWriter()
	w.err = errors.New("disk full")
	rec := &sinkRecorder{}
	p := start(t, DefaultConfig(), w, nil, rec)
	first := consumeAsync(p, spans(1, "a", "op", 1))
	<-w.entered
	x, y := consumeAsync(p, spans(1, "a", "op", 1)), consumeAsync(p, spans(2, "a", "op", 1))
	waitFor(t, func() bool { return p.QueuedSpans() == 4 })
	w.gate <- struct{}{}
	<-w.entered
	w.gate <- struct{}{}
	for _, ch := range []chan error{first, x, y} {
		if err := <-ch; err == nil || !errors.Is(err, w.err) {
			t.Fatalf("err = %v, want the store's error", err)
		}
	}
	if len(rec.spans) != 0 {
		t.Fatal("sinks saw spans that were not committed")
	}
}

func TestCloseDrainsThenRefuses(t *testing.T) {
	w := newGateWriter()
	p, err := New(DefaultConfig(), w, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.Run(); close(done) }()
	a := consumeAsync(p, spans(2, "a", "op", 1))
	<-w.entered
	b := consumeAsync(p, spans(3, "a", "op", 1))
	waitFor(t, func() bool { return p.QueuedSpans() == 5 })
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	waitFor(t, func() bool {
		p.mu.RLock()
		defer p.mu.RUnlock()
		return p.closing
	})
	if err := p.ConsumeSpans(context.Background(), spans(1, "a", "op", 1)); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("err = %v while draining, want ErrShuttingDown", err)
	}
	w.gate <- struct{}{}
	<-w.entered
	w.gate <- struct{}{}
	if err := errors.Join(<-a, <-b, <-closed); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(w.calls) != 2 || len(w.calls[1]) != 3 {
		t.Fatalf("commits = %d, want the queued request committed before Close returned", len(w.calls))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"zero queue", func(c *Config) { c.QueueSpans = 0 }, false},
		{"zero queue bytes", func(c *Config) { c.QueueBytes = 0 }, false},
		{"zero batch", func(c *Config) { c.MaxBatchSpans = 0 }, false},
		{"bad key", func(c *Config) { c.KeyBy = "trace" }, false},
		{"service key", func(c *Config) { c.KeyBy = KeyByService }, true},
		{"no commit delay", func(c *Config) { c.CommitDelay = 0 }, true},
		{"negative commit delay", func(c *Config) { c.CommitDelay = -time.Millisecond }, false},
		{"huge commit delay", func(c *Config) { c.CommitDelay = time.Minute }, false},
		{"negative commit delay spans", func(c *Config) { c.CommitDelaySpans = -1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// After a quiet time, small requests arriving within CommitDelay share one
// commit; a commit that reaches CommitDelaySpans, or a large request, does
// not wait; a client that sends as soon as it is acknowledged is not slowed;
// with no delay each request commits at once.
func TestCommitDelay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CommitDelay, cfg.CommitDelaySpans = 300*time.Millisecond, 20
	w := newGateWriter()
	w.open()
	p := start(t, cfg, w, nil)

	time.Sleep(200 * time.Millisecond) // quiet: the next commit may wait 300 ms
	began := time.Now()
	a := consumeAsync(p, spans(3, "a", "op", 1))
	time.Sleep(30 * time.Millisecond)
	b := consumeAsync(p, spans(4, "b", "op", 1))
	if n := <-w.entered; n != 7 {
		t.Fatalf("first commit: %d spans, want both small requests (7)", n)
	}
	if err := errors.Join(<-a, <-b); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited < 200*time.Millisecond {
		t.Errorf("small requests committed after %v: did not wait for others", waited)
	}

	// Enough spans end the wait at once.
	time.Sleep(200 * time.Millisecond)
	began = time.Now()
	c := consumeAsync(p, spans(5, "c", "op", 1))
	time.Sleep(20 * time.Millisecond)
	d := consumeAsync(p, spans(15, "d", "op", 1))
	if n := <-w.entered; n != 20 {
		t.Fatalf("second commit: %d spans, want 20", n)
	}
	if err := errors.Join(<-c, <-d); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited > 250*time.Millisecond {
		t.Errorf("a commit of CommitDelaySpans waited %v", waited)
	}
	// A large request alone does not wait.
	time.Sleep(200 * time.Millisecond)
	began = time.Now()
	if err := p.ConsumeSpans(context.Background(), spans(25, "e", "op", 1)); err != nil {
		t.Fatal(err)
	}
	if n := <-w.entered; n != 25 {
		t.Fatalf("third commit: %d spans", n)
	}
	if waited := time.Since(began); waited > 250*time.Millisecond {
		t.Errorf("a large request waited %v for its commit", waited)
	}

	// A closed-loop client leaves no quiet time: 50 small requests, one
	// after the other's acknowledgement, take far less than 50 delays.
	began = time.Now()
	for range 50 {
		if err := p.ConsumeSpans(context.Background(), spans(1, "f", "op", 1)); err != nil {
			t.Fatal(err)
		}
		<-w.entered
	}
	if took := time.Since(began); took > 3*cfg.CommitDelay {
		t.Errorf("50 sequential small requests took %v: the commit delay throttles a closed-loop client", took)
	}

	// No delay: each request commits by itself.
	cfg.CommitDelay = 0
	w2 := newGateWriter()
	w2.open()
	p2 := start(t, cfg, w2, nil)
	if err := p2.ConsumeSpans(context.Background(), spans(2, "a", "op", 1)); err != nil {
		t.Fatal(err)
	}
	if err := p2.ConsumeSpans(context.Background(), spans(2, "a", "op", 1)); err != nil {
		t.Fatal(err)
	}
	if n1, n2 := <-w2.entered, <-w2.entered; n1 != 2 || n2 != 2 {
		t.Errorf("without delay: commits of %d and %d spans, want 2 and 2", n1, n2)
	}
}

// TestDetectInFlight: a provisional copy of a span still in flight
// (model.AttrInFlight) is judged against its key's baseline but does not
// enter it; its final copy is observed once. A detector that cannot judge
// without observing (no anomaly.Checker) flags no in-flight span.
func TestDetectInFlight(t *testing.T) {
	det, err := anomaly.NewMedian(anomaly.Config{Window: 50, Threshold: 3, MinFill: 20, MaxKeys: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	Detect(det, KeyByOperation, spans(30, "svc", "GET /", 10*time.Millisecond))
	key := DetectorKey("svc", "GET /")
	before, _ := det.State(key)
	inFlight := func(d time.Duration) *model.Span {
		s := spans(1, "svc", "GET /", d)[0]
		s.SetAttr(model.Bool(model.AttrInFlight, true))
		return s
	}
	young, old := inFlight(5*time.Millisecond), inFlight(time.Second)
	if n := Detect(det, KeyByOperation, []*model.Span{young, old}); n != 1 {
		t.Fatalf("Detect flagged %d in-flight spans, want 1 (the one past 3 × 10 ms)", n)
	}
	if young.IsAnomalous() || !old.IsAnomalous() {
		t.Fatalf("anomalous: young %v, old %v; want false, true", young.IsAnomalous(), old.IsAnomalous())
	}
	if after, _ := det.State(key); after.Observed != before.Observed || after.Baseline != before.Baseline {
		t.Fatalf("in-flight spans entered the window: %+v → %+v", before, after)
	}
	final := spans(1, "svc", "GET /", 2*time.Second)
	if n := Detect(det, KeyByOperation, final); n != 1 {
		t.Fatalf("the final copy: %d anomalous, want 1", n)
	}
	if after, _ := det.State(key); after.Observed != before.Observed+1 {
		t.Fatalf("observed %d, want %d: the final copy is observed once", after.Observed, before.Observed+1)
	}

	var plain struct{ anomaly.Detector } // hides Median's Check
	plain.Detector = det
	if n := Detect(plain, KeyByOperation, []*model.Span{inFlight(time.Hour)}); n != 0 {
		t.Fatalf("without a Checker: %d in-flight spans flagged, want 0", n)
	}
	if after, _ := det.State(key); after.Observed != before.Observed+1 {
		t.Fatal("without a Checker the in-flight span was observed")
	}
}
