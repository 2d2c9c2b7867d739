//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/agent"
	"github.com/rootline/rootline/internal/run/datapath"
)

// sweepDatapaths removes the shared `rootline run` datapaths that no live
// run holds (see datapath.Sweep). It returns false when this process cannot
// sweep (datapath.ErrCannotSweep). A
// failure is a warning the first time (*warned false), debug after that.
func sweepDatapaths(log *slog.Logger, warned *bool) bool {
	removed, err := datapath.Sweep()
	if len(removed) > 0 {
		log.Info("removed shared eBPF datapaths no rootline run holds (their last run was killed)", "pins", removed)
	}
	if errors.Is(err, datapath.ErrCannotSweep) {
		log.Debug("shared eBPF datapaths not swept", "err", err)
		return false
	}
	if err != nil {
		level := slog.LevelWarn
		if *warned {
			level = slog.LevelDebug
		}
		*warned = true
		log.Log(context.Background(), level, "sweeping shared eBPF datapaths", "err", err)
	}
	return true
}

// datapathSweeper is the agent's component that sweeps the node's shared
// datapaths once a minute: a `rootline run` killed last leaves its programs
// attached (a load on every socket read of the node) until then.
type datapathSweeper struct {
	log    *slog.Logger
	warned *bool
}

func (datapathSweeper) Routes(*http.ServeMux)           {}
func (datapathSweeper) Collector() prometheus.Collector { return nil }
func (datapathSweeper) Close() error                    { return nil }

func (s datapathSweeper) Run(ctx context.Context) error {
	if !sweepDatapaths(s.log, s.warned) {
		return nil
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			sweepDatapaths(s.log, s.warned)
		}
	}
}

// addDatapathSweeper adds the sweeper to the agent (it stops at once where
// it cannot sweep: not root, not the host's PID namespace).
func addDatapathSweeper(a *agent.Agent, log *slog.Logger) error {
	return a.AddComponent(datapathSweeper{log: log, warned: new(bool)})
}
