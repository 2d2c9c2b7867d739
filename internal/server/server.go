package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/capture"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/export"
	"github.com/rootline/rootline/internal/httpjson"
	"github.com/rootline/rootline/internal/pipeline"
	"github.com/rootline/rootline/internal/query"
	"github.com/rootline/rootline/internal/receiver"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/factory"
)

// Addrs are the bound listen addresses (useful with ":0").
type Addrs struct {
	OTLPGRPC, OTLPHTTP, Zipkin, Query string
}

// Server is a running `rootline server`.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	reg      *prometheus.Registry
	store    *factory.Storage
	maxBytes int64 // the size cap retention applies (Retention.MaxBytes resolved)
	detector anomaly.Detector
	pipeline *pipeline.Pipeline
	capture  *capture.Manager
	critpath *critpathRunner
	tracker  *diagnosis.Tracker // nil: incidents disabled or not kept by the store
	exporter *export.Exporter
	recv     *receiver.Receivers
	queryLn  net.Listener
	queryWeb *http.Server
	queryTLS *tls.Config // nil: plaintext
	ready    atomic.Bool
	// UI is served at / of the query port when set (the embedded web UI).
	UI http.Handler
}

// New opens the store and builds every component; nothing listens yet.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDerived()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger, reg: prometheus.NewRegistry()}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	stCfg, err := cfg.StorageConfig()
	if err != nil {
		return nil, err
	}
	st, err := factory.Open(stCfg, factory.Options{Logger: logger, Registerer: s.reg, MaxClockSkew: cfg.Retention.MaxClockSkew})
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	s.store = st
	fail := func(err error) (*Server, error) {
		return nil, errors.Join(err, st.Close())
	}
	capDir := cfg.DataDir
	if stCfg.Spans.SQLite != nil {
		capDir = stCfg.Spans.SQLite.Dir // where the database grows
	}
	if s.maxBytes, err = resolveMaxBytes(cfg.Retention, capDir, logger); err != nil {
		return fail(err)
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_store_writable",
		Help: "1 while the store can write, 0 after a write failed for want of space or an I/O error, until a write succeeds again."},
		func() float64 {
			if st.WriteHealth() != nil {
				return 0
			}
			return 1
		}))
	det, err := anomaly.NewMedian(cfg.Detector, nil)
	if err != nil {
		return fail(err)
	}
	s.detector = det
	if s.capture, err = capture.New(cfg.Capture, s.store, logger, s.reg); err != nil {
		return fail(err)
	}
	if s.critpath, err = newCritpathRunner(s.store, logger, s.reg); err != nil {
		return fail(err)
	}
	s.capture.OnFinished(s.critpath.finished)
	sinks := []pipeline.Sink{s.capture}
	if s.tracker, err = s.newTracker(); err != nil {
		return fail(err)
	}
	if s.tracker != nil {
		sinks = append(sinks, s.tracker)
	}
	if cfg.Export.Endpoint != "" {
		if s.exporter, err = export.New(cfg.Export, logger, s.reg); err != nil {
			return fail(err)
		}
		sinks = append(sinks, s.exporter)
	}
	if s.pipeline, err = pipeline.New(cfg.Pipeline, s.store, det, sinks, logger, s.reg); err != nil {
		return fail(err)
	}
	s.recv, err = receiver.New(cfg.receiverConfig(), s.pipeline, logger, s.reg)
	if err != nil {
		return fail(err)
	}
	// Services already stored are not new to the cardinality caps.
	if services, err := st.GetServices(context.Background()); err != nil {
		logger.Warn("cannot list stored services; each counts as new once against the cardinality caps", "err", err)
	} else {
		s.recv.SetKnownServices(services)
	}
	if s.queryTLS, err = cfg.QueryTLS.Config(); err != nil {
		return fail(fmt.Errorf("query_tls: %w", err))
	}
	// Metrics go through the storage like spans: timed, and counted in its
	// write health.
	s.recv.SetMetricWriter(s.store)
	return s, nil
}

// newTracker builds the incident tracker: verdicts read the store, and the
// critical paths of slow spans that the critical-path runner stored for
// each completed capture.
func (s *Server) newTracker() (*diagnosis.Tracker, error) {
	st := s.store.Incidents()
	if s.cfg.Diagnosis.Disabled {
		return nil, nil
	}
	if st == nil {
		s.logger.Warn("the store keeps no incidents: incidents and verdicts are off")
		return nil, nil
	}
	src := &analysis.StoreSource{Spans: s.store, Artifacts: s.store, CaptureLog: s.captureLog}
	paths := diagnosis.StoredPaths{Artifacts: s.store,
		Analyzer: &critpath.Analyzer{Spans: s.store, Artifacts: s.store, Logger: s.logger.With("component", "critpath"), Slots: make(chan struct{}, 1)}}
	d := &diagnosis.Diagnoser{Source: src, Paths: paths, Config: s.cfg.Diagnosis}
	return diagnosis.NewTracker(s.cfg.Diagnosis, st, d, s.logger, s.reg)
}

// captureLog is the capture log as a diagnosis reads it.
func (s *Server) captureLog(_ context.Context, limit int) ([]analysis.Capture, error) {
	caps := s.capture.Captures(limit)
	out := make([]analysis.Capture, 0, min(len(caps), limit))
	for _, c := range caps {
		if len(out) >= limit {
			break
		}
		out = append(out, analysis.Capture{Service: c.Service, State: c.State, Error: c.Error, Created: c.Created})
	}
	return out, nil
}

// Registry exposes the server's Prometheus registry (for tests and the demo).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Store exposes the store (for the demo and tests in this repository).
func (s *Server) Store() store.Store { return s.store }

// Detector exposes the anomaly detector.
func (s *Server) Detector() anomaly.Detector { return s.detector }

// Captures exposes the capture manager.
func (s *Server) Captures() *capture.Manager { return s.capture }

func (s *Server) handler() http.Handler {
	q := query.New(query.Config{AuthToken: s.cfg.AuthToken, UI: s.UI}, s.store, s.store, s.detector.States, s.logger)
	q.SetMetricReader(s.store)
	q.SetIncidents(s.store.Incidents())
	mux := http.NewServeMux()
	capH := s.capture.Handler()
	mux.Handle("/api/v1/agents", capH)
	mux.Handle("/api/v1/agents/", capH)
	mux.Handle("/api/v1/captures", capH)
	mux.Handle("/api/v1/captures/", capH)
	// /metrics names services and operations: a read endpoint like the
	// others, behind the token when one is set. Health checks stay open.
	mux.Handle("GET /metrics", httpjson.RequireBearer(s.cfg.AuthToken, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		if s.store.WriteHealth() != nil {
			// The cause (a full disk, an I/O error) is in the log; clients
			// of the receivers get 503 / UNAVAILABLE with Retry-After.
			w.Header().Set("Retry-After", "1")
			http.Error(w, "not ready: the store cannot write", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("/", q.Handler())
	return mux
}

// Start binds every listener. On error nothing is left listening.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.QueryAddr)
	if err != nil {
		return fmt.Errorf("query API listen on %s: %w", s.cfg.QueryAddr, err)
	}
	if err := s.recv.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	s.queryLn = ln
	s.queryWeb = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		TLSConfig: s.queryTLS, ErrorLog: slog.NewLogLogger(s.logger.With("component", "query").Handler(), slog.LevelDebug)}
	return nil
}

// Addrs returns the bound addresses; valid after Start.
func (s *Server) Addrs() Addrs {
	a := s.recv.Addrs()
	return Addrs{OTLPGRPC: a.GRPC, OTLPHTTP: a.HTTP, Zipkin: a.Zipkin, Query: s.queryLn.Addr().String()}
}

// Run serves until ctx ends, then shuts down in order: receivers stop taking
// requests and finish the ones in flight (their spans commit), the pipeline
// drains, background work stops, the store checkpoints and closes. Start must
// have succeeded.
func (s *Server) Run(ctx context.Context) error {
	bg, bgCancel := context.WithCancel(context.Background())
	defer bgCancel()
	g, gctx := errgroup.WithContext(bg)
	pipeDone := make(chan error, 1)
	go func() { pipeDone <- s.pipeline.Run() }()
	g.Go(func() error { return s.capture.Run(gctx) })
	g.Go(func() error { return s.critpath.run(gctx) })
	if s.tracker != nil {
		g.Go(func() error { return s.tracker.Run(gctx) })
	}
	if s.exporter != nil {
		g.Go(func() error { return s.exporter.Run(gctx) })
	}
	g.Go(func() error { s.retentionLoop(gctx); return nil })
	g.Go(func() error { s.writeHealthLoop(gctx); return nil })
	serveErr := make(chan error, 1)
	go func() {
		serve := func() error { return s.queryWeb.Serve(s.queryLn) }
		if s.queryTLS != nil {
			serve = func() error { return s.queryWeb.ServeTLS(s.queryLn, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("query API: %w", err)
		}
	}()
	s.ready.Store(true)
	a := s.Addrs()
	s.logger.Info("rootline server ready", "otlp_grpc", a.OTLPGRPC, "otlp_http", a.OTLPHTTP, "zipkin", a.Zipkin,
		"query", a.Query, "query_tls", s.queryTLS != nil, "data_dir", s.cfg.DataDir)
	s.logMemoryBound()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case <-gctx.Done():
	}
	s.ready.Store(false)
	s.logger.Info("shutting down: draining receivers and committing queued spans", "queued_spans", s.pipeline.QueuedSpans())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	errs := []error{runErr}
	errs = append(errs, s.recv.Shutdown(sctx))
	errs = append(errs, s.pipeline.Close(sctx))
	if err := <-pipeDone; err != nil {
		errs = append(errs, err)
	}
	bgCancel()
	errs = append(errs, g.Wait())
	errs = append(errs, s.queryWeb.Shutdown(sctx))
	errs = append(errs, s.store.Close())
	err := errors.Join(errs...)
	if err == nil {
		s.logger.Info("shutdown complete")
	}
	return err
}

func (s *Server) retentionLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Retention.Interval)
	defer t.Stop()
	for {
		p := store.RetentionPolicy{Now: time.Now().UnixNano(), Normal: int64(s.cfg.Retention.Normal),
			Anomalous: int64(s.cfg.Retention.Anomalous), MaxBytes: s.maxBytes}
		if st, err := s.store.Purge(ctx, p); err != nil {
			if ctx.Err() == nil {
				s.logger.Error("retention purge failed", "err", err)
			}
		} else if st != (store.PurgeStats{}) {
			s.logger.Info("retention purged traces", "traces", st.Traces, "spans", st.Spans, "artifacts", st.Artifacts, "bytes", st.Bytes,
				"services", st.Services, "operations", st.Operations, "orphan_blobs", st.OrphanBlobs)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// logMemoryBound says, once at start, what bounds the server's memory.
func (s *Server) logMemoryBound() {
	attrs := []any{"memory_limit", s.cfg.MemoryLimit.String(), "bound", ByteSize(s.cfg.memoryBound() / (1 << 20) << 20).String()}
	for _, p := range s.cfg.memoryParts() {
		attrs = append(attrs, strings.ReplaceAll(p.name, " ", "_"), ByteSize(p.bytes/(1<<20)<<20).String())
	}
	s.logger.Info("memory bounds", attrs...)
}

// writeHealthProbe is how often a store that cannot write is probed.
const writeHealthProbe = time.Second

// writeHealthLoop logs when the store stops being able to write and, while it
// cannot, probes it every second so that readiness comes back by itself once
// space is freed, even when no client writes meanwhile.
func (s *Server) writeHealthLoop(ctx context.Context) {
	t := time.NewTicker(writeHealthProbe)
	defer t.Stop()
	var down bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.store.WriteHealth()
		if err != nil && !down {
			down = true
			s.logger.Error("the store cannot write: receivers answer 503 / UNAVAILABLE with Retry-After and /readyz fails until it can", "err", err)
		}
		if err != nil {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = s.store.ProbeWrite(pctx)
			cancel()
			if err != nil && !errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
				s.logger.Error("store write probe failed", "err", err)
			}
		}
		if err == nil && down {
			down = false
			s.logger.Info("the store can write again")
		}
	}
}

// resolveMaxBytes returns the size cap retention applies: r.MaxBytes when
// positive, none when negative, and when 0 a share of the filesystem of dir,
// where the store grows (DefaultMaxBytes).
func resolveMaxBytes(r Retention, dir string, logger *slog.Logger) (int64, error) {
	switch {
	case r.MaxBytes > 0:
		return r.MaxBytes, nil
	case r.MaxBytes < 0:
		return 0, nil
	}
	size, err := filesystemBytes(dir)
	if err != nil {
		return 0, fmt.Errorf("size the store's cap from the filesystem of %s (set --retention.max-bytes to skip): %w", dir, err)
	}
	c := DefaultMaxBytes(size, r.MaxDiskFraction)
	logger.Info("store size cap", "max_bytes", c, "filesystem_bytes", size, "fraction", r.MaxDiskFraction)
	return c, nil
}
