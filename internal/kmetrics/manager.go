package kmetrics

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Target is a process the agent knows, with its service name (registered by
// `rootline run`, configured, or read from its OpenTelemetry environment).
type Target struct {
	PID     int
	Service string
}

// Options configure a Manager.
type Options struct {
	// Cgroups locates the hierarchies; zero means DetectCgroups.
	Cgroups Cgroups
	// Targets lists the agent's processes; it maps containers to services.
	// May be nil.
	Targets func() []Target
	// Default is the config of every container without its own entry.
	Default Entry
	// Logger; nil discards.
	Logger *slog.Logger
	// Only, when set, limits what Read returns to the containers whose
	// cgroup path is one of these or below one ("/kubepods", or a demo
	// mesh's "/rootline-demo"), and those of the agent's targets: a node
	// runs other workloads whose services can carry the same names.
	// Unnamed cgroups are left out then.
	Only []string
}

// under says whether the cgroup path name is one of prefixes or below one.
func under(name string, prefixes []string) bool {
	for _, p := range prefixes {
		p = "/" + strings.Trim(p, "/")
		if p == "/" || name == p || strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// Manager owns the BPF config: it turns API requests into config map
// entries, attaches exactly the programs some container needs, and decodes
// the BPF maps into labelled series. It is safe for concurrent use.
type Manager struct {
	k       Kernel
	cg      Cgroups
	targets func() []Target
	logger  *slog.Logger
	only    []string // Options.Only

	mu       sync.Mutex
	dflt     Entry
	entries  map[uint64]Entry
	names    map[uint64]Container // keys resolved to cgroups
	unknown  map[uint64]bool      // keys FindKey could not resolve
	envSvc   map[uint64]envInfo   // read from cgroup members' environment
	gen      uint64
	attached programSet
	reasons  map[uint32]string
	closed   bool
}

// New applies opts.Default to k and returns the manager; it owns k from now on.
func New(k Kernel, opts Options) (*Manager, error) {
	if opts.Cgroups == (Cgroups{}) {
		opts.Cgroups = DetectCgroups()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{k: k, cg: opts.Cgroups, targets: opts.Targets, logger: opts.Logger.With("component", "kmetrics"),
		dflt: opts.Default, entries: map[uint64]Entry{}, names: map[uint64]Container{},
		unknown: map[uint64]bool{}, envSvc: map[uint64]envInfo{}, only: opts.Only}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.applyLocked(); err != nil {
		return nil, err
	}
	return m, nil
}

// Close detaches and unloads the programs.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.k.Close()
}

// applyLocked writes the globals (new generation) and attaches the programs
// the union of every config needs.
func (m *Manager) applyLocked() error {
	m.gen++
	mask := m.dflt.Enabled
	keys := make([]uint64, 0, len(m.entries))
	for key, e := range m.entries {
		mask |= e.Enabled
		keys = append(keys, key)
	}
	slices.Sort(keys)
	if err := m.k.SetGlobals(m.dflt, m.gen, keys); err != nil {
		return err
	}
	want := programsFor(mask)
	if err := m.k.SetAttached(want); err != nil {
		return err
	}
	if want != m.attached {
		m.logger.Info("programs attached", "programs", want.names())
	}
	m.attached = want
	return nil
}

func (s programSet) names() []string {
	out := []string{}
	for p := range numPrograms {
		if s.has(p) {
			out = append(out, p.String())
		}
	}
	return out
}

// ConfigRequest changes the config of containers (PUT /api/v1/kmetrics/config).
// Exactly one of Container, Service and PID selects them.
type ConfigRequest struct {
	// Container is "default" (every container without its own entry), a
	// cgroup path (/sys/fs/cgroup/unified/x, /sys/fs/cgroup/cpu/x, "cpu:/x"
	// for v1 cpu, "/x" for v2) or a container key in decimal.
	Container string `json:"container,omitempty"`
	// Service selects the containers of every target with that service name.
	Service string `json:"service,omitempty"`
	// PID selects the container of one process.
	PID int `json:"pid,omitempty"`
	// Metrics are the metric names the change applies to; empty or ["all"]
	// means every metric.
	Metrics []string `json:"metrics,omitempty"`
	// Enabled switches the metrics on or off; nil leaves them as they are.
	Enabled *bool `json:"enabled,omitempty"`
	// Rate sets 1-in-Rate sampling of the metrics (1: every event).
	Rate *uint32 `json:"rate,omitempty"`
	// Reset drops the containers' own entries: they follow the default again.
	Reset bool `json:"reset,omitempty"`
}

// ErrBadRequest wraps invalid config requests.
var ErrBadRequest = errors.New("kmetrics: bad request")

// Configure applies req live (no program is reloaded) and returns the new state.
func (m *Manager) Configure(req ConfigRequest) (State, error) {
	metrics, err := ParseMetrics(strings.Join(req.Metrics, ","))
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if len(metrics) == 0 {
		metrics = Metrics()
	}
	if req.Rate != nil && *req.Rate > 1<<20 {
		return State{}, fmt.Errorf("%w: rate must be at most %d", ErrBadRequest, 1<<20)
	}
	var sel int
	for _, set := range []bool{req.Container != "", req.Service != "", req.PID != 0} {
		if set {
			sel++
		}
	}
	if sel != 1 {
		return State{}, fmt.Errorf("%w: give exactly one of container, service and pid", ErrBadRequest)
	}
	if req.Enabled == nil && req.Rate == nil && !req.Reset {
		return State{}, fmt.Errorf("%w: nothing to change (enabled, rate or reset)", ErrBadRequest)
	}
	var containers []Container
	isDefault := req.Container == "default"
	switch {
	case isDefault:
		if req.Reset {
			return State{}, fmt.Errorf("%w: the default cannot be reset", ErrBadRequest)
		}
	case req.Container != "":
		c, err := m.containerByName(req.Container)
		if err != nil {
			return State{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		containers = append(containers, c)
	case req.PID != 0:
		c, err := m.cg.PIDContainer(req.PID)
		if err != nil {
			return State{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		containers = append(containers, c)
	default:
		for _, ct := range m.containersOfTargets() {
			if slices.Contains(ct.Services, req.Service) {
				containers = append(containers, ct.Container)
			}
		}
		if len(containers) == 0 {
			return State{}, fmt.Errorf("%w: no target with service %q", ErrBadRequest, req.Service)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return State{}, errors.New("kmetrics: closed")
	}
	change := func(e Entry) Entry {
		for _, mt := range metrics {
			if req.Enabled != nil {
				if *req.Enabled {
					e.Enabled |= 1 << mt
				} else {
					e.Enabled &^= 1 << mt
				}
			}
			if req.Rate != nil {
				e.Rate[mt] = max(*req.Rate, 1)
			}
		}
		return e
	}
	if isDefault {
		m.dflt = change(m.dflt)
	}
	for _, c := range containers {
		m.names[c.Key] = c
		if req.Reset {
			delete(m.entries, c.Key)
			if err := m.k.DeleteEntry(c.Key); err != nil {
				return State{}, err
			}
			continue
		}
		e, ok := m.entries[c.Key]
		if !ok {
			e = m.dflt // a new entry starts as a copy of the default
		}
		e = change(e)
		m.entries[c.Key] = e
		if err := m.k.SetEntry(c.Key, e); err != nil {
			return State{}, err
		}
	}
	if err := m.applyLocked(); err != nil {
		return State{}, err
	}
	m.logger.Info("config changed", "container", req.Container, "service", req.Service, "pid", req.PID,
		"metrics", metrics, "enabled", req.Enabled, "rate", req.Rate, "reset", req.Reset)
	return m.stateLocked(nil), nil
}

func (m *Manager) containerByName(name string) (Container, error) {
	if n, err := strconv.ParseUint(name, 10, 64); err == nil {
		m.mu.Lock()
		c, ok := m.names[n]
		m.mu.Unlock()
		if ok {
			return c, nil
		}
		if c, ok := m.cg.FindKey(n); ok {
			return c, nil
		}
		return Container{}, fmt.Errorf("no cgroup with key %d", n)
	}
	return m.cg.PathContainer(name)
}

// MetricConfig is one metric's config in the API.
type MetricConfig struct {
	Enabled bool   `json:"enabled"`
	Rate    uint32 `json:"rate"`
}

// ContainerState describes one container in GET /api/v1/kmetrics.
type ContainerState struct {
	Container
	Name     string   `json:"name"`
	Services []string `json:"services,omitempty"`
	PIDs     []int    `json:"pids,omitempty"`
	// Config is the container's own entry; absent when it follows the default.
	Config map[string]MetricConfig `json:"config,omitempty"`
}

// State is the answer of GET /api/v1/kmetrics.
type State struct {
	Default    map[string]MetricConfig `json:"default"`
	Containers []ContainerState        `json:"containers"`
	Attached   []string                `json:"attached"`
	Metrics    []string                `json:"metrics"`
}

func configMap(e Entry) map[string]MetricConfig {
	out := map[string]MetricConfig{}
	for _, mt := range Metrics() {
		out[mt.String()] = MetricConfig{Enabled: e.Has(mt), Rate: max(e.Rate[mt], 1)}
	}
	return out
}

// State returns the config and the known containers: those of the agent's
// targets and those with their own entry.
func (m *Manager) State() State {
	cts := m.containersOfTargets()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stateLocked(cts)
}

func (m *Manager) stateLocked(cts []ContainerState) State {
	st := State{Default: configMap(m.dflt), Attached: m.attached.names(), Containers: []ContainerState{}}
	for _, mt := range Metrics() {
		st.Metrics = append(st.Metrics, mt.String())
	}
	seen := map[uint64]bool{}
	for _, c := range cts {
		seen[c.Key] = true
		if e, ok := m.entries[c.Key]; ok {
			c.Config = configMap(e)
		}
		st.Containers = append(st.Containers, c)
	}
	for key, e := range m.entries {
		if seen[key] {
			continue
		}
		c := m.names[key]
		st.Containers = append(st.Containers, ContainerState{Container: c, Name: c.Name(), Services: m.envLocked(c).services, Config: configMap(e)})
	}
	sort.Slice(st.Containers, func(i, j int) bool { return st.Containers[i].Name < st.Containers[j].Name })
	return st
}

// containersOfTargets maps the agent's targets to their containers.
func (m *Manager) containersOfTargets() []ContainerState {
	if m.targets == nil {
		return nil
	}
	byKey := map[uint64]*ContainerState{}
	for _, t := range m.targets() {
		c, err := m.cg.PIDContainer(t.PID)
		if err != nil {
			continue
		}
		cs, ok := byKey[c.Key]
		if !ok {
			cs = &ContainerState{Container: c, Name: c.Name()}
			byKey[c.Key] = cs
		}
		cs.PIDs = append(cs.PIDs, t.PID)
		if t.Service != "" && !slices.Contains(cs.Services, t.Service) {
			cs.Services = append(cs.Services, t.Service)
		}
	}
	out := make([]ContainerState, 0, len(byKey))
	m.mu.Lock()
	for _, cs := range byKey {
		m.names[cs.Key] = cs.Container
		sort.Ints(cs.PIDs)
		sort.Strings(cs.Services)
		out = append(out, *cs)
	}
	m.mu.Unlock()
	return out
}

// envInfo is what the OpenTelemetry environment of a container's members
// says of it.
type envInfo struct {
	services []string
	// container is k8s.container.name (k8s set) or container.name, of the
	// first member that gives one.
	container string
	k8s       bool
	read      time.Time // when it was read
}

// envRetry is how long a container whose members named nothing is left
// before they are read again: a member read as it starts (between the fork
// and the exec of the program the environment is for) may say nothing yet.
const envRetry = 10 * time.Second

// envLocked reads the service names and the container name in the
// OpenTelemetry environment of a few members of a container (cached per
// key; when they named nothing, for envRetry only).
func (m *Manager) envLocked(c Container) envInfo {
	if s, ok := m.envSvc[c.Key]; ok && (len(s.services) > 0 || s.container != "" || time.Since(s.read) < envRetry) {
		return s
	}
	root := m.cg.V2Root
	if c.V1 {
		root = m.cg.V1CPURoot
	}
	var out envInfo
	read := 0
	if root != "" && c.Path != "" && c.Path != "/" {
		data, _ := os.ReadFile(filepath.Join(root, c.Path, "cgroup.procs"))
		for line := range strings.Lines(string(data)) {
			pid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil {
				continue
			}
			if read >= 8 {
				break
			}
			env, err := os.ReadFile(filepath.Join(m.cg.ProcRoot, strconv.Itoa(pid), "environ"))
			if err != nil {
				continue
			}
			read++
			oe := otelFromEnviron(env)
			if oe.service != "" && !slices.Contains(out.services, oe.service) {
				out.services = append(out.services, oe.service)
			}
			if out.container == "" && oe.container != "" {
				out.container, out.k8s = oe.container, oe.k8s
			}
		}
	}
	if read > 0 {
		out.read = time.Now()
		m.envSvc[c.Key] = out
	}
	return out
}

// otelEnv is what an OpenTelemetry environment names.
type otelEnv struct {
	service, container string
	k8s                bool // container is k8s.container.name
}

// serviceFromEnviron returns OTEL_SERVICE_NAME, else service.name in
// OTEL_RESOURCE_ATTRIBUTES, of a NUL-separated environment.
func serviceFromEnviron(env []byte) string { return otelFromEnviron(env).service }

// otelFromEnviron reads a NUL-separated environment: the service is
// OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES; the
// container is k8s.container.name (what the OpenTelemetry operator sets in a
// Kubernetes pod), else container.name, in OTEL_RESOURCE_ATTRIBUTES.
func otelFromEnviron(env []byte) otelEnv {
	var out otelEnv
	var attrs string
	for kv := range strings.SplitSeq(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "OTEL_SERVICE_NAME="); ok && v != "" && out.service == "" {
			out.service = v
		}
		if v, ok := strings.CutPrefix(kv, "OTEL_RESOURCE_ATTRIBUTES="); ok {
			attrs = v
		}
	}
	var plain string
	for kv := range strings.SplitSeq(attrs, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			continue
		}
		switch k {
		case "service.name":
			if out.service == "" {
				out.service = v
			}
		case "k8s.container.name":
			out.container, out.k8s = v, true
		case "container.name":
			plain = v
		}
	}
	if out.container == "" {
		out.container = plain
	}
	return out
}

// Series is one labelled histogram or counter.
type Series struct {
	Metric    Metric
	Container string // Container.Name, or the key when unresolved
	CgroupID  uint64
	Service   string // comma-separated when a container runs several
	// ContainerName is the container's name in its members' OpenTelemetry
	// environment (k8s.container.name when K8s, else container.name), ""
	// when none gives one.
	ContainerName string
	K8s           bool
	Reason        string // drops only
	Count         uint64
	Sum           uint64
	Buckets       [NumBuckets]uint64 // histograms only
}

// Read decodes the BPF maps into labelled series (cumulative values, raw
// sampled counts: with 1-in-N sampling they are ~1/N of the events).
func (m *Manager) Read() ([]Series, error) {
	cts := m.containersOfTargets()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("kmetrics: closed")
	}
	snap, err := m.k.Read()
	if err != nil {
		return nil, err
	}
	svc := map[uint64]string{}
	for _, c := range cts {
		svc[c.Key] = strings.Join(c.Services, ",")
	}
	m.forgetRemovedLocked(&snap)
	label := func(key uint64) (string, string, envInfo) {
		c, ok := m.names[key]
		if !ok && !m.unknown[key] && key != 0 {
			if c, ok = m.cg.FindKey(key); ok {
				m.names[key] = c
			} else {
				m.unknown[key] = true
			}
		}
		s, hasSvc := svc[key]
		if !ok {
			if key == 0 {
				return "none", s, envInfo{}
			}
			return "id:" + strconv.FormatUint(key&^V1Bit, 10), s, envInfo{}
		}
		env := m.envLocked(c)
		if !hasSvc {
			s = strings.Join(env.services, ",")
		}
		return c.Name(), s, env
	}
	out := make([]Series, 0, len(snap.Samples)+len(snap.Drops))
	for _, s := range snap.Samples {
		if s.Metric >= numMetrics || s.Metric == Drops {
			continue // drops are exported per reason below
		}
		name, service, env := label(s.Key)
		if !m.reported(name, s.Key, svc) {
			continue
		}
		se := Series{Metric: s.Metric, Container: name, CgroupID: s.Key &^ V1Bit, Service: service,
			ContainerName: env.container, K8s: env.k8s, Count: s.Count, Sum: s.Sum}
		if s.Metric.Kind() == Histogram {
			se.Buckets = s.Buckets
		}
		out = append(out, se)
	}
	for _, d := range snap.Drops {
		name, service, env := label(d.Key)
		if !m.reported(name, d.Key, svc) {
			continue
		}
		out = append(out, Series{Metric: Drops, Container: name, CgroupID: d.Key &^ V1Bit, Service: service,
			ContainerName: env.container, K8s: env.k8s, Reason: m.reasonLocked(d.Reason), Count: d.Count, Sum: d.Count})
	}
	out = append(out, m.cgroupSeriesLocked(cts, svc, label)...)
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Metric != b.Metric {
			return a.Metric < b.Metric
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		return a.Reason < b.Reason
	})
	return out, nil
}

// cgroupSeriesLocked reads the metrics that come from cgroup files
// (Metric.fromCgroup) for the containers the manager knows — its targets'
// and those a BPF metric has named — where their config enables them.
// A container without CPU bandwidth statistics (Cgroups.Throttled: a v2
// cgroup without the cpu controller, and no v1 cpu cgroup beside it) gets
// no cpu_throttled series.
func (m *Manager) cgroupSeriesLocked(cts []ContainerState, targets map[uint64]string, label func(uint64) (string, string, envInfo)) []Series {
	keys := make([]uint64, 0, len(m.names)+len(cts))
	for _, c := range cts {
		keys = append(keys, c.Key)
	}
	for key := range m.names {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var out []Series
	for _, key := range slices.Compact(keys) {
		e, ok := m.entries[key]
		if !ok {
			e = m.dflt
		}
		c, ok := m.names[key]
		if !e.Has(CPUThrottled) || !ok {
			continue
		}
		nr, ns, ok := m.cg.Throttled(c)
		if !ok {
			continue
		}
		name, service, env := label(key)
		if !m.reported(name, key, targets) {
			continue
		}
		out = append(out, Series{Metric: CPUThrottled, Container: name, CgroupID: key &^ V1Bit, Service: service,
			ContainerName: env.container, K8s: env.k8s, Count: nr, Sum: ns})
	}
	return out
}

// reported says whether Read reports the container: every one without
// Options.Only; with it, those at or below its paths and those holding the
// agent's own targets (targets maps their keys to their services): `rootline
// run` puts its service in a cgroup of its own, /rootline-run-PID.
func (m *Manager) reported(name string, key uint64, targets map[uint64]string) bool {
	if m.only == nil {
		return true
	}
	_, ok := targets[key]
	return ok || under(name, m.only)
}

// forgetRemovedLocked drops from snap, and from the BPF maps, the values of
// cgroups that no longer exist (their directory is gone or now belongs to a
// new cgroup), unless they still have a config entry: churn must not fill
// the maps.
func (m *Manager) forgetRemovedLocked(snap *Snapshot) {
	gone := map[uint64]bool{}
	check := func(key uint64) {
		if key == 0 || gone[key] {
			return
		}
		if _, ok := m.entries[key]; ok {
			return
		}
		c, ok := m.names[key]
		if !ok {
			return // resolved (or found unresolvable) below, on first sight
		}
		root := m.cg.V2Root
		if c.V1 {
			root = m.cg.V1CPURoot
		}
		if ino, err := inode(filepath.Join(root, c.Path)); err != nil || ino != key&^V1Bit {
			gone[key] = true
		}
	}
	for _, s := range snap.Samples {
		check(s.Key)
	}
	for _, d := range snap.Drops {
		check(d.Key)
	}
	if len(gone) == 0 {
		return
	}
	if err := m.k.Forget(gone); err != nil {
		m.logger.Warn("forget removed cgroups", "err", err)
		return
	}
	for key := range gone {
		delete(m.names, key)
		delete(m.envSvc, key)
	}
	snap.Samples = slices.DeleteFunc(snap.Samples, func(s Sample) bool { return gone[s.Key] })
	snap.Drops = slices.DeleteFunc(snap.Drops, func(d DropSample) bool { return gone[d.Key] })
	m.logger.Debug("forgot removed cgroups", "keys", len(gone))
}

func (m *Manager) reasonLocked(r uint32) string {
	if m.reasons == nil {
		m.reasons = dropReasons()
	}
	if s, ok := m.reasons[r]; ok {
		return s
	}
	return strconv.FormatUint(uint64(r), 10)
}
