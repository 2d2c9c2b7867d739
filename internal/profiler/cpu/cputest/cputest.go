// Package cputest holds test helpers for code that needs the eBPF CPU
// sampler (internal/profiler/cpu).
package cputest

import (
	"os"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/overhead"
	"github.com/rootline/rootline/internal/profiler/cpu"
)

// RequireEnv is the environment variable that turns a missing capability
// into a test failure (CI sets it where BPF is expected to work).
const RequireEnv = "ROOTLINE_REQUIRE_BPF"

// RequireBPF skips tb with the reason when the sampler cannot run here (not
// root, BPF unavailable), or fails it when ROOTLINE_REQUIRE_BPF=1.
func RequireBPF(tb testing.TB) {
	tb.Helper()
	if err := cpu.Available(); err != nil {
		Missing(tb, err.Error())
	}
}

// Missing skips tb because of reason, or fails it when ROOTLINE_REQUIRE_BPF=1
// (for other prerequisites of BPF tests: a compiler, perf…).
func Missing(tb testing.TB, reason string) {
	tb.Helper()
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("%s=1 but: %s", RequireEnv, reason)
	}
	tb.Skip(reason)
}

// ExcludedTime is the irq, softirq and steal time of every CPU so far
// (/proc/stat, USER_HZ ticks). Task clocks (schedstat, sum_exec_runtime)
// leave it out, while BPF intervals between two sched_switch events are
// wall-clock: on a virtual machine whose host steals the CPU, a thread's
// BPF on-CPU time exceeds its schedstat by up to the steal meanwhile.
func ExcludedTime(tb testing.TB) time.Duration {
	tb.Helper()
	return overhead.StatTime(overhead.StatIRQ, overhead.StatSoftIRQ, overhead.StatSteal)
}
