// Package receiver holds Rootline's span intake: OTLP over gRPC and HTTP
// (protobuf or JSON) and Zipkin v2 JSON, the formats OpenTelemetry SDKs and
// Envoy's tracers send. Each request is translated to model spans and handed
// to a pipeline.Consumer; the client is acknowledged only once the consumer has
// made the spans durable, and back-pressure (a full queue, a draining server)
// is passed back to it as the protocol's retryable status.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip decompressor OTLP exporters use

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
)

// DefaultMaxRequestBytes bounds a request body (and its decompressed form).
const DefaultMaxRequestBytes = 8 << 20

// Config says where the receivers listen. An empty address disables that
// receiver; at least one must be set.
type Config struct {
	GRPCAddr   string `yaml:"grpc_addr"`   // OTLP/gRPC, e.g. ":4317"
	HTTPAddr   string `yaml:"http_addr"`   // OTLP/HTTP, POST /v1/traces, e.g. ":4318"
	ZipkinAddr string `yaml:"zipkin_addr"` // Zipkin, POST /api/v2/spans, e.g. ":9411"
	// MaxRequestBytes bounds one request, compressed and decompressed; 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
}

// DefaultConfig returns the standard ports of the three protocols on all
// interfaces.
func DefaultConfig() Config {
	return Config{GRPCAddr: ":4317", HTTPAddr: ":4318", ZipkinAddr: ":9411", MaxRequestBytes: DefaultMaxRequestBytes}
}

// Addresses are the addresses the receivers are bound to; empty for a receiver
// that is disabled or not started.
type Addresses struct {
	GRPC   string
	HTTP   string
	Zipkin string
}

// Receivers runs the OTLP/gRPC, OTLP/HTTP and Zipkin receivers. Create it with
// New, then Start it once and Shutdown it once. Safe for concurrent use.
type Receivers struct {
	cfg      Config
	consumer pipeline.Consumer
	logger   *slog.Logger
	metrics  *metrics

	mu      sync.Mutex
	started bool
	stopped bool
	grpc    *grpc.Server
	http    []*http.Server // OTLP/HTTP and Zipkin, those enabled
	addrs   Addresses
	serving sync.WaitGroup // the Serve loops

	// metricWriter stores OTLP metrics (otlpmetrics.go); nil refuses them.
	metricWriter store.MetricWriter
}

// New checks cfg and builds the receivers without binding anything. A nil
// logger logs nothing; a nil reg registers no metrics.
func New(cfg Config, c pipeline.Consumer, logger *slog.Logger, reg prometheus.Registerer) (*Receivers, error) {
	if c == nil {
		return nil, errors.New("receiver: nil consumer")
	}
	if cfg.GRPCAddr == "" && cfg.HTTPAddr == "" && cfg.ZipkinAddr == "" {
		return nil, errors.New("receiver: no address configured (grpc_addr, http_addr, zipkin_addr)")
	}
	switch {
	case cfg.MaxRequestBytes == 0:
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	case cfg.MaxRequestBytes < 0 || cfg.MaxRequestBytes > 1<<30:
		return nil, fmt.Errorf("receiver: max_request_bytes %d is not in 1..1GiB", cfg.MaxRequestBytes)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("receiver: register metrics: %w", err)
	}
	return &Receivers{
		cfg:      cfg,
		consumer: c,
		logger:   logger.With("component", "receiver"),
		metrics:  m,
	}, nil
}

// Start binds every configured address and serves in the background; ctx
// bounds only the binding. If one address cannot be bound, nothing stays bound
// and the error names the address. Errors while serving are logged.
func (r *Receivers) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("receiver: already started")
	}

	type bound struct {
		name string
		ln   net.Listener
	}
	var lns []bound
	closeAll := func() {
		for _, b := range lns {
			b.ln.Close()
		}
	}
	var lc net.ListenConfig
	for _, a := range []struct{ name, addr string }{
		{receiverOTLPGRPC, r.cfg.GRPCAddr},
		{receiverOTLPHTTP, r.cfg.HTTPAddr},
		{receiverZipkin, r.cfg.ZipkinAddr},
	} {
		if a.addr == "" {
			continue
		}
		ln, err := lc.Listen(ctx, "tcp", a.addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("receiver: %s: listen on %q: %w", a.name, a.addr, err)
		}
		lns = append(lns, bound{a.name, ln})
	}

	r.started = true
	for _, b := range lns {
		addr := b.ln.Addr().String()
		r.logger.Info("receiver listening", "receiver", b.name, "addr", addr)
		switch b.name {
		case receiverOTLPGRPC:
			r.addrs.GRPC = addr
			r.grpc = r.newGRPCServer()
			r.serve(b.name, func() error { return r.grpc.Serve(b.ln) })
		case receiverOTLPHTTP:
			r.addrs.HTTP = addr
			r.serveHTTP(b.name, b.ln, r.otlpHTTPHandler())
		case receiverZipkin:
			r.addrs.Zipkin = addr
			r.serveHTTP(b.name, b.ln, r.zipkinHandler())
		}
	}
	return nil
}

func (r *Receivers) serveHTTP(name string, ln net.Listener, h http.Handler) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(r.logger.With("receiver", name).Handler(), slog.LevelWarn),
	}
	r.http = append(r.http, srv)
	r.serve(name, func() error { return srv.Serve(ln) })
}

func (r *Receivers) serve(name string, serve func() error) {
	r.serving.Add(1)
	go func() {
		defer r.serving.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			r.logger.Error("receiver stopped serving", "receiver", name, "err", err)
		}
	}()
}

// Addrs returns the bound addresses (useful with port 0).
func (r *Receivers) Addrs() Addresses {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs
}

// Shutdown stops accepting connections and requests, waits for the requests
// in flight to finish (their ConsumeSpans calls included), then returns. If ctx
// ends first, the requests still running are cut off and ctx's error returned.
// Calling it before Start, or again, does nothing.
func (r *Receivers) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.started || r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	r.mu.Unlock()

	var wg sync.WaitGroup
	errs := make([]error, len(r.http)+1)
	for i, srv := range r.http {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				errs[i] = errors.Join(err, srv.Close())
			}
		})
	}
	if r.grpc != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				r.grpc.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
			case <-ctx.Done():
				r.grpc.Stop() // cancels the RPCs in flight; GracefulStop then returns
				<-done
				errs[len(errs)-1] = ctx.Err()
			}
		})
	}
	wg.Wait()
	r.serving.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("receiver: shutdown: %w", err)
	}
	r.logger.Info("receivers stopped")
	return nil
}

// consume hands the spans of one request to the consumer and records the
// request's outcome. Spans must not be touched afterwards.
func (r *Receivers) consume(ctx context.Context, receiver string, spans []*model.Span) (outcome, error) {
	n := len(spans)
	if n == 0 {
		r.metrics.observe(receiver, outcomeAccepted, 0)
		return outcomeAccepted, nil
	}
	err := r.consumer.ConsumeSpans(ctx, spans)
	o := consumeOutcome(err)
	r.metrics.observe(receiver, o, n)
	switch o {
	case outcomeError:
		r.logger.Error("storing spans failed", "receiver", receiver, "spans", n, "err", err)
	case outcomeQueueFull, outcomeShuttingDown, outcomeCanceled:
		r.logger.Debug("spans refused", "receiver", receiver, "spans", n, "outcome", string(o))
	}
	return o, err
}

// logRefused logs a request refused for its content, at debug level: a client
// sending garbage must not be able to flood the log.
func (r *Receivers) logRefused(receiver string, o outcome, status int, invalid *InvalidError) {
	if !r.logger.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"receiver", receiver, "outcome", string(o), "status", status}
	if invalid != nil {
		attrs = append(attrs, "err", invalid.Error())
	}
	r.logger.Debug("request refused", attrs...)
}
