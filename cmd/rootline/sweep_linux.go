//go:build linux

package main

import (
	"log/slog"

	"github.com/rootline/rootline/internal/agent"
	runner "github.com/rootline/rootline/internal/run"
)

// addDatapathSweeper adds to the agent the sweeper of the node's shared
// `rootline run` datapaths (it stops at once where it cannot sweep: not
// root, not the host's PID namespace).
func addDatapathSweeper(a *agent.Agent, log *slog.Logger) error {
	return a.AddComponent(runner.NewDatapathSweeper(log))
}
