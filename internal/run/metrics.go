package run

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rootline/rootline/internal/httpjson"
	"github.com/rootline/rootline/internal/mirage"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/tlsconf"
)

// MetricsOptions is the decentralised mode's listener: the run's own Mirage
// decision as Prometheus metrics (internal/mirage.Live).
type MetricsOptions struct {
	// Listen is the address ("" : no listener).
	Listen string
	// TLS serves it over TLS (zero: plaintext).
	TLS tlsconf.Server
	// Window is the decision's sliding window (default 30 s).
	Window time.Duration
	// Model sets the policy and thresholds.
	Model mirage.Config
}

// ErrMetricsToken is returned when the metrics listener would be reachable
// beyond loopback without a token.
var ErrMetricsToken = errors.New("the metrics listener is bound beyond loopback and no auth token is configured")

// Validate checks o before anything starts; token is the run's bearer token.
func (o MetricsOptions) Validate(token string) error {
	if o.Listen == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		return fmt.Errorf("-metrics.listen %q: %v", o.Listen, err)
	}
	if token == "" && !httpjson.IsLoopback(o.Listen) {
		return fmt.Errorf("%w (%s): set ROOTLINE_AUTH_TOKEN or -auth.token-file, or listen on 127.0.0.1", ErrMetricsToken, o.Listen)
	}
	return o.TLS.Validate()
}

// teeSink passes each span to every sink in turn.
type teeSink []Sink

func (t teeSink) Emit(s *model.Span) {
	for _, k := range t {
		k.Emit(s)
	}
}

// Flush flushes the sinks that can be (the shipper): the datapath sends the
// spans of each read in the same wake-up.
func (t teeSink) Flush() {
	for _, k := range t {
		if f, ok := k.(interface{ Flush() }); ok {
			f.Flush()
		}
	}
}

// startMetrics starts the metrics listener when o asks for one and returns
// the sink that feeds it (nil when none), its URL and a function that stops
// it. st (nil: none) are the run's counters it serves beside the decision.
func startMetrics(o MetricsOptions, token string, st *Stats, log *slog.Logger) (Sink, string, func(), error) {
	if o.Listen == "" {
		return nil, "", func() {}, nil
	}
	live := mirage.NewLive(o.Model, o.Window)
	reg := prometheus.NewRegistry()
	if err := live.Register(reg); err != nil {
		return nil, "", nil, err
	}
	if st != nil {
		if err := registerStats(reg, st); err != nil {
			return nil, "", nil, err
		}
	}
	var tcfg *tls.Config
	if o.TLS.Enabled() {
		var err error
		if tcfg, err = o.TLS.Config(); err != nil {
			return nil, "", nil, fmt.Errorf("metrics listener TLS: %w", err)
		}
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	scheme := "http"
	if tcfg != nil {
		ln = tls.NewListener(ln, tcfg)
		scheme = "https"
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpjson.RequireBearer(token,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})))
	srv := &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener stopped", "err", err)
		}
	}()
	url := scheme + "://" + ln.Addr().String() + "/metrics"
	log.Info("serving the Mirage decision as Prometheus metrics", "url", url,
		"policy", o.Model.Policy.String(), "window", o.Window)
	return live, url, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// registerStats serves the run's counters that an operator must be able to
// see without reading its logs: the connections it could not trace.
func registerStats(reg prometheus.Registerer, st *Stats) error {
	for _, c := range []struct {
		name, help string
		v          func() int64
	}{
		{"rootline_run_opaque_connections_total",
			"Connections the run passed through untraced: not HTTP/1.x (the supervisor: nor HTTP/2), or lost track of.",
			st.Opaque.Load},
		{"rootline_run_http2_untraced_connections_total",
			"HTTP/2 connections the in-kernel datapath passed through untraced (-mode ptrace traces them).",
			st.H2Untraced.Load},
	} {
		v := c.v
		if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(v()) })); err != nil {
			return err
		}
	}
	return nil
}
