package kmetrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/httpjson"
)

// Component plugs a Manager into the agent (agent.Component): the API
// routes, the Prometheus collector and the periodic OTLP push.
type Component struct {
	Manager *Manager
	// Pusher pushes the series every Interval; nil pushes nothing.
	Pusher   *Pusher
	Interval time.Duration
	Logger   *slog.Logger
}

// Routes serves:
//
//	GET /api/v1/kmetrics         current config and containers (State)
//	PUT /api/v1/kmetrics/config  change the config live (ConfigRequest) → State
func (c *Component) Routes(api *http.ServeMux) {
	api.HandleFunc("GET /api/v1/kmetrics", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, http.StatusOK, c.Manager.State())
	})
	api.HandleFunc("PUT /api/v1/kmetrics/config", func(w http.ResponseWriter, r *http.Request) {
		var req ConfigRequest
		if err := httpjson.Decode(w, r, &req, true); err != nil {
			httpjson.Error(w, http.StatusBadRequest, err.Error())
			return
		}
		st, err := c.Manager.Configure(req)
		switch {
		case errors.Is(err, ErrBadRequest):
			httpjson.Error(w, http.StatusBadRequest, err.Error())
		case err != nil:
			httpjson.Error(w, http.StatusInternalServerError, err.Error())
		default:
			httpjson.Write(w, http.StatusOK, st)
		}
	})
}

// Collector is the Manager.
func (c *Component) Collector() prometheus.Collector { return c.Manager }

// Run pushes the series every Interval until ctx ends, then once more.
func (c *Component) Run(ctx context.Context) error {
	if c.Pusher == nil {
		<-ctx.Done()
		return nil
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	interval := c.Interval
	if interval <= 0 {
		interval = 15 * time.Second
	}
	push := func(ctx context.Context) {
		series, err := c.Manager.Read()
		if err == nil {
			err = c.Pusher.Push(ctx, series, time.Now())
		}
		if err != nil {
			logger.Warn("kernel metrics push failed", "component", "kmetrics", "err", err)
		}
	}
	c.Pusher.start = time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			push(final)
			cancel()
			return nil
		case <-tick.C:
			push(ctx)
		}
	}
}

// Close unloads the BPF programs.
func (c *Component) Close() error { return c.Manager.Close() }
