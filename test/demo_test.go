package test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoFindsEachFault runs `rootline demo` on a small topology (Go, Java
// and Python services under `rootline run`, with Envoy sidecars in network
// namespaces) and injects every fault once, each into a chosen service; the
// demo's verdict, read from Rootline's API, must name that service (in the
// full run, or in a second run of the faults it missed), and the demo must
// leave no namespace, cgroup or process behind.
func TestDemoFindsEachFault(t *testing.T) {
	requireTracing(t)
	if testing.Short() {
		t.Skip("the mesh demo takes minutes")
	}
	// Amounts that slow the small topology down for sure at 20 req/s: c
	// needs ~8 % of a CPU, its responses are a few hundred bytes, and the
	// apps' default gc (1 MB) and disk (1 MB fsynced) amounts were too weak
	// on this VM for a stable verdict (disk@d blamed b in one CI run). The
	// two hogs share d's cgroup under its half-CPU limit (a noisy neighbour
	// in its pod); when they were pinned with d to one CPU instead, the rest
	// of the mesh lost that CPU too and the verdict named another service.
	faults := []string{"lock@b", "cpu-throttle@c=3%", "cpu-hog@d=2", "net-bandwidth@c=64kbit", "net-delay@d",
		"gc@b=4MB", "slow-downstream@c", "disk@d=8MB"}
	// The issue asks that each fault be found at least once: a fault whose
	// verdict was wrong in the full run gets one more run of its own (on a
	// shared 2-core VM one of eight verdicts is sometimes noise).
	missed := runDemo(t, faults)
	if len(missed) > 0 {
		t.Logf("wrong in the full run: %v; running them once more", missed)
		for _, f := range runDemo(t, missed) {
			t.Errorf("%s: never named the injected service", f)
		}
	}
	// Cleanup: nothing named rl-* left.
	if o, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(o), "rl-") {
		t.Errorf("network namespaces left behind:\n%s", o)
	}
	if o, _ := exec.Command("ip", "-o", "link").Output(); strings.Contains(string(o), "rl-") {
		t.Errorf("links left behind:\n%s", o)
	}
}

// runDemo runs `rootline demo` with faults and returns those whose verdict
// did not name the injected service; it fails the test when the demo gave no
// summary or its exit status disagrees with it.
func runDemo(t *testing.T, faults []string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "demo.json")
	args := []string{"demo", "--topology", "testdata/demo-small.yaml", "--duration", "12s",
		"--query.addr", "127.0.0.1:0", "--json", out}
	for _, f := range faults {
		args = append(args, "--fault", f)
	}
	cmd := exec.Command(rootlineBin(t), args...)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	start := time.Now()
	err := cmd.Run()
	t.Logf("demo ran %s:\n%s", time.Since(start).Round(time.Second), logs.String())
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("no summary (%v); demo: %v", rerr, err)
	}
	var sum struct {
		Faults []struct {
			Injected string `json:"injected"`
			Service  string `json:"service"`
			Correct  bool   `json:"correct"`
			Error    string `json:"error"`
			Verdict  struct {
				Service string `json:"service"`
				Cause   string `json:"cause"`
			} `json:"verdict"`
		} `json:"faults"`
		Correct bool `json:"correct"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Faults) != len(faults) {
		t.Fatalf("%d fault results, want %d", len(sum.Faults), len(faults))
	}
	if (err == nil) != sum.Correct {
		t.Errorf("exit status %v does not match correct=%v", err, sum.Correct)
	}
	var missed []string
	for i, f := range sum.Faults {
		if !f.Correct {
			t.Logf("%s: verdict %q (cause %s), want %q %s", f.Injected, f.Verdict.Service, f.Verdict.Cause, f.Service, f.Error)
			missed = append(missed, faults[i])
		}
	}
	return missed
}
