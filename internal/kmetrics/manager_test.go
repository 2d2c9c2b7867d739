package kmetrics

import (
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// fakeKernel records what the manager writes and serves a canned snapshot.
type fakeKernel struct {
	dflt     Entry
	gen      uint64
	v1       bool
	keys     []uint64
	entries  map[uint64]Entry
	attached programSet
	snap     Snapshot
	closed   bool
	failSet  error
}

func newFake() *fakeKernel { return &fakeKernel{entries: map[uint64]Entry{}} }

func (f *fakeKernel) SetGlobals(d Entry, gen uint64, keys []uint64) error {
	f.dflt, f.gen, f.keys, f.v1 = d, gen, keys, false
	for _, k := range keys {
		f.v1 = f.v1 || k&V1Bit != 0
	}
	return nil
}
func (f *fakeKernel) SetEntry(k uint64, e Entry) error {
	if f.failSet != nil {
		return f.failSet
	}
	f.entries[k] = e
	return nil
}
func (f *fakeKernel) DeleteEntry(k uint64) error     { delete(f.entries, k); return nil }
func (f *fakeKernel) SetAttached(s programSet) error { f.attached = s; return nil }
func (f *fakeKernel) Read() (Snapshot, error) {
	return Snapshot{Samples: slices.Clone(f.snap.Samples), Drops: slices.Clone(f.snap.Drops)}, nil
}
func (f *fakeKernel) Close() error { f.closed = true; return nil }
func (f *fakeKernel) Forget(keys map[uint64]bool) error {
	f.snap.Samples = slices.DeleteFunc(f.snap.Samples, func(s Sample) bool { return keys[s.Key] })
	f.snap.Drops = slices.DeleteFunc(f.snap.Drops, func(d DropSample) bool { return keys[d.Key] })
	return nil
}

// fakeCgroups builds a fake hierarchy: dirs under tmp standing for the v2
// and v1 cpu mounts, and a /proc with cgroup files.
func fakeCgroups(t *testing.T) (Cgroups, map[string]uint64) {
	t.Helper()
	tmp := t.TempDir()
	cg := Cgroups{V2Root: filepath.Join(tmp, "unified"), V1CPURoot: filepath.Join(tmp, "cpu"), ProcRoot: filepath.Join(tmp, "proc")}
	keys := map[string]uint64{}
	for _, d := range []string{"unified/app", "unified/db", "cpu/batch"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
		ino, err := inode(filepath.Join(tmp, d))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(d, "cpu/") {
			ino |= V1Bit
		}
		keys[d] = ino
	}
	for pid, content := range map[string]string{
		"10": "1:cpu:/\n0::/app\n",
		"11": "1:cpu:/\n0::/app\n",
		"20": "1:cpu,cpuacct:/batch\n0::/\n",
		"30": "1:cpu:/\n0::/db\n",
	} {
		dir := filepath.Join(cg.ProcRoot, pid)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644)
	}
	os.WriteFile(filepath.Join(cg.V2Root, "db", "cgroup.procs"), []byte("30\n"), 0o644)
	os.WriteFile(filepath.Join(cg.ProcRoot, "30", "environ"), []byte("PATH=/bin\x00OTEL_RESOURCE_ATTRIBUTES=a=b,service.name=postgres\x00"), 0o644)
	return cg, keys
}

func newTestManager(t *testing.T) (*Manager, *fakeKernel, map[string]uint64) {
	t.Helper()
	cg, keys := fakeCgroups(t)
	k := newFake()
	m, err := New(k, Options{Cgroups: cg, Targets: func() []Target {
		return []Target{{PID: 10, Service: "checkout"}, {PID: 11, Service: "checkout"}, {PID: 20, Service: "batch"}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m, k, keys
}

func ptr[T any](v T) *T { return &v }

func TestConfigureLiveAttachesOnlyWhatIsWanted(t *testing.T) {
	m, k, keys := newTestManager(t)
	if k.attached != 0 || k.gen != 1 {
		t.Fatalf("fresh manager: attached %v gen %d", k.attached.names(), k.gen)
	}
	st, err := m.Configure(ConfigRequest{Service: "checkout", Metrics: []string{"runq"}, Enabled: ptr(true), Rate: ptr(uint32(4))})
	if err != nil {
		t.Fatal(err)
	}
	e := k.entries[keys["unified/app"]]
	if !e.Has(RunqLatency) || e.Rate[RunqLatency] != 4 || e.Enabled != 1<<RunqLatency {
		t.Errorf("entry of app = %+v", e)
	}
	want := []string{"km_sched_switch", "km_sched_wakeup", "km_sched_wakeup_new"}
	if got := strings.Join(st.Attached, ","); got != strings.Join(want, ",") {
		t.Errorf("attached %s, want %v", got, want)
	}
	if k.gen != 2 {
		t.Errorf("gen %d, want 2 (bumped on change)", k.gen)
	}

	// The v1 container of a process whose v2 cgroup is the root.
	if _, err := m.Configure(ConfigRequest{PID: 20, Metrics: []string{"tcp_send_bytes", "dns_latency"}, Enabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.entries[keys["cpu/batch"]]; !ok || !k.v1 {
		t.Errorf("v1 entry missing or v1 flag unset: %v %v", k.entries, k.v1)
	}
	if !k.attached.has(progSockSend) || !k.attached.has(progSockRecv) {
		t.Errorf("sock programs not attached: %v", k.attached.names())
	}

	// Disabling runq detaches the scheduler programs, nothing else.
	if _, err := m.Configure(ConfigRequest{Container: "/app", Metrics: []string{"runq"}, Enabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if k.attached.has(progSchedSwitch) || !k.attached.has(progSockSend) {
		t.Errorf("after disabling runq: %v", k.attached.names())
	}
	// Reset removes the entry; the default (off) applies again.
	if _, err := m.Configure(ConfigRequest{Container: "cpu:/batch", Reset: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.entries[keys["cpu/batch"]]; ok || k.v1 || k.attached != 0 {
		t.Errorf("after reset: entries %v v1 %v attached %v", k.entries, k.v1, k.attached.names())
	}
	// The default entry enables a metric for every container.
	st, err = m.Configure(ConfigRequest{Container: "default", Metrics: []string{"page_faults_user"}, Enabled: ptr(true), Rate: ptr(uint32(0))})
	if err != nil {
		t.Fatal(err)
	}
	if !k.dflt.Has(PageFaultsUser) || k.dflt.Rate[PageFaultsUser] != 1 || !st.Default["page_faults_user"].Enabled {
		t.Errorf("default = %+v", k.dflt)
	}
	if strings.Join(st.Attached, ",") != "km_page_fault_user" {
		t.Errorf("attached %v", st.Attached)
	}
	// A new container entry starts as a copy of the default.
	m.Configure(ConfigRequest{Container: "/db", Metrics: []string{"oncpu"}, Enabled: ptr(true)})
	if e := k.entries[keys["unified/db"]]; !e.Has(PageFaultsUser) || !e.Has(OnCPU) {
		t.Errorf("db entry %+v does not include the default", e)
	}
}

func TestConfigureRejects(t *testing.T) {
	m, k, _ := newTestManager(t)
	for _, tc := range []struct {
		name string
		req  ConfigRequest
	}{
		{"no selector", ConfigRequest{Enabled: ptr(true)}},
		{"two selectors", ConfigRequest{Container: "/app", PID: 10, Enabled: ptr(true)}},
		{"unknown metric", ConfigRequest{Container: "/app", Metrics: []string{"cache_ratio"}, Enabled: ptr(true)}},
		{"no change", ConfigRequest{Container: "/app"}},
		{"unknown service", ConfigRequest{Service: "nope", Enabled: ptr(true)}},
		{"missing cgroup", ConfigRequest{Container: "/nope", Enabled: ptr(true)}},
		{"reset default", ConfigRequest{Container: "default", Reset: true}},
		{"huge rate", ConfigRequest{Container: "/app", Rate: ptr(uint32(1 << 30))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := m.Configure(tc.req); !errors.Is(err, ErrBadRequest) {
				t.Errorf("err = %v, want ErrBadRequest", err)
			}
		})
	}
	if len(k.entries) != 0 {
		t.Errorf("rejected requests wrote %v", k.entries)
	}
}

func TestStateListsContainersWithServices(t *testing.T) {
	m, _, keys := newTestManager(t)
	m.Configure(ConfigRequest{Container: "/db", Metrics: []string{"oncpu"}, Enabled: ptr(true)})
	st := m.State()
	got := map[string]ContainerState{}
	for _, c := range st.Containers {
		got[c.Name] = c
	}
	if c := got["/app"]; c.Key != keys["unified/app"] || strings.Join(c.Services, ",") != "checkout" || len(c.PIDs) != 2 || c.Config != nil {
		t.Errorf("/app = %+v", c)
	}
	if c := got["cpu:/batch"]; !c.V1 || strings.Join(c.Services, ",") != "batch" {
		t.Errorf("cpu:/batch = %+v", c)
	}
	// /db has no target: its service comes from its members' environment.
	if c := got["/db"]; strings.Join(c.Services, ",") != "postgres" || !c.Config["oncpu"].Enabled {
		t.Errorf("/db = %+v", c)
	}
	if len(st.Metrics) != int(numMetrics) {
		t.Errorf("metrics %v", st.Metrics)
	}
}

func hist(values ...uint64) (h [NumBuckets]uint64, count, sum uint64) {
	for _, v := range values {
		b := 0
		for v>>(b+1) != 0 {
			b++
		}
		h[b]++
		count++
		sum += v
	}
	return
}

func TestBounds(t *testing.T) {
	h, _, _ := hist(1, 3, 3, 1000)
	upper, cum := Bounds(DiskIOBytes, h)
	if len(upper) != 10 || upper[0] != 2 || upper[1] != 4 || upper[9] != 1024 {
		t.Errorf("upper = %v", upper)
	}
	if cum[0] != 1 || cum[1] != 3 || cum[8] != 3 || cum[9] != 4 {
		t.Errorf("cumulative = %v", cum)
	}
	upper, _ = Bounds(OnCPU, h)
	if upper[9] != 1024e-9 {
		t.Errorf("ns bounds not in seconds: %v", upper[9])
	}
	if u, c := Bounds(OnCPU, [NumBuckets]uint64{}); u != nil || c != nil {
		t.Errorf("empty histogram: %v %v", u, c)
	}
}

func withSnapshot(t *testing.T) (*Manager, map[string]uint64) {
	m, k, keys := newTestManager(t)
	h, n, s := hist(1500, 3000, 2_000_000)
	k.snap = Snapshot{
		Samples: []Sample{
			{Key: keys["unified/app"], Metric: RunqLatency, Count: n, Sum: s, Buckets: h},
			{Key: keys["cpu/batch"], Metric: PageFaultsUser, Count: 42, Sum: 42},
			{Key: keys["unified/app"], Metric: Drops, Count: 3, Sum: 3},
			{Key: 0, Metric: TLBFlushes, Count: 7, Sum: 100},
		},
		Drops: []DropSample{{Key: keys["unified/app"], Reason: 2, Count: 3}},
	}
	m.reasons = map[uint32]string{2: "not_specified"}
	return m, keys
}

func TestPrometheusExposition(t *testing.T) {
	m, keys := withSnapshot(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	app := formatID(keys["unified/app"])
	batch := formatID(keys["cpu/batch"] &^ V1Bit)
	want := `
# HELP rootline_kernel_page_faults_user_total Page faults taken in user mode (exceptions:page_fault_user).
# TYPE rootline_kernel_page_faults_user_total counter
rootline_kernel_page_faults_user_total{cgroup_id="` + batch + `",container="cpu:/batch",service="batch"} 42
# HELP rootline_kernel_runq_latency_seconds Run-queue latency: wakeup or preemption to switch-in.
# TYPE rootline_kernel_runq_latency_seconds histogram
`
	var sb strings.Builder
	sb.WriteString(want)
	for i := range 21 {
		le := strconv.FormatFloat(math.Ldexp(1, i+1)*1e-9, 'g', -1, 64)
		c := 0
		switch {
		case i >= 20:
			c = 3
		case i >= 11:
			c = 2
		case i >= 10:
			c = 1
		}
		fmt.Fprintf(&sb, "rootline_kernel_runq_latency_seconds_bucket{cgroup_id=%q,container=\"/app\",service=\"checkout\",le=%q} %d\n", app, le, c)
	}
	sb.WriteString(`rootline_kernel_runq_latency_seconds_bucket{cgroup_id="` + app + `",container="/app",service="checkout",le="+Inf"} 3
rootline_kernel_runq_latency_seconds_sum{cgroup_id="` + app + `",container="/app",service="checkout"} 0.0020045
rootline_kernel_runq_latency_seconds_count{cgroup_id="` + app + `",container="/app",service="checkout"} 3
# HELP rootline_kernel_skb_drops_total Packets freed with a drop reason (skb:kfree_skb), by the socket's cgroup and reason.
# TYPE rootline_kernel_skb_drops_total counter
rootline_kernel_skb_drops_total{cgroup_id="` + app + `",container="/app",reason="not_specified",service="checkout"} 3
# HELP rootline_kernel_tlb_flushes_total TLB flushes (tlb:tlb_flush) in the container's context.
# TYPE rootline_kernel_tlb_flushes_total counter
rootline_kernel_tlb_flushes_total{cgroup_id="0",container="none",service=""} 7
`)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if got := rec.Body.String(); strings.TrimSpace(got) != strings.TrimSpace(sb.String()) {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, sb.String())
	}
}

func TestToOTLP(t *testing.T) {
	m, _ := withSnapshot(t)
	series, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(100, 0)
	md := ToOTLP(series, "node1", start, start.Add(time.Minute))
	type found struct {
		svc, container string
		m              pmetric.Metric
	}
	byName := map[string]found{}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		attrs := rms.At(i).Resource().Attributes()
		svc, _ := attrs.Get("service.name")
		ct, _ := attrs.Get("container")
		if h, _ := attrs.Get("host.name"); h.Str() != "node1" {
			t.Errorf("host.name = %q", h.Str())
		}
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			byName[ms.At(j).Name()] = found{svc.Str(), ct.Str(), ms.At(j)}
		}
	}
	rq := byName["rootline_kernel_runq_latency_seconds"]
	if rq.svc != "checkout" || rq.container != "/app" || rq.m.Unit() != "s" {
		t.Fatalf("runq: %+v", rq)
	}
	dp := rq.m.Histogram().DataPoints().At(0)
	if dp.Count() != 3 || dp.ExplicitBounds().Len() != 21 || dp.BucketCounts().Len() != 22 || dp.BucketCounts().At(10) != 1 ||
		dp.BucketCounts().At(20) != 1 || !dp.StartTimestamp().AsTime().Equal(start) {
		t.Errorf("runq point: count %d bounds %v buckets %v", dp.Count(), dp.ExplicitBounds().AsRaw(), dp.BucketCounts().AsRaw())
	}
	if d := byName["rootline_kernel_skb_drops_total"]; d.m.Sum().DataPoints().At(0).IntValue() != 3 || !d.m.Sum().IsMonotonic() {
		t.Errorf("drops: %+v", d)
	} else if r, _ := d.m.Sum().DataPoints().At(0).Attributes().Get("reason"); r.Str() != "not_specified" {
		t.Errorf("drop reason %q", r.Str())
	}
	if tl := byName["rootline_kernel_tlb_flushes_total"]; tl.svc != "unknown" || tl.container != "none" {
		t.Errorf("tlb: %+v", tl)
	}
}

func TestParsers(t *testing.T) {
	v2, v1, ok := parseProcCgroup("12:cpu,cpuacct:/kube/pod1\n0::/kubepods/pod1\n")
	if !ok || v2 != "/kubepods/pod1" || v1 != "/kube/pod1" {
		t.Errorf("parseProcCgroup = %q %q %v", v2, v1, ok)
	}
	mi := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	if a, b := parseMountinfo(strings.NewReader(mi)); a != "/sys/fs/cgroup/unified" || b != "/sys/fs/cgroup/cpu" {
		t.Errorf("parseMountinfo = %q %q", a, b)
	}
	for env, want := range map[string]string{
		"A=1\x00OTEL_SERVICE_NAME=cart\x00":                                  "cart",
		"OTEL_RESOURCE_ATTRIBUTES=deployment=x, service.name=pay\x00":        "pay",
		"OTEL_SERVICE_NAME=a\x00OTEL_RESOURCE_ATTRIBUTES=service.name=b\x00": "a",
		"PATH=/bin": "",
	} {
		if got := serviceFromEnviron([]byte(env)); got != want {
			t.Errorf("serviceFromEnviron(%q) = %q, want %q", env, got, want)
		}
	}
	if ms, err := ParseMetrics("oncpu, runq,oncpu"); err != nil || len(ms) != 2 {
		t.Errorf("ParseMetrics = %v, %v", ms, err)
	}
	if ms, _ := ParseMetrics("all"); len(ms) != int(numMetrics) {
		t.Errorf("all = %v", ms)
	}
	// Every BPF metric needs at least one program, every program serves a
	// metric, and the metrics read from cgroup files need none.
	var all programSet
	for _, mt := range Metrics() {
		if (programsFor(1<<mt) == 0) != mt.FromCgroup() {
			t.Errorf("%s: programs %b", mt, programsFor(1<<mt))
		}
		all |= programsFor(1 << mt)
	}
	if all != 1<<numPrograms-1 {
		t.Errorf("programs without a metric: %b", all)
	}
}

func TestCloseClosesKernel(t *testing.T) {
	m, k, _ := newTestManager(t)
	if err := m.Close(); err != nil || !k.closed {
		t.Fatalf("close: %v %v", err, k.closed)
	}
	if _, err := m.Read(); err == nil {
		t.Error("Read after Close succeeded")
	}
}

func TestRemovedCgroupsAreForgotten(t *testing.T) {
	m, keys := withSnapshot(t)
	if _, err := m.Read(); err != nil { // resolves the names
		t.Fatal(err)
	}
	// Both cgroups go away (a cgroup created again under the same path gets
	// a new id, as kernfs ids carry a generation).
	for _, d := range []string{filepath.Join(m.cg.V2Root, "app"), filepath.Join(m.cg.V1CPURoot, "batch")} {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	series, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range series {
		if s.CgroupID == keys["unified/app"] || s.CgroupID == keys["cpu/batch"]&^V1Bit {
			t.Errorf("series of a removed cgroup kept: %+v", s)
		}
	}
	if len(series) != 1 || series[0].Container != "none" {
		t.Errorf("series = %+v", series)
	}
}

// TestSidecarContainer: a pod's sidecar has no target of the agent; its
// container takes its service and its name from its members' OpenTelemetry
// environment (as the OpenTelemetry operator sets it), and the OTLP
// resource says both, so its retransmissions count for the service as a
// container of its own.
func TestSidecarContainer(t *testing.T) {
	m, k, _ := newTestManager(t)
	dir := filepath.Join(m.cg.V2Root, "pod", "envoy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := inode(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("40\n"), 0o644)
	os.MkdirAll(filepath.Join(m.cg.ProcRoot, "40"), 0o755)
	os.WriteFile(filepath.Join(m.cg.ProcRoot, "40", "environ"),
		[]byte("PATH=/bin\x00OTEL_RESOURCE_ATTRIBUTES=service.name=checkout,k8s.container.name=envoy\x00"), 0o644)
	k.snap = Snapshot{Samples: []Sample{{Key: key, Metric: TCPRetransmits, Count: 5, Sum: 5}}}
	series, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 1 || series[0].Service != "checkout" || series[0].ContainerName != "envoy" || !series[0].K8s ||
		series[0].Container != "/pod/envoy" {
		t.Fatalf("series %+v", series)
	}
	attrs := ToOTLP(series, "n1", time.Unix(1, 0), time.Unix(2, 0)).ResourceMetrics().At(0).Resource().Attributes()
	for k, want := range map[string]string{"service.name": "checkout", "container": "/pod/envoy", "container.name": "envoy", "k8s.container.name": "envoy"} {
		if v, _ := attrs.Get(k); v.Str() != want {
			t.Errorf("resource %s = %q, want %q", k, v.Str(), want)
		}
	}
}

func TestOtelFromEnviron(t *testing.T) {
	for env, want := range map[string]otelEnv{
		"OTEL_RESOURCE_ATTRIBUTES=service.name=a,k8s.container.name=envoy\x00":            {service: "a", container: "envoy", k8s: true},
		"OTEL_RESOURCE_ATTRIBUTES=container.name=app, service.name=b\x00":                 {service: "b", container: "app"},
		"OTEL_SERVICE_NAME=c\x00OTEL_RESOURCE_ATTRIBUTES=container.name=x,service.name=d": {service: "c", container: "x"},
		"OTEL_RESOURCE_ATTRIBUTES=container.name=x,k8s.container.name=y\x00":              {container: "y", k8s: true},
		"OTEL_RESOURCE_ATTRIBUTES=container.name=\x00":                                    {},
	} {
		if got := otelFromEnviron([]byte(env)); got != want {
			t.Errorf("otelFromEnviron(%q) = %+v, want %+v", env, got, want)
		}
	}
}

// TestEnvReadAgain: a container whose members named nothing when first read
// (a member caught between its fork and its exec) is read again later.
func TestEnvReadAgain(t *testing.T) {
	m, _, _ := newTestManager(t)
	dir := filepath.Join(m.cg.V2Root, "pod2", "envoy")
	os.MkdirAll(dir, 0o755)
	key, _ := inode(dir)
	os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("41\n"), 0o644)
	os.MkdirAll(filepath.Join(m.cg.ProcRoot, "41"), 0o755)
	env := filepath.Join(m.cg.ProcRoot, "41", "environ")
	os.WriteFile(env, []byte("PATH=/bin\x00"), 0o644)
	c := Container{Key: key, Path: "/pod2/envoy"}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.envLocked(c); len(e.services) != 0 {
		t.Fatalf("first read %+v", e)
	}
	os.WriteFile(env, []byte("OTEL_RESOURCE_ATTRIBUTES=service.name=cart,k8s.container.name=envoy\x00"), 0o644)
	if e := m.envLocked(c); len(e.services) != 0 {
		t.Errorf("read again before envRetry: %+v", e)
	}
	e := m.envSvc[key]
	e.read = e.read.Add(-envRetry)
	m.envSvc[key] = e
	if e := m.envLocked(c); !slices.Equal(e.services, []string{"cart"}) || e.container != "envoy" {
		t.Errorf("after envRetry: %+v", e)
	}
}

// TestOnlyUnderCgroups: with Options.Only, Read reports the containers at or
// below those cgroup paths (not a sibling that shares the prefix's name)
// and those of the agent's targets (pid 20 in /batch), and no unnamed cgroup.
func TestOnlyUnderCgroups(t *testing.T) {
	cg, keys := fakeCgroups(t)
	k := newFake()
	m, err := New(k, Options{Cgroups: cg, Only: []string{"/app/"},
		Targets: func() []Target { return []Target{{PID: 20, Service: "batch"}} }})
	if err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Join(cg.V2Root, "application")
	if err := os.MkdirAll(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	sk, err := inode(sibling)
	if err != nil {
		t.Fatal(err)
	}
	k.snap = Snapshot{
		Samples: []Sample{{Key: keys["unified/app"], Metric: RunqLatency, Count: 1, Sum: 1},
			{Key: keys["unified/db"], Metric: RunqLatency, Count: 2, Sum: 2},
			{Key: sk, Metric: RunqLatency, Count: 3, Sum: 3},
			{Key: 0, Metric: RunqLatency, Count: 4, Sum: 4},
			{Key: keys["cpu/batch"], Metric: RunqLatency, Count: 7, Sum: 7}},
		Drops: []DropSample{{Key: keys["unified/app"], Reason: 2, Count: 5}, {Key: keys["unified/db"], Reason: 2, Count: 6}},
	}
	series, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range series {
		got = append(got, fmt.Sprintf("%s %s %d", s.Metric, s.Container, s.Count))
	}
	want := []string{"runq /app 1", "runq cpu:/batch 7", "drops /app 5"}
	if !slices.Equal(got, want) {
		t.Errorf("series %q, want %q", got, want)
	}
}

// TestCPUThrottledFromCgroupFiles: cpu_throttled comes from each known
// container's cpu.stat (v2 throttled_usec, v1 throttled_time), only where
// its config enables it and the cgroup has bandwidth statistics.
func TestCPUThrottledFromCgroupFiles(t *testing.T) {
	m, k, keys := newTestManager(t)
	write := func(rel, content string) {
		root := m.cg.V2Root
		if strings.HasPrefix(rel, "cpu/") {
			root = m.cg.V1CPURoot
		}
		if err := os.WriteFile(filepath.Join(root, strings.SplitN(rel, "/", 2)[1], "cpu.stat"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("unified/app", "usage_usec 900\nuser_usec 800\nsystem_usec 100\nnr_periods 50\nnr_throttled 7\nthrottled_usec 1500\nnr_bursts 0\nburst_usec 0\n")
	write("cpu/batch", "nr_periods 5\nnr_throttled 2\nthrottled_time 3000000\n")
	write("unified/db", "usage_usec 10\nuser_usec 5\nsystem_usec 5\n") // no cpu controller
	// web: a v2 cgroup without the cpu controller on a hybrid host; its
	// member's v1 cpu cgroup is batch's, whose quota counts.
	web := filepath.Join(m.cg.V2Root, "web")
	os.MkdirAll(web, 0o755)
	os.WriteFile(filepath.Join(web, "cgroup.procs"), []byte("40\n41\n"), 0o644)
	os.WriteFile(filepath.Join(web, "cpu.stat"), []byte("usage_usec 10\n"), 0o644)
	os.MkdirAll(filepath.Join(m.cg.ProcRoot, "40"), 0o755)
	os.WriteFile(filepath.Join(m.cg.ProcRoot, "40", "cgroup"), []byte("2:cpu,cpuacct:/batch\n0::/web\n"), 0o644)
	webKey, err := inode(web)
	if err != nil {
		t.Fatal(err)
	}
	// db and web are known through BPF samples; app and batch through the
	// targets.
	k.snap = Snapshot{Samples: []Sample{{Key: keys["unified/db"], Metric: PageFaultsUser, Count: 1, Sum: 1}, {Key: webKey, Metric: PageFaultsUser, Count: 1, Sum: 1}}}

	throttled := func() map[string]Series {
		all, err := m.Read()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Series{}
		for _, s := range all {
			if s.Metric == CPUThrottled {
				out[s.Container] = s
			}
		}
		return out
	}
	if got := throttled(); len(got) != 0 {
		t.Fatalf("cpu_throttled while disabled: %+v", got)
	}
	on := true
	if _, err := m.Configure(ConfigRequest{Container: "default", Metrics: []string{"cpu_throttled", "page_faults_user"}, Enabled: &on}); err != nil {
		t.Fatal(err)
	}
	if k.attached != 1<<progPageFaultUser {
		t.Errorf("attached %b: cpu_throttled needs no program", k.attached)
	}
	got := throttled()
	if s := got["/app"]; s.Count != 7 || s.Sum != 1_500_000 || s.Service != "checkout" || s.CgroupID != keys["unified/app"] {
		t.Errorf("/app: %+v", s)
	}
	if s := got["cpu:/batch"]; s.Count != 2 || s.Sum != 3_000_000 || s.Service != "batch" {
		t.Errorf("cpu:/batch: %+v", s)
	}
	if s := got["/web"]; s.Count != 2 || s.Sum != 3_000_000 || s.CgroupID != webKey {
		t.Errorf("/web (batch's v1 cpu cgroup): %+v", s)
	}
	if s, ok := got["/db"]; ok {
		t.Errorf("/db has no bandwidth statistics, got %+v", s)
	}

	// Exported in seconds.
	series, _ := m.Read()
	md := ToOTLP(series, "", time.Unix(1, 0), time.Unix(2, 0))
	var values []float64
	for i := range md.ResourceMetrics().Len() {
		ms := md.ResourceMetrics().At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if mt := ms.At(j); mt.Name() == "rootline_kernel_cpu_throttled_seconds_total" {
				if mt.Unit() != "s" || !mt.Sum().IsMonotonic() {
					t.Errorf("unit %q monotonic %v", mt.Unit(), mt.Sum().IsMonotonic())
				}
				values = append(values, mt.Sum().DataPoints().At(0).DoubleValue())
			}
		}
	}
	slices.Sort(values)
	if !slices.Equal(values, []float64{0.0015, 0.003, 0.003}) {
		t.Errorf("OTLP values %v, want [0.0015 0.003 0.003]", values)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := `rootline_kernel_cpu_throttled_seconds_total{cgroup_id="` + formatID(keys["unified/app"]) + `",container="/app",service="checkout"} 0.0015`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("exposition lacks %s:\n%s", want, rec.Body.String())
	}
}
