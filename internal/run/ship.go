package run

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
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
// A receiver that answers "retry later" gets the same batch again
// (export.Poster) for at most MaxRetryTime; meanwhile new spans wait in the
// bounded queue, and those that do not fit are dropped and counted, as
// always. Other failures are not retried.
type Shipper struct {
	// dest is where batches go: the server, or the node's agent, which
	// relays them (ShipperConfig.Agent); direct, when dest is the agent,
	// is the server, for a batch the agent could not take.
	dest, direct *export.Poster
	// noRelayUntil (Unix ns) is set when the agent said it relays no
	// spans for this process (no relay, no server endpoint known yet, not
	// for this caller: relayUnavailable): until then batches go to direct,
	// and the agent is asked again after it (it may have registered with
	// the server since).
	noRelayUntil atomic.Int64
	log          *slog.Logger
	queue        chan *model.Span
	batch        int
	every        time.Duration

	// Sent, Dropped and Failed count spans; Relayed counts those of Sent
	// that the agent took.
	Sent, Dropped, Failed, Relayed atomic.Int64

	flushc   chan struct{}
	done     chan struct{}
	failOnce sync.Once
	fallOnce sync.Once
	raw      []byte // the last batch's protobuf bytes, reused (Run's goroutine only)
	zipped   []byte // raw gzipped, reused likewise
	smp      *sampler
}

// Retried counts requests sent again after a "retry later" answer.
func (s *Shipper) Retried() int64 {
	n := s.dest.Retried.Load()
	if s.direct != nil {
		n += s.direct.Retried.Load()
	}
	return n
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
	// Agent, when set, is the node's agent: batches go to its span relay
	// (agentapi.TracesPath), which sends the node's spans to the server in
	// one request a second, and to Endpoint directly only when the agent
	// cannot take them (not running, no relay, full).
	Agent *agentapi.AgentClient
	// Logger; nil discards.
	Logger *slog.Logger
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
	dest := &export.Poster{URL: cfg.Endpoint, Token: cfg.Token, Client: &http.Client{Timeout: 10 * time.Second}, Gzip: !cfg.NoCompression,
		Initial: cfg.RetryInitial, MaxDelay: cfg.RetryMaxDelay, MaxTime: cfg.MaxRetryTime}
	var direct *export.Poster
	if cfg.Agent != nil {
		// The agent is on the node: its batches go uncompressed (it
		// compresses what it relays once, for all the node's processes).
		direct = dest
		dest = &export.Poster{URL: cfg.Agent.Base() + agentapi.TracesPath, Token: cfg.Token, Client: cfg.Agent.HTTPClient(),
			Initial: cfg.RetryInitial, MaxDelay: cfg.RetryMaxDelay, MaxTime: cfg.MaxRetryTime}
	}
	return &Shipper{
		smp: smp, dest: dest, direct: direct,
		log: cfg.Logger.With("component", "shipper"), queue: make(chan *model.Span, cfg.Queue),
		batch: cfg.Batch, every: cfg.Every, flushc: make(chan struct{}, 1), done: make(chan struct{}),
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

// EmitNow queues sp past node-side sampling: a provisional span of a
// request still in flight (InFlight), which the server must see now. Its
// trace is then kept whole by the sampler, so that the span's final copy,
// which supersedes it, is shipped too.
func (s *Shipper) EmitNow(sp *model.Span) {
	if s.smp != nil {
		s.smp.keep(sp.TraceID, time.Now())
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
			if n := s.Retried(); n > 0 {
				s.log.Info("requests sent again after the receiver asked to retry later", "retried", n,
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
	p := s.dest
	if s.direct != nil && time.Now().UnixNano() < s.noRelayUntil.Load() {
		p = s.direct
	}
	err := s.post(ctx, p, s.raw)
	if err != nil && p != s.direct && s.direct != nil && relayUnavailable(err) {
		if code := export.StatusOf(err); code != 0 && !export.Retryable(code) {
			s.noRelayUntil.Store(time.Now().Add(noRelayFor).UnixNano())
		}
		s.fallOnce.Do(func() {
			s.log.Info("the agent did not take the spans; sending them to the server directly", "agent", s.dest.URL, "err", err)
		})
		err = s.post(ctx, s.direct, s.raw)
	} else if err == nil && p != s.direct && s.direct != nil {
		s.Relayed.Add(int64(len(spans)))
	}
	if err != nil {
		s.Failed.Add(int64(len(spans)))
		s.failOnce.Do(func() {
			s.log.Warn("cannot send spans; they are dropped and counted (logged once)", "endpoint", p.URL, "err", err)
		})
		return
	}
	s.Sent.Add(int64(len(spans)))
}

// post sends a batch's protobuf bytes through p, gzipped if p says so.
func (s *Shipper) post(ctx context.Context, p *export.Poster, raw []byte) error {
	body := raw
	if p.Gzip {
		s.zipped = export.AppendGzip(s.zipped[:0], raw)
		body = s.zipped
	}
	return p.PostRetrying(ctx, body)
}

// noRelayFor is how long a process sends to the server directly after its
// agent answered that it does not relay its spans.
const noRelayFor = time.Minute

// relayUnavailable says whether the agent failed to take a batch in a way
// the server may not: unreachable (not running, restarting), without a
// relay (404, 405: an older agent, or one that knows no server endpoint),
// refusing the caller (401, 403: no token for its node routes), or still
// full after the retries (429, 503).
func relayUnavailable(err error) bool {
	switch code := export.StatusOf(err); {
	case code == 0, export.Retryable(code):
		return true
	default:
		return code == http.StatusNotFound || code == http.StatusMethodNotAllowed || code == http.StatusUnauthorized || code == http.StatusForbidden
	}
}
