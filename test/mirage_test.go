package test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/demo"
	"github.com/rootline/rootline/internal/mirage"
	"github.com/rootline/rootline/internal/mirage/miragetest"
	"github.com/rootline/rootline/internal/model"
)

// TestMirageDecentralised runs a chain front → mid → leaf of unmodified
// services, each under `rootline run` with its metrics listener, injects a
// fault, and checks that each hop's own decision (rootline_bottleneck,
// scraped from its listener) points at the right place, and that
// internal/mirage run on the spans the server stored decides the same.
//   - CPU: the leaf's CPU quota is cut to 5% of a CPU: the leaf says "my
//     CPU", mid and front delegate down the chain.
//   - Link: the leaf's responses cross a 2 Mbit/s link: mid says "my link
//     to leaf", front delegates to mid, the leaf has nothing to act on.
//
// Both ways of tracing: the in-kernel datapath and the syscall supervisor.
func TestMirageDecentralised(t *testing.T) {
	requireTracing(t)
	svc, err := filepath.Abs("../internal/run/testdata/svc.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"ebpf", "ptrace"} {
		t.Run(mode, func(t *testing.T) {
			runMode = []string{"--mode", mode}
			defer func() { runMode = nil }()
			fixture := ""
			if mode == "ebpf" {
				// Writes the stored spans of the CPU case, for internal/mirage's testdata.
				fixture = os.Getenv("ROOTLINE_MIRAGE_FIXTURE")
			}
			mirageChain(t, svc, fixture)
		})
	}
}

func mirageChain(t *testing.T, svc, fixture string) {
	srv := startServer(t, t.TempDir())
	otlp := "http://" + srv.http

	t.Run("cpu", func(t *testing.T) {
		const cg = "/sys/fs/cgroup/cpu/rootline-test-mirage-leaf"
		if _, err := os.Stat("/sys/fs/cgroup/cpu/cgroup.procs"); err != nil {
			t.Skip("no cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
		}
		if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(cg) })
		mustWrite(t, cg+"/cpu.cfs_period_us", "100000")
		mustWrite(t, cg+"/cpu.cfs_quota_us", "5000") // 5% of one CPU
		leaf := startMirageHop(t, otlp, "m-leaf", []string{"LISTEN=127.0.0.1:0", "SPIN_MS=8"},
			"sh", "-c", "echo $$ > "+cg+"/cgroup.procs && exec python3 "+svc)
		mid := startMirageHop(t, otlp, "m-mid", []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://127.0.0.1:%d", leaf.port)}, "python3", svc)
		front := startMirageHop(t, otlp, "m-front", []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://127.0.0.1:%d", mid.port)}, "python3", svc)
		// One client at a time, as in TestRunWaitFields: with more, requests
		// queue in the starved leaf's accept backlog, which the model counts
		// as network time.
		const n = 25
		throttled0 := throttledTime(t, cg)
		load(t, front.port, "/cpu", 1, n)
		throttled := time.Duration(throttledTime(t, cg)-throttled0) / n
		want := map[string]string{
			"m-leaf":  "local",
			"m-mid":   fmt.Sprintf("remote 127.0.0.1:%d", leaf.port),
			"m-front": fmt.Sprintf("remote 127.0.0.1:%d", mid.port),
		}
		w := checkDecisions(t, srv, n, want, fixture, leaf, mid, front)
		// The advice for the leaf, with its cgroup's throttled time per
		// request: most of its local wait was its quota's doing, so more
		// quota (vertical), not more replicas.
		sum := w.Summary("m-leaf", time.Now())
		a := mirage.Advise("m-leaf", sum.Decision, mirage.Resources{Replicas: 1, CPUQuota: 0.05, Throttled: throttled}, 0)
		t.Logf("leaf throttled %s per request; advice: %s", throttled, a.Explanation)
		if a.Scaling != mirage.ScaleVertical || a.To <= 0.05 {
			t.Errorf("advice for the throttled leaf: %+v, want more CPU quota", a)
		}
	})

	t.Run("link", func(t *testing.T) {
		for _, tool := range []string{"ip", "tc"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("%s not installed", tool)
			}
		}
		const ns = "rootline-test-mirage"
		sh(t, "ip netns del "+ns+" 2>/dev/null; ip link del rlm-w0 2>/dev/null; true")
		sh(t, "ip netns add "+ns)
		t.Cleanup(func() { sh(t, "ip netns del "+ns+"; ip link del rlm-w0 2>/dev/null; true") })
		sh(t, "ip link add rlm-w0 type veth peer name rlm-w1 && ip link set rlm-w1 netns "+ns+
			" && ip addr add 10.79.1.1/30 dev rlm-w0 && ip link set rlm-w0 up"+
			" && ip netns exec "+ns+" sh -c 'ip addr add 10.79.1.2/30 dev rlm-w1 && ip link set rlm-w1 up && ip link set lo up'"+
			" && ip netns exec "+ns+" tc qdisc add dev rlm-w1 root tbf rate 2mbit burst 8kb latency 2s")
		leaf := startMirageHop(t, otlp, "n-leaf", []string{"LISTEN=10.79.1.2:0", "BODY_KB=24"}, "ip", "netns", "exec", ns, "python3", svc)
		mid := startMirageHop(t, otlp, "n-mid", []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://10.79.1.2:%d", leaf.port)}, "python3", svc)
		front := startMirageHop(t, otlp, "n-front", []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://127.0.0.1:%d", mid.port)}, "python3", svc)
		const n = 30
		load(t, front.port, "/link", 2, n)
		want := map[string]string{
			"n-mid":   fmt.Sprintf("network 10.79.1.2:%d", leaf.port),
			"n-front": fmt.Sprintf("remote 127.0.0.1:%d", mid.port),
			// The leaf only sends: its own waits are noise next to the
			// link's ~100 ms; on a busy machine its run-queue wait may pass
			// the 1 ms floor, so "local" is accepted below if it is small.
			"n-leaf": "none",
		}
		checkDecisions(t, srv, n, want, "", leaf, mid, front)
	})
}

type mirageHop struct {
	service string
	port    int
	metrics string // URL of its /metrics
}

var metricsURL = regexp.MustCompile(`url=(https?://\S+/metrics)`)

// startMirageHop starts argv under `rootline run` with a metrics listener on
// an ephemeral port, and finds that port in its log.
func startMirageHop(t *testing.T, otlp, service string, env []string, argv ...string) mirageHop {
	t.Helper()
	_, port, stderr := startTracedStderr(t, env, true,
		[]string{"--service", service, "--server", otlp, "--metrics.listen", "127.0.0.1:0", "--metrics.window", "2m", "--log.level", "info"}, argv...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := metricsURL.FindStringSubmatch(stderr.String()); m != nil {
			return mirageHop{service: service, port: port, metrics: m[1]}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no metrics listener in the log:\n%s", service, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var bottleneckLine = regexp.MustCompile(`^rootline_bottleneck\{cause="([a-z]+)",peer="([^"]*)",service="([^"]+)"\} (\S+)$`)
var windowLine = regexp.MustCompile(`^rootline_bottleneck_window_requests\{service="([^"]+)"\} (\S+)$`)

// scrape returns the hop's decision ("cause peer", "local", or "none") and
// the requests in its window.
func (h mirageHop) scrape(t *testing.T) (string, int) {
	t.Helper()
	resp, err := http.Get(h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var chosen []string
	requests := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := bottleneckLine.FindStringSubmatch(sc.Text()); m != nil && m[3] == h.service && m[4] == "1" {
			chosen = append(chosen, strings.TrimSpace(m[1]+" "+m[2]))
		}
		if m := windowLine.FindStringSubmatch(sc.Text()); m != nil && m[1] == h.service {
			requests, _ = strconv.Atoi(m[2])
		}
	}
	switch len(chosen) {
	case 0:
		return "none", requests
	case 1:
		return chosen[0], requests
	}
	t.Fatalf("%s: %d resources chosen under the max policy: %v", h.service, len(chosen), chosen)
	return "", 0
}

// checkDecisions waits until every hop's window holds the n requests, then
// compares each hop's live decision with want and with internal/mirage's
// decision on the spans the server stored for the chain (the last hop is
// its entry).
func checkDecisions(t *testing.T, srv *serverProc, n int, want map[string]string, fixture string, hops ...mirageHop) *mirage.Window {
	t.Helper()
	live := map[string]string{}
	for _, h := range hops {
		deadline := time.Now().Add(20 * time.Second)
		for {
			d, requests := h.scrape(t)
			if requests >= n {
				live[h.service] = d
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d requests in its window", h.service, requests, n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	stored := storedSpans(t, srv, hops[len(hops)-1].service, n)
	if fixture != "" {
		if err := miragetest.Write(fixture, stored); err != nil {
			t.Fatal(err)
		}
	}
	w := mirage.NewWindow(mirage.Config{}, time.Hour)
	now := time.Now()
	for _, h := range mirage.Hops(stored) {
		w.Add(&h, now)
	}
	for _, h := range hops {
		sum := w.Summary(h.service, now)
		stored := string(sum.Decision.Cause)
		if sum.Decision.Peer != "" {
			stored += " " + sum.Decision.Peer
		}
		t.Logf("%s: live %q, stored spans %q (%d hops): %s; advice: %s", h.service, live[h.service], stored, sum.Hops,
			sum.Decision.Reason, mirage.Advise(h.service, sum.Decision, mirage.Resources{}, 0).Explanation)
		got := live[h.service]
		if got != want[h.service] && !(want[h.service] == "none" && got == "local" && sum.Decision.Wait < 10*time.Millisecond) {
			t.Errorf("%s decided %q live, want %q", h.service, got, want[h.service])
		}
		if stored != got {
			t.Errorf("%s: the stored spans decide %q, the live view %q", h.service, stored, got)
		}
	}
	return w
}

// storedSpans fetches the traces of the entry service from the query API
// (internal/demo's client: Jaeger JSON to model spans) until n of them are
// complete (a SERVER span of each of the three services).
func storedSpans(t *testing.T, srv *serverProc, entry string, n int) []*model.Span {
	t.Helper()
	api := demo.NewAPISource("http://"+srv.query, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		traces, err := api.SearchTraces(context.Background(), entry, time.Now().Add(-time.Hour), time.Now(), 500)
		if err != nil {
			t.Fatal(err)
		}
		var spans []*model.Span
		complete := 0
		for _, tr := range traces {
			servers := 0
			for _, s := range tr {
				if s.Kind == model.KindServer {
					servers++
				}
			}
			if servers == 3 {
				complete++
			}
			spans = append(spans, tr...)
		}
		if complete >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d complete traces of %s stored", complete, n, entry)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
