package run

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
type Shipper struct {
	url    string
	token  string
	client *http.Client
	log    *slog.Logger
	queue  chan *model.Span
	batch  int
	every  time.Duration

	Sent, Dropped, Failed atomic.Int64

	flushc   chan struct{}
	done     chan struct{}
	failOnce sync.Once
	body     []byte // the last request's bytes, reused (Run's goroutine only)
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
	return &Shipper{
		url: cfg.Endpoint, token: cfg.Token, client: &http.Client{Timeout: 10 * time.Second},
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

// Emit queues s, or drops it when the queue is full.
func (s *Shipper) Emit(sp *model.Span) {
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
	for {
		select {
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
			flush(fctx)
			return
		}
	}
}

// Wait returns when Run has returned.
func (s *Shipper) Wait() { <-s.done }

func (s *Shipper) send(ctx context.Context, spans []*model.Span) {
	s.body = export.AppendOTLP(s.body[:0], spans)
	if err := s.post(ctx, s.body); err != nil {
		s.Failed.Add(int64(len(spans)))
		s.failOnce.Do(func() {
			s.log.Warn("cannot send spans; they are dropped and counted (logged once)", "endpoint", s.url, "err", err)
		})
		return
	}
	s.Sent.Add(int64(len(spans)))
}

func (s *Shipper) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
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
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("server answered %s", resp.Status)
	}
	return nil
}
