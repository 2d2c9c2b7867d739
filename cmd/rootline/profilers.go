package main

import (
	"log/slog"

	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/jfr"
)

// The profiler plugins compiled into the agent. Adding one is one package and
// one line here (profilers_linux.go for those built on eBPF).
func init() {
	profilerFactories["jfr"] = func(l *slog.Logger) (profiler.Profiler, error) { return jfr.New(jfrConfig, l), nil }
}

// jfrConfig is the jfr profiler's configuration (flags --jfr.*).
var jfrConfig jfr.Config
