// Package capture turns anomalous spans into evidence: it keeps the registry of
// agents, maps a span to a process an agent registered for the span's
// service, coalesces overlapping windows per process, asks the agent to dump
// its flight recorders for the window, and stores what the agent uploads as
// artifacts linked to the spans. The wire protocol is internal/agentapi's
// (docs/api.md, "Capture protocol").
package capture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/tlsconf"
)

// Capture states.
const (
	StatePending   = "pending"   // waiting for its window to close
	StateRequested = "requested" // sent to the agent, uploads expected
	StateComplete  = agentapi.StatusComplete
	StatePartial   = agentapi.StatusPartial
	StateFailed    = agentapi.StatusFailed
	StateExpired   = "expired" // the agent never completed it
	StateSkipped   = "skipped" // budget exhausted, or held by the rate limits past its window
)

// Config sets capture windows, budgets and timeouts.
type Config struct {
	// Pre and Post widen a span's window: [start − Pre, end + Post]
	// (a span a verdict asked for: [start − Pre, end]).
	Pre  time.Duration `yaml:"pre"`
	Post time.Duration `yaml:"post"`
	// Settle is waited after a window closes (or after the first anomaly
	// arrives, if later) before asking for it, so the agent's ring buffers hold
	// the window's last samples and overlapping anomalies arriving meanwhile are
	// coalesced into one capture.
	Settle time.Duration `yaml:"settle"`
	// MaxWindow caps a coalesced window.
	MaxWindow time.Duration `yaml:"max_window"`
	// MaxDelay bounds how much later than when it was first due a pending
	// capture may be asked for because anomalies coalesced into it (each
	// moves its window's end): a steady stream of slow requests would
	// otherwise postpone it until the window stops growing. Anomalies past
	// it start the next capture. 0: no bound.
	MaxDelay time.Duration `yaml:"max_delay"`
	// BudgetBytesPerMinute bounds artifact bytes per process per minute.
	BudgetBytesPerMinute int64 `yaml:"budget_bytes_per_minute"`
	// MinInterval is the least time between two captures of one process
	// (0: none). Anomalies meanwhile join the capture that waits, whose
	// window grows to cover them (within MaxWindow): a burst of slow
	// requests costs the process one dump per interval, not one per window.
	MinInterval time.Duration `yaml:"min_interval"`
	// AskedInterval stands for MinInterval for the spans an open
	// incident's verdict asks captures of (CaptureSpans), for the first
	// capture of a process of a service the open incidents rank suspect
	// (SetSuspects) since its incident began or it became one, and for
	// every capture of a culprit whose verdict has none of its kernel
	// paths yet: the verdict waits for them, so they need not wait a whole
	// MinInterval after the capture the incident's first anomalies took,
	// or one taken before the incident. MaxPerMinute and the budgets hold
	// all the same; such a culprit's burst counts the suspects' captures
	// only.
	AskedInterval time.Duration `yaml:"asked_interval"`
	// MaxPerMinute bounds captures requested per minute over all processes
	// (0: no bound), at most 3 of them within any 3/MaxPerMinute of a
	// minute (15 s at 12). Captures beyond it wait for a slot while their
	// window's start is within MaxWindow of now, else are skipped.
	MaxPerMinute int `yaml:"max_per_minute"`
	// SuspectShare is the share of MaxPerMinute (rounded up) kept for the
	// processes of the services open incidents rank most suspect
	// (SetSuspects): the other processes' captures use at most the rest of
	// a minute's captures and leave one of every burst free. When a fault
	// slows every service on a request path, the callers' anomalies come
	// first and would otherwise take the budget the culprit needs. Without
	// a ranking (no incident open, or no Suspects given) nothing is used by
	// suspects, so the others are held to the rest all the same: the cost
	// bound stays MaxPerMinute. 0 keeps nothing.
	SuspectShare float64 `yaml:"suspect_share"`
	// Suspects is how many of each open incident's most suspect services
	// (its verdict's culprit, then its ranking) SuspectShare is kept for.
	Suspects int `yaml:"suspects"`
	// Concurrency bounds dump requests in flight.
	Concurrency int `yaml:"concurrency"`
	// MaxPerAgent bounds the captures one agent is working on (requested,
	// not yet completed); more wait here, suspects first (0: no bound). An
	// agent copies a request's kernel window when it accepts it and
	// encodes it when one of its dump slots (max_concurrent_dumps, 2)
	// frees: on a loaded node a dump takes tens of seconds, and a capture
	// that waits at the agent too long expires (CaptureTimeout). Waiting
	// here, they keep their order, and are skipped once their window's
	// start is more than MaxWindow old (bench/RESULTS.md, "the culprit's
	// path in the demo" and "dumps that keep their window").
	MaxPerAgent int `yaml:"max_per_agent"`
	// Queue bounds anomalies waiting to be routed; beyond it they are dropped
	// (counted), because capture must never slow ingest.
	Queue int `yaml:"queue"`
	// RequestTimeout bounds the dump request to the agent (not the upload).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// EagerPaths makes the server compute every capture's kernel critical
	// paths as soon as it completes. By default a capture that completes
	// while no incident is open (or settling) has them computed only when
	// an incident opens within the diagnosis' lookback of it, or when they
	// are asked for (the trace's critical path in the API or the UI): in a
	// healthy mesh the detector's tail captures are most of the server's
	// capture work, and nothing reads their paths.
	EagerPaths bool `yaml:"eager_paths"`
	// CaptureTimeout is how long an agent has to complete a capture.
	CaptureTimeout time.Duration `yaml:"capture_timeout"`
	// Heartbeat is the agents' heartbeat interval.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// MaxTargets bounds the processes captured for one span when only its
	// service name identifies it (replicas).
	MaxTargets int `yaml:"max_targets"`
	// Kinds requested from agents; empty asks for every kind the agent offers.
	Kinds []string `yaml:"kinds"`
	// AuthToken, when set, is required from agents and sent to them.
	AuthToken string `yaml:"-"`
	// AgentTLS configures the dump requests sent to agents at https dump
	// URLs (a CA bundle to trust, a client certificate for mutual TLS).
	AgentTLS tlsconf.Client `yaml:"agent_tls"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		// MaxWindow within the kernel recorder's 60 s retention, with
		// room for the dump to start: a window older than that is evicted
		// before it is dumped.
		Pre: 5 * time.Second, Post: 2 * time.Second, Settle: time.Second, MaxWindow: 45 * time.Second, MaxDelay: 2 * time.Second,
		BudgetBytesPerMinute: 64 << 20, MinInterval: 30 * time.Second, AskedInterval: 5 * time.Second, MaxPerMinute: 12,
		SuspectShare: 0.5, Suspects: 2,
		Concurrency: 4, MaxPerAgent: 4, Queue: 10_000,
		RequestTimeout: 10 * time.Second, CaptureTimeout: 2 * time.Minute,
		Heartbeat: 10 * time.Second, MaxTargets: 4,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Pre < 0 || c.Post < 0 || c.Settle < 0 || c.MinInterval < 0 || c.AskedInterval < 0 || c.MaxDelay < 0 {
		errs = append(errs, errors.New("capture pre, post, settle, min_interval, asked_interval and max_delay must not be negative"))
	}
	if c.MaxPerMinute < 0 {
		errs = append(errs, errors.New("capture max_per_minute must not be negative (0: no bound)"))
	}
	if c.SuspectShare < 0 || c.SuspectShare > 1 || c.Suspects < 0 {
		errs = append(errs, errors.New("capture suspect_share must be in [0, 1] and suspects not negative"))
	}
	if c.MaxWindow <= 0 {
		errs = append(errs, errors.New("capture max_window must be positive"))
	}
	if c.BudgetBytesPerMinute <= 0 {
		errs = append(errs, errors.New("capture budget_bytes_per_minute must be positive"))
	}
	if c.MaxPerAgent < 0 {
		errs = append(errs, errors.New("capture max_per_agent must not be negative (0: no bound)"))
	}
	if c.Concurrency < 1 || c.Queue < 1 || c.MaxTargets < 1 {
		errs = append(errs, errors.New("capture concurrency, queue and max_targets must be ≥ 1"))
	}
	if c.RequestTimeout <= 0 || c.CaptureTimeout <= 0 || c.Heartbeat <= 0 {
		errs = append(errs, errors.New("capture timeouts and heartbeat must be positive"))
	}
	return errors.Join(errs...)
}

// Capture is one request for evidence: a process, a window and the spans it explains.
type Capture struct {
	ID        string          `json:"id"`
	AgentID   string          `json:"agentId"`
	Host      string          `json:"host"`
	PID       int64           `json:"pid"`
	Service   string          `json:"service,omitempty"`
	Start     int64           `json:"start"`
	End       int64           `json:"end"`
	Kinds     []string        `json:"kinds,omitempty"`
	Spans     []store.SpanRef `json:"-"`
	SpanCount int             `json:"spanCount"`
	State     string          `json:"state"`
	// Suspect: the capture was requested for a service an open incident
	// ranked among its most suspect (Config.SuspectShare).
	Suspect   bool      `json:"suspect,omitempty"`
	Error     string    `json:"error,omitempty"`
	Artifacts []string  `json:"artifacts"`
	Bytes     int64     `json:"bytes"`
	Created   time.Time `json:"created"`
	Requested time.Time `json:"requested,omitzero"`
	Finished  time.Time `json:"finished,omitzero"`
	due       time.Time
	// held: the capture waits for MinInterval or MaxPerMinute, and takes
	// any anomaly of its process that fits MaxWindow.
	held bool
	// asked: it holds a span a verdict asked for (AskedInterval applies).
	asked bool
	// latest is how late coalescing may make it due (MaxDelay past when it
	// was first due, or held to).
	latest time.Time
	// spansEnd is the latest end of its spans (Unix ns).
	spansEnd int64
}

type agent struct {
	agentapi.Registration
	lastSeen time.Time
	// client sends dump requests to the registration's DumpURL.
	client *agentapi.AgentClient
}

// queued is a span waiting to be routed; asked: an incident's verdict asked
// for it (CaptureSpans), which AskedInterval lets through sooner.
type queued struct {
	span  *model.Span
	asked bool
}

type procKey struct {
	agent string
	pid   int64
}

// firing is a capture request, for the rate limits.
type firing struct {
	at      time.Time
	service string
	suspect bool
}

type ledgerEntry struct {
	at    time.Time
	bytes int64
}

// Manager implements pipeline.Sink and serves the agent/capture HTTP API.
type Manager struct {
	cfg       Config
	artifacts store.ArtifactStore
	logger    *slog.Logger
	// dumpOpts configure the clients of the agents' dump URLs.
	dumpOpts agentapi.ClientOptions
	// otlpPort and otlpTLS are the OTLP/HTTP receiver the registration
	// replies name (SetOTLPHTTP; 0: none).
	otlpPort atomic.Int32
	otlpTLS  atomic.Bool
	now      func() time.Time

	anomalies chan queued
	wake      chan struct{}
	sem       chan struct{}
	wg        sync.WaitGroup

	mu       sync.Mutex
	agents   map[string]*agent
	captures map[string]*Capture
	pending  map[procKey][]*Capture
	finished []string // ids of ended captures, oldest first (bounded)
	ledger   map[string][]ledgerEntry
	// lastFired is when each process's last capture was requested, fired
	// the request times of the last minute (oldest first): the rate limits.
	lastFired map[procKey]time.Time
	fired     []firing
	// suspects returns the services open incidents rank most suspect, most
	// suspect first (nil: no ranking, SuspectShare does not apply);
	// suspect is its last answer, refreshed every second, by service.
	suspects Suspects
	suspect  map[string]suspectState
	// onFinished are called with each capture an agent completed.
	onFinished []func(Capture)

	// uploadURL goes into dump requests (DumpRequest.UploadURL); mirror
	// is told of every registration, heartbeat and deregistration this
	// Manager serves, so that other processes can apply them (ApplyAgent).
	uploadURL string
	mirror    func(reg agentapi.Registration, gone bool)

	m captureMetrics
}

// OnFinished registers f to be called, in a goroutine of its own, with a copy
// of each capture an agent completes (state complete or partial) once its
// artifacts are stored: analyses of the evidence hook there. Register before
// Run.
func (m *Manager) OnFinished(f func(Capture)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onFinished = append(m.onFinished, f)
}

// Suspects names the services the open incidents rank most suspect, most
// suspect first. It is called about once a second from the Manager's loop
// and MUST return promptly without calling back into the Manager.
type Suspects func() []Suspect

// Suspect is a service an open incident ranks among its most suspect.
type Suspect struct {
	Service string
	// Since is when the newest incident that ranks it began (zero: not
	// known): a capture of the service's process requested before it
	// holds none of the incident's slow requests.
	Since time.Time
	// Wanting: the incident's verdict names it culprit and has no kernel
	// critical path of its slow spans (or no cause) yet, so every capture
	// of it is as good as asked for (AskedInterval).
	Wanting bool
}

// suspectState is what the Manager keeps of a Suspect: its rank, since
// when its captures count for the incident (the later of the incident's
// start and when the service entered the ranking) and whether the verdict
// wants its evidence.
type suspectState struct {
	rank    int
	since   time.Time
	wanting bool
}

// SetSuspects gives the Manager the ranking Config.SuspectShare keeps
// captures for. Call it before Run.
func (m *Manager) SetSuspects(f Suspects) {
	m.mu.Lock()
	m.suspects = f
	m.mu.Unlock()
	m.refreshSuspects()
}

// refreshSuspects asks for the ranking (outside m.mu: the ranking takes
// its own lock).
func (m *Manager) refreshSuspects() {
	m.mu.Lock()
	f := m.suspects
	m.mu.Unlock()
	if f == nil {
		return
	}
	list := f()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	next := make(map[string]suspectState, len(list))
	var eased []string
	for _, s := range list {
		if _, ok := next[s.Service]; ok {
			continue
		}
		st := suspectState{rank: len(next), since: now, wanting: s.Wanting}
		old, was := m.suspect[s.Service]
		if was {
			st.since = old.since
		}
		st.since = laterOf(st.since, s.Since)
		next[s.Service] = st
		// Its captures may go sooner than they were held to when it just
		// became a suspect, an incident began since, or the verdict came
		// to want its evidence.
		if !was || st.since.After(old.since) || (st.wanting && !old.wanting) {
			eased = append(eased, s.Service)
		}
	}
	m.suspect = next
	if len(eased) == 0 {
		return
	}
	// The pending captures of those services, some held by MinInterval
	// after one taken before (nextSlotLocked): the incident's verdict
	// waits for them. Each already holds slow spans, which have ended; the
	// rest of its window (Post after the last of them) is context the
	// verdict does not read, so the window ends with the last of them and
	// the capture goes once the agent's buffers hold that (Settle after
	// it: by the time a span reached the server and ranked its service,
	// mostly now). Anomalies that would postpone it start the next
	// capture, which the suspect's AskedInterval lets follow.
	for key, list := range m.pending {
		for _, c := range list {
			if !slices.Contains(eased, c.Service) {
				continue
			}
			end := min(c.End, max(c.spansEnd, c.Start))
			slot := m.nextSlotLocked(key, c.Service, now, c.asked)
			settled := laterOf(time.Unix(0, end).Add(m.cfg.Settle), now)
			if due := laterOf(slot, settled); due.Before(c.due) {
				c.End, c.due, c.held = end, due, slot.After(settled)
				c.latest = due
			}
		}
	}
}

// suspectLocked reports whether service is ranked suspect, and its rank
// (len of the ranking when it is not). m.mu is held.
func (m *Manager) suspectLocked(service string) (bool, int) {
	st, ok := m.suspect[service]
	if !ok {
		return false, len(m.suspect)
	}
	return true, st.rank
}

type captureMetrics struct {
	anomalies, dropped, unrouted, coalesced *prometheus.CounterVec
	unregistered                            *prometheus.CounterVec
	captures                                *prometheus.CounterVec
	uploadBytes                             prometheus.Counter
	requested                               prometheus.Counter
	agents                                  prometheus.GaugeFunc
}

// maxFinished bounds the ended captures kept for the API.
const maxFinished = 2000

// New returns a Manager. reg may be nil.
func New(cfg Config, artifacts store.ArtifactStore, logger *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tlsCfg, err := cfg.AgentTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("capture agent_tls: %w", err)
	}
	m := &Manager{
		cfg: cfg, artifacts: artifacts, logger: logger.With("component", "capture"),
		// A dump URL on a unix socket is dialed only when the socket is
		// root's or this server's own: a registration must not make the
		// server talk to some other program's socket.
		dumpOpts: agentapi.ClientOptions{Token: cfg.AuthToken, TLS: tlsCfg, Timeout: cfg.RequestTimeout,
			SocketOwners: []uint32{0, uint32(os.Geteuid())}},
		now:       time.Now,
		anomalies: make(chan queued, cfg.Queue),
		wake:      make(chan struct{}, 1),
		sem:       make(chan struct{}, cfg.Concurrency),
		agents:    map[string]*agent{},
		captures:  map[string]*Capture{},
		pending:   map[procKey][]*Capture{},
		ledger:    map[string][]ledgerEntry{},
		lastFired: map[procKey]time.Time{},
	}
	m.m = captureMetrics{
		anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_capture_anomalies_total", Help: "Anomalous spans handed to the capture trigger."}, nil),
		dropped:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_capture_anomalies_dropped_total", Help: "Anomalous spans dropped because the capture queue was full."}, nil),
		unrouted:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_capture_unrouted_total", Help: "Anomalous spans no registered agent serves."}, nil),
		unregistered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_capture_unregistered_pid_total",
			Help: "Anomalous spans whose process.pid no agent registered for their service: no capture is requested."}, nil),
		coalesced:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_capture_coalesced_total", Help: "Anomalous spans folded into an existing capture."}, nil),
		captures:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_captures_total", Help: "Captures by final state."}, []string{"state"}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_capture_artifact_bytes_total", Help: "Artifact bytes accepted from agents."}),
		requested: prometheus.NewCounter(prometheus.CounterOpts{Name: "rootline_capture_requested_spans_total",
			Help: "Spans the diagnosis asked captures for (slow spans of an incident's culprit the detector did not flag)."}),
		agents: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "rootline_agents", Help: "Registered agents."}, func() float64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			return float64(len(m.agents))
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.m.anomalies, m.m.dropped, m.m.unrouted, m.m.unregistered, m.m.coalesced, m.m.captures, m.m.uploadBytes, m.m.requested, m.m.agents} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register capture metrics: %w", err)
			}
		}
	}
	return m, nil
}

// OnCommitted queues the anomalous spans of a committed batch. It never blocks.
func (m *Manager) OnCommitted(spans []*model.Span) {
	for _, s := range spans {
		if !s.IsAnomalous() {
			continue
		}
		m.m.anomalies.WithLabelValues().Inc()
		select {
		case m.anomalies <- queued{span: s}:
		default:
			m.m.dropped.WithLabelValues().Inc()
		}
	}
}

// CaptureSpans queues spans the detector did not flag for capture as if it
// had: the slow spans of an incident's culprit that no capture holds (an
// incident opened on a shift of its entry point's latency, which flags few
// spans). They share the anomalies' queue, rate limits and budgets, except
// that AskedInterval stands for MinInterval: the verdict waits for them, and
// it asks only while it lacks paths. A span whose process was captured over
// its time already just joins that capture. It never blocks; it returns how
// many were queued.
func (m *Manager) CaptureSpans(spans []*model.Span) int {
	n := 0
	for _, s := range spans {
		select {
		case m.anomalies <- queued{span: s, asked: true}:
			n++
			m.m.requested.Inc()
		default:
			m.m.dropped.WithLabelValues().Inc()
			return n
		}
	}
	return n
}

// Run routes anomalies, fires captures when their windows close and expires
// silent agents and stuck captures, until ctx ends. In-flight dump requests
// are waited for before it returns.
func (m *Manager) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		m.resetTimer(timer)
		select {
		case <-ctx.Done():
			m.wg.Wait()
			return nil
		case q := <-m.anomalies:
			m.route(q.span, q.asked)
		case <-m.wake:
		case <-timer.C:
		case <-tick.C:
			m.expire()
			m.refreshSuspects()
		}
		m.fireDue(ctx)
	}
}

func (m *Manager) resetTimer(t *time.Timer) {
	m.mu.Lock()
	next := time.Time{}
	for _, list := range m.pending {
		for _, c := range list {
			if next.IsZero() || c.due.Before(next) {
				next = c.due
			}
		}
	}
	m.mu.Unlock()
	d := time.Hour
	if !next.IsZero() {
		d = max(next.Sub(m.now()), 0)
	}
	t.Reset(d)
}

// target is a process an anomalous span maps to.
type target struct {
	agent *agent
	proc  agentapi.Process
}

// resolve maps a span to the processes that served it. Only processes an
// agent registered under the span's service.name are candidates: a span's
// attributes choose among them, never beyond them, so that whoever can send
// spans cannot have an arbitrary process profiled. In order of precision:
// service.instance.id; process.pid with host.name; process.pid alone;
// service.name (every replica, at most MaxTargets), restricted to host.name
// when present. A span that names a process.pid no agent registered for its
// service resolves to nothing and unregistered is true.
func (m *Manager) resolve(s *model.Span) (targets []target, unregistered bool) {
	str := func(k string) string {
		v, ok := s.ResourceAttr(k)
		if !ok {
			return ""
		}
		return v.String()
	}
	if s.Service == "" {
		return nil, false
	}
	inst, host := str(model.AttrServiceInstanceID), str(model.AttrHostName)
	var pid int64
	if v, ok := s.ResourceAttr(model.AttrProcessPID); ok {
		pid = v.Int
		if v.Type == model.TypeString {
			pid, _ = strconv.ParseInt(v.Str, 10, 64)
		}
	}
	ids := make([]string, 0, len(m.agents))
	for id := range m.agents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// The service's registered processes, in a stable order.
	var registered []target
	for _, id := range ids {
		a := m.agents[id]
		if host != "" && a.Host != host {
			continue
		}
		for _, p := range a.Processes {
			if p.Service == s.Service {
				registered = append(registered, target{a, p})
			}
		}
	}
	pick := func(ok func(p agentapi.Process) bool, limit int) []target {
		var out []target
		for _, t := range registered {
			if ok(t.proc) {
				out = append(out, t)
				if len(out) == limit {
					break
				}
			}
		}
		return out
	}
	if inst != "" {
		if t := pick(func(p agentapi.Process) bool { return p.InstanceID == inst }, 1); len(t) > 0 {
			return t, false
		}
	}
	if pid != 0 {
		// One pid on several hosts (no host.name to tell them apart): each
		// of them served the service, so each is captured.
		t := pick(func(p agentapi.Process) bool { return p.PID == pid }, m.cfg.MaxTargets)
		return t, len(t) == 0
	}
	return pick(func(agentapi.Process) bool { return true }, m.cfg.MaxTargets), false
}

// route folds an anomalous span into a pending or in-flight capture of its
// process, or starts a new one; asked: a verdict asked for it.
func (m *Manager) route(s *model.Span, asked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	targets, unregistered := m.resolve(s)
	if unregistered {
		m.m.unregistered.WithLabelValues().Inc()
		m.logger.Debug("anomalous span names a process not registered for its service: no capture",
			"service", s.Service, "trace", s.TraceID.String(), "span", s.SpanID.String())
		return
	}
	if len(targets) == 0 {
		m.m.unrouted.WithLabelValues().Inc()
		return
	}
	ref := store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID}
	start, end := s.Start-int64(m.cfg.Pre), s.End()+int64(m.cfg.Post)
	if asked {
		// A verdict asks for spans that ended before it was computed,
		// for their critical paths, which lie within them: waiting Post
		// after them would only delay the verdict.
		end = s.End()
	}
	for _, t := range targets {
		key := procKey{t.agent.AgentID, t.proc.PID}
		if m.coalesce(key, t.proc.Service, ref, start, end, s.Start, s.End(), asked) {
			m.m.coalesced.WithLabelValues().Inc()
			continue
		}
		c := &Capture{
			ID: newID(), AgentID: t.agent.AgentID, Host: t.agent.Host, PID: t.proc.PID,
			Service: t.proc.Service, Start: start, End: end, Kinds: m.kindsFor(t),
			Spans: []store.SpanRef{ref}, State: StatePending, Created: m.now(),
			Artifacts: []string{}, asked: asked, spansEnd: s.End(),
		}
		c.due = laterOf(time.Unix(0, end), m.now()).Add(m.cfg.Settle)
		m.captures[c.ID] = c
		if next := m.nextSlotLocked(key, c.Service, m.now(), asked); next.After(c.due) {
			// The process waits for its interval: later anomalies join this.
			c.due, c.held = next, true
		}
		c.latest = c.due.Add(m.cfg.MaxDelay)
		m.pending[key] = append(m.pending[key], c)
	}
}

// coalesce adds ref to an existing capture of key whose window overlaps
// [start, end] (the span's window, Pre and Post around the span): a pending
// one grows to the union (within MaxWindow); an in-flight one that covers
// the span itself, [spanStart, spanEnd], just explains one more span: its
// recording holds every moment of the span, which is what the span's
// critical path reads, and a capture of its own would cost the process a
// dump for what is already being uploaded. A span a verdict asked for
// (asked) releases a held capture it joins as soon as AskedInterval allows.
func (m *Manager) coalesce(key procKey, service string, ref store.SpanRef, start, end, spanStart, spanEnd int64, asked bool) bool {
	for _, c := range m.pending[key] {
		if !c.held && (start > c.End || end < c.Start) {
			continue
		}
		ns, ne := min(start, c.Start), max(end, c.End)
		if ne-ns > int64(m.cfg.MaxWindow) {
			continue
		}
		settled := laterOf(time.Unix(0, ne), m.now()).Add(m.cfg.Settle)
		if m.cfg.MaxDelay > 0 && settled.After(c.latest) {
			// It would postpone the capture past MaxDelay: the next one
			// takes it.
			continue
		}
		c.Start, c.End = ns, ne
		c.spansEnd = max(c.spansEnd, spanEnd)
		c.due = laterOf(c.due, settled)
		if asked && !c.asked {
			c.asked = true
			if c.held {
				slot := m.nextSlotLocked(key, service, m.now(), true)
				c.due, c.held = laterOf(settled, slot), slot.After(settled)
				c.latest = c.due.Add(m.cfg.MaxDelay)
			}
		}
		c.Spans = append(c.Spans, ref)
		return true
	}
	for _, c := range m.captures {
		if c.State != StateRequested || c.AgentID != key.agent || c.PID != key.pid {
			continue
		}
		if spanStart >= c.Start && spanEnd <= c.End {
			c.Spans = append(c.Spans, ref)
			m.linkLater(c, ref)
			return true
		}
	}
	return false
}

// linkLater links the artifacts a capture already has to a span that joined it.
func (m *Manager) linkLater(c *Capture, ref store.SpanRef) {
	ids := append([]string(nil), c.Artifacts...)
	if len(ids) == 0 {
		return
	}
	go func() {
		for _, id := range ids {
			if err := m.artifacts.LinkArtifact(context.Background(), id, []store.SpanRef{ref}); err != nil {
				m.logger.Warn("link artifact to coalesced span", "artifact", id, "err", err)
			}
		}
	}()
}

func (m *Manager) kindsFor(t target) []string {
	offered := t.proc.Kinds
	if len(offered) == 0 {
		offered = t.agent.Kinds
	}
	if len(m.cfg.Kinds) == 0 {
		return append([]string(nil), offered...)
	}
	var out []string
	for _, k := range m.cfg.Kinds {
		for _, o := range offered {
			if k == o {
				out = append(out, k)
			}
		}
	}
	return out
}

// fireDue sends every pending capture whose window has settled.
func (m *Manager) fireDue(ctx context.Context) {
	now := m.now()
	var due []*Capture
	m.mu.Lock()
	for key, list := range m.pending {
		keep := list[:0]
		for _, c := range list {
			if c.due.After(now) {
				keep = append(keep, c)
				continue
			}
			due = append(due, c)
		}
		if len(keep) == 0 {
			delete(m.pending, key)
		} else {
			m.pending[key] = keep
		}
	}
	m.orderLocked(due, now)
	busy := m.busyAgentsLocked()
	for _, c := range due {
		c.SpanCount = len(c.Spans)
		key := procKey{c.AgentID, c.PID}
		if next := m.nextSlotLocked(key, c.Service, now, c.asked); next.After(now) {
			if next.Sub(time.Unix(0, c.Start)) > m.cfg.MaxWindow {
				// The agents' buffers will not reach back that far.
				m.finishLocked(c, StateSkipped, "capture rate limit (capture.min_interval, capture.max_per_minute) held it past capture.max_window")
				continue
			}
			m.holdLocked(key, c, next)
			continue
		}
		if m.cfg.MaxPerAgent > 0 && busy[c.AgentID] >= m.cfg.MaxPerAgent {
			if now.Sub(time.Unix(0, c.Start)) > m.cfg.MaxWindow {
				m.finishLocked(c, StateSkipped, "the agent was busy with earlier captures (capture.max_per_agent) past capture.max_window")
				continue
			}
			// Asked again when a slot may be free; it keeps its place
			// (orderLocked) and takes no rate-limit slot meanwhile.
			m.holdLocked(key, c, now.Add(agentRetry))
			continue
		}
		busy[c.AgentID]++
		m.lastFired[key] = now
		c.Suspect, _ = m.suspectLocked(c.Service)
		m.fired = append(m.fired, firing{at: now, service: c.Service, suspect: c.Suspect})
		left := m.cfg.BudgetBytesPerMinute - m.usedLocked(budgetKey(c.Host, c.PID), now)
		if left <= 0 {
			m.finishLocked(c, StateSkipped, "per-process capture budget exhausted for this minute")
			continue
		}
		c.State = StateRequested
		c.Requested = now
		req := agentapi.DumpRequest{CaptureID: c.ID, AgentID: c.AgentID, PID: c.PID, Service: c.Service,
			Start: c.Start, End: c.End, Kinds: c.Kinds, MaxBytes: left, UploadURL: m.uploadURL}
		for _, r := range c.Spans {
			req.Spans = append(req.Spans, agentapi.SpanRef{TraceID: r.TraceID.String(), SpanID: r.SpanID.String()})
		}
		a := m.agents[c.AgentID]
		if a == nil {
			m.finishLocked(c, StateFailed, "agent is gone")
			continue
		}
		m.wg.Add(1)
		go m.send(ctx, c.ID, a.client, req)
	}
	m.mu.Unlock()
}

// holdLocked makes c wait until next, merged into a capture of key that
// already waits when their union fits MaxWindow. m.mu is held.
func (m *Manager) holdLocked(key procKey, c *Capture, next time.Time) {
	for _, w := range m.pending[key] {
		if w == c || !w.held || max(w.End, c.End)-min(w.Start, c.Start) > int64(m.cfg.MaxWindow) {
			continue
		}
		w.Start, w.End = min(w.Start, c.Start), max(w.End, c.End)
		w.spansEnd = max(w.spansEnd, c.spansEnd)
		w.Spans = append(w.Spans, c.Spans...)
		if c.asked && !w.asked {
			w.asked, w.due = true, next
		} else {
			w.due = laterOf(w.due, next)
		}
		w.latest = laterOf(w.latest, w.due.Add(m.cfg.MaxDelay))
		delete(m.captures, c.ID)
		return
	}
	c.due, c.held = next, true
	c.latest = next.Add(m.cfg.MaxDelay)
	m.pending[key] = append(m.pending[key], c)
}

// orderLocked sorts the captures due at now in the order they get the
// rate limits' slots: the services open incidents rank most suspect first
// (by rank), then the services captured least in the last minute (so that
// one service's stream of anomalies does not starve the others), then the
// earliest window. First come would favour the callers of a slow service:
// their spans start first and their anomalies arrive with its. m.mu is
// held.
func (m *Manager) orderLocked(due []*Capture, now time.Time) {
	recent := map[string]int{}
	for _, f := range m.fired {
		if now.Sub(f.at) < time.Minute {
			recent[f.service]++
		}
	}
	sort.SliceStable(due, func(i, j int) bool {
		_, ri := m.suspectLocked(due[i].Service)
		_, rj := m.suspectLocked(due[j].Service)
		if ri != rj {
			return ri < rj
		}
		if ni, nj := recent[due[i].Service], recent[due[j].Service]; ni != nj {
			return ni < nj
		}
		return due[i].Start < due[j].Start
	})
}

// nextSlotLocked returns when a capture of key, a process of service, may
// next be requested under MinInterval (AskedInterval for a capture a
// verdict asked for), MaxPerMinute and SuspectShare (now or earlier: at
// once). m.mu is held.
func (m *Manager) nextSlotLocked(key procKey, service string, now time.Time, asked bool) time.Time {
	next := now
	st, suspect := m.suspect[service]
	last, captured := m.lastFired[key]
	interval := m.cfg.MinInterval
	// A suspect's first capture since its incident began (or since it
	// became a suspect) is as good as asked for: the incident's verdict
	// waits for it, and the capture that holds it back was taken before,
	// without the slow requests it must explain. So is every capture of a
	// culprit whose verdict still has none of its kernel paths.
	eased := suspect && captured && (st.wanting || last.Before(st.since))
	if asked || eased {
		interval = min(interval, m.cfg.AskedInterval)
	}
	if captured && interval > 0 {
		next = laterOf(next, last.Add(interval))
	}
	i := 0
	for i < len(m.fired) && now.Sub(m.fired[i].at) >= time.Minute {
		i++
	}
	m.fired = m.fired[i:]
	n := m.cfg.MaxPerMinute
	if n <= 0 {
		return next
	}
	if len(m.fired) >= n {
		next = laterOf(next, m.fired[len(m.fired)-n].at.Add(time.Minute))
	}
	// Spread them over the minute too: at most captureBurst in any
	// captureBurst/n of a minute. A slow service makes its callers slow
	// at the same moment, and a dozen dumps at once on a small node
	// slowed every service for a while (bench/RESULTS.md, demo mesh).
	b := min(captureBurst, n)
	span := time.Duration(b) * time.Minute / time.Duration(n)
	burst := m.fired
	if suspect && st.wanting {
		// A culprit the verdict has no path of yet: only the suspects'
		// captures count towards its burst, so that the others' taken at
		// the onset (its callers are slow too) do not hold it a whole
		// span. At most b more dumps in a span, while an incident wants
		// them.
		burst = nil
		for _, f := range m.fired {
			if f.suspect {
				burst = append(burst, f)
			}
		}
	}
	if len(burst) >= b {
		next = laterOf(next, burst[len(burst)-b].at.Add(span))
	}
	if suspect || m.suspects == nil {
		return next
	}
	// Not a suspect: the kept share is not for it, nor the last of a
	// burst (the others' captures take at most b−1 of any burst's span).
	kept := int(math.Ceil(m.cfg.SuspectShare * float64(n)))
	if kept == 0 {
		return next
	}
	rest := n - kept
	if rest <= 0 || b == 1 {
		return laterOf(next, now.Add(span))
	}
	var others []time.Time
	for _, f := range m.fired {
		if !f.suspect {
			others = append(others, f.at)
		}
	}
	if len(others) >= rest {
		next = laterOf(next, others[len(others)-rest].Add(time.Minute))
	}
	if len(others) >= b-1 {
		next = laterOf(next, others[len(others)-(b-1)].Add(span))
	}
	return next
}

// busyAgentsLocked counts the captures each agent is working on. m.mu is
// held.
func (m *Manager) busyAgentsLocked() map[string]int {
	busy := map[string]int{}
	for _, c := range m.captures {
		if c.State == StateRequested {
			busy[c.AgentID]++
		}
	}
	return busy
}

// agentRetry is how soon a capture held for a busy agent is tried again.
const agentRetry = time.Second

// captureBurst is how many captures MaxPerMinute lets start together.
const captureBurst = 3

// send posts a dump request; on failure the capture fails with the reason.
func (m *Manager) send(ctx context.Context, id string, client *agentapi.AgentClient, req agentapi.DumpRequest) {
	defer m.wg.Done()
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		m.fail(id, "server shutting down")
		return
	}
	defer func() { <-m.sem }()
	if _, err := client.Dump(ctx, req); err != nil {
		if agentapi.StatusOf(err) == http.StatusTooManyRequests {
			m.retryBusy(id, err)
			return
		}
		if agentapi.StatusOf(err) != 0 {
			m.fail(id, err.Error())
		} else {
			m.fail(id, fmt.Sprintf("dump request to agent failed: %v", err))
		}
	}
}

// retryBusy: the agent refused the capture for now (429: the windows it
// holds for accepted dumps fill its memory bound). The capture waits here
// as for a busy agent (MaxPerAgent), and is skipped once its window is
// older than MaxWindow.
func (m *Manager) retryBusy(id string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.captures[id]
	if c == nil || c.State != StateRequested {
		return
	}
	now := m.now()
	if now.Sub(time.Unix(0, c.Start)) > m.cfg.MaxWindow {
		m.finishLocked(c, StateSkipped, "the agent was busy (it answered 429) past capture.max_window: "+err.Error())
		return
	}
	c.State, c.Requested = StatePending, time.Time{}
	m.holdLocked(procKey{c.AgentID, c.PID}, c, now.Add(agentRetry))
}

func (m *Manager) fail(id, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.captures[id]; c != nil && c.State == StateRequested {
		m.finishLocked(c, StateFailed, reason)
	}
}

// finishLocked ends a capture; m.mu is held.
func (m *Manager) finishLocked(c *Capture, state, reason string) {
	c.State, c.Error, c.Finished = state, reason, m.now()
	c.SpanCount = len(c.Spans)
	m.m.captures.WithLabelValues(state).Inc()
	if reason != "" && state != StateComplete {
		m.logger.Info("capture ended", "capture", c.ID, "state", state, "pid", c.PID, "host", c.Host, "reason", reason)
	}
	if state == StateComplete || state == StatePartial {
		cp := *c
		cp.Spans = append([]store.SpanRef(nil), c.Spans...)
		cp.Artifacts = append([]string{}, c.Artifacts...)
		for _, f := range m.onFinished {
			go f(cp)
		}
	}
	m.finished = append(m.finished, c.ID)
	if len(m.finished) > maxFinished {
		delete(m.captures, m.finished[0])
		m.finished = m.finished[1:]
	}
}

// expire forgets agents silent for three heartbeats and ends captures whose
// agent never completed them.
func (m *Manager) expire() {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, a := range m.agents {
		if now.Sub(a.lastSeen) > 3*m.cfg.Heartbeat {
			m.logger.Warn("agent expired (no heartbeat)", "agent", id, "host", a.Host)
			a.client.CloseIdleConnections()
			delete(m.agents, id)
		}
	}
	for _, c := range m.captures {
		if c.State == StateRequested && now.Sub(c.Requested) > m.cfg.CaptureTimeout {
			m.finishLocked(c, StateExpired, "agent did not complete the capture in time")
		}
	}
	for k, t := range m.lastFired {
		if now.Sub(t) > m.cfg.MinInterval {
			delete(m.lastFired, k)
		}
	}
	for k, l := range m.ledger {
		m.ledger[k] = pruneLedger(l, now)
		if len(m.ledger[k]) == 0 {
			delete(m.ledger, k)
		}
	}
}

// laterOf returns the later of two times.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func budgetKey(host string, pid int64) string { return host + "/" + strconv.FormatInt(pid, 10) }

func pruneLedger(l []ledgerEntry, now time.Time) []ledgerEntry {
	i := 0
	for i < len(l) && now.Sub(l[i].at) > time.Minute {
		i++
	}
	return l[i:]
}

// usedLocked returns the bytes a process used in the last minute.
func (m *Manager) usedLocked(key string, now time.Time) int64 {
	var n int64
	for _, e := range pruneLedger(m.ledger[key], now) {
		n += e.bytes
	}
	return n
}

// SetUploadURL makes dump requests ask agents to upload to base (the URL of
// this process's capture API) instead of the server they registered with.
// Call it before Run.
func (m *Manager) SetUploadURL(base string) { m.uploadURL = base }

// Mirror makes the Manager call fn after every registration, heartbeat
// (gone false) and deregistration (gone true) it serves. fn MUST NOT block
// for long. Call it before serving.
func (m *Manager) Mirror(fn func(reg agentapi.Registration, gone bool)) { m.mirror = fn }

func (m *Manager) mirrored(reg agentapi.Registration, gone bool) {
	if m.mirror != nil {
		m.mirror(reg, gone)
	}
}

// ApplyAgent applies a registration or heartbeat another process served,
// seen at the time given (an agent silent since then for three heartbeats
// is not added, or is expired as usual).
func (m *Manager) ApplyAgent(reg agentapi.Registration, seen time.Time) {
	if reg.AgentID == "" || m.now().Sub(seen) > 3*m.cfg.Heartbeat {
		return
	}
	client, err := m.validateRegistration(reg)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.agents[reg.AgentID]
	switch {
	case ok && a.lastSeen.After(seen):
		client.CloseIdleConnections()
		return
	case ok && a.DumpURL == reg.DumpURL:
		client.CloseIdleConnections()
		client = a.client // keeps its connections
	case ok:
		a.client.CloseIdleConnections()
	}
	m.agents[reg.AgentID] = &agent{Registration: reg, lastSeen: seen, client: client}
}

// RemoveAgent applies a deregistration another process served.
func (m *Manager) RemoveAgent(id string) {
	m.mu.Lock()
	if a := m.agents[id]; a != nil {
		a.client.CloseIdleConnections()
		delete(m.agents, id)
	}
	m.mu.Unlock()
}

// Captures returns the known captures, newest first, at most limit.
func (m *Manager) Captures(limit int) []Capture {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Capture, 0, len(m.captures))
	for _, c := range m.captures {
		cp := *c
		cp.SpanCount = len(c.Spans)
		cp.Artifacts = append([]string{}, c.Artifacts...)
		out = append(out, cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Agents returns the registered agents sorted by id.
func (m *Manager) Agents() []agentapi.Registration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]agentapi.Registration, 0, len(m.agents))
	for _, a := range m.agents {
		out = append(out, a.Registration)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
