// Package cputest holds test helpers for code that needs the eBPF CPU
// sampler (internal/profiler/cpu).
package cputest

import (
	"os"
	"testing"

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
