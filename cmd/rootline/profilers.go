package main

import (
	"log/slog"

	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/cpu"
	"github.com/rootline/rootline/internal/profiler/jfr"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

// The profiler plugins compiled into the agent. Adding one is one package and
// one line here.
func init() {
	profilerFactories["cpu"] = func(l *slog.Logger) (profiler.Profiler, error) { return cpu.New(cpu.Config{}, l) }
	profilerFactories["kernel"] = func(l *slog.Logger) (profiler.Profiler, error) { return kernel.New(kernel.Config{}, l) }
	profilerFactories["jfr"] = func(l *slog.Logger) (profiler.Profiler, error) { return jfr.New(jfrConfig, l), nil }
}

// jfrConfig is the jfr profiler's configuration (flags --jfr.*).
var jfrConfig jfr.Config
