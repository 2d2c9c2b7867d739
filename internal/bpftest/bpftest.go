// Package bpftest decides what a test does when this machine lacks what it
// needs — root, BPF, a kernel feature, a tool: it skips with the reason,
// or, where ROOTLINE_REQUIRE_BPF=1 says the machine must have it (CI runs
// as root on a kernel with BTF), fails with the reason. A capability that
// is missing where it is required then shows as a failure, never as a
// quiet skip.
//
// Under -short (`make test-fast`) the tests that need root, BPF, Envoy or a
// JVM skip even where those are present: Require, RequireRoot and
// RequireBPF say a test needs root or BPF, SkipShort says it needs
// something else as heavy.
package bpftest

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/rootline/rootline/internal/overhead"
)

// RequireEnv is the environment variable that turns a missing capability
// into a test failure.
const RequireEnv = "ROOTLINE_REQUIRE_BPF"

// Required reports whether ROOTLINE_REQUIRE_BPF=1: what tests need must be
// there.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Missing skips tb because of reason, or fails it when ROOTLINE_REQUIRE_BPF=1.
func Missing(tb testing.TB, reason string) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s=1 but: %s", RequireEnv, reason)
	}
	tb.Skip(reason)
}

// SkipShort skips tb under -short, saying that it needs what (root, BPF,
// Envoy, a JVM…), which `make test-fast` leaves out.
func SkipShort(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs " + what + ": left out by -short (make test-fast)")
	}
}

// Require is for a package's own check of the root or BPF it needs
// (cpu.Available, kernel.Available…): Missing with err's text when err is
// not nil, and a skip under -short.
func Require(tb testing.TB, err error) {
	tb.Helper()
	SkipShort(tb, "root or BPF")
	if err != nil {
		Missing(tb, err.Error())
	}
}

// RequireRoot is Missing unless the test runs as root, and a skip under
// -short; why says what needs root.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	SkipShort(tb, "root ("+why+")")
	if os.Geteuid() != 0 {
		Missing(tb, why+": needs root")
	}
}

// btfPath is where the kernel exposes its BTF, which CO-RE programs need.
const btfPath = "/sys/kernel/btf/vmlinux"

// RequireBPF is Missing unless this process can use BPF: root, the kernel's
// BTF, and a BPF map it can create (a container or lockdown may refuse the
// bpf syscall even to root). It is a skip under -short.
func RequireBPF(tb testing.TB) {
	tb.Helper()
	SkipShort(tb, "BPF")
	if err := bpfAvailable(); err != nil {
		Missing(tb, err.Error())
	}
}

func bpfAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("BPF needs root")
	}
	if _, err := os.Stat(btfPath); err != nil {
		return errors.New("the kernel has no BTF (" + btfPath + ")")
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return errors.New("cannot create a BPF map: " + err.Error())
	}
	return m.Close()
}

// RequireTools is Missing for the first of the commands not in PATH
// (scripts/deps.sh installs them).
func RequireTools(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			Missing(tb, n+" not installed (scripts/deps.sh)")
		}
	}
}

// ExcludedTime is the irq, softirq and steal time of every CPU so far
// (/proc/stat, USER_HZ ticks). Task clocks (schedstat, sum_exec_runtime)
// leave it out, while BPF intervals between two sched_switch events are
// wall-clock: on a virtual machine whose host steals the CPU, a thread's
// BPF on-CPU time exceeds its schedstat by up to the steal meanwhile.
// Accuracy tests that compare the two allow for it.
func ExcludedTime(tb testing.TB) time.Duration {
	tb.Helper()
	return overhead.StatTime(overhead.StatIRQ, overhead.StatSoftIRQ, overhead.StatSteal)
}
