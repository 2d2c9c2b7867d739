package agent

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

var (
	_ profiler.Holder = (*kernel.Recorder)(nil)
	_ CgroupHolder    = (*kernel.Recorder)(nil)
)

// TestDumpKeepsItsWindow: a kernel dump accepted while the only dump slot
// is busy is encoded after the real BPF recorder has evicted its window
// (a retention of one second, and a busy target filling the ring), and
// still holds the window's records, because the agent copied them when it
// accepted the request. Beyond max_held_bytes a request is refused with
// 429 and nothing more is held. Root and BPF needed (fails under
// ROOTLINE_REQUIRE_BPF=1).
func TestDumpKeepsItsWindow(t *testing.T) {
	bpftest.Require(t, kernel.Available())
	if _, err := exec.LookPath("sh"); err != nil {
		bpftest.Missing(t, "sh not installed")
	}
	srv, url := newArtifactServer(t)
	rec, err := kernel.New(kernel.Config{Retention: time.Second, Preroll: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	slot := &fakeProfiler{name: "cpu", dumpFn: func(ctx context.Context, _ profiler.Target, _ profiler.Window) ([]profiler.Artifact, error) {
		select { // holds the only dump slot until released
		case <-release:
		case <-ctx.Done():
		}
		return []profiler.Artifact{{Kind: "cpu", FileName: "cpu.pb.gz", Data: []byte("x")}}, nil
	}}
	var relOnce bool
	defer func() {
		if !relOnce {
			close(release)
		}
	}()

	gated := startGated(t)
	// Forks and exits a few thousand times a second: records enough to
	// fill several of the ring's chunks within the retention.
	busy := exec.Command("sh", "-c", `while :; do /bin/true; done`)
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })

	cfg := testConfig(url)
	cfg.MaxConcurrentDumps = 1
	cfg.Targets = []TargetSpec{{PID: gated.pid(), Service: "gated"}, {PID: busy.Process.Pid, Service: "busy"}}
	a := startAgent(t, cfg, rec, slot)
	waitUntil(t, "targets", func() bool { return len(a.processes()) == 2 })

	start := time.Now()
	gated.run(t) // spins, sleeps 0.3 s in a child, prints
	end := time.Now()

	// The slot: a dump of the busy process's cpu kind, blocked.
	req := func(id string, pid int, kinds ...string) agentapi.DumpRequest {
		return agentapi.DumpRequest{CaptureID: id, PID: int64(pid), Start: start.UnixNano(), End: end.UnixNano(), Kinds: kinds}
	}
	if code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", req("slot", busy.Process.Pid, "cpu")); code != http.StatusAccepted {
		t.Fatalf("dump: %d %s", code, body)
	}
	waitUntil(t, "the slot taken", func() bool { return slot.dumpCount() == 1 })
	if code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", req("held", gated.pid(), "kernel")); code != http.StatusAccepted {
		t.Fatalf("dump: %d %s", code, body)
	}
	// Copied at once, although the dump waits for the slot.
	waitUntil(t, "the window copied", func() bool { return a.heldBytes.Load() > 0 })
	held := a.heldBytes.Load()

	// Beyond the bound: refused, nothing more held.
	a.heldLimit.Store(held)
	code, body := postJSON(t, apiURL(a, agentapi.DumpPath), "", req("refused", gated.pid(), "kernel"))
	if code != http.StatusTooManyRequests || !strings.Contains(body, "max_held_bytes") {
		t.Errorf("dump beyond max_held_bytes: %d %s, want 429 naming max_held_bytes", code, body)
	}
	if got := a.heldBytes.Load(); got != held {
		t.Errorf("held bytes after a refusal = %d, want %d", got, held)
	}
	a.heldLimit.Store(cfg.MaxHeldBytes)

	// The recorder moves on: the window is evicted from its ring.
	deadline := time.Now().Add(30 * time.Second)
	for {
		arts, err := rec.Dump(context.Background(), profiler.Target{PID: gated.pid()}, profiler.Window{Start: start, End: end})
		if errors.Is(err, profiler.ErrUnknownTarget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		snap, err := kernel.DecodeSnapshot(arts[0].Data)
		if err != nil {
			t.Fatal(err)
		}
		if n := runningOf(snap, uint32(gated.pid())); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorder still holds the window %s after its retention (stats %v)", time.Since(end), rec.Stats())
		}
		time.Sleep(200 * time.Millisecond)
	}
	evictedAt := time.Since(end)

	close(release)
	relOnce = true
	arts := srv.kernelDump(t, "held")
	snap, err := kernel.DecodeSnapshot(arts[0].data)
	if err != nil {
		t.Fatal(err)
	}
	pid := uint32(gated.pid())
	states := map[string]time.Duration{}
	for _, iv := range snap.Intervals {
		if iv.TID == pid && iv.Start >= start.UnixNano()-int64(time.Second) && iv.End <= end.UnixNano()+int64(time.Second) {
			states[iv.State] += time.Duration(iv.End - iv.Start)
		}
	}
	t.Logf("encoded %s after the window, evicted from the ring %s after it; pid %d: %v", time.Since(end).Round(time.Millisecond), evictedAt.Round(time.Millisecond), pid, states)
	if states[kernel.StateRunning] <= 0 || states[kernel.StateBlocked] <= 0 {
		t.Errorf("pid %d: no RUNNING and BLOCKED intervals in the held window: %v", pid, states)
	}
	waitUntil(t, "held bytes released", func() bool { return a.heldBytes.Load() == 0 })
}

// runningOf is the time tid ran in a snapshot.
func runningOf(s *kernel.Snapshot, tid uint32) time.Duration {
	var d time.Duration
	for _, iv := range s.Intervals {
		if iv.TID == tid && iv.State == kernel.StateRunning {
			d += time.Duration(iv.End - iv.Start)
		}
	}
	return d
}
