package test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/mesh"
	"github.com/rootline/rootline/internal/procfs"
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
	missed := runDemo(t, faults, true)
	if len(missed) > 0 {
		t.Logf("wrong in the full run: %v; running them once more", missed)
		for _, f := range runDemo(t, missed, false) {
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
// summary or its exit status disagrees with it. With probe, it also checks,
// while the mesh runs, that a pod cannot use the agent's API without the
// demo's token, and after it, that captures (which carry the token) brought
// evidence.
func runDemo(t *testing.T, faults []string, probe bool) []string {
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
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	probed := make(chan string, 1)
	if probe {
		go func() { probed <- probeAgentFromPod(&logs) }()
	}
	err := cmd.Wait()
	t.Logf("demo ran %s:\n%s", time.Since(start).Round(time.Second), logs.String())
	if probe {
		if status := <-probed; status != "401" {
			t.Errorf("a pod asking the agent's API for its processes without a token got %q, want 401", status)
		}
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("no summary (%v); demo: %v", rerr, err)
	}
	var sum struct {
		Faults []struct {
			Injected string         `json:"injected"`
			Service  string         `json:"service"`
			Correct  bool           `json:"correct"`
			Error    string         `json:"error"`
			Evidence map[string]int `json:"evidenceArtifacts"`
			Verdict  struct {
				Service  string   `json:"service"`
				Cause    string   `json:"cause"`
				Evidence []string `json:"evidence"`
			} `json:"verdict"`
			CriticalPath *struct {
				Service string             `json:"service"`
				Ms      float64            `json:"ms"`
				States  map[string]float64 `json:"states"`
			} `json:"criticalPath"`
			NoPath string `json:"noCriticalPath"`
			// What the fault did at its service, from spans alone.
			Effect *struct {
				Entry  string  `json:"entry"`
				Before int     `json:"before"`
				After  int     `json:"after"`
				Score  float64 `json:"score"`
			} `json:"effect"`
			NoEffect    bool   `json:"noEffect"`
			EffectError string `json:"effectError"`
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
	evidence := 0
	for _, f := range sum.Faults {
		for _, n := range f.Evidence {
			evidence += n
		}
		if f.Error == "" && !strings.HasPrefix(f.Injected, "none") && (f.Effect == nil || f.Effect.Entry == "" || f.Effect.Before == 0 || f.Effect.After == 0) {
			t.Errorf("%s: no measure of the fault's effect at its service (%s)", f.Injected, f.EffectError)
		} else if f.Effect != nil {
			t.Logf("%s: %+.1f ms per request at %s (%d traces before, %d after), no effect: %v", f.Injected, f.Effect.Score, f.Service, f.Effect.Before, f.Effect.After, f.NoEffect)
		}
		// The culprit's critical path is printed, or why there is none.
		// Whether the kernel snapshot covered the culprit's slow spans
		// depends on how far behind the agent's dumps run on the machine
		// (bench/RESULTS.md, "the culprit's path in the demo"), so its
		// presence is not asserted; its consistency is.
		switch p := f.CriticalPath; {
		case f.Verdict.Service != "" && p == nil && f.NoPath == "":
			t.Errorf("%s: no critical path of the culprit %s, and no reason given", f.Injected, f.Verdict.Service)
		case p != nil:
			var sum float64
			for _, ms := range p.States {
				sum += ms
			}
			if p.Service != f.Verdict.Service || p.Ms <= 0 || math.Abs(sum-p.Ms) > 0.01*p.Ms+0.1 {
				t.Errorf("%s: the culprit %s's path is of %s, %.1f ms, states summing to %.1f ms", f.Injected, f.Verdict.Service, p.Service, p.Ms, sum)
			}
		}
		for _, e := range f.Verdict.Evidence {
			if strings.Contains(e, "unreadable") {
				// The demo reads Rootline's own API for its verdict; a part
				// it cannot read (a missing token, say) weakens the verdict.
				t.Errorf("%s: the verdict could not read part of the API: %s", f.Injected, e)
			}
		}
	}
	if probe && evidence == 0 {
		t.Error("no evidence captured in the whole run: the server's dump requests did not reach the agent")
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

// probeAgentFromPod waits for the demo's mesh, then sends a request without a
// token from a pod's network namespace to the agent's API through the bridge
// (as a service there could) and returns the HTTP status it got.
func probeAgentFromPod(logs *lockedBuffer) string {
	agentRE := regexp.MustCompile(`agent up at 127\.0\.0\.1:(\d+)`)
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		out := logs.String()
		m := agentRE.FindStringSubmatch(out)
		if m == nil || !strings.Contains(out, "mesh up") {
			continue
		}
		ents, _ := os.ReadDir("/run/netns")
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "rl-") {
				continue
			}
			script := `exec 3<>/dev/tcp/10.77.0.1/` + m[1] + ` && printf 'GET /api/v1/processes HTTP/1.0\r\n\r\n' >&3 && head -1 <&3`
			line, err := exec.Command("ip", "netns", "exec", e.Name(), "bash", "-c", script).Output()
			if err != nil {
				return fmt.Sprintf("no answer from %s: %v", e.Name(), err)
			}
			if f := strings.Fields(string(line)); len(f) > 1 {
				return f[1]
			}
			return strings.TrimSpace(string(line))
		}
		return "no pod namespace"
	}
	return "the mesh did not come up"
}

// TestDemoKilledStopsAgent: a demo that dies without cleaning up (killed, or
// a second Ctrl-C) must not leave its agent running, with the agent's eBPF
// programs on every CPU of the node; what else it left (the mesh's
// processes and namespaces) the next demo removes.
func TestDemoKilledStopsAgent(t *testing.T) {
	requireTracing(t)
	cmd := exec.Command(rootlineBin(t), "demo", "--topology", "testdata/demo-small.yaml", "--mode", "port", "--no-envoy",
		"--fault", "lock@b", "--duration", "5s", "--query.addr", "127.0.0.1:0",
		"--data-dir", t.TempDir()) // what it leaves there goes with the test
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
		if err := mesh.Cleanup("rl", nil); err != nil {
			t.Errorf("cleanup after the killed demo: %v", err)
		}
	}()
	agentRE := regexp.MustCompile(`agent up at (127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(time.Minute); addr == "" && time.Now().Before(deadline) && len(exited) == 0; time.Sleep(100 * time.Millisecond) {
		if m := agentRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("the demo did not start its agent:\n%s", logs.String())
	}
	agent := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[1] == "agent" && slices.Contains(args, addr) {
			agent, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
		}
	}
	start, err := procfs.StartTime(agent)
	if agent == 0 || err != nil {
		t.Fatalf("no agent process listening on %s (%v)", addr, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	exited <- err // for the deferred cleanup
	deadline := time.Now().Add(20 * time.Second)
	for procfs.Alive(agent, start) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if procfs.Alive(agent, start) {
		_ = syscall.Kill(agent, syscall.SIGKILL)
		t.Errorf("the agent (pid %d) still runs 20 s after its demo was killed", agent)
	}
}
