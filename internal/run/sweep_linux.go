//go:build linux

package run

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/run/datapath"
)

// SweepDatapaths removes the shared `rootline run` datapaths that no live
// run holds (see datapath.Sweep). It returns false when this process cannot
// sweep (datapath.ErrCannotSweep). A
// failure is a warning the first time (*warned false), debug after that.
func SweepDatapaths(log *slog.Logger, warned *bool) bool {
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

// DatapathSweeper is the agent's component (see agent.Component) that sweeps the node's shared
// datapaths once a minute: a `rootline run` killed last leaves its programs
// attached (a load on every socket read of the node) until then.
type DatapathSweeper struct {
	log    *slog.Logger
	warned *bool
}

func (DatapathSweeper) Routes(*http.ServeMux)           {}
func (DatapathSweeper) Collector() prometheus.Collector { return nil }
func (DatapathSweeper) Close() error                    { return nil }

func (s DatapathSweeper) Run(ctx context.Context) error {
	if !SweepDatapaths(s.log, s.warned) {
		return nil
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			SweepDatapaths(s.log, s.warned)
		}
	}
}

// NewDatapathSweeper returns the sweeper, logging to log (a failure is a
// warning the first time, debug after that).
func NewDatapathSweeper(log *slog.Logger) DatapathSweeper {
	return DatapathSweeper{log: log, warned: new(bool)}
}
