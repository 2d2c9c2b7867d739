// Package critmetrics finds, offline, the few per-container kernel metrics
// worth keeping on (ViperProbe's CriticalMetrics: "ViperProbe: Rethinking
// Microservice Observability with eBPF", §3.1 and §5.3).
//
// For each service, and separately for its sidecar containers, the stored
// metric series (internal/kmetrics, pushed by the agents) are turned into
// one signal per metric on a common time grid (the mean latency per interval
// for durations, bytes per second for sizes, events per second for
// counters), z-normalised, and clustered by shape with k-Shape
// (internal/kshape); the number of clusters is the one of highest mean
// silhouette on the shape-based distance. Metrics of one cluster move
// together, so one of them says what the others would: each cluster keeps
// its cheapest member by the agent's measured cost (ns of BPF time per event
// times the events per second the container produced), and the rest can be
// turned off. The result is also the agent's config (PUT
// /api/v1/kmetrics/config requests) that does so. Two-sample
// Kolmogorov–Smirnov tests (internal/kstest) compare each metric's
// distribution in the service with the same metric in its sidecar.
package critmetrics

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/kshape"
	"github.com/rootline/rootline/internal/kstest"
	"github.com/rootline/rootline/internal/store"
)

// Errors of Analyze.
var (
	// ErrNoData: no kernel metric series in the window.
	ErrNoData = errors.New("critmetrics: no kernel metrics stored in the window")
	// ErrTooShort: the window holds too few intervals to compare shapes.
	ErrTooShort = errors.New("critmetrics: too few intervals")
)

// DefaultSidecarPattern matches the container names of sidecar proxies:
// containers named envoy (the demo mesh's <mesh>/<service>/envoy), sidecar
// or istio-proxy, alone or as a path or name component.
const DefaultSidecarPattern = `(^|[/._-])(sidecar|envoy|istio-proxy)([/._-]|$)`

// Options of Analyze. Zero values take the defaults.
type Options struct {
	// From and To bound the window (Unix ns); zero: the whole stored span.
	From, To int64
	// Step is the grid's interval; zero: the median spacing of the stored
	// points (the agents' push interval).
	Step time.Duration
	// MinIntervals is the least number of intervals analysed (default 8).
	MinIntervals int
	// MaxPoints bounds the length of a clustered series; longer ones are
	// averaged down (default 256: k-Shape's eigendecomposition is O(m³)).
	MaxPoints int
	// K fixes the number of clusters; zero chooses it (MaxK).
	K int
	// MaxK bounds the chosen number of clusters (default 6).
	MaxK int
	// Starts of k-Shape per k (default 10) and the seed of their choice.
	Starts int
	Seed   uint64
	// Costs per metric; nil: DefaultCosts.
	Costs CostTable
	// Sidecar matches the container names of sidecars; nil:
	// DefaultSidecarPattern.
	Sidecar *regexp.Regexp
	// Alpha is the KS significance level (default 0.05).
	Alpha float64
	// Rate is the sampling rate set for the critical metrics (default 1).
	Rate uint32
	// Progress, when set, is told what is being analysed (one line per
	// group of containers), for the progress output of long runs.
	Progress func(msg string)
	// Services, when not empty, limits the analysis to these services
	// (after each container is given its service): the result for one of
	// them is the same as in a report on every service.
	Services []string
}

func (o *Options) defaults() {
	if o.MinIntervals <= 0 {
		o.MinIntervals = 8
	}
	if o.MaxPoints <= 0 {
		o.MaxPoints = 256
	}
	if o.MaxK <= 0 {
		o.MaxK = 6
	}
	if o.Starts <= 0 {
		o.Starts = 10
	}
	if o.Costs == nil {
		o.Costs = DefaultCosts()
	}
	if o.Sidecar == nil {
		o.Sidecar = regexp.MustCompile(DefaultSidecarPattern)
	}
	if o.Alpha <= 0 {
		o.Alpha = 0.05
	}
	if o.Rate == 0 {
		o.Rate = 1
	}
}

// Criterion states how the number of clusters is chosen.
const Criterion = "highest mean silhouette on SBD over k = 2…min(maxK, metrics−1), ties to the smaller k"

// Report is the result of Analyze (the --json output).
type Report struct {
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Step      string    `json:"step"`
	Intervals int       `json:"intervals"`
	Criterion string    `json:"criterion"`
	Services  []Service `json:"services"`
	// Critical lists the chosen metrics by service, and by "<service>
	// sidecar" for its sidecar containers.
	Critical map[string][]string `json:"critical"`
	// AgentConfig is what --apply sends, in order, to each agent's PUT
	// /api/v1/kmetrics/config.
	AgentConfig []kmetrics.ConfigRequest `json:"agentConfig"`
	Costs       CostTable                `json:"costs"`
	Notes       []string                 `json:"notes,omitempty"`
	// Apply is what --apply did (Apply), nil when the config was not sent.
	Apply *ApplyResult `json:"apply,omitempty"`
}

// Service is one service's analysis.
type Service struct {
	Name    string   `json:"service"`
	App     *Group   `json:"app,omitempty"`
	Sidecar *Group   `json:"sidecar,omitempty"`
	KS      []KSTest `json:"ks,omitempty"`
	KSNote  string   `json:"ksNote,omitempty"`
	Error   string   `json:"error,omitempty"`
	ivs     [2]groupData
}

type groupData map[kmetrics.Metric]*intervals

// Group is the clustering of one service's own containers, or of its
// sidecars'.
type Group struct {
	Role       string          `json:"role"` // "app" or "sidecar"
	Containers []string        `json:"containers"`
	Metrics    []MetricInfo    `json:"metrics"`
	Flat       []string        `json:"flat,omitempty"`
	K          int             `json:"k"`
	Choices    []kshape.Choice `json:"choices,omitempty"`
	Inertia    float64         `json:"inertia"`
	Clusters   []Cluster       `json:"clusters"`
	Critical   []string        `json:"critical"`
	Off        []string        `json:"off"`
	// CostAllNsPerSecond and CostCriticalNsPerSecond estimate the BPF time
	// the group's recorded metrics cost with all of them on and with only
	// the critical ones (the cost table × the recorded event rates): what
	// the config saves in these containers by the model, not a measurement.
	CostAllNsPerSecond      float64 `json:"costAllNsPerSecond"`
	CostCriticalNsPerSecond float64 `json:"costCriticalNsPerSecond"`
}

// MetricInfo describes one metric of a group.
type MetricInfo struct {
	Metric string `json:"metric"`
	Signal Signal `json:"signal"`
	// EventsPerSecond is the mean recorded event rate (raw sampled counts).
	EventsPerSecond float64 `json:"eventsPerSecond"`
	// CostNsPerSecond is EventsPerSecond × the cost per event: BPF time per
	// second of wall time (1e6 is 0.1 % of one CPU).
	CostNsPerSecond float64 `json:"costNsPerSecond"`
	// Values is the signal per interval (before normalisation).
	Values []float64 `json:"values"`
}

// Cluster is one group of metrics of similar shape.
type Cluster struct {
	Members []Member `json:"members"`
	// Centroid is the cluster's shape (z-normalised).
	Centroid []float64 `json:"centroid"`
	// Representative is the member kept on: the cheapest.
	Representative string `json:"representative"`
}

// Member is a metric in a cluster and its distance to the centroid.
type Member struct {
	Metric string  `json:"metric"`
	SBD    float64 `json:"sbd"`
}

// KSTest compares one metric of the service and of its sidecar.
type KSTest struct {
	Metric string `json:"metric"`
	// Sample is "values" (the metric's histograms over the window) or
	// "rates" (a counter's per-interval rates).
	Sample string `json:"sample"`
	kstest.Result
	// Different: p < alpha, the two distributions differ.
	Different bool `json:"different"`
}

// Analyze runs the analysis on stored series (any metric names; those
// that are not kernel metrics are ignored).
func Analyze(series []store.MetricSeries, opts Options) (*Report, error) {
	opts.defaults()
	type member struct {
		svc, container string
		sidecar        bool
		mt             kmetrics.Metric
		c              cumulative
	}
	var ms []member
	var all []cumulative
	ladders := metricLadders(series)
	serviceOf := containerServices(series)
	isSidecar := sidecarContainers(series, opts.Sidecar)
	for _, s := range series {
		mt, ok := byExportName[s.Name]
		if !ok {
			continue
		}
		c := unwrap(s, ladders[mt])
		if len(c.t) == 0 {
			continue
		}
		ctr := s.Labels[ContainerLabel]
		svc, ok := serviceOf[ctr]
		if !ok {
			svc = ctr // a container without a service is analysed on its own
		}
		// Every series sets the grid (its span and step), so that a
		// service's result does not depend on which services are asked for.
		all = append(all, c)
		if len(opts.Services) > 0 && !slices.Contains(opts.Services, svc) {
			continue
		}
		ms = append(ms, member{svc: svc, container: ctr, sidecar: isSidecar[ctr], mt: mt, c: c})
	}
	if len(ms) == 0 {
		return nil, ErrNoData
	}
	step := opts.Step
	if step <= 0 {
		var err error
		if step, err = inferStep(all); err != nil {
			return nil, err
		}
	}
	lo, hi := span(all, opts.From, opts.To)
	n := 0
	if hi > lo {
		n = int((hi - lo) / int64(step))
	}
	if n < opts.MinIntervals {
		return nil, fmt.Errorf("%w: %d of %s in the window, need %d (record longer, widen --from/--to or shorten --step)",
			ErrTooShort, n, step, opts.MinIntervals)
	}
	grid := make([]int64, n+1)
	for i := range grid {
		grid[i] = lo + int64(i)*int64(step)
	}

	byName := map[string]*Service{}
	containers := map[string]map[bool][]string{}
	for _, m := range ms {
		s, ok := byName[m.svc]
		if !ok {
			s = &Service{Name: m.svc, ivs: [2]groupData{{}, {}}}
			byName[m.svc] = s
			containers[m.svc] = map[bool][]string{}
		}
		role := 0
		if m.sidecar {
			role = 1
		}
		iv, ok := s.ivs[role][m.mt]
		if !ok {
			iv = newIntervals(m.mt, n)
			s.ivs[role][m.mt] = iv
		}
		iv.add(m.c, grid)
		if !slices.Contains(containers[m.svc][m.sidecar], m.container) {
			containers[m.svc][m.sidecar] = append(containers[m.svc][m.sidecar], m.container)
		}
	}
	rep := &Report{From: time.Unix(0, grid[0]).UTC(), To: time.Unix(0, grid[n]).UTC(), Step: step.String(), Intervals: n,
		Criterion: Criterion, Critical: map[string][]string{}, AgentConfig: []kmetrics.ConfigRequest{}, Costs: opts.Costs}
	if opts.K > 0 {
		rep.Criterion = fmt.Sprintf("fixed: k = %d (at most the number of metrics with a shape)", opts.K)
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := byName[name]
		for role, sidecar := range []bool{false, true} {
			if len(s.ivs[role]) == 0 {
				continue
			}
			ctrs := containers[name][sidecar]
			sort.Strings(ctrs)
			if opts.Progress != nil {
				opts.Progress(fmt.Sprintf("clustering %d metrics of %s (%s, %d containers)", len(s.ivs[role]), name, map[bool]string{false: "app", true: "sidecar"}[sidecar], len(ctrs)))
			}
			g, err := analyzeGroup(s.ivs[role], ctrs, sidecar, step, opts)
			if err != nil {
				s.Error = err.Error()
				continue
			}
			key := name
			if sidecar {
				s.Sidecar = g
				key += " sidecar"
			} else {
				s.App = g
			}
			rep.Critical[key] = g.Critical
			rep.AgentConfig = append(rep.AgentConfig, configFor(g, opts.Rate)...)
		}
		s.KS, s.KSNote = ksTests(s, opts.Alpha)
		rep.Services = append(rep.Services, *s)
	}
	return rep, nil
}

// ContainerNameLabel is the resource attribute naming a container within
// its pod or service (the semantic conventions' container.name: the agent
// reads it, or k8s.container.name, from the container's members'
// OTEL_RESOURCE_ATTRIBUTES), such as "app" or "envoy".
const ContainerNameLabel = "container.name"

// sidecarContainers says which containers are sidecars: those whose cgroup
// path (ContainerLabel) or name (ContainerNameLabel) the pattern matches. A
// Kubernetes container's cgroup is named by its id, so its name is what
// tells a sidecar.
func sidecarContainers(series []store.MetricSeries, re *regexp.Regexp) map[string]bool {
	out := map[string]bool{}
	for _, s := range series {
		ctr := s.Labels[ContainerLabel]
		if out[ctr] {
			continue
		}
		out[ctr] = re.MatchString(ctr) || (s.Labels[ContainerNameLabel] != "" && re.MatchString(s.Labels[ContainerNameLabel]))
	}
	return out
}

// containerServices names the service of each container: the one its kernel
// metric series carry with the most points. A container's series also carry
// no service (or "unknown") while the agent does not know it yet, and the
// same container must not be analysed, and configured, twice.
func containerServices(series []store.MetricSeries) map[string]string {
	points := map[string]map[string]int{}
	for _, s := range series {
		if _, ok := byExportName[s.Name]; !ok || s.Service == "" || s.Service == "unknown" {
			continue
		}
		ctr := s.Labels[ContainerLabel]
		if points[ctr] == nil {
			points[ctr] = map[string]int{}
		}
		points[ctr][s.Service] += len(s.Points)
	}
	out := map[string]string{}
	for ctr, bySvc := range points {
		best := ""
		for svc, n := range bySvc {
			if best == "" || n > bySvc[best] || (n == bySvc[best] && svc < best) {
				best = svc
			}
		}
		out[ctr] = best
	}
	return out
}

func analyzeGroup(ivs groupData, containers []string, sidecar bool, step time.Duration, opts Options) (*Group, error) {
	g := &Group{Role: "app", Containers: containers, Critical: []string{}, Off: []string{}}
	if sidecar {
		g.Role = "sidecar"
	}
	var shaped []kmetrics.Metric
	var x [][]float64
	present := map[kmetrics.Metric]bool{}
	for _, mt := range kmetrics.Metrics() {
		iv, ok := ivs[mt]
		if !ok {
			continue
		}
		present[mt] = true
		vals, ok := iv.values(step)
		eps := iv.eventsPerSecond(step)
		info := MetricInfo{Metric: mt.String(), Signal: SignalOf(mt), EventsPerSecond: eps,
			CostNsPerSecond: eps * opts.Costs[mt.String()].NsPerEvent, Values: vals}
		if !ok {
			info.Values = nil
		}
		g.Metrics = append(g.Metrics, info)
		z := kshape.ZNormalize(resample(vals, opts.MaxPoints))
		if !ok || allZero(z) {
			g.Flat = append(g.Flat, mt.String())
			continue
		}
		shaped = append(shaped, mt)
		x = append(x, z)
	}
	cost := func(mt kmetrics.Metric) float64 {
		for _, m := range g.Metrics {
			if m.Metric == mt.String() {
				return m.CostNsPerSecond
			}
		}
		return math.Inf(1)
	}
	if len(x) > 0 {
		var res kshape.Result
		var err error
		copts := kshape.ClusterOptions{Starts: opts.Starts, Seed: opts.Seed}
		if opts.K > 0 {
			res, err = kshape.Cluster(x, min(opts.K, len(x)), copts)
		} else {
			res, g.Choices, err = kshape.ChooseK(x, opts.MaxK, copts)
		}
		if err != nil {
			return nil, err
		}
		g.K, g.Inertia = len(res.Centroids), res.Inertia
		for j, cen := range res.Centroids {
			cl := Cluster{Centroid: cen}
			best, bestCost, bestDist := "", math.Inf(1), math.Inf(1)
			for i, l := range res.Labels {
				if l != j {
					continue
				}
				d := res.Dist[i][j]
				// Rounding leaves a copy of the centroid at −1e-16.
				cl.Members = append(cl.Members, Member{Metric: shaped[i].String(), SBD: max(d, 0)})
				// The cheapest member; on equal cost the one nearest the centroid.
				if c := cost(shaped[i]); c < bestCost || (c == bestCost && d < bestDist) {
					best, bestCost, bestDist = shaped[i].String(), c, d
				}
			}
			cl.Representative = best
			g.Clusters = append(g.Clusters, cl)
			g.Critical = append(g.Critical, best)
		}
	}
	for _, mt := range kmetrics.Metrics() {
		if !slices.Contains(g.Critical, mt.String()) {
			g.Off = append(g.Off, mt.String())
		}
	}
	for _, m := range g.Metrics {
		g.CostAllNsPerSecond += m.CostNsPerSecond
		if slices.Contains(g.Critical, m.Metric) {
			g.CostCriticalNsPerSecond += m.CostNsPerSecond
		}
	}
	return g, nil
}

func allZero(x []float64) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}

// configFor is the agent config of a group: its critical metrics on at the
// given rate, every other metric off, for each of its containers.
func configFor(g *Group, rate uint32) []kmetrics.ConfigRequest {
	var out []kmetrics.ConfigRequest
	on, off := true, false
	for _, c := range g.Containers {
		if len(g.Critical) > 0 {
			r := rate
			out = append(out, kmetrics.ConfigRequest{Container: c, Metrics: slices.Clone(g.Critical), Enabled: &on, Rate: &r})
		}
		if len(g.Off) > 0 {
			out = append(out, kmetrics.ConfigRequest{Container: c, Metrics: slices.Clone(g.Off), Enabled: &off})
		}
	}
	return out
}

// ksTests compares each metric the service and its sidecar both recorded.
func ksTests(s *Service, alpha float64) ([]KSTest, string) {
	app, side := s.ivs[0], s.ivs[1]
	if len(side) == 0 {
		return nil, "no sidecar containers: nothing to compare with"
	}
	if len(app) == 0 {
		return nil, "only sidecar containers"
	}
	var out []KSTest
	var skipped []string
	for _, mt := range kmetrics.Metrics() {
		a, okA := app[mt]
		b, okB := side[mt]
		if !okA || !okB {
			continue
		}
		var r kstest.Result
		var err error
		sample := "values"
		if mt.Kind() == kmetrics.Histogram {
			ha, hb := a.histogram(), b.histogram()
			if ha == nil || hb == nil || len(ha) != len(hb) {
				err = kstest.ErrEmpty
			} else {
				r, err = kstest.Binned(ha, hb)
			}
		} else {
			sample = "rates"
			r, err = kstest.TwoSample(rates(a), rates(b))
		}
		if err != nil {
			skipped = append(skipped, mt.String())
			continue
		}
		out = append(out, KSTest{Metric: mt.String(), Sample: sample, Result: r, Different: r.P < alpha})
	}
	note := ""
	if len(skipped) > 0 {
		note = "no events on one side: " + strings.Join(skipped, ", ")
	}
	return out, note
}

// rates is a counter's events per interval over the intervals with data.
func rates(iv *intervals) []float64 {
	var out []float64
	for i, s := range iv.seen {
		if s {
			out = append(out, iv.count[i])
		}
	}
	return out
}
