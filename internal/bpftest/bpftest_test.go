package bpftest

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that records how a helper ended the test.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	skipped string
	failed  string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.mu.Lock()
	r.skipped = args[0].(string)
	r.mu.Unlock()
	panic(r)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = format
	r.mu.Unlock()
	panic(r)
}

// run calls f with a recorder and returns it; Skip and Fatalf end f as
// they end a test (here by a panic run recovers).
func run(f func(tb testing.TB)) (r *recorder) {
	r = &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
	}()
	f(r)
	return r
}

// A missing capability is a skip with the reason, and a failure with the
// reason under ROOTLINE_REQUIRE_BPF=1; a capability present is neither.
func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		name, env      string
		f              func(tb testing.TB)
		skip, fail     bool
		reasonContains string
	}{
		{"missing", "", func(tb testing.TB) { Missing(tb, "no frobnicator") }, true, false, "no frobnicator"},
		{"missing, required", "1", func(tb testing.TB) { Missing(tb, "no frobnicator") }, false, true, ""},
		{"require nil", "1", func(tb testing.TB) { Require(tb, nil) }, testing.Short(), false, "left out by -short"},
		{"skip short", "1", func(tb testing.TB) { SkipShort(tb, "Envoy") }, testing.Short(), false, "needs Envoy: left out by -short"},
		{"tool present", "1", func(tb testing.TB) { RequireTools(tb, "sh") }, false, false, ""},
		{"tool absent", "", func(tb testing.TB) { RequireTools(tb, "sh", "no-such-tool-rootline") }, true, false, "no-such-tool-rootline not installed"},
		{"tool absent, required", "1", func(tb testing.TB) { RequireTools(tb, "no-such-tool-rootline") }, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.env)
			r := run(tc.f)
			if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
				t.Errorf("skipped %q, failed %q; want skip %v, fail %v", r.skipped, r.failed, tc.skip, tc.fail)
			}
			if tc.skip && tc.reasonContains != "" && !strings.Contains(r.skipped, tc.reasonContains) {
				t.Errorf("skip reason %q does not say %q", r.skipped, tc.reasonContains)
			}
		})
	}
}

// As root with BTF the BPF check passes; otherwise it names what is missing.
func TestRequireBPF(t *testing.T) {
	err := bpfAvailable()
	_, btf := os.Stat(btfPath)
	switch {
	case os.Geteuid() == 0 && btf == nil && err != nil:
		t.Errorf("root with BTF, yet: %v", err)
	case os.Geteuid() != 0 && err == nil:
		t.Error("BPF available without root")
	}
	t.Logf("BPF here: %v", err)
}
