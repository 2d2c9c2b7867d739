package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strconv"
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
	"github.com/rootline/rootline/internal/kafka"
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

	// artifacts is the store as the capture manager and the critical-path
	// runner write artifacts through it: it tells the verdicts which
	// traces' artifacts changed (diagnosis.ArtifactChanges).
	artifacts *diagnosis.ArtifactChanges

	// Kafka stage (roles ingester and detector).
	producer *kafka.Producer
	kdet     *kafka.Detector
	agents   *kafka.AgentLog
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
		if s.agents != nil {
			s.agents.Close()
		}
		return nil, errors.Join(err, st.Close())
	}
	// The size cap is the embedded store's (a cluster's size is its
	// operators' to manage).
	if stCfg.Spans.SQLite != nil {
		// Sized from the filesystem the database grows on.
		if s.maxBytes, err = resolveMaxBytes(cfg.Retention, stCfg.Spans.SQLite.Dir, logger); err != nil {
			return fail(err)
		}
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_store_writable",
		Help: "1 while the store can write, 0 after a write failed for want of space or an I/O error, until a write succeeds again."},
		func() float64 {
			if st.WriteHealth() != nil {
				return 0
			}
			return 1
		}))
	s.artifacts = diagnosis.NewArtifactChanges(s.store)
	if s.capture, err = capture.New(cfg.Capture, s.artifacts, logger, s.reg); err != nil {
		return fail(err)
	}
	// Captures complete where agents upload them: the all-in-one server, or
	// the detector that asked (DumpRequest.UploadURL).
	if s.critpath, err = newCritpathRunner(s.store, s.artifacts, logger, s.reg); err != nil {
		return fail(err)
	}
	s.capture.OnFinished(s.critpath.finished)
	if s.queryTLS, err = cfg.QueryTLS.Config(); err != nil {
		return fail(fmt.Errorf("query_tls: %w", err))
	}
	if cfg.Role != RoleAll {
		if err := s.newKafkaStage(); err != nil {
			return fail(err)
		}
		return s, nil
	}
	det, err := anomaly.NewMedian(cfg.Detector, nil)
	if err != nil {
		return fail(err)
	}
	s.detector = det
	sinks, err := s.sinks()
	if err != nil {
		return fail(err)
	}
	if s.pipeline, err = pipeline.New(cfg.Pipeline, s.store, det, sinks, logger, s.reg); err != nil {
		return fail(err)
	}
	if err := s.newReceivers(s.pipeline); err != nil {
		return fail(err)
	}
	return s, nil
}

// sinks are what sees committed spans: the capture trigger, the incident
// tracker when the store keeps incidents, and the exporter when configured.
func (s *Server) sinks() ([]pipeline.Sink, error) {
	sinks := []pipeline.Sink{s.capture}
	var err error
	if s.tracker, err = s.newTracker(); err != nil {
		return nil, err
	}
	if s.tracker != nil {
		sinks = append(sinks, s.tracker)
		// The capture budget keeps a share for the services the open
		// incidents rank most suspect.
		tr, n := s.tracker, s.cfg.Capture.Suspects
		s.capture.SetSuspects(func() []capture.Suspect {
			var out []capture.Suspect
			for _, sv := range tr.Suspects(n) {
				out = append(out, capture.Suspect(sv))
			}
			return out
		})
	}
	if s.cfg.Export.Endpoint != "" {
		if s.exporter, err = export.New(s.cfg.Export, s.logger, s.reg); err != nil {
			return nil, err
		}
		sinks = append(sinks, s.exporter)
	}
	return sinks, nil
}

func (s *Server) newReceivers(c pipeline.Consumer) error {
	var err error
	if s.recv, err = receiver.New(s.cfg.receiverConfig(), c, s.logger, s.reg); err != nil {
		return err
	}
	// Services already stored are not new to the cardinality caps.
	if services, err := s.store.GetServices(context.Background()); err != nil {
		s.logger.Warn("cannot list stored services; each counts as new once against the cardinality caps", "err", err)
	} else {
		s.recv.SetKnownServices(services)
	}
	// Metrics go through the storage like spans: timed, and counted in its
	// write health.
	s.recv.SetMetricWriter(s.store)
	return nil
}

// newKafkaStage builds the parts of the ingester and detector roles.
func (s *Server) newKafkaStage() error {
	k := s.cfg.Kafka
	k.ApplyDefaults()
	var err error
	if s.agents, err = kafka.NewAgentLog(k, s.logger); err != nil {
		return err
	}
	s.capture.Mirror(s.agents.Publish)
	switch s.cfg.Role {
	case RoleIngester:
		maxSkew := s.cfg.Retention.MaxClockSkew
		if maxSkew == 0 {
			maxSkew = store.DefaultMaxClockSkew
		}
		if s.producer, err = kafka.NewProducer(k, maxSkew, s.logger, s.reg); err != nil {
			return err
		}
		return s.newReceivers(s.producer)
	case RoleDetector:
		sinks, err := s.sinks()
		if err != nil {
			return err
		}
		s.kdet, err = kafka.NewDetector(k, s.cfg.Detector, s.cfg.Pipeline.KeyBy, s.store, sinks, s.logger, s.reg)
		return err
	}
	return fmt.Errorf("unknown role %q", s.cfg.Role)
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
	// One cache of decoded critical paths: the runner puts each capture's
	// there as it stores them, the verdicts read them from it.
	cache := s.critpath.an.Cache
	paths := diagnosis.StoredPaths{Artifacts: s.store,
		Analyzer: &critpath.Analyzer{Spans: s.store, Artifacts: s.store, Logger: s.logger.With("component", "critpath"), Slots: make(chan struct{}, 1), Cache: cache}}
	d := &diagnosis.Diagnoser{Source: src, Paths: paths, Metrics: s.store, Config: s.cfg.Diagnosis, Cache: cache}
	if s.cfg.Role == RoleAll {
		// Every artifact is written here (uploads and stored paths), so
		// a verdict's listings are kept until their trace changes. In a
		// scaled-out deployment another detector may write them.
		d.Changes = s.artifacts
	}
	tr, err := diagnosis.NewTracker(s.cfg.Diagnosis, st, d, s.logger, s.reg)
	if err != nil {
		return nil, err
	}
	// Verdicts are computed again when evidence comes: a capture's
	// artifacts, then the critical paths computed from its snapshot.
	s.capture.OnFinished(func(capture.Capture) { tr.Evidence() })
	// An incident whose culprit's slow spans were not flagged (a shift
	// of the entry's latency) asks captures of them.
	tr.SetCapture(s.capture.CaptureSpans)
	s.critpath.onStored, s.critpath.onBaseline = tr.PathsStored, tr.Evidence
	if !s.cfg.Capture.EagerPaths {
		// A capture's paths are computed when a verdict may read them.
		s.critpath.active, s.critpath.keep = tr.Active, s.cfg.Diagnosis.Lookback
		tr.SetOnOpen(s.critpath.undefer)
	}
	return tr, nil
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
	states := func() []anomaly.KeyState { return nil } // an ingester detects nothing
	switch {
	case s.detector != nil:
		states = s.detector.States
	case s.kdet != nil:
		states = s.kdet.States
	}
	q := query.New(query.Config{AuthToken: s.cfg.AuthToken, UI: s.UI}, s.store, s.store, states, s.logger)
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
	// Go's profiles of the server itself (heap, CPU, goroutines), for its
	// operators: behind the token like /metrics.
	mux.Handle("GET /debug/pprof/", httpjson.RequireBearer(s.cfg.AuthToken, http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/profile", httpjson.RequireBearer(s.cfg.AuthToken, http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/trace", httpjson.RequireBearer(s.cfg.AuthToken, http.HandlerFunc(pprof.Trace)))
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
	if s.recv != nil {
		if err := s.recv.Start(ctx); err != nil {
			ln.Close()
			return err
		}
	}
	s.queryLn = ln
	if s.kdet != nil {
		u, err := advertiseURL(s.cfg.AdvertiseURL, ln.Addr(), s.queryTLS != nil)
		if err != nil {
			ln.Close()
			return err
		}
		s.capture.SetUploadURL(u)
		s.logger.Info("agents upload evidence of this detector's captures here", "advertise_url", u)
	}
	s.queryWeb = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		TLSConfig: s.queryTLS, ErrorLog: slog.NewLogLogger(s.logger.With("component", "query").Handler(), slog.LevelDebug)}
	return nil
}

// advertiseURL is configured, or http:// (https:// with TLS on the query
// port) and the bound address with the host name in place of an
// unspecified host.
func advertiseURL(configured string, addr net.Addr, useTLS bool) (string, error) {
	if configured != "" {
		u, err := url.Parse(configured)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--advertise-url %q must be an absolute http(s) URL", configured)
		}
		return strings.TrimRight(configured, "/"), nil
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("no --advertise-url and no host name: %w", err)
		}
	}
	scheme := "http://"
	if useTLS {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port), nil
}

// Addrs returns the bound addresses; valid after Start.
func (s *Server) Addrs() Addrs {
	a := Addrs{Query: s.queryLn.Addr().String()}
	if s.recv != nil {
		r := s.recv.Addrs()
		a.OTLPGRPC, a.OTLPHTTP, a.Zipkin = r.GRPC, r.HTTP, r.Zipkin
	}
	return a
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
	if s.pipeline != nil {
		go func() { pipeDone <- s.pipeline.Run() }()
	} else {
		pipeDone <- nil
	}
	g.Go(func() error { return s.capture.Run(gctx) })
	g.Go(func() error { return s.critpath.run(gctx) })
	if s.tracker != nil {
		g.Go(func() error { return s.tracker.Run(gctx) })
	}
	if s.exporter != nil {
		g.Go(func() error { return s.exporter.Run(gctx) })
	}
	if s.agents != nil {
		g.Go(func() error { s.ensureTopics(gctx); return nil })
		g.Go(func() error { return s.agents.Follow(gctx, s.capture) })
	}
	// Retention runs in one process: the all-in-one server, or the detector
	// that owns partition 0 of the spans topic (one at a time).
	switch {
	case s.pipeline != nil:
		g.Go(func() error { s.retentionLoop(gctx, func() bool { return true }); return nil })
	case s.kdet != nil:
		g.Go(func() error { s.retentionLoop(gctx, func() bool { return s.kdet.Owns(0) }); return nil })
	}
	if s.producer == nil {
		g.Go(func() error { s.writeHealthLoop(gctx); return nil })
	}
	kdetCtx, kdetCancel := context.WithCancel(bg)
	defer kdetCancel()
	kdetDone := make(chan error, 1)
	if s.kdet != nil {
		go func() { kdetDone <- s.kdet.Run(kdetCtx) }()
	} else {
		kdetDone <- nil
	}
	if s.capture != nil && s.recv != nil {
		// Agents relay their node's spans to the OTLP/HTTP receiver.
		if _, port, err := net.SplitHostPort(s.recv.Addrs().HTTP); err == nil {
			p, _ := strconv.Atoi(port)
			s.capture.SetOTLPHTTP(p, s.cfg.Receiver.TLS.CertFile != "")
		}
	}
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
	s.logger.Info("rootline server ready", "role", s.cfg.Role, "otlp_grpc", a.OTLPGRPC, "otlp_http", a.OTLPHTTP, "zipkin", a.Zipkin,
		"query", a.Query, "query_tls", s.queryTLS != nil, "data_dir", s.cfg.DataDir)
	s.logMemoryBound()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case <-gctx.Done():
	}
	s.ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	errs := []error{runErr}
	if s.recv != nil {
		s.logger.Info("shutting down: draining receivers")
		errs = append(errs, s.recv.Shutdown(sctx))
	}
	if s.pipeline != nil {
		s.logger.Info("shutting down: committing queued spans", "queued_spans", s.pipeline.QueuedSpans())
		errs = append(errs, s.pipeline.Close(sctx))
	}
	if s.producer != nil {
		errs = append(errs, s.producer.Close(sctx))
	}
	if err := <-pipeDone; err != nil {
		errs = append(errs, err)
	}
	// A detector stops consuming and leaves its group: its partitions go
	// to the other detectors at once.
	kdetCancel()
	errs = append(errs, <-kdetDone)
	bgCancel()
	errs = append(errs, g.Wait())
	errs = append(errs, s.queryWeb.Shutdown(sctx))
	if s.agents != nil {
		s.agents.Close()
	}
	errs = append(errs, s.store.Close())
	err := errors.Join(errs...)
	if err == nil {
		s.logger.Info("shutdown complete")
	}
	return err
}

// ensureTopics creates the Kafka topics when missing, retrying until it
// succeeds (Kafka may come up after the server).
func (s *Server) ensureTopics(ctx context.Context) {
	k := s.cfg.Kafka
	k.ApplyDefaults()
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := kafka.EnsureTopics(tctx, k)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		s.logger.Warn("cannot create the Kafka topics yet; retrying", "brokers", k.Brokers, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// retentionLoop purges every Retention.Interval while mine says so.
func (s *Server) retentionLoop(ctx context.Context, mine func() bool) {
	t := time.NewTicker(s.cfg.Retention.Interval)
	defer t.Stop()
	for {
		if !mine() {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			continue
		}
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
	soft := "none"
	if s.cfg.MemoryLimit > 0 {
		soft = ByteSize(s.cfg.GoMemoryLimit() >> 20 << 20).String()
	}
	attrs := []any{"memory_limit", s.cfg.MemoryLimit.String(), "go_soft_limit", soft, "bound", ByteSize(s.cfg.memoryBound() / (1 << 20) << 20).String()}
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
