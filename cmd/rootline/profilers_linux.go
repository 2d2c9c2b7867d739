package main

import (
	"flag"
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
	profilerFactories["kernel"] = func(l *slog.Logger) (profiler.Profiler, error) { return kernel.New(kernelConfig, l) }
}

// kernelConfig is the kernel flight recorder's configuration (--kernel.*).
var kernelConfig = kernel.DefaultConfig()

// addKernelFlags adds the kernel flight recorder's flags.
func addKernelFlags(fs *flag.FlagSet) {
	c := &kernelConfig
	fs.IntVar(&c.FollowDepth, "kernel.follow-depth", c.FollowDepth, "the kernel recorder also records the threads that wake its targets (another process, a kernel worker), "+
		"and their wakers, this many hops back (-1: only the targets' own threads)")
	fs.IntVar(&c.FollowThreads, "kernel.follow-threads", c.FollowThreads, "at most this many such wakers are followed at once")
	fs.BoolVar(&c.CTF, "kernel.ctf", c.CTF, "also upload each kernel snapshot's window as a CTF 1.8 trace (kernel-ctf, for babeltrace2 or Trace Compass): "+
		"its raw scheduler events make it ~5 times the snapshot's bytes, and nothing in Rootline reads it")
	fs.Int64Var(&c.MaxBytes, "kernel.max-bytes", c.MaxBytes, "memory of the kernel recorder's buffered records (a quarter of it for the followed wakers')")
}

// enableBPFStats turns on the kernel's BPF run-time statistics until closed.
func enableBPFStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}
