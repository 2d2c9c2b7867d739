// Package receiver holds Rootline's span intake: OTLP over gRPC and HTTP
// (protobuf or JSON) and Zipkin v2 JSON, the formats OpenTelemetry SDKs and
// Envoy's tracers send. Each request is translated to model spans and handed
// to a pipeline.Consumer; the client is acknowledged only once the consumer has
// made the spans durable, and back-pressure (a full queue, a draining server)
// is passed back to it as the protocol's retryable status.
package receiver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip decompressor OTLP exporters use

	"github.com/rootline/rootline/internal/bearer"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/tlsconf"
)

// DefaultMaxRequestBytes bounds a request body (and its decompressed form).
const DefaultMaxRequestBytes = 8 << 20

// Defaults of the connection and concurrency bounds (see Config).
const (
	DefaultMaxConcurrentRequests = 16
	DefaultMaxInflightBytes      = 256 << 20
	DefaultMaxConnections        = 1024
	DefaultReadHeaderTimeout     = 10 * time.Second
	DefaultReadTimeout           = 30 * time.Second
	DefaultIdleTimeout           = 2 * time.Minute
)

// Config says where the receivers listen and what they admit. An empty
// address disables that receiver; at least one must be set. Zero bounds take
// the defaults above.
type Config struct {
	GRPCAddr   string `yaml:"grpc_addr"`   // OTLP/gRPC, e.g. "127.0.0.1:4317"
	HTTPAddr   string `yaml:"http_addr"`   // OTLP/HTTP, POST /v1/traces and /v1/metrics
	ZipkinAddr string `yaml:"zipkin_addr"` // Zipkin, POST /api/v2/spans
	// MaxRequestBytes bounds one request, compressed and decompressed; 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// Limits bound what one span may carry (limits.go).
	Limits Limits `yaml:"limits"`
	// Cardinality bounds the services and operations spans may name
	// (cardinality.go).
	Cardinality CardinalityConfig `yaml:"cardinality"`

	// Admission bounds connections, concurrency and the memory of requests
	// in flight.
	Admission `yaml:",inline"`

	// TLS, when enabled, serves every receiver over TLS; with a client CA,
	// clients must present a certificate it signed, and that certificate
	// authenticates them in place of the token.
	TLS tlsconf.Server `yaml:"tls"`
	// AuthToken, when set, is the bearer token every request must carry
	// (HTTP Authorization, gRPC metadata "authorization").
	AuthToken string `yaml:"-"`
}

// Admission bounds what the receivers take on at once. Zero fields take the
// defaults above.
type Admission struct {
	// MaxConcurrentRequests bounds the requests each receiver decodes and
	// stores at once; beyond it requests get 429 / RESOURCE_EXHAUSTED with a
	// retry delay. On gRPC it counts RPCs from the moment their message
	// starts to arrive, and is also each connection's stream limit.
	MaxConcurrentRequests int `yaml:"max_concurrent_requests"`
	// MaxInflightBytes is the memory all receivers' requests in flight may
	// hold: bodies as they arrive and the estimate of what decoding takes.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MaxConnections bounds each receiver's open connections; more wait in
	// the kernel's accept queue.
	MaxConnections int `yaml:"max_connections"`
	// ReadHeaderTimeout bounds the TLS handshake and a request's headers;
	// ReadTimeout a whole request, body included (for gRPC: a message,
	// from its first byte); IdleTimeout a connection with no request.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
}

// DefaultAdmission returns the default bounds.
func DefaultAdmission() Admission {
	return Admission{MaxConcurrentRequests: DefaultMaxConcurrentRequests, MaxInflightBytes: DefaultMaxInflightBytes,
		MaxConnections: DefaultMaxConnections, ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout: DefaultReadTimeout, IdleTimeout: DefaultIdleTimeout}
}

// DefaultConfig returns the standard ports of the three protocols on
// loopback, and the default bounds.
func DefaultConfig() Config {
	return Config{GRPCAddr: "127.0.0.1:4317", HTTPAddr: "127.0.0.1:4318", ZipkinAddr: "127.0.0.1:9411",
		MaxRequestBytes: DefaultMaxRequestBytes, Limits: DefaultLimits(), Cardinality: DefaultCardinality(),
		Admission: DefaultAdmission()}
}

// withDefaults fills the zero bounds.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	orDefault(&c.MaxRequestBytes, d.MaxRequestBytes)
	a := &c.Admission
	orDefault(&a.MaxConcurrentRequests, d.MaxConcurrentRequests)
	orDefault(&a.MaxInflightBytes, d.MaxInflightBytes)
	orDefault(&a.MaxConnections, d.MaxConnections)
	orDefault(&a.ReadHeaderTimeout, d.ReadHeaderTimeout)
	orDefault(&a.ReadTimeout, d.ReadTimeout)
	orDefault(&a.IdleTimeout, d.IdleTimeout)
	c.Limits = c.Limits.withDefaults()
	c.Cardinality = c.Cardinality.withDefaults()
	return c
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate checks the configuration (zero bounds mean their defaults).
func (c Config) Validate() error {
	var errs []error
	if c.GRPCAddr == "" && c.HTTPAddr == "" && c.ZipkinAddr == "" {
		errs = append(errs, errors.New("receiver: no address configured (grpc_addr, http_addr, zipkin_addr)"))
	}
	if c.MaxRequestBytes < 0 || c.MaxRequestBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("receiver: max_request_bytes %d is not in 1..1GiB", c.MaxRequestBytes))
	}
	if c.MaxConcurrentRequests < 0 || c.MaxConcurrentRequests > 1<<16 {
		errs = append(errs, fmt.Errorf("receiver: max_concurrent_requests %d is not in 1..65536", c.MaxConcurrentRequests))
	}
	if c.MaxInflightBytes < 0 {
		errs = append(errs, fmt.Errorf("receiver: max_inflight_bytes %d is negative", c.MaxInflightBytes))
	}
	if c.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("receiver: max_connections %d is negative", c.MaxConnections))
	}
	if c.ReadHeaderTimeout < 0 || c.ReadTimeout < 0 || c.IdleTimeout < 0 {
		errs = append(errs, errors.New("receiver: timeouts must not be negative"))
	}
	// A request of max_request_bytes is held twice while it is read (its
	// chunks, then one slice) and decodes into a few times its size.
	if d := c.withDefaults(); d.MaxInflightBytes < 4*d.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("receiver: max_inflight_bytes (%d) must be at least 4 × max_request_bytes (%d)", d.MaxInflightBytes, d.MaxRequestBytes))
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("receiver: %w", err))
	}
	errs = append(errs, c.Limits.Validate(), c.Cardinality.Validate())
	return errors.Join(errs...)
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
	token    bearer.Token
	tls      *tls.Config // nil: plaintext
	budget   *budget
	slots    map[string]slots // by receiver label
	card     *cardinality

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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "receiver")
	r := &Receivers{
		cfg:      cfg,
		consumer: c,
		logger:   logger,
		token:    bearer.New(cfg.AuthToken),
		tls:      tlsCfg,
		budget:   newBudget(cfg.MaxInflightBytes, newMemoryGauge(debug.SetMemoryLimit(-1))),
		slots:    map[string]slots{},
	}
	for _, name := range []string{receiverOTLPGRPC, receiverOTLPHTTP, receiverZipkin} {
		r.slots[name] = newSlots(cfg.MaxConcurrentRequests)
	}
	if r.metrics, err = newMetrics(reg, r); err != nil {
		return nil, fmt.Errorf("receiver: register metrics: %w", err)
	}
	r.card = newCardinality(cfg.Cardinality, time.Now, logger, r.metrics.overflow)
	return r, nil
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
		// Connections past the bound wait in the kernel's accept queue;
		// each one accepted costs buffers and goroutines whatever it sends.
		lns = append(lns, bound{a.name, netutil.LimitListener(ln, r.cfg.MaxConnections)})
	}

	r.started = true
	for _, b := range lns {
		addr := b.ln.Addr().String()
		r.logger.Info("receiver listening", "receiver", b.name, "addr", addr, "tls", r.tls != nil,
			"client_certificates", r.tls != nil && r.tls.ClientCAs != nil, "token", r.token.Required())
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
		ReadHeaderTimeout: r.cfg.ReadHeaderTimeout,
		// A body must arrive within ReadTimeout: a client that announces
		// megabytes and sends a byte holds its connection no longer.
		ReadTimeout: r.cfg.ReadTimeout,
		// The answer waits for the commit, so the write deadline (which
		// starts with the request) leaves room for it.
		WriteTimeout:   r.cfg.ReadTimeout + writeGrace,
		IdleTimeout:    r.cfg.IdleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		TLSConfig:      r.tls.Clone(), // ServeTLS changes it

		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: r.cfg.MaxConcurrentRequests,
			// What an HTTP/2 connection buffers of bodies its handlers
			// have not read yet.
			MaxReceiveBufferPerConnection: 1 << 20,
			MaxReceiveBufferPerStream:     1 << 20,
		},
		ErrorLog: slog.NewLogLogger(r.logger.With("receiver", name).Handler(), slog.LevelDebug),
	}
	r.http = append(r.http, srv)
	if r.tls != nil {
		r.serve(name, func() error { return srv.ServeTLS(ln, "", "") })
		return
	}
	r.serve(name, func() error { return srv.Serve(ln) })
}

// Connection bounds that are not configurable: headers (OTLP sends a few
// short ones), and the time an answer may take past the request's read
// timeout (one commit, normally milliseconds).
const (
	maxHeaderBytes = 64 << 10
	writeGrace     = time.Minute
)

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
