// Package agent is the core of the `rootline agent` role: it finds the
// processes of its node to record (configured, discovered in /proc,
// registered by `rootline run`, or in a registered container: a cgroup v2
// the kernel flight recorder records as a whole, container.go), keeps every
// supporting profiler recording them, registers them with the Rootline
// server, and answers the server's dump requests by uploading the
// profilers' artifacts (docs/api.md, "Capture protocol").
//
// The agent serves its own HTTP API (see Handler) on Config.ListenAddr and on
// a unix socket (Config.Socket), and decides for each request what its
// caller may do (access.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/profiler"
)

// Agent records targets with its profilers and serves dump requests.
// Create it with New, then call Run once.
type Agent struct {
	cfg       Config
	profilers []profiler.Profiler
	logger    *slog.Logger
	server    *agentapi.ServerClient
	procRoot  string
	self      int
	ln        net.Listener
	sock      *socketListener // nil without Config.Socket
	tls       bool            // ln serves TLS
	dumpURL   string
	srv       *http.Server

	// ctx lives as long as the agent: recordings and dumps derive from it.
	ctx    context.Context
	cancel context.CancelFunc

	// scanMu serializes reconciliation, so profiler Start and Stop calls for
	// one target never interleave.
	scanMu sync.Mutex
	seen   map[procKey]procInfo // discovery cache, pruned every scan

	mu         sync.Mutex
	targets    map[int]*target
	registered map[int]apiProcess    // by POST /api/v1/processes
	containers map[uint64]*container // registered cgroups, by id (container.go)
	cgroupRoot string                // the cgroup2 mount ("" if none)
	jobs       map[int][]*dumpJob    // running or waiting dumps per pid
	closed     bool
	dumps      sync.WaitGroup
	dumpSem    chan struct{}
	// heldBytes is the memory of the windows copied for accepted dumps
	// and not yet encoded (Config.MaxHeldBytes bounds it).
	heldBytes atomic.Int64
	heldLimit atomic.Int64 // Config.MaxHeldBytes
	holdMu    sync.Mutex   // one window copied at a time

	changed chan struct{} // the target set changed: heartbeat early
	agentID string        // the server's id for this agent ("": not registered)

	// relay is the span relay (relay.go; nil: Config.Relay.Disabled), and
	// serverTraces the server's traces URL its registration reply named.
	relay        *relay
	serverTraces atomic.Value // string

	// retryMin and retryMax bound the backoff after failed server calls.
	retryMin, retryMax time.Duration

	reg     *prometheus.Registry
	metrics metrics

	components []Component // optional parts (component.go)
}

type procKey struct {
	pid   int
	start uint64
}

// target is one process being recorded.
type target struct {
	profiler.Target
	start      uint64
	instanceID string
	kinds      []string // profilers recording it
	// cgroup is the id of the registered container the process is in (0:
	// none); its kernel dumps are the container's.
	cgroup uint64
	// containerOnly: a target only as a container's process, recorded by
	// the cgroup profilers as part of it (no profiler was started for it).
	containerOnly bool
}

type apiProcess struct {
	service, instanceID string
	start               uint64
	// by is the uid of the local caller that registered it, -1 for a
	// trusted caller: it may forget it too.
	by int64
}

// New validates cfg, binds cfg.ListenAddr (so Addr is known before Run) and
// returns an agent. profilers are owned by the agent from now on: Run closes
// them. A nil logger discards logs. Call Run, or Close if Run is never called.
func New(cfg Config, profilers []profiler.Profiler, logger *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seenNames := map[string]bool{}
	for _, p := range profilers {
		if seenNames[p.Name()] {
			return nil, fmt.Errorf("agent: two profilers named %q", p.Name())
		}
		seenNames[p.Name()] = true
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Host = hostname(cfg.Host)
	cfg.ServerURL = strings.TrimRight(cfg.ServerURL, "/")
	serverTLS, err := cfg.ServerTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("agent: server TLS: %w", err)
	}
	server, err := agentapi.NewServerClient(cfg.ServerURL, cfg.AuthToken, serverTLS)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("agent: listener TLS: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("agent: listen: %w", err)
	}
	var sock *socketListener
	if cfg.Socket != "" {
		if sock, err = listenSocket(cfg.Socket, cfg.SocketMode, cfg.SocketGroup); err != nil {
			ln.Close()
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	// The server reaches the dump API over TCP when it has the token to
	// show there, else through the unix socket (it runs on this machine
	// then: without a token neither side listens beyond loopback).
	dumpURL := "unix:" + cfg.Socket
	if cfg.AuthToken != "" {
		base := strings.TrimRight(cfg.AdvertiseURL, "/")
		if base == "" {
			scheme := "http://"
			if tlsCfg != nil {
				scheme = "https://"
			}
			base = scheme + advertiseAddr(ln.Addr().(*net.TCPAddr), cfg.Host)
		}
		dumpURL = base + agentapi.DumpPath
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{
		cfg: cfg, profilers: profilers, logger: logger.With("component", "agent"),
		server:   server,
		procRoot: "/proc", self: os.Getpid(),
		ln: ln, sock: sock, tls: tlsCfg != nil, dumpURL: dumpURL,
		ctx: ctx, cancel: cancel,
		seen:       map[procKey]procInfo{},
		targets:    map[int]*target{},
		registered: map[int]apiProcess{},
		containers: map[uint64]*container{},
		cgroupRoot: cgroup2Root(),
		jobs:       map[int][]*dumpJob{},
		dumpSem:    make(chan struct{}, cfg.MaxConcurrentDumps),
		changed:    make(chan struct{}, 1),
		retryMin:   time.Second, retryMax: 30 * time.Second,
		reg: prometheus.NewRegistry(),
	}
	a.heldLimit.Store(cfg.MaxHeldBytes)
	a.serverTraces.Store("")
	if !cfg.Relay.Disabled {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = serverTLS
		a.relay = newRelay(cfg.Relay, &http.Client{Transport: tr, Timeout: 30 * time.Second}, cfg.AuthToken, a.relayEndpoint, a.logger)
	}
	fail := func(err error) (*Agent, error) {
		ln.Close()
		if sock != nil {
			sock.Close()
		}
		cancel()
		return nil, err
	}
	for i, spec := range cfg.Containers {
		if _, err := resolveCgroup(a.cgroupRoot, spec); err != nil {
			return fail(fmt.Errorf("agent: containers[%d] (%s): %w", i, spec, err))
		}
	}
	if len(cfg.Containers) > 0 && len(a.cgroupProfilers()) == 0 {
		a.logger.Warn("the configured cgroups are not recorded: " + errNoCgroupProf.Error())
	}
	if err := a.registerMetrics(); err != nil {
		return fail(err)
	}
	a.srv = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		IdleTimeout: agentapi.AgentIdleTimeout,
		TLSConfig:   tlsCfg, ConnContext: connContext,
		// Failed handshakes and the like: whoever sends them, not the agent, is at fault.
		ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelDebug)}
	return a, nil
}

// advertiseAddr is the host:port the server should dial: the bound address,
// or the host name when bound to every interface.
func advertiseAddr(addr *net.TCPAddr, host string) string {
	if addr.IP == nil || addr.IP.IsUnspecified() {
		return net.JoinHostPort(host, fmt.Sprint(addr.Port))
	}
	return addr.String()
}

// relayEndpoint is where the relay sends the node's spans: Config.Relay.URL,
// else what the server's registration reply named ("" before it).
func (a *Agent) relayEndpoint() string {
	if a.cfg.Relay.URL != "" {
		return a.cfg.Relay.URL
	}
	return a.serverTraces.Load().(string)
}

// Addr is the address the agent's API listens on.
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// DumpURL is the dump URL the agent registers: "unix:" + Config.Socket
// without a token, else its TCP address + agentapi.DumpPath.
func (a *Agent) DumpURL() string { return a.dumpURL }

// Socket is the path of the agent's unix socket ("" for none).
func (a *Agent) Socket() string { return a.cfg.Socket }

// Run serves the API, discovers targets, registers and heartbeats with the
// server until ctx ends; then it deregisters, waits for running dumps
// (cancelled), stops every recording and closes the profilers. It returns
// nil on a clean shutdown.
func (a *Agent) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	serveErr := make(chan error, 2)
	go func() {
		if a.tls {
			serveErr <- a.srv.ServeTLS(a.ln, "", "")
		} else {
			serveErr <- a.srv.Serve(a.ln)
		}
	}()
	if a.sock != nil {
		go func() { serveErr <- a.srv.Serve(a.sock) }()
	}
	a.logger.Info("agent started", "listen", a.ln.Addr().String(), "tls", a.tls, "socket", a.cfg.Socket, "dumpUrl", a.dumpURL,
		"server", a.cfg.ServerURL, "profilers", a.kinds(), "discover", a.cfg.Discover)

	a.reconcile()
	waitComponents := a.runComponents(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { a.discoverLoop(ctx) })
	wg.Go(func() { a.registerLoop(ctx) })
	// The relay outlives the listeners: what it took before they shut
	// down is sent.
	relayCtx, relayStop := context.WithCancel(context.WithoutCancel(ctx))
	var relayDone sync.WaitGroup
	if a.relay != nil {
		relayDone.Go(func() { a.relay.run(relayCtx) })
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("agent: serve: %w", err)
	}
	stop()
	wg.Wait()
	waitComponents()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := a.srv.Shutdown(shutdown); serr != nil && err == nil {
		err = serr
	}
	relayStop()
	relayDone.Wait()
	return errors.Join(err, a.Close())
}

// Close cancels running dumps, waits for them, stops every recording and
// closes the profilers. Run calls it; call it yourself only when Run is never
// called.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	a.cancel()
	a.dumps.Wait()
	a.ln.Close() // already closed after Serve; a no-op then
	if a.sock != nil {
		a.sock.Close() // removes the socket file
	}
	defer a.server.CloseIdleConnections()
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	a.mu.Lock()
	targets := a.targets
	a.targets = map[int]*target{}
	a.mu.Unlock()
	for _, t := range targets {
		a.stopTarget(t)
	}
	var errs []error
	for _, p := range a.profilers {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close profiler %s: %w", p.Name(), err))
		}
	}
	if err := a.closeComponents(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *Agent) kinds() []string {
	out := make([]string, 0, len(a.profilers))
	for _, p := range a.profilers {
		out = append(out, p.Name())
	}
	return out
}

func (a *Agent) discoverLoop(ctx context.Context) {
	interval := a.cfg.DiscoverInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.reconcile()
		}
	}
}

// candidate is a process that should be a target.
type candidate struct {
	t             profiler.Target
	start         uint64
	instanceID    string
	cgroup        uint64 // see target
	containerOnly bool
}

// reconcile computes the processes to record and starts and stops
// recordings to match: new targets are started with every profiler that
// supports them; targets whose pid is gone or was reused are stopped.
func (a *Agent) reconcile() {
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	if a.ctx.Err() != nil {
		return
	}
	a.syncContainers()
	want := a.candidates()

	a.mu.Lock()
	var gone []*target
	for pid, t := range a.targets {
		if c, ok := want[pid]; !ok || c.start != t.start || c.cgroup != t.cgroup || c.containerOnly != t.containerOnly {
			gone = append(gone, t)
			delete(a.targets, pid)
		}
	}
	var added []candidate
	for pid, c := range want {
		if _, ok := a.targets[pid]; !ok {
			added = append(added, c)
		}
	}
	a.mu.Unlock()

	for _, t := range gone {
		a.logger.Info("target gone", "pid", t.PID, "service", t.Service)
		a.stopTarget(t)
	}
	sort.Slice(added, func(i, j int) bool { return added[i].t.PID < added[j].t.PID })
	for _, c := range added {
		t := &target{Target: c.t, start: c.start, instanceID: c.instanceID, cgroup: c.cgroup, containerOnly: c.containerOnly}
		for _, p := range a.profilers {
			if c.containerOnly || !p.Supports(t.Target) {
				continue
			}
			if err := p.Start(a.ctx, t.Target); err != nil {
				// Logged once: a target is started once per pid and start time.
				a.logger.Warn("profiler cannot record target", "profiler", p.Name(), "pid", t.PID, "service", t.Service, "err", err)
				continue
			}
			t.kinds = append(t.kinds, p.Name())
		}
		if c.cgroup != 0 { // the profilers recording its container record it
			a.mu.Lock()
			if ct := a.containers[c.cgroup]; ct != nil {
				for _, k := range ct.kinds {
					if !slices.Contains(t.kinds, k) {
						t.kinds = append(t.kinds, k)
					}
				}
			}
			a.mu.Unlock()
		}
		a.logger.Info("target added", "pid", t.PID, "service", t.Service, "jvm", t.JVM, "kinds", t.kinds)
		a.mu.Lock()
		a.targets[t.PID] = t
		a.mu.Unlock()
	}
	if len(gone)+len(added) > 0 {
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}
}

func (a *Agent) stopTarget(t *target) {
	if t.containerOnly {
		return // recorded with its cgroup, which removeContainer stops
	}
	for _, p := range a.profilers {
		if !slices.Contains(t.kinds, p.Name()) {
			continue
		}
		if err := p.Stop(t.Target); err != nil && !errors.Is(err, profiler.ErrUnknownTarget) {
			a.logger.Warn("stop recording", "profiler", p.Name(), "pid", t.PID, "err", err)
		}
	}
}

// candidates lists the processes to record now; a.scanMu is held.
// Precedence of names: API registration, then configured spec, then the
// process's OpenTelemetry environment, then (JVMs) the main class or jar.
func (a *Agent) candidates() map[int]candidate {
	want := map[int]candidate{}
	info := func(pid int, st procStat) procInfo {
		k := procKey{pid, st.start}
		p, ok := a.seen[k]
		if !ok {
			p = readInfo(a.procRoot, pid)
			a.seen[k] = p
		}
		return p
	}
	mk := func(pid int, st procStat, p procInfo, service, inst string) candidate {
		c := candidate{start: st.start, instanceID: inst,
			t: profiler.Target{PID: pid, Service: service, Command: p.command(), Exe: p.exe, JVM: p.jvm}}
		if c.t.Service == "" {
			c.t.Service = p.service
		}
		if c.instanceID == "" {
			c.instanceID = p.inst
		}
		if c.t.Service == "" && p.jvm {
			c.t.Service = javaMain(p.argv)
		}
		if c.t.Service == "" && p.exe != "" {
			c.t.Service = strings.TrimSuffix(baseName(p.exe), " (deleted)")
		}
		return c
	}

	var cmdSpecs []TargetSpec
	for _, s := range a.cfg.Targets {
		if s.Command != "" {
			cmdSpecs = append(cmdSpecs, s)
		}
	}
	live := map[procKey]bool{}
	if a.cfg.Discover || len(cmdSpecs) > 0 {
		pids, err := listPIDs(a.procRoot)
		if err != nil {
			a.logger.Warn("scan processes", "err", err)
		}
		for _, pid := range pids {
			if pid == a.self {
				continue
			}
			st, err := readStat(a.procRoot, pid)
			if err != nil {
				continue
			}
			live[procKey{pid, st.start}] = true
			p := info(pid, st)
			for _, s := range cmdSpecs {
				if strings.Contains(p.command(), s.Command) {
					want[pid] = mk(pid, st, p, s.Service, s.InstanceID)
					break
				}
			}
			if _, ok := want[pid]; !ok && a.cfg.Discover && (p.service != "" || p.jvm) {
				want[pid] = mk(pid, st, p, "", "")
			}
		}
	}
	for _, s := range a.cfg.Targets {
		if s.PID <= 0 {
			continue
		}
		st, err := readStat(a.procRoot, s.PID)
		if err != nil {
			continue
		}
		live[procKey{s.PID, st.start}] = true
		want[s.PID] = mk(s.PID, st, info(s.PID, st), s.Service, s.InstanceID)
	}
	a.mu.Lock()
	regs := registeredList(a.registered)
	a.mu.Unlock()
	for _, r := range regs {
		st, err := readStat(a.procRoot, r.pid)
		if err != nil || st.start != r.start {
			a.mu.Lock()
			if cur, ok := a.registered[r.pid]; ok && cur.start == r.start {
				delete(a.registered, r.pid)
			}
			a.mu.Unlock()
			continue
		}
		live[procKey{r.pid, st.start}] = true
		want[r.pid] = mk(r.pid, st, info(r.pid, st), r.service, r.instanceID)
	}
	// The processes of registered containers. Being in a cgroup does not
	// make a process a container's: only registered cgroups count.
	a.mu.Lock()
	cts := make([]*container, 0, len(a.containers))
	for _, c := range a.containers {
		cts = append(cts, c)
	}
	a.mu.Unlock()
	for _, ct := range cts {
		for _, pid := range cgroupPIDs(ct.dir) {
			if pid == a.self {
				continue
			}
			if c, ok := want[pid]; ok { // a target anyway: its own names win
				c.cgroup = ct.id
				want[pid] = c
				continue
			}
			st, err := readStat(a.procRoot, pid)
			if err != nil {
				continue
			}
			live[procKey{pid, st.start}] = true
			c := mk(pid, st, info(pid, st), ct.service, ct.instanceID)
			c.cgroup, c.containerOnly = ct.id, true
			want[pid] = c
		}
	}
	for k := range a.seen {
		if !live[k] {
			delete(a.seen, k)
		}
	}
	return want
}

type pidProcess struct {
	pid int
	apiProcess
}

func registeredList(m map[int]apiProcess) []pidProcess {
	out := make([]pidProcess, 0, len(m))
	for pid, p := range m {
		out = append(out, pidProcess{pid, p})
	}
	return out
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// processes returns the current targets as protocol processes, by pid.
func (a *Agent) processes() []agentapi.Process {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]agentapi.Process, 0, len(a.targets))
	for _, t := range a.targets {
		out = append(out, t.process())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

func (t *target) process() agentapi.Process {
	return agentapi.Process{PID: int64(t.PID), Service: t.Service, InstanceID: t.instanceID, Command: t.Command,
		Kinds: append([]string{}, t.kinds...)}
}
