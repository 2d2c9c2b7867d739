package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/export"
	"github.com/rootline/rootline/internal/model"
)

// Shipper is a Sink that sends spans to a Rootline server (or any OTLP/HTTP
// receiver) in batches. Emit never blocks: when the queue is full the span is
// dropped and counted, so a slow or dead server never stalls the traced
// service. A span waits at most Every for its batch; Flush sends what is
// queued at once (a reader that takes spans in bursts calls it after each,
// so that the process wakes once per burst, not once more for the shipper).
// An idle Shipper does not wake at all.
//
// A server that answers "retry later" (429, 502, 503 or 504, as the OTLP/HTTP
// specification lists them: its queue is full, its disk is full) gets the
// same batch again after an exponential backoff with jitter, or after its
// Retry-After when that is longer, for at most MaxRetryTime; meanwhile new
// spans wait in the bounded queue, and those that do not fit are dropped
// and counted, as always. Other failures are not retried.
type Shipper struct {
	url    string
	token  string
	client *http.Client
	log    *slog.Logger
	queue  chan *model.Span
	batch  int
	every  time.Duration
	retry  retryPolicy

	// Sent, Dropped and Failed count spans; Retried counts requests sent
	// again after a "retry later" answer.
	Sent, Dropped, Failed, Retried atomic.Int64

	flushc   chan struct{}
	done     chan struct{}
	failOnce sync.Once
	gzip     bool
	raw      []byte // the last batch's protobuf bytes, reused (Run's goroutine only)
	zipped   []byte // raw gzipped, reused likewise
	smp      *sampler
}

// SampledOut returns the spans node-side sampling did not ship and the
// traces it shipped for being anomalous (0, 0 when it is off).
func (s *Shipper) SampledOut() (spans, anomalousTraces int64) {
	if s.smp == nil {
		return 0, 0
	}
	return s.smp.counts()
}

// ShipperConfig configures a Shipper.
type ShipperConfig struct {
	// Endpoint is the OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces.
	Endpoint string
	// Token is sent as a bearer token when set.
	Token string
	// Queue bounds the spans waiting to be sent (default 8192).
	Queue int
	// Batch is the most spans per request (default 512); Every the longest a
	// span waits for its batch unless Flush sends it sooner (default 1s).
	Batch int
	Every time.Duration
	// RetryInitial is the first backoff after a "retry later" answer
	// (default 500ms); it doubles up to RetryMaxDelay (default 10s), each
	// wait drawn at random between half and all of it. MaxRetryTime bounds
	// the time one batch spends being retried (default 30s); 0 keeps the
	// default, negative disables retries.
	RetryInitial, RetryMaxDelay, MaxRetryTime time.Duration
	// NoCompression sends the batches as they are; by default they are
	// gzipped (Content-Encoding: gzip), which every OTLP/HTTP receiver
	// accepts and which takes ~3/4 off the bytes of a batch of the
	// tracer's spans.
	NoCompression bool
	// Sample turns on node-side tail sampling when in (0, 1): every span
	// of a trace the process finds anomalous (the server's detector, run
	// here on all its spans) is shipped, and of the other traces this
	// share, chosen by trace id so that every process keeps the same ones;
	// their spans carry the threshold (anomaly.AttrSamplingThreshold) by
	// which the server weights them. 0 or ≥ 1 ships every span.
	Sample float64
	// SampleHold is how long a trace's spans wait for its verdict when
	// sampling (default 2s: past the second the datapath's reader batches
	// events for); a span that ends later is decided alone.
	SampleHold time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// retryPolicy is how a batch answered "retry later" is sent again.
type retryPolicy struct {
	initial, maxDelay, maxTime time.Duration
	// sleep waits d or until ctx ends, and now is the clock of the
	// deadline (tests replace both with a fake clock).
	sleep func(ctx context.Context, d time.Duration) error
	now   func() time.Time
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NewShipper returns a Shipper; Run sends what Emit queues.
func NewShipper(cfg ShipperConfig) *Shipper {
	if cfg.Queue <= 0 {
		cfg.Queue = 8192
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 512
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RetryInitial <= 0 {
		cfg.RetryInitial = 500 * time.Millisecond
	}
	if cfg.RetryMaxDelay <= 0 {
		cfg.RetryMaxDelay = 10 * time.Second
	}
	if cfg.MaxRetryTime == 0 {
		cfg.MaxRetryTime = 30 * time.Second
	}
	var smp *sampler
	if cfg.Sample > 0 && cfg.Sample < 1 {
		if cfg.SampleHold <= 0 {
			cfg.SampleHold = 2 * time.Second
		}
		smp = newSampler(cfg.Sample, cfg.SampleHold)
	}
	return &Shipper{
		smp: smp, url: cfg.Endpoint, token: cfg.Token, client: &http.Client{Timeout: 10 * time.Second},
		log: cfg.Logger.With("component", "shipper"), queue: make(chan *model.Span, cfg.Queue),
		gzip: !cfg.NoCompression, batch: cfg.Batch, every: cfg.Every, flushc: make(chan struct{}, 1), done: make(chan struct{}),
		retry: retryPolicy{initial: cfg.RetryInitial, maxDelay: cfg.RetryMaxDelay, maxTime: cfg.MaxRetryTime, sleep: sleepCtx, now: time.Now},
	}
}

// Flush asks Run to send the queued spans now. It does not block.
func (s *Shipper) Flush() {
	select {
	case s.flushc <- struct{}{}:
	default:
	}
}

// Emit queues s, or drops it when the queue is full; with sampling, it
// holds s for its trace's verdict.
func (s *Shipper) Emit(sp *model.Span) {
	if s.smp != nil {
		for _, x := range s.smp.add(sp, time.Now()) {
			s.enqueue(x)
		}
		return
	}
	s.enqueue(sp)
}

func (s *Shipper) enqueue(sp *model.Span) {
	select {
	case s.queue <- sp:
	default:
		s.Dropped.Add(1)
	}
}

// Run sends batches until ctx is done, then flushes what is queued (for at
// most a few seconds) and returns.
func (s *Shipper) Run(ctx context.Context) {
	defer close(s.done)
	// The timer runs only while spans wait: armed by the first span of a
	// batch, stopped when the batch is sent.
	timer := time.NewTimer(s.every)
	timer.Stop()
	defer timer.Stop()
	var buf []*model.Span
	flush := func(c context.Context) {
		timer.Stop()
		if len(buf) > 0 {
			s.send(c, buf)
			buf = buf[:0]
		}
	}
	// With sampling, held traces are decided twice per hold; their spans
	// join the batch (and arm its timer) as if just queued.
	var decide <-chan time.Time
	if s.smp != nil {
		tick := time.NewTicker(s.smp.hold / 2)
		defer tick.Stop()
		decide = tick.C
	}
	var released []*model.Span
	for {
		select {
		case now := <-decide:
			released = s.smp.release(now, false, released[:0])
			for _, sp := range released {
				if len(buf) == 0 {
					timer.Reset(s.every)
				}
				buf = append(buf, sp)
				if len(buf) >= s.batch {
					flush(ctx)
				}
			}
		case sp := <-s.queue:
			if len(buf) == 0 {
				timer.Reset(s.every)
			}
			buf = append(buf, sp)
			if len(buf) >= s.batch {
				flush(ctx)
			}
		case <-s.flushc:
			// What Emit queued before Flush is in the queue: take it too.
			for drained := false; !drained && len(buf) < s.batch; {
				select {
				case sp := <-s.queue:
					buf = append(buf, sp)
				default:
					drained = true
				}
			}
			flush(ctx)
		case <-timer.C:
			flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			for {
				select {
				case sp := <-s.queue:
					buf = append(buf, sp)
					if len(buf) >= s.batch {
						flush(fctx)
					}
					continue
				default:
				}
				break
			}
			if s.smp != nil {
				for _, sp := range s.smp.release(time.Now(), true, nil) {
					buf = append(buf, sp)
					if len(buf) >= s.batch {
						flush(fctx)
					}
				}
			}
			flush(fctx)
			if n := s.Retried.Load(); n > 0 {
				s.log.Info("requests sent again after the server asked to retry later", "retried", n,
					"sent_spans", s.Sent.Load(), "failed_spans", s.Failed.Load())
			}
			return
		}
	}
}

// Wait returns when Run has returned.
func (s *Shipper) Wait() { <-s.done }

func (s *Shipper) send(ctx context.Context, spans []*model.Span) {
	s.raw = export.AppendOTLP(s.raw[:0], spans)
	body := s.raw
	if s.gzip {
		s.zipped = export.AppendGzip(s.zipped[:0], s.raw)
		body = s.zipped
	}
	if err := s.postRetrying(ctx, body); err != nil {
		s.Failed.Add(int64(len(spans)))
		s.failOnce.Do(func() {
			s.log.Warn("cannot send spans; they are dropped and counted (logged once)", "endpoint", s.url, "err", err)
		})
		return
	}
	s.Sent.Add(int64(len(spans)))
}

// postRetrying posts body, and again while the server answers "retry
// later", until s.retry.maxTime has passed or ctx ends.
func (s *Shipper) postRetrying(ctx context.Context, body []byte) error {
	p := s.retry
	var deadline time.Time
	backoff := p.initial
	for {
		err := s.post(ctx, body)
		var later *retryLater
		if err == nil || p.maxTime < 0 || !errors.As(err, &later) {
			return err
		}
		if deadline.IsZero() {
			deadline = p.now().Add(p.maxTime)
		}
		// Full backoff halved at random ("equal jitter"), so that the
		// shippers of many processes do not come back in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		wait = max(wait, later.after)
		if p.now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (gave up retrying after %v)", err, p.maxTime)
		}
		s.Retried.Add(1)
		if err := p.sleep(ctx, wait); err != nil {
			return errors.Join(later, err)
		}
		backoff = min(backoff*2, p.maxDelay)
	}
}

// retryLater is an answer the OTLP/HTTP specification says to retry.
type retryLater struct {
	status string
	after  time.Duration // the server's Retry-After, 0 if none
}

func (e *retryLater) Error() string { return "server answered " + e.status + " (retryable)" }

// retryable reports whether an HTTP status asks to retry later (OTLP/HTTP:
// 429, 502, 503, 504).
func retryable(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil {
		return time.Duration(max(n, 0)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func (s *Shipper) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if s.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read the answer to its end, so that the connection is kept for the
	// next batch rather than closed (and dialled again a second later).
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if retryable(resp.StatusCode) {
		return &retryLater{status: resp.Status, after: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("server answered %s", resp.Status)
	}
	return nil
}
