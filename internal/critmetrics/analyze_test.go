package critmetrics

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/store"
)

// synth builds the stored series the agent would push for one container:
// per interval i a number of events and their values, made cumulative.
type synth struct {
	service, container string
	t0                 time.Time
	step               time.Duration
	rng                *rand.Rand
	out                []store.MetricSeries
}

// hist adds a histogram metric whose events per interval are count(i) with
// mean value mean(i) (seconds or bytes), spread over two log2 buckets.
func (s *synth) hist(mt kmetrics.Metric, n int, count, mean func(i int) float64) {
	bounds := make([]float64, 40)
	for b := range bounds {
		bounds[b] = math.Ldexp(1, b-30) // 2^-30 … 2^9
		if mt.Unit() == kmetrics.Bytes {
			bounds[b] = math.Ldexp(1, b)
		}
	}
	ser := store.MetricSeries{Name: mt.ExportName(), Service: s.service, Kind: store.MetricHistogram,
		Labels: map[string]string{ContainerLabel: s.container}}
	var cnt uint64
	var sum float64
	buckets := make([]uint64, len(bounds)+1)
	for i := range n + 1 {
		if i > 0 {
			c := uint64(math.Max(0, math.Round(count(i))))
			m := mean(i)
			cnt += c
			sum += float64(c) * m
			b := 0
			for b < len(bounds) && bounds[b] < m {
				b++
			}
			buckets[b] += c
		}
		// As the agent does (kmetrics.Bounds), the point's bounds stop at
		// its highest non-empty bucket, so they grow as larger values come.
		top := len(buckets) - 1
		for top > 0 && buckets[top] == 0 {
			top--
		}
		top = min(top, len(bounds)-1)
		ser.Points = append(ser.Points, store.MetricPoint{StartTime: s.t0.UnixNano(), Time: s.t0.Add(time.Duration(i) * s.step).UnixNano(),
			Count: cnt, Sum: sum, Bounds: slices.Clone(bounds[:top+1]), Buckets: append(slices.Clone(buckets[:top+1]), 0)})
	}
	s.out = append(s.out, ser)
}

func (s *synth) counter(mt kmetrics.Metric, n int, rate func(i int) float64) {
	ser := store.MetricSeries{Name: mt.ExportName(), Service: s.service, Kind: store.MetricSum,
		Labels: map[string]string{ContainerLabel: s.container}}
	var v float64
	for i := range n + 1 {
		if i > 0 {
			v += math.Round(rate(i) * s.step.Seconds())
		}
		ser.Points = append(ser.Points, store.MetricPoint{StartTime: s.t0.UnixNano(), Time: s.t0.Add(time.Duration(i) * s.step).UnixNano(), Value: v})
	}
	s.out = append(s.out, ser)
}

// viperProbeLike is a service whose CPU load ramps up and down with a burst
// (a CPU-bound job of its own) while its clients send requests in on/off
// phases: the scheduler metrics follow the load, the TCP metrics the request
// rate, TLB flushes and disk their own rhythms; page faults never happen.
// The two drivers must differ in shape, not only in time: SBD aligns shifted
// copies, so a request rate that merely lagged the load would rightly share
// its cluster. Event rates make runq expensive and tcp_send_bytes cheap.
func viperProbeLike(service, container string, n int, seed uint64) []store.MetricSeries {
	s := &synth{service: service, container: container, t0: time.Unix(1_800_000_000, 0), step: 5 * time.Second, rng: rand.New(rand.NewPCG(seed, 1))}
	load := func(i int) float64 {
		x := float64(i) / float64(n)
		l := math.Min(x, 1-x) * 3
		if math.Abs(x-0.6) < 0.08 {
			l += 0.6
		}
		return math.Min(l, 1.6)
	}
	rate := func(i int) float64 {
		if (i/(n/4))%2 == 0 {
			return 1
		}
		return 0.3
	}
	noise := func(a float64) float64 { return 1 + a*s.rng.NormFloat64() }
	s.hist(kmetrics.RunqLatency, n, func(i int) float64 { return 3000 * (0.2 + load(i)) }, func(i int) float64 { return 1e-5 * math.Exp(2*load(i)) * noise(0.03) })
	s.hist(kmetrics.OnCPU, n, func(i int) float64 { return 2500 * (0.2 + load(i)) * noise(0.02) }, func(i int) float64 { return 2e-4 * (0.5 + load(i)) * noise(0.03) })
	s.hist(kmetrics.TCPSendBytes, n, func(i int) float64 { return 400 * rate(i) * noise(0.02) }, func(i int) float64 { return 900 })
	s.hist(kmetrics.TCPRecvBytes, n, func(i int) float64 { return 380 * rate(i) * noise(0.02) }, func(i int) float64 { return 700 })
	s.counter(kmetrics.TLBFlushes, n, func(i int) float64 {
		if i%9 == 0 {
			return 200 * noise(0.05)
		}
		return 5 * noise(0.05)
	})
	s.hist(kmetrics.DiskIOLatency, n, func(i int) float64 { return 3 }, func(i int) float64 { return 2e-3 * (1.5 + math.Sin(float64(i)/4)) * noise(0.02) })
	s.counter(kmetrics.PageFaultsUser, n, func(int) float64 { return 0 })
	return s.out
}

func TestViperProbeLike(t *testing.T) {
	series := viperProbeLike("cart", "cpu:/rootline-demo/cart", 120, 1)
	series = append(series, viperProbeLike("cart", "cpu:/rootline-demo/cart.sidecar", 120, 2)...)
	rep, err := Analyze(series, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Intervals != 120 || rep.Step != "5s" {
		t.Fatalf("grid: %d intervals of %s", rep.Intervals, rep.Step)
	}
	if len(rep.Services) != 1 {
		t.Fatalf("services: %+v", rep.Services)
	}
	s := rep.Services[0]
	if s.App == nil || s.Sidecar == nil {
		t.Fatalf("app %v sidecar %v", s.App, s.Sidecar)
	}
	g := s.App
	if !slices.Equal(g.Flat, []string{"page_faults_user"}) {
		t.Errorf("flat %v, want page_faults_user (no events)", g.Flat)
	}
	clusterOf := map[string]int{}
	for j, c := range g.Clusters {
		for _, m := range c.Members {
			clusterOf[m.Metric] = j
		}
	}
	// Metrics driven by one cause share a cluster; different causes do not.
	same := [][2]string{{"runq", "oncpu"}, {"tcp_send_bytes", "tcp_recv_bytes"}}
	for _, p := range same {
		if clusterOf[p[0]] != clusterOf[p[1]] {
			t.Errorf("%s and %s in different clusters: %+v", p[0], p[1], g.Clusters)
		}
	}
	if clusterOf["tlb_flushes"] == clusterOf["runq"] || clusterOf["disk_io_latency"] == clusterOf["runq"] {
		t.Errorf("unrelated shapes clustered with runq: %+v", g.Clusters)
	}
	// The cheapest member represents each cluster: runq (456 ns × ~3000/s)
	// costs more than oncpu (313 ns × ~2500/s); tcp_recv_bytes (55 ns ×
	// ~380/s) less than tcp_send_bytes.
	for _, want := range []string{"oncpu", "tcp_recv_bytes", "tlb_flushes", "disk_io_latency"} {
		if !slices.Contains(g.Critical, want) {
			t.Errorf("critical %v lacks %s (clusters %+v)", g.Critical, want, g.Clusters)
		}
	}
	if slices.Contains(g.Critical, "runq") || slices.Contains(g.Critical, "tcp_send_bytes") {
		t.Errorf("critical %v keeps the dearer member of a pair", g.Critical)
	}
	// The estimate sums the members' costs: keeping one member per cluster
	// costs less than keeping them all.
	var all float64
	for _, m := range g.Metrics {
		all += m.CostNsPerSecond
	}
	if math.Abs(g.CostAllNsPerSecond-all) > 1e-6*all || g.CostCriticalNsPerSecond <= 0 || g.CostCriticalNsPerSecond >= g.CostAllNsPerSecond {
		t.Errorf("estimated cost: all %g (sum %g), critical %g", g.CostAllNsPerSecond, all, g.CostCriticalNsPerSecond)
	}
	if len(g.Critical)+len(g.Off) != len(kmetrics.Metrics()) {
		t.Errorf("critical %v + off %v do not cover every metric", g.Critical, g.Off)
	}
	// The config turns the critical metrics on and the rest off, per container.
	var on, off int
	for _, r := range rep.AgentConfig {
		if r.Container == "" || r.Enabled == nil {
			t.Fatalf("request %+v", r)
		}
		if *r.Enabled {
			on++
			if !slices.Equal(r.Metrics, g.Critical) && !slices.Equal(r.Metrics, s.Sidecar.Critical) {
				t.Errorf("enable request %+v", r)
			}
		} else {
			off++
		}
	}
	if on != 2 || off != 2 {
		t.Errorf("agent config: %d enable, %d disable requests, want 2 and 2", on, off)
	}
	// KS: the sidecar here is another draw of the same process — the rates
	// of tcp_send_bytes are the same distribution; every histogram is
	// compared, so is every counter with events on both sides.
	if len(s.KS) == 0 {
		t.Fatalf("no KS tests: %s", s.KSNote)
	}
	for _, k := range s.KS {
		if k.Metric == "tcp_send_bytes" && k.Different {
			t.Errorf("same-process tcp_send_bytes judged different: %+v", k)
		}
	}
	var buf bytes.Buffer
	rep.WriteSummary(&buf)
	if !strings.Contains(buf.String(), "critical: ") || !strings.Contains(buf.String(), "cart") {
		t.Errorf("summary:\n%s", buf.String())
	}
}

func TestKSDetectsDifferentSidecar(t *testing.T) {
	series := viperProbeLike("api", "cpu:/rootline-demo/api", 60, 3)
	side := &synth{service: "api", container: "cpu:/rootline-demo/api.sidecar", t0: time.Unix(1_800_000_000, 0), step: 5 * time.Second}
	// The sidecar waits ten times longer in the run queue.
	side.hist(kmetrics.RunqLatency, 60, func(int) float64 { return 500 }, func(int) float64 { return 4e-4 })
	series = append(series, side.out...)
	rep, err := Analyze(series, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, k := range rep.Services[0].KS {
		if k.Metric == "runq" {
			found = true
			if !k.Different || k.P > 1e-6 {
				t.Errorf("runq service vs sidecar: %+v", k)
			}
		}
	}
	if !found {
		t.Error("no runq KS test")
	}
}

// TestSidecarByContainerName: in a Kubernetes pod the containers' cgroups
// are named by id; the sidecar is the container the agent labels
// container.name=envoy (from its OTEL_RESOURCE_ATTRIBUTES), and is paired
// with its service's app containers for the KS tests.
func TestSidecarByContainerName(t *testing.T) {
	series := viperProbeLike("api", "/kubepods/pod7/3f2a", 60, 3)
	side := &synth{service: "api", container: "/kubepods/pod7/9c1e", t0: time.Unix(1_800_000_000, 0), step: 5 * time.Second}
	side.hist(kmetrics.RunqLatency, 60, func(int) float64 { return 500 }, func(int) float64 { return 4e-4 })
	for i := range side.out {
		side.out[i].Labels[ContainerNameLabel] = "envoy"
	}
	series = append(series, side.out...)
	rep, err := Analyze(series, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Services[0]
	if s.Sidecar == nil || !slices.Equal(s.Sidecar.Containers, []string{"/kubepods/pod7/9c1e"}) ||
		s.App == nil || !slices.Equal(s.App.Containers, []string{"/kubepods/pod7/3f2a"}) {
		t.Fatalf("app %+v sidecar %+v", s.App, s.Sidecar)
	}
	if len(s.KS) != 1 || s.KS[0].Metric != "runq" || !s.KS[0].Different {
		t.Errorf("KS %+v (%s)", s.KS, s.KSNote)
	}
	tl, err := BuildTimeline(series, TimelineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tl.Containers {
		if c.Sidecar != (c.Container == "/kubepods/pod7/9c1e") {
			t.Errorf("timeline container %s sidecar=%v", c.Container, c.Sidecar)
		}
	}
}

func TestCounterResetAndGaps(t *testing.T) {
	// A counter that restarts (agent restart) keeps counting; a container
	// that appears late adds nothing before it exists.
	t0 := time.Unix(1_800_000_000, 0)
	s := store.MetricSeries{Name: kmetrics.TLBFlushes.ExportName(), Service: "x", Kind: store.MetricSum,
		Labels: map[string]string{ContainerLabel: "/x"}}
	vals := []float64{0, 10, 20, 30, 5, 15, 25, 35, 45, 55, 65}
	for i, v := range vals {
		start := t0
		if i >= 4 {
			start = t0.Add(20 * time.Second)
		}
		s.Points = append(s.Points, store.MetricPoint{StartTime: start.UnixNano(), Time: t0.Add(time.Duration(i) * 5 * time.Second).UnixNano(), Value: v})
	}
	rep, err := Analyze([]store.MetricSeries{s}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Services[0].App.Metrics[0]
	want := []float64{2, 2, 2, 1, 2, 2, 2, 2, 2, 2} // 5 events over the reset interval
	for i, v := range m.Values {
		if math.Abs(v-want[i]) > 1e-9 {
			t.Fatalf("rates %v, want %v", m.Values, want)
		}
	}
}

func TestContainerStartsMidInterval(t *testing.T) {
	// Another container sets the grid (0, 10, …, 80 s); this one's first
	// push is at 14 s, a burst of 30 events comes before its 16 s push and
	// it is idle after. The burst lies in the interval [10, 20) s, of which
	// the series covers only the end: it counts there, not nowhere.
	t0 := time.Unix(1_800_000_000, 0)
	grid := &synth{service: "other", container: "/other", t0: t0, step: 10 * time.Second}
	grid.counter(kmetrics.TLBFlushes, 8, func(i int) float64 { return float64(i % 3) })
	late := store.MetricSeries{Name: kmetrics.TLBFlushes.ExportName(), Service: "late", Kind: store.MetricSum,
		Labels: map[string]string{ContainerLabel: "/late"}}
	for i, sec := range []int{14, 15, 16, 30, 50, 80} {
		v := 30.0
		if i < 2 {
			v = 2
		}
		late.Points = append(late.Points, store.MetricPoint{StartTime: t0.UnixNano(), Time: t0.Add(time.Duration(sec) * time.Second).UnixNano(), Value: v})
	}
	rep, err := Analyze(append(grid.out, late), Options{Step: 10 * time.Second, Services: []string{"late"}})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Services[0].App.Metrics[0]
	want := []float64{2.8, 2.8, 0, 0, 0, 0, 0, 0} // 28 events in [10, 20) s; the first interval takes the first value
	if len(m.Values) != len(want) {
		t.Fatalf("rates %v, want %v", m.Values, want)
	}
	for i, v := range m.Values {
		if math.Abs(v-want[i]) > 1e-9 {
			t.Fatalf("rates %v, want %v", m.Values, want)
		}
	}
	if got := rep.Critical["late"]; len(got) != 1 || got[0] != kmetrics.TLBFlushes.String() {
		t.Fatalf("critical %v, want the burst's metric", got)
	}
}

func TestErrors(t *testing.T) {
	if _, err := Analyze(nil, Options{}); !errors.Is(err, ErrNoData) {
		t.Errorf("no series: %v", err)
	}
	short := viperProbeLike("x", "/x", 4, 1)
	if _, err := Analyze(short, Options{}); !errors.Is(err, ErrTooShort) {
		t.Errorf("4 intervals: %v", err)
	}
	other := []store.MetricSeries{{Name: "http_requests_total", Points: []store.MetricPoint{{Time: 1}, {Time: 2}}}}
	if _, err := Analyze(other, Options{}); !errors.Is(err, ErrNoData) {
		t.Errorf("no kernel metrics: %v", err)
	}
}

func TestCosts(t *testing.T) {
	c := DefaultCosts()
	for _, mt := range kmetrics.Metrics() {
		if (c[mt.String()].NsPerEvent <= 0) != mt.FromCgroup() || c[mt.String()].Source == "" {
			t.Errorf("%s: %+v", mt, c[mt.String()])
		}
	}
	if err := c.ParseCosts("runq=10, oncpu=20"); err != nil {
		t.Fatal(err)
	}
	if c["runq"].NsPerEvent != 10 || c["oncpu"].NsPerEvent != 20 {
		t.Errorf("overrides not applied: %+v %+v", c["runq"], c["oncpu"])
	}
	for _, bad := range []string{"nosuch=1", "runq=x", "runq=-1", "runq"} {
		if err := DefaultCosts().ParseCosts(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestContainerUnderOneService: the series a container had before the agent
// knew its service join the service's, so the container is analysed (and
// configured) once.
func TestContainerUnderOneService(t *testing.T) {
	series := viperProbeLike("cart", "/cart", 60, 4)
	for i := range series {
		early := series[i]
		early.Service = "unknown"
		early.Points = early.Points[:10]
		series[i].Points = series[i].Points[9:]
		series = append(series, early)
	}
	rep, err := Analyze(series, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Services) != 1 || rep.Services[0].Name != "cart" {
		t.Fatalf("services %+v", rep.Services)
	}
	if rep.Intervals != 60 {
		t.Errorf("%d intervals, want 60", rep.Intervals)
	}
	seen := map[string]int{}
	for _, r := range rep.AgentConfig {
		seen[r.Container]++
	}
	if len(seen) != 1 || seen["/cart"] != 2 {
		t.Errorf("config requests per container: %v", seen)
	}
}
