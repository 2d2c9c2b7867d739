package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/rootline/rootline/internal/bpftest"
)

// requireRoot skips (or fails under ROOTLINE_REQUIRE_BPF=1) without root.
func requireRoot(t *testing.T) {
	t.Helper()
	bpftest.RequireRoot(t, "pod mode")
	bpftest.RequireTools(t, "ip", "tc", "iptables-restore")
}

func requireEnvoy(t *testing.T) string {
	t.Helper()
	bpftest.SkipShort(t, "Envoy")
	bin, err := FindEnvoy()
	if err != nil {
		bpftest.Missing(t, err.Error())
	}
	return bin
}

var (
	standinOnce sync.Once
	standinBin  string
	standinErr  error
)

// standin builds testdata/standin once per test binary.
func standin(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rootline-standin-")
		if err != nil {
			standinErr = err
			return
		}
		standinBin = filepath.Join(dir, "standin")
		out, err := exec.Command("go", "build", "-o", standinBin, "./testdata/standin").CombinedOutput()
		if err != nil {
			standinErr = errors.New(string(out))
		}
	})
	if standinErr != nil {
		t.Fatalf("build standin: %v", standinErr)
	}
	return standinBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if standinBin != "" {
		os.RemoveAll(filepath.Dir(standinBin))
	}
	// Idle keep-alive connections of HTTP clients are not the mesh's.
	testClient.CloseIdleConnections()
	adminClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chain is a → b → c; b has two replicas; c does CPU work so that a quota
// shows.
func chain() *Topology {
	return &Topology{Entry: "a", Services: []Service{
		{Name: "a", Language: LangGo, Calls: []string{"b"}, Replicas: 1},
		{Name: "b", Language: LangGo, Calls: []string{"c"}, Replicas: 2},
		{Name: "c", Language: LangGo, Replicas: 1, Work: "cpu=30ms"},
	}}
}

// otlpSink is an OTLP gRPC trace receiver counting spans.
type otlpSink struct {
	ptraceotlp.UnimplementedGRPCServer
	spans atomic.Int64
	mu    sync.Mutex
	names []string // "service kind name" of the first spans
}

func (s *otlpSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.spans.Add(int64(req.Traces().SpanCount()))
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := range rss.Len() {
		svc, _ := rss.At(i).Resource().Attributes().Get("service.name")
		sss := rss.At(i).ScopeSpans()
		for j := range sss.Len() {
			spans := sss.At(j).Spans()
			for k := range spans.Len() {
				if len(s.names) < 20 {
					s.names = append(s.names, svc.AsString()+" "+spans.At(k).Kind().String()+" "+spans.At(k).Name())
				}
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

func startSink(t *testing.T) (*otlpSink, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{}
	g := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(g, s)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return s, l.Addr().String()
}

var testClient = &http.Client{Timeout: 30 * time.Second}

// get requests u and returns the body's first line and the time it took.
func get(t *testing.T, u string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := testClient.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %.200s", u, resp.Status, err, b)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return first, took
}

// fastest of n requests' durations (a delay is a floor: the fastest
// request shows it best on a busy machine).
func fastest(t *testing.T, u string, n int) time.Duration {
	t.Helper()
	var best time.Duration
	for i := range n {
		if _, d := get(t, u); i == 0 || d < best {
			best = d
		}
	}
	return best
}

// mean of n requests' durations.
func mean(t *testing.T, u string, n int) time.Duration {
	t.Helper()
	var sum time.Duration
	for range n {
		_, d := get(t, u)
		sum += d
	}
	return sum / time.Duration(n)
}

// median of n requests' durations.
func median(t *testing.T, u string, n int) time.Duration {
	t.Helper()
	var ds []time.Duration
	for range n {
		_, d := get(t, u)
		ds = append(ds, d)
	}
	for i := range ds {
		for j := i + 1; j < len(ds); j++ {
			if ds[j] < ds[i] {
				ds[i], ds[j] = ds[j], ds[i]
			}
		}
	}
	return ds[len(ds)/2]
}

func startMesh(t *testing.T, ctx context.Context, opts Options) *Mesh {
	t.Helper()
	bin := standin(t)
	opts.ServiceCmd = func(Service) []string { return []string{bin} }
	if testing.Verbose() {
		opts.Logger = testLogger(t)
	}
	m, err := Start(ctx, chain(), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func inboundRequests(t *testing.T, m *Mesh) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, s := range m.Services() {
		for _, r := range s.Replicas {
			st, err := EnvoyStats(r.EnvoyAdmin, `^http\.inbound\.downstream_rq_total$`)
			if err != nil {
				t.Fatalf("stats of %s: %v", s.Name, err)
			}
			out[s.Name] += st["http.inbound.downstream_rq_total"]
		}
	}
	return out
}

func TestPodMode(t *testing.T) {
	requireRoot(t)
	envoy := requireEnvoy(t)
	sink, otlp := startSink(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const prefix = "rlt"
	m := startMesh(t, ctx, Options{Mode: ModePod, EnvoyBin: envoy, Tracing: true, OTLPEndpoint: otlp,
		Prefix: prefix, Subnet: "10.77.91.0/24"})
	entry := m.EntryURL()
	if !strings.HasPrefix(entry, "http://10.77.91.") {
		t.Fatalf("EntryURL = %q", entry)
	}

	t.Run("hops through envoy", func(t *testing.T) {
		before := inboundRequests(t, m)
		body, _ := get(t, entry)
		if body != "a(b(c()))" {
			t.Fatalf("body %q, want a(b(c()))", body)
		}
		after := inboundRequests(t, m)
		for _, s := range []string{"a", "b", "c"} {
			if after[s] <= before[s] {
				t.Errorf("%s's sidecar inbound requests %d → %d: the hop did not go through Envoy", s, before[s], after[s])
			}
		}
		// Sidecars balance over b's replicas.
		for range 3 {
			get(t, entry)
		}
		for _, r := range m.service("b").Replicas {
			st, err := EnvoyStats(r.EnvoyAdmin, `^http\.inbound\.downstream_rq_total$`)
			if err != nil || st["http.inbound.downstream_rq_total"] == 0 {
				t.Errorf("replica b-%d got no request: %v %v", r.Index, st, err)
			}
		}
		for _, s := range m.Services() {
			r := s.Replicas[0]
			if r.AppPID == 0 || r.EnvoyPID == 0 || r.Netns != prefix+"-"+s.Name+"-0" {
				t.Errorf("replica %+v", r)
			}
			procs, _ := os.ReadFile(filepath.Join(r.Cgroup, "cgroup.procs"))
			if !strings.Contains("\n"+string(procs), fmt.Sprintf("\n%d\n", r.AppPID)) {
				t.Errorf("%s's app %d not in its cgroup %s (%q)", s.Name, r.AppPID, r.Cgroup, procs)
			}
			// The pod: the app and the sidecar are sibling containers, the
			// sidecar outside the app's limits and in a v2 cgroup of its
			// own, which its sockets carry.
			if want := filepath.Join(cgroupName(prefix), s.Name, ContainerApp); !strings.HasSuffix(r.Cgroup, want) {
				t.Errorf("%s's app cgroup %s, want …/%s", s.Name, r.Cgroup, want)
			}
			if strings.Contains("\n"+string(procs), fmt.Sprintf("\n%d\n", r.EnvoyPID)) {
				t.Errorf("%s's sidecar %d is in the app's cgroup %s", s.Name, r.EnvoyPID, r.Cgroup)
			}
			side := filepath.Join(filepath.Dir(r.Cgroup), ContainerSidecar)
			if procs, _ := os.ReadFile(filepath.Join(side, "cgroup.procs")); !strings.Contains("\n"+string(procs), fmt.Sprintf("\n%d\n", r.EnvoyPID)) {
				t.Errorf("%s's sidecar %d not in %s (%q)", s.Name, r.EnvoyPID, side, procs)
			}
			if r.SidecarCgroup == "" || !strings.HasSuffix(r.SidecarCgroup, filepath.Join(cgroupName(prefix), s.Name, ContainerSidecar)) {
				t.Errorf("%s's SidecarCgroup %q", s.Name, r.SidecarCgroup)
			} else if own, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.EnvoyPID)); !strings.Contains(string(own), "0::/"+filepath.Join(cgroupName(prefix), s.Name, ContainerSidecar)+"\n") {
				t.Errorf("%s's sidecar %d: /proc/…/cgroup %q has not its v2 cgroup", s.Name, r.EnvoyPID, own)
			}
			if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.EnvoyPID)); !strings.Contains(string(env), "OTEL_RESOURCE_ATTRIBUTES=service.name="+s.Name+",k8s.container.name=envoy\x00") {
				t.Errorf("%s's sidecar %d does not name its service and container in its environment", s.Name, r.EnvoyPID)
			}
		}
		deadline := time.Now().Add(15 * time.Second)
		for sink.spans.Load() < 5 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		// A request makes an inbound span in each sidecar and an outbound
		// span in A's and B's.
		if n := sink.spans.Load(); n < 5 {
			t.Errorf("OTLP receiver got %d spans, want ≥ 5", n)
		}
		sink.mu.Lock()
		t.Logf("spans: %q", sink.names)
		sink.mu.Unlock()
		// The spans came by DNAT, not through a forwarder in this process.
		m.mu.Lock()
		natted, fwd := m.natted, len(m.fwd)
		m.mu.Unlock()
		if !natted || fwd != 0 {
			t.Errorf("gateway: natted %v, %d forwarders; want DNAT and none", natted, fwd)
		}
		nat, _ := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
		if !strings.Contains(string(nat), "--to-destination "+otlp) {
			t.Errorf("no DNAT to %s in the host's nat table:\n%s", otlp, nat)
		}
	})

	t.Run("net-delay", func(t *testing.T) {
		base := fastest(t, entry, 5)
		undo, err := m.Inject(Fault{Name: FaultNetDelay, Service: "b", Amount: "200ms"})
		if err != nil {
			t.Fatal(err)
		}
		slow := fastest(t, entry, 3)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		after := fastest(t, entry, 5)
		t.Logf("net-delay 200ms on b: fastest of requests %v → %v → %v", base, slow, after)
		// The delay is a floor under every request; the baseline is far below
		// it but noisy on a shared machine, so it is only compared.
		if slow < 200*time.Millisecond || slow <= base {
			t.Errorf("delayed %v (baseline %v), want ≥ 200ms more", slow, base)
		}
		if after >= 200*time.Millisecond {
			t.Errorf("after undo the fastest request still took %v", after)
		}
	})

	t.Run("net-bandwidth", func(t *testing.T) {
		u := entry + "?bytes=250000"
		base := median(t, u, 3)
		undo, err := m.Inject(Fault{Name: FaultNetBandwidth, Service: "c", Amount: "1mbit"})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("tc", "qdisc", "show", "dev", m.service("c").Replicas[0].Veth).CombinedOutput()
		if !strings.Contains(string(out), "tbf") {
			t.Errorf("no tbf on c's veth: %s", out)
		}
		_, slow := get(t, u)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		t.Logf("net-bandwidth 1mbit on c, 250 kB response: %v → %v", base, slow)
		// 250 kB at 125 kB/s is 2 s.
		if slow < 1500*time.Millisecond || slow < 5*base {
			t.Errorf("with 1mbit: %v (baseline %v), want ≥ 1.5 s", slow, base)
		}
		out, _ = exec.Command("tc", "qdisc", "show", "dev", m.service("c").Replicas[0].Veth).CombinedOutput()
		if strings.Contains(string(out), "tbf") {
			t.Errorf("tbf left after undo: %s", out)
		}
	})

	t.Run("cpu-throttle", func(t *testing.T) {
		base := median(t, entry, 5)
		undo, err := m.Inject(Fault{Name: FaultCPUThrottle, Service: "c", Amount: "10%"})
		if err != nil {
			t.Fatal(err)
		}
		quotaFile := filepath.Join(m.cg.dir("c"), "cpu.cfs_quota_us")
		if m.cg.cpu == "" {
			quotaFile = filepath.Join(m.cg.dir("c"), "cpu.max")
		}
		q, _ := os.ReadFile(quotaFile)
		throttled := nrThrottled(t, m.cg.dir("c"))
		slow := median(t, entry, 3)
		throttled = nrThrottled(t, m.cg.dir("c")) - throttled
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		q2, _ := os.ReadFile(quotaFile)
		t.Logf("cpu-throttle 10%% on c (30 ms CPU per request): %s=%s, median %v → %v, throttled %d periods", filepath.Base(quotaFile), strings.TrimSpace(string(q)), base, slow, throttled)
		if !strings.HasPrefix(string(q), "10000") {
			t.Errorf("%s = %q, want 10000", quotaFile, q)
		}
		if strings.HasPrefix(string(q2), "10000") {
			t.Errorf("quota not restored: %q", q2)
		}
		// 30 ms of CPU at 10 ms per 100 ms period take ≥ 200 ms.
		if slow < 200*time.Millisecond || slow <= base {
			t.Errorf("throttled median %v (baseline %v), want ≥ 200ms", slow, base)
		}
		if throttled < 3 {
			t.Errorf("cpu.stat nr_throttled rose by %d over 3 requests", throttled)
		}
	})

	t.Run("cpu-hog", func(t *testing.T) {
		base := median(t, entry, 3)
		undo, err := m.Inject(Fault{Name: FaultCPUHog, Service: "c", Amount: "2"})
		if err != nil {
			t.Fatal(err)
		}
		quotaFile := filepath.Join(m.cg.dir("c"), "cpu.cfs_quota_us")
		if m.cg.cpu == "" {
			quotaFile = filepath.Join(m.cg.dir("c"), "cpu.max")
		}
		q, _ := os.ReadFile(quotaFile)
		var procs []byte
		for range 50 {
			// The hogs' shells enter the cgroup themselves, just after they start.
			if procs, _ = os.ReadFile(filepath.Join(m.cg.dir("c"), "cgroup.procs")); len(strings.Fields(string(procs))) >= 3 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		slow := median(t, entry, 3)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		q2, _ := os.ReadFile(quotaFile)
		t.Logf("cpu-hog on c: %s=%s, procs %q, median %v → %v", filepath.Base(quotaFile), strings.TrimSpace(string(q)),
			strings.Fields(string(procs)), base, slow)
		if len(strings.Fields(string(procs))) < 3 {
			t.Errorf("cgroup of c has %q, want the app and two hogs", procs)
		}
		if !strings.HasPrefix(string(q), strconv.Itoa(int(CPUHogLimit*100000))) {
			t.Errorf("%s = %q during the fault, want the pod limit %v CPU", quotaFile, q, CPUHogLimit)
		}
		if strings.HasPrefix(string(q2), strconv.Itoa(int(CPUHogLimit*100000))) {
			t.Errorf("limit not lifted: %q", q2)
		}
		// c does 30 ms of CPU per request; sharing half a CPU with two hogs
		// it gets at most a sixth.
		if slow < 2*base {
			t.Errorf("median with the hogs %v, baseline %v: want at least twice as slow", slow, base)
		}
	})

	t.Run("packet-loss", func(t *testing.T) {
		base := median(t, entry, 5)
		// stalls counts, of n requests, those that took a retransmission
		// timeout (≥ 200 ms) more than the baseline median.
		stalls := func(n int) (k int, all []time.Duration) {
			for range n {
				_, d := get(t, entry)
				all = append(all, d)
				if d >= base+180*time.Millisecond {
					k++
				}
			}
			return k, all
		}
		undo, err := m.Inject(Fault{Name: FaultPacketLoss, Service: "c", Amount: "30%"})
		if err != nil {
			t.Fatal(err)
		}
		// 30 % of the packets on c's link lost: TCP resends a lost one
		// after a timeout of at least 200 ms (a lost ACK may cost nothing).
		during, slow := stalls(15)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		after, fast := stalls(15)
		t.Logf("packet-loss 30%% on c: baseline median %v; with loss %d of 15 requests stalled ≥ 180 ms more (%v); after undo %d (%v)",
			base, during, slow, after, fast)
		if during < 2 {
			t.Errorf("with loss %d of 15 requests stalled for a retransmission timeout, want ≥ 2", during)
		}
		if after >= during {
			t.Errorf("after undo %d of 15 requests stalled, with loss %d: the dropper stayed", after, during)
		}
	})

	t.Run("noisy-neighbour", func(t *testing.T) {
		cPID := 0
		m.mu.Lock()
		for _, p := range m.procs {
			if p.name == "c-0.app" {
				cPID = p.cmd.Process.Pid
			}
		}
		m.mu.Unlock()
		if cPID == 0 {
			t.Fatal("no process c-0.app")
		}
		rd0 := runDelay(t, cPID)
		base := median(t, entry, 5)
		rd1 := runDelay(t, cPID)
		undo, err := m.Inject(Fault{Name: FaultNoisyNeighbour, Service: "c", Amount: "2"})
		if err != nil {
			t.Fatal(err)
		}
		cpu := strconv.Itoa(runtime.NumCPU() - 1)
		setFile := filepath.Join(m.cg.cpuset, m.cg.name, "c", ContainerApp, "cpuset.cpus")
		if m.cg.cpuset == "" {
			setFile = filepath.Join(m.cg.v2, m.cg.name, "c", ContainerApp, "cpuset.cpus")
		}
		set, _ := os.ReadFile(setFile)
		var neighbours []string
		m.mu.Lock()
		procs := slices.Clone(m.procs)
		m.mu.Unlock()
		// The neighbours' own pod, of NeighbourWeight times c's CPU weight.
		pod := filepath.Join(m.cg.name, "c-neighbour", ContainerApp)
		weightFile, wantWeight := filepath.Join(m.cg.cpu, m.cg.name, "c-neighbour", "cpu.shares"), strconv.Itoa(1024*NeighbourWeight)
		if m.cg.cpu == "" {
			weightFile, wantWeight = filepath.Join(m.cg.v2, m.cg.name, "c-neighbour", "cpu.weight"), strconv.Itoa(100*NeighbourWeight)
		}
		if w, err := os.ReadFile(weightFile); err != nil || strings.TrimSpace(string(w)) != wantWeight {
			t.Errorf("the neighbours' pod weight %q (%v), want %s", w, err, wantWeight)
		}
		for _, p := range procs {
			if strings.HasPrefix(p.name, "c.neighbour") {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
				for _, l := range strings.Split(string(st), "\n") {
					if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
						neighbours = append(neighbours, strings.TrimSpace(v))
					}
				}
				if cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.cmd.Process.Pid)); !strings.Contains(string(cg), pod) {
					t.Errorf("a neighbour's cgroups %q, want %s", cg, pod)
				}
			}
		}
		rd2 := runDelay(t, cPID)
		slow := median(t, entry, 5)
		rd3 := runDelay(t, cPID)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		set2, _ := os.ReadFile(setFile)
		t.Logf("noisy-neighbour on c: cpuset %q, neighbours on CPUs %q, median %v → %v, c's run-queue wait over 5 requests %v → %v",
			strings.TrimSpace(string(set)), neighbours, base, slow, rd1-rd0, rd3-rd2)
		if strings.TrimSpace(string(set)) != cpu {
			t.Errorf("c's cpuset.cpus = %q during the fault, want %s", set, cpu)
		}
		if len(neighbours) != 2 || neighbours[0] != cpu || neighbours[1] != cpu {
			t.Errorf("neighbours' CPUs %q, want two on CPU %s", neighbours, cpu)
		}
		if strings.TrimSpace(string(set2)) == cpu && runtime.NumCPU() > 1 {
			t.Errorf("cpuset not restored: %q", set2)
		}
		// c spins 30 ms per request and now shares its one CPU with two
		// busy processes that are no part of its cgroup: its threads wait
		// for the CPU (the kernel's run-queue delay of its threads, most of
		// the spin). Its latency need not grow: the demo services spin for
		// a wall-clock time, so the fault shows in the kernel's record, which
		// is what diagnosis reads.
		if wait := rd3 - rd2; wait < 5*10*time.Millisecond || wait < 2*(rd1-rd0) {
			t.Errorf("c's threads waited %v in the run queue over 5 requests with the neighbours, %v without: want ≥ 50 ms and twice as long", wait, rd1-rd0)
		}
	})

	t.Run("app fault", func(t *testing.T) {
		base := fastest(t, entry, 3)
		undo, err := m.Inject(Fault{Name: FaultSlowDownstream, Service: "b", Amount: "150ms"})
		if err != nil {
			t.Fatal(err)
		}
		slow := fastest(t, entry, 3)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		if slow < 150*time.Millisecond || slow <= base {
			t.Errorf("slow-downstream: %v (baseline %v), want ≥ 150ms more", slow, base)
		}
		if _, err := m.Inject(Fault{Name: FaultLock, Service: "b"}); err == nil {
			t.Error("the stand-in knows only slow; lock should fail")
		}
	})

	// A fault left active is undone by Close; cancelling ctx closes.
	if _, err := m.Inject(Fault{Name: FaultNetBandwidth, Service: "b"}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("cancelling ctx did not close the mesh")
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	assertClean(t, prefix)
}

// nrThrottled reads nr_throttled of a cgroup's cpu.stat (v1 and v2).
func nrThrottled(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var n int64
		if _, err := fmt.Sscanf(line, "nr_throttled %d", &n); err == nil {
			return n
		}
	}
	t.Fatalf("no nr_throttled in %s", b)
	return 0
}

// assertClean checks nothing of prefix is left.
func assertClean(t *testing.T, prefix string) {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	if strings.Contains(string(out), prefix+"-") {
		t.Errorf("netns left: %s", out)
	}
	out, _ = exec.Command("ip", "-o", "link").CombinedOutput()
	if strings.Contains(string(out), " "+prefix+"-") {
		t.Errorf("links left: %s", out)
	}
	if m, _ := filepath.Glob("/etc/netns/" + prefix + "-*"); len(m) > 0 {
		t.Errorf("/etc/netns left: %v", m)
	}
	for _, d := range []string{"cpu", "cpuset", "unified", ""} {
		p := filepath.Join(cgroupRoot, d, cgroupName(prefix))
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup left: %s", p)
		}
	}
	out, _ = exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if strings.Contains(string(out), "RL_") || strings.Contains(string(out), gatewayChain(prefix)) {
		t.Errorf("root namespace has mesh rules: %s", out)
	}
	out, _ = exec.Command("iptables-save", "-t", "filter").CombinedOutput()
	if strings.Contains(string(out), gatewayChain(prefix)) {
		t.Errorf("root namespace has the gateway's filter rules: %s", out)
	}
	if _, err := os.Stat(pidFile(prefix)); err == nil {
		t.Errorf("pid file left: %s", pidFile(prefix))
	}
}

func TestPortMode(t *testing.T) {
	envoy := requireEnvoy(t)
	sink, otlp := startSink(t)
	m := startMesh(t, context.Background(), Options{Mode: ModePort, EnvoyBin: envoy, Tracing: true, OTLPEndpoint: otlp, Prefix: "rltp"})
	entry := m.EntryURL()
	if !strings.HasPrefix(entry, "http://127.0.0.1:") {
		t.Fatalf("EntryURL = %q", entry)
	}
	before := inboundRequests(t, m)
	if body, _ := get(t, entry); body != "a(b(c()))" {
		t.Fatalf("body %q", body)
	}
	after := inboundRequests(t, m)
	for _, s := range []string{"a", "b", "c"} {
		if after[s] <= before[s] {
			t.Errorf("%s: the hop did not go through Envoy (%d → %d)", s, before[s], after[s])
		}
	}
	base := fastest(t, entry, 3)
	undo, err := m.Inject(Fault{Name: FaultNetDelay, Service: "c", Amount: "150ms"})
	if err != nil {
		t.Fatal(err)
	}
	slow := fastest(t, entry, 3)
	_ = undo()
	if slow < 150*time.Millisecond || slow <= base {
		t.Errorf("delayed %v (baseline %v), want ≥ 150ms more", slow, base)
	}
	if _, err := m.Inject(Fault{Name: FaultNetBandwidth, Service: "c"}); !errors.Is(err, ErrPortMode) {
		t.Errorf("net-bandwidth in port mode: %v, want ErrPortMode", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for sink.spans.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := sink.spans.Load(); n < 5 {
		t.Errorf("OTLP receiver got %d spans, want ≥ 5", n)
	}
	pids := []int{}
	for _, s := range m.Services() {
		pids = append(pids, s.Replicas[0].AppPID, s.Replicas[0].EnvoyPID)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still runs after Close", pid)
		}
	}
}

func TestPortModeNoSidecar(t *testing.T) {
	var wrapped atomic.Int32
	// The wrapper forks the app instead of exec'ing it, as a supervisor does.
	wrap := func(svc string, argv []string) []string {
		wrapped.Add(1)
		return append([]string{"sh", "-c", `"$@"; exit $?`, "wrap"}, argv...)
	}
	m := startMesh(t, context.Background(), Options{Mode: ModePort, Prefix: "rltn", Wrap: wrap})
	if wrapped.Load() != 4 {
		t.Errorf("Wrap called %d times, want 4 (one per replica)", wrapped.Load())
	}
	var apps []int
	for _, s := range m.Services() {
		apps = append(apps, processTree(s.Replicas[0].AppPID)...)
	}
	if len(apps) != 6 {
		t.Errorf("wrapper and app processes %v, want 2 per service", apps)
	}
	defer func() {
		m.Close()
		for _, pid := range apps {
			if alive(pid) {
				t.Errorf("pid %d runs after Close", pid)
			}
		}
	}()
	if body, _ := get(t, m.EntryURL()); body != "a(b(c()))" {
		t.Fatalf("body %q", body)
	}
	if _, err := m.Inject(Fault{Name: FaultNetDelay, Service: "b"}); !errors.Is(err, ErrNoSidecar) {
		t.Errorf("net-delay without sidecars: %v, want ErrNoSidecar", err)
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestDefaultTopologyRealServices runs the demo's own services (Go, Java,
// Python builds of demo/services, made by `make build`) in the default
// topology, pod mode, and checks every hop went through its sidecar as many
// times as the topology visits it.
func TestDefaultTopologyRealServices(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten services and sidecars")
	}
	requireRoot(t)
	envoy := requireEnvoy(t)
	repo, _ := filepath.Abs("../..")
	for _, f := range []string{"build/demo/svc-go", "build/demo/java/Svc.class", "demo/services/python/svc.py"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Skipf("%s not built (make build)", f)
		}
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java")
	}
	topo := Default()
	opts := Options{Mode: ModePod, EnvoyBin: envoy, Prefix: "rltd", Subnet: "10.77.92.0/24",
		ServiceCmd: DefaultServiceCmd(repo)}
	if testing.Verbose() {
		opts.Logger = testLogger(t)
	}
	start := time.Now()
	m, err := Start(context.Background(), topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d services up in %v", len(m.Services()), time.Since(start))
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		assertClean(t, "rltd")
	}()
	before := inboundRequests(t, m)
	const n = 5
	for range n {
		get(t, m.EntryURL())
	}
	after := inboundRequests(t, m)
	for svc, visits := range topo.Visits() {
		if got := after[svc] - before[svc]; got != int64(n*visits) {
			t.Errorf("%s's sidecar saw %d inbound requests, want %d × %d", svc, got, n, visits)
		}
	}
	// The fault must slow requests on average: e's holder keeps the lock
	// 50 ms at a time, free 0–25 ms between, and each request takes it.
	// Requests sent one after the other often reach e while it is free
	// (the previous one passed at its release), so neither the fastest nor
	// the median need move; the mean of ten does (by ~40 ms in three runs here). A loaded
	// machine can make one baseline slower than the fault (a 222 ms
	// baseline against 193 ms was seen under the race detector's load): a
	// second measurement settles it.
	var base, slow time.Duration
	for attempt := 1; attempt <= 2; attempt++ {
		base = mean(t, m.EntryURL(), 10)
		undo, err := m.Inject(Fault{Name: FaultLock, Service: "e", Amount: "50ms"})
		if err != nil {
			t.Fatal(err)
		}
		slow = mean(t, m.EntryURL(), 10)
		if err := undo(); err != nil {
			t.Fatal(err)
		}
		t.Logf("lock@e=50ms, attempt %d: mean request %v → %v", attempt, base, slow)
		if slow >= base+8*time.Millisecond {
			return
		}
	}
	t.Errorf("lock@e=50ms: mean %v (baseline %v)", slow, base)
}

// TestHelperMesh is not a test: TestKilledRun runs it in a child process
// that starts a mesh and is then killed.
func TestHelperMesh(t *testing.T) {
	if os.Getenv("ROOTLINE_MESH_HELPER") != "1" {
		t.Skip("helper process of TestKilledRun")
	}
	// An exposed address leaves gateway rules behind when the run is killed.
	m := startMesh(t, context.Background(), Options{Mode: ModePod, EnvoyBin: os.Getenv("ROOTLINE_ENVOY"), Prefix: "rltk", Subnet: "10.77.93.0/24",
		Expose: []string{"127.0.0.1:9"}})
	fmt.Println("ready", m.EntryURL())
	time.Sleep(time.Minute)
}

// TestKilledRun kills a process running a mesh and checks that another
// Start with its prefix is refused while it lives and cleans up after it.
func TestKilledRun(t *testing.T) {
	requireRoot(t)
	envoy := requireEnvoy(t)
	standin(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMesh$", "-test.v")
	cmd.Env = append(os.Environ(), "ROOTLINE_MESH_HELPER=1", "ROOTLINE_ENVOY="+envoy)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		var acc string
		for {
			n, err := out.Read(b)
			acc += string(b[:n])
			if i := strings.Index(acc, "ready "); i >= 0 && strings.Contains(acc[i:], "\n") {
				ready <- strings.TrimSpace(strings.SplitN(acc[i+6:], "\n", 2)[0])
				io.Copy(io.Discard, out)
				return
			}
			if err != nil {
				close(ready)
				return
			}
		}
	}()
	var entry string
	select {
	case entry = <-ready:
	case <-time.After(60 * time.Second):
	}
	if entry == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper mesh did not start")
	}
	if body, _ := get(t, entry); body != "a(b(c()))" {
		t.Errorf("helper mesh answered %q", body)
	}
	bin := standin(t)
	opts := Options{Mode: ModePod, EnvoyBin: envoy, Prefix: "rltk", Subnet: "10.77.93.0/24",
		ServiceCmd: func(Service) []string { return []string{bin} }}
	if _, err := Start(context.Background(), chain(), opts); !errors.Is(err, ErrBusy) {
		t.Errorf("Start beside a live mesh: %v, want ErrBusy", err)
	}
	var procs []int
	for _, p := range strings.Fields(run1("pgrep", "-f", "standin|envoy")) {
		var pid int
		fmt.Sscan(p, &pid)
		if strings.Contains(run1("ip", "netns", "identify", p), "rltk-") {
			procs = append(procs, pid)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !strings.Contains(run1("ip", "netns", "list"), "rltk-") {
		t.Fatal("the killed run left no namespace: nothing to test")
	}
	if !strings.Contains(run1("iptables-save", "-t", "nat"), gatewayChain("rltk")) {
		t.Error("the killed run left no gateway rules: their cleanup is not tested")
	}
	m, err := Start(context.Background(), chain(), opts)
	if err != nil {
		t.Fatalf("Start after a killed run: %v", err)
	}
	if body, _ := get(t, m.EntryURL()); body != "a(b(c()))" {
		t.Errorf("new mesh answered %q", body)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	assertClean(t, "rltk")
	for _, pid := range procs {
		if alive(pid) {
			t.Errorf("process %d of the killed run still runs", pid)
		}
	}
	if len(procs) == 0 {
		t.Error("found no process of the helper's namespaces")
	}
}

// alive reports whether pid runs, waiting up to 3 s for a dying process
// (killed processes are reaped by init, not at once).
func alive(pid int) bool {
	for range 150 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 && strings.HasPrefix(s[i+1:], " Z") {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func run1(argv ...string) string {
	out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out)
}

// TestStopProcsKillsStubborn stops processes that ignore SIGTERM and a
// wrapper's child, within the grace period plus a little.
func TestStopProcsKillsStubborn(t *testing.T) {
	m := &Mesh{dir: t.TempDir(), log: slog.New(slog.DiscardHandler), opts: Options{Prefix: "rltq"}}
	defer clearPIDs("rltq")
	var procs []*proc
	for i := range 2 {
		p, err := m.spawn(fmt.Sprintf("stubborn%d", i), "", []string{"sh", "-c", `trap "" TERM; sleep 100 & wait; wait`}, os.Environ(), nil, false)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	time.Sleep(100 * time.Millisecond)
	var pids []int
	for _, p := range procs {
		pids = append(pids, processTree(p.pid())...)
	}
	start := time.Now()
	stopProcs(procs)
	if d := time.Since(start); d > 10*time.Second { // 3 s grace, 3 s for the group to go
		t.Errorf("stopProcs took %v", d)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived", pid)
		}
	}
	if len(pids) < 4 {
		t.Errorf("processes %v, want shells and their sleeps", pids)
	}
}

// runDelay is the time pid's threads have waited in a run queue
// (/proc/PID/task/*/schedstat, second field).
func runDelay(t *testing.T, pid int) time.Duration {
	t.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if len(files) == 0 {
		t.Fatalf("no threads of pid %d", pid)
	}
	var sum int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		if fs := strings.Fields(string(b)); len(fs) >= 2 {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			sum += v
		}
	}
	return time.Duration(sum)
}
