//go:build !linux

package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"

	"github.com/rootline/rootline/internal/agent"
)

// enableBPFStats: BPF is Linux's.
func enableBPFStats() (io.Closer, error) {
	return nil, errors.New("BPF statistics are Linux-only")
}

// addDatapathSweeper: `rootline run`'s datapath is Linux's.
func addDatapathSweeper(*agent.Agent, *slog.Logger) error { return nil }

// addKernelFlags: no kernel flight recorder on this platform.
func addKernelFlags(*flag.FlagSet) {}
