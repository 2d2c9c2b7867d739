package main

import (
	"io"
	"log/slog"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/cpu"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

// The eBPF profilers.
func init() {
	profilerFactories["cpu"] = func(l *slog.Logger) (profiler.Profiler, error) { return cpu.New(cpu.Config{}, l) }
	profilerFactories["kernel"] = func(l *slog.Logger) (profiler.Profiler, error) { return kernel.New(kernel.Config{}, l) }
}

// enableBPFStats turns on the kernel's BPF run-time statistics until closed.
func enableBPFStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}
