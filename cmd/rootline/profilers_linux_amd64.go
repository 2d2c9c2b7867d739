package main

import (
	"log/slog"

	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/goroutine"
)

// The goroutine tracker: a uprobe on the Go runtime, whose register ABI it
// reads (amd64).
func init() {
	profilerFactories["goroutines"] = func(l *slog.Logger) (profiler.Profiler, error) {
		return goroutine.NewProfiler(goroutine.Config{}, l)
	}
}
