// Package query serves Rootline's read API on the query port (:16686).
//
// Two APIs share one handler:
//   - under /api/ a Jaeger-compatible JSON API (the shapes of Jaeger's query
//     service), so the Jaeger UI and Grafana's Jaeger data source can read
//     Rootline unchanged;
//   - under /api/v1/ Rootline's own API: the anomaly feed, captured artifacts
//     (metadata and content), the critical paths of traces and the anomaly
//     detector's state.
//
// Everything else is handed to the web UI.
package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/bearer"
	"github.com/rootline/rootline/internal/store"
)

// Config configures the query API.
type Config struct {
	// AuthToken, when set, is the bearer token every API request needs:
	// artifacts may hold heap contents, command lines and other secrets, and
	// traces, services and metrics tell how the system is built. The web UI
	// (everything outside /api/) stays open: it asks for the token.
	AuthToken string `yaml:"auth_token"`
	// DefaultLimit is the number of traces a search returns without a limit
	// parameter; 0 means 20.
	DefaultLimit int `yaml:"default_limit"`
	// MaxLimit caps the limit parameter of searches and feeds; 0 means 1000.
	MaxLimit int `yaml:"max_limit"`
	// UI serves every path outside /api/. Nil serves a short text page saying
	// that the UI is not built.
	UI http.Handler `yaml:"-"`
}

// DefaultConfig returns the configuration used for zero fields.
func DefaultConfig() Config {
	return Config{DefaultLimit: 20, MaxLimit: 1000}
}

// API serves the query port. Create it with New; it is safe for concurrent use.
type API struct {
	cfg       Config
	spans     store.SpanReader
	artifacts store.ArtifactStore
	detector  func() []anomaly.KeyState
	metrics   store.MetricReader  // nil: GET /api/v1/metrics answers 501 (handlers_metrics.go)
	incidents store.IncidentStore // nil: the incident endpoints answer 501 (handlers_incidents.go)
	logger    *slog.Logger
	// now is the clock; tests replace it.
	now func() time.Time
	// token is cfg.AuthToken, compared in constant time.
	token bearer.Token
	// critpathSlot lets one critical-path computation run at a time.
	critpathSlot chan struct{}
	// critmetricsSlot lets one kernel-metric analysis run at a time
	// (handlers_critmetrics.go).
	critmetricsSlot chan struct{}
}

// New returns the query API over spans and artifacts. detector returns the
// anomaly detector's per-key states (it may be nil when no detector runs);
// artifacts may be nil when no artifact store is configured. A nil logger
// discards logs.
func New(cfg Config, spans store.SpanReader, artifacts store.ArtifactStore, detector func() []anomaly.KeyState, logger *slog.Logger) *API {
	def := DefaultConfig()
	if cfg.DefaultLimit <= 0 {
		cfg.DefaultLimit = def.DefaultLimit
	}
	if cfg.MaxLimit <= 0 {
		cfg.MaxLimit = def.MaxLimit
	}
	if cfg.DefaultLimit > cfg.MaxLimit {
		cfg.DefaultLimit = cfg.MaxLimit
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &API{
		cfg:       cfg,
		spans:     spans,
		artifacts: artifacts,
		detector:  detector,
		logger:    logger.With("component", "query"),
		now:       time.Now,
		token:     bearer.New(cfg.AuthToken),

		critpathSlot:    make(chan struct{}, 1),
		critmetricsSlot: make(chan struct{}, 1),
	}
	return a
}

// Handler returns the HTTP handler of the query port. It does not serve
// /healthz; the caller mounts that.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", a.authorized(a.apiHandler()))
	ui := a.cfg.UI
	if ui == nil {
		ui = http.HandlerFunc(noUI)
	}
	mux.Handle("/", ui)
	return mux
}

// apiHandler serves everything under /api/.
func (a *API) apiHandler() http.Handler {
	mux := http.NewServeMux()

	// Jaeger-compatible API.
	mux.HandleFunc("GET /api/services", a.getServices)
	mux.HandleFunc("GET /api/services/{service}/operations", a.getServiceOperations)
	mux.HandleFunc("GET /api/operations", a.getOperations)
	mux.HandleFunc("GET /api/traces", a.searchTraces)
	mux.HandleFunc("GET /api/traces/{traceID}", a.getTrace)
	mux.HandleFunc("GET /api/dependencies", a.getDependencies)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		a.jaegerError(w, r, http.StatusNotFound, errors.New("no such endpoint: "+r.Method+" "+r.URL.Path))
	})

	// Rootline API.
	mux.HandleFunc("GET /api/v1/anomalies", a.getAnomalies)
	mux.HandleFunc("GET /api/v1/traces/{traceID}/artifacts", a.getTraceArtifacts)
	mux.HandleFunc("GET /api/v1/artifacts/{id}/meta", a.getArtifactMeta)
	mux.HandleFunc("GET /api/v1/artifacts/{id}", a.getArtifactContent)
	mux.HandleFunc("GET /api/v1/artifacts/{id}/flamegraph", a.getFlameGraph)
	mux.HandleFunc("GET /api/v1/traces/{traceID}/critical-path", a.getCriticalPath)
	mux.HandleFunc("GET /api/v1/traces/{traceID}/diagnosis", a.getTraceDiagnosis)
	mux.HandleFunc("GET /api/v1/incidents", a.getIncidents)
	mux.HandleFunc("GET /api/v1/incidents/{id}", a.getIncident)
	mux.HandleFunc("GET /api/v1/detector", a.getDetector)
	mux.HandleFunc("GET /api/v1/services/latency", a.getServiceLatency)
	mux.HandleFunc("GET /api/v1/metrics", a.getMetrics)
	mux.HandleFunc("GET /api/v1/metrics/timeline", a.getMetricsTimeline)
	mux.HandleFunc("GET /api/v1/critical-metrics", a.getCriticalMetrics)
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		a.v1Error(w, r, http.StatusNotFound, errors.New("no such endpoint: "+r.Method+" "+r.URL.Path))
	})
	return mux
}

// noUI answers for the web UI when the binary was built without it.
func noUI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	status := http.StatusOK
	if r.URL.Path != "/" {
		status = http.StatusNotFound
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "Rootline: the web UI is not built into this binary.\n"+
		"The Jaeger-compatible API is served under /api/ and Rootline's API under /api/v1/.\n")
}

// authorized wraps h with the bearer-token check when a token is configured;
// a refusal is in the envelope of the API asked (Jaeger's or Rootline's).
// The Authorization header is never logged.
func (a *API) authorized(h http.Handler) http.Handler {
	if !a.token.Required() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if res := a.token.Check(r.Header.Get("Authorization")); res != bearer.OK {
			w.Header().Set("WWW-Authenticate", res.Challenge())
			if strings.HasPrefix(r.URL.Path, "/api/v1/") {
				a.v1Error(w, r, http.StatusUnauthorized, errors.New(res.Message()))
			} else {
				a.jaegerError(w, r, http.StatusUnauthorized, errors.New(res.Message()))
			}
			return
		}
		h.ServeHTTP(w, r)
	})
}

// writeJSON encodes v with status. The body is encoded before anything is
// written, so an encoding failure still yields a clean 500.
func (a *API) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if pretty, _ := strconv.ParseBool(r.URL.Query().Get("prettyPrint")); pretty {
		enc.SetIndent("", "    ")
	}
	if err := enc.Encode(v); err != nil {
		a.logger.Error("cannot encode response", "path", r.URL.Path, "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"code":500,"error":"cannot encode response"}`+"\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// storeStatus maps a store error to an HTTP status and logs server-side
// failures (a client that went away is not one).
func (a *API) storeStatus(r *http.Request, err error) int {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
		a.logger.Debug("request canceled", "path", r.URL.Path)
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		a.logger.Warn("store query timed out", "path", r.URL.Path)
		return http.StatusGatewayTimeout
	case errors.Is(err, store.ErrClosed):
		a.logger.Warn("store closed", "path", r.URL.Path)
		return http.StatusServiceUnavailable
	}
	a.logger.Error("store query failed", "path", r.URL.Path, "err", err)
	return http.StatusInternalServerError
}
