// The mesh runtime: starts a topology's replicas, each with an optional Envoy
// sidecar, and injects faults into them (fault.go).
//
// In pod mode (root) every replica lives in its own network namespace on a
// bridge, and iptables rules inside the namespace send its inbound and
// outbound TCP through Envoy as Istio's init container does, so services call
// plain http://<service>:8080/ addresses; the host's loopback services a pod
// needs (OTLP receiver, agent) answer at the bridge gateway through DNAT
// rules of the host (natGateway). In port mode (no root) everything
// is on loopback: each app and its Envoy get their own ports and a service
// calls a per-callee outbound port of its own sidecar.

package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Mode says how replicas are isolated from each other.
type Mode string

// Modes of a mesh.
const (
	// ModeAuto picks ModePod when running as root, else ModePort.
	ModeAuto Mode = ""
	// ModePod puts each replica and its sidecar in a network namespace.
	ModePod Mode = "pod"
	// ModePort runs everything on loopback with distinct ports.
	ModePort Mode = "port"
)

// Fixed ports inside a pod (pod mode), the same in every namespace.
const (
	AppPort           = 8080 // the service port, what callers use
	AppAdminPort      = 9090 // the app's ADMIN endpoint (POST /fault)
	EnvoyAdminPort    = 15000
	EnvoyOutboundPort = 15001
	EnvoyInboundPort  = 15006
	// EnvoyGID is the group Envoy runs as in pod mode; the OUTPUT rules let
	// its traffic through so that it is not redirected back to itself.
	EnvoyGID = 1337
)

// Errors of the runtime.
var (
	// ErrNeedRoot is wrapped by errors of things that need root.
	ErrNeedRoot = errors.New("needs root")
	// ErrPortMode is wrapped by errors of things that need pod mode.
	ErrPortMode = errors.New("not available in port mode")
	// ErrNoSidecar is wrapped by errors of things that need Envoy sidecars.
	ErrNoSidecar = errors.New("needs Envoy sidecars")
	// ErrBusy is returned by Start when a live mesh holds the same prefix.
	ErrBusy = errors.New("another mesh with the same prefix is running")
)

// Options of a mesh. Only ServiceCmd is required; by default the services
// run without sidecars, in pod mode when root and port mode otherwise.
type Options struct {
	// Mode is ModeAuto, ModePod or ModePort.
	Mode Mode
	// Dir holds generated Envoy configs and process logs. Empty: a temporary
	// directory removed by Close.
	Dir string
	// EnvoyBin is the Envoy binary; empty runs the services without sidecars.
	// FindEnvoy finds the one scripts/deps.sh installs.
	EnvoyBin string
	// Tracing makes every sidecar send spans to OTLPEndpoint (OTLP gRPC).
	Tracing bool
	// OTLPEndpoint is host:port of an OTLP gRPC receiver as reached from the
	// caller's network namespace (loopback). In pod mode the mesh forwards
	// the bridge gateway's port to it (see PodAddr).
	OTLPEndpoint string
	// Expose lists more loopback host:port addresses pods must reach (the
	// agent, the server's HTTP receiver); forwarded like OTLPEndpoint.
	Expose []string
	// Wrap, if set, rewrites each app's argv, e.g. to prefix
	// `rootline run --service X --`.
	Wrap func(svc string, argv []string) []string
	// ServiceCmd gives the argv that runs a service (by language); required.
	// DefaultServiceCmd gives the demo's services.
	ServiceCmd func(svc Service) []string
	// Env is added to every app's environment (after the service contract).
	Env []string
	// ForwardHeaders sets FORWARD_HEADERS=1 for every app.
	ForwardHeaders bool
	// Prefix names what pod mode creates: netns <prefix>-<svc>-<replica>,
	// bridge <prefix>-br0, veths <prefix>-v<n>. Default "rl". Two meshes may
	// run at once only with different prefixes and subnets.
	Prefix string
	// Subnet is the pods' /24, default 10.77.0.0/24; .1 is the bridge.
	Subnet string
	// ReadyTimeout bounds the wait for each app and sidecar, default 60s.
	ReadyTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Replica is one running instance of a service.
type Replica struct {
	Service string
	Index   int
	// Netns is the network namespace (pod mode), empty in port mode.
	Netns string
	// IP is the pod's address (pod mode) or 127.0.0.1.
	IP string
	// AppPID is the process started for the app (the Wrap command if set);
	// EnvoyPID is its sidecar, 0 without sidecars.
	AppPID, EnvoyPID int
	// AppAddr is where the app listens as seen from its own namespace;
	// ServiceAddr is what reaches it through its sidecar from the caller's
	// namespace; AdminAddr is its ADMIN endpoint, EnvoyAdmin its sidecar's
	// admin endpoint (both reachable from the caller's namespace).
	AppAddr, ServiceAddr, AdminAddr, EnvoyAdmin string
	// Veth is the host side of the pod's link (pod mode).
	Veth string
	// Cgroup is the service's app container in the cpu hierarchy (v1 cpu
	// or v2), <mesh>/<service>/app, shared by its replicas' apps; empty when
	// the mesh made none (not root).
	Cgroup string
	// SidecarCgroup is the service's sidecar container in the unified (v2)
	// hierarchy, <mesh>/<service>/envoy, shared by its replicas' sidecars:
	// the cgroup the agent knows the sidecars by. Empty without sidecars or
	// cgroups.
	SidecarCgroup string

	appPort, inPort, adminPort, envoyAdminPort int
	outPorts                                   map[string]int // callee → port (port mode)
}

// ServiceState is a service of a running mesh and its replicas.
type ServiceState struct {
	Name     string
	Language string
	Replicas []Replica
}

// Mesh is a running topology. Its methods are safe for concurrent use.
type Mesh struct {
	opts    Options
	mode    Mode
	topo    Topology
	log     *slog.Logger
	dir     string
	tempDir bool
	root    bool
	gw      string // bridge address (pod mode)
	subnet  string // a.b.c (pod mode)
	bridge  string
	natted  bool // natGateway's rules are in (pod mode)

	services []ServiceState
	lock     *os.File
	cg       *cgroups
	infra    []infra // processes AdoptInfra moved (under mu)

	mu      sync.Mutex
	procs   []*proc
	fwd     []net.Listener
	active  map[int]func() error
	nextID  int
	closed  bool
	closeMu sync.Mutex
	closeEr error
	stop    context.CancelFunc
	done    chan struct{}
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// Start runs topo and returns when every app listens and every sidecar is
// ready. Cancelling ctx closes the mesh (Close may also be called).
func Start(ctx context.Context, topo *Topology, opts Options) (*Mesh, error) {
	if opts.ServiceCmd == nil {
		return nil, errors.New("mesh: Options.ServiceCmd is required")
	}
	if topo == nil {
		return nil, errors.New("mesh: no topology")
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "rl"
	}
	if !prefixRE.MatchString(opts.Prefix) {
		// It names interfaces (<prefix>-v<n>, at most 15 bytes).
		return nil, fmt.Errorf("mesh: prefix %q: want 1-8 of a-z, 0-9, starting with a letter", opts.Prefix)
	}
	if opts.Subnet == "" {
		opts.Subnet = "10.77.0.0/24"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Mesh{opts: opts, topo: *topo, log: log.With("component", "mesh"), root: os.Geteuid() == 0,
		active: map[int]func() error{}, done: make(chan struct{})}
	switch opts.Mode {
	case ModeAuto:
		m.mode = ModePort
		if m.root {
			_, errIP := exec.LookPath("ip")
			_, errIPT := exec.LookPath("iptables-restore")
			switch {
			case errIP != nil:
				m.log.Warn("no ip command (iproute2): port mode")
			case opts.EnvoyBin != "" && errIPT != nil:
				m.log.Warn("no iptables to send pods' traffic through their sidecars: port mode")
			default:
				m.mode = ModePod
			}
		}
	case ModePod:
		if !m.root {
			return nil, fmt.Errorf("mesh: pod mode %w", ErrNeedRoot)
		}
		m.mode = ModePod
	case ModePort:
		m.mode = ModePort
	default:
		return nil, fmt.Errorf("mesh: unknown mode %q", opts.Mode)
	}
	if m.mode == ModePod {
		if _, err := exec.LookPath("ip"); err != nil {
			return nil, fmt.Errorf("mesh: pod mode needs the ip command (iproute2): %w", err)
		}
		if opts.EnvoyBin != "" {
			if _, err := exec.LookPath("iptables-restore"); err != nil {
				return nil, fmt.Errorf("mesh: pod mode with sidecars needs iptables (scripts/deps.sh installs it): %w", err)
			}
		}
		gw, subnet, err := parseSubnet(opts.Subnet)
		if err != nil {
			return nil, err
		}
		m.gw, m.subnet, m.bridge = gw, subnet, opts.Prefix+"-br0"
	}
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "rootline-mesh-")
		if err != nil {
			return nil, err
		}
		m.dir, m.tempDir = d, true
	} else {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, err
		}
		m.dir = opts.Dir
	}
	var err error
	if m.lock, err = lockPrefix(opts.Prefix); err != nil {
		m.removeDir()
		return nil, err
	}
	if err := Cleanup(opts.Prefix, m.log); err != nil {
		m.log.Warn("stale state cleanup incomplete", "err", err)
	}
	// While starting, ctx bounds every step and a failure closes the mesh;
	// once running, a watcher closes it when ctx ends.
	if err := m.start(ctx); err != nil {
		return nil, errors.Join(err, m.Close())
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	go func() {
		select {
		case <-ctx.Done():
			m.log.Info("context done: closing")
			_ = m.Close()
		case <-runCtx.Done():
		}
	}()
	m.log.Info("mesh running", "mode", m.mode, "services", len(m.services), "entry", m.EntryURL(), "dir", m.dir)
	return m, nil
}

// Mode is the mode the mesh runs in.
func (m *Mesh) Mode() Mode { return m.mode }

// Dir is where configs and logs are.
func (m *Mesh) Dir() string { return m.dir }

// EntryURL is the entry service's first replica, through its sidecar when
// there is one, reachable from the caller's network namespace.
func (m *Mesh) EntryURL() string {
	for _, s := range m.services {
		if s.Name == m.topo.Entry && len(s.Replicas) > 0 {
			return "http://" + s.Replicas[0].ServiceAddr + "/"
		}
	}
	return ""
}

// Services returns the running services and their replicas (a copy).
func (m *Mesh) Services() []ServiceState {
	out := make([]ServiceState, len(m.services))
	for i, s := range m.services {
		out[i] = s
		out[i].Replicas = slices.Clone(s.Replicas)
	}
	return out
}

// PodAddr is how code inside a pod reaches the loopback address hostAddr of
// the caller's namespace, forwarded through the bridge gateway when it is
// in Options.OTLPEndpoint or Options.Expose. In port mode it is hostAddr.
func (m *Mesh) PodAddr(hostAddr string) string {
	if m.mode != ModePod {
		return hostAddr
	}
	_, port, err := net.SplitHostPort(hostAddr)
	if err != nil {
		return hostAddr
	}
	return net.JoinHostPort(m.gw, port)
}

func (m *Mesh) service(name string) *ServiceState {
	for i := range m.services {
		if m.services[i].Name == name {
			return &m.services[i]
		}
	}
	return nil
}

// start plans addresses, builds the network, and starts sidecars then apps.
func (m *Mesh) start(ctx context.Context) error {
	if err := m.plan(); err != nil {
		return err
	}
	if m.mode == ModePod {
		if err := m.setupNetwork(ctx); err != nil {
			return err
		}
	}
	if err := m.forwardGateway(); err != nil {
		return err
	}
	if m.root {
		cg, err := newCgroups(cgroupName(m.opts.Prefix), m.log)
		if err != nil {
			m.log.Warn("no cgroups: cpu faults unavailable", "err", err)
		} else {
			m.cg = cg
			for i, s := range m.services {
				if err := cg.addService(s.Name); err != nil {
					return err
				}
				for j := range s.Replicas {
					m.services[i].Replicas[j].Cgroup = cg.dir(s.Name)
					if m.opts.EnvoyBin != "" {
						m.services[i].Replicas[j].SidecarCgroup = cg.unifiedDir(s.Name, ContainerSidecar)
					}
				}
			}
		}
	}
	if m.opts.EnvoyBin != "" {
		if err := m.startSidecars(ctx); err != nil {
			return err
		}
	}
	return m.startApps(ctx)
}

// plan assigns each replica its namespace, addresses and ports.
func (m *Mesh) plan() error {
	n := 0
	for _, s := range m.topo.Services {
		reps := max(s.Replicas, 1)
		st := ServiceState{Name: s.Name, Language: s.Language}
		for i := range reps {
			r := Replica{Service: s.Name, Index: i}
			if m.mode == ModePod {
				if n >= 250 {
					return errors.New("mesh: more than 250 replicas do not fit the /24")
				}
				r.Netns = fmt.Sprintf("%s-%s-%d", m.opts.Prefix, s.Name, i)
				r.Veth = fmt.Sprintf("%s-v%d", m.opts.Prefix, n)
				r.IP = fmt.Sprintf("%s.%d", m.subnet, 10+n)
				r.appPort, r.adminPort = AppPort, AppAdminPort
				r.inPort, r.envoyAdminPort = EnvoyInboundPort, EnvoyAdminPort
				r.AppAddr = net.JoinHostPort("0.0.0.0", strconv.Itoa(AppPort))
				r.ServiceAddr = net.JoinHostPort(r.IP, strconv.Itoa(AppPort))
				r.AdminAddr = net.JoinHostPort(r.IP, strconv.Itoa(AppAdminPort))
				if m.opts.EnvoyBin != "" {
					r.EnvoyAdmin = net.JoinHostPort(r.IP, strconv.Itoa(EnvoyAdminPort))
				}
			} else {
				r.IP = "127.0.0.1"
				ports, err := freePorts(4)
				if err != nil {
					return err
				}
				r.appPort, r.adminPort, r.inPort, r.envoyAdminPort = ports[0], ports[1], ports[2], ports[3]
				r.AppAddr = hostPort(r.IP, r.appPort)
				r.AdminAddr = hostPort(r.IP, r.adminPort)
				r.ServiceAddr = r.AppAddr
				if m.opts.EnvoyBin != "" {
					r.ServiceAddr = hostPort(r.IP, r.inPort)
					r.EnvoyAdmin = hostPort(r.IP, r.envoyAdminPort)
					r.outPorts = map[string]int{}
					for _, c := range s.Calls {
						p, err := freePorts(1)
						if err != nil {
							return err
						}
						r.outPorts[c] = p[0]
					}
				}
			}
			st.Replicas = append(st.Replicas, r)
			n++
		}
		m.services = append(m.services, st)
	}
	return nil
}

// callsEnv is the CALLS setting of one replica of s.
func (m *Mesh) callsEnv(s Service, r Replica) string {
	var urls []string
	for _, c := range s.Calls {
		switch {
		case m.mode == ModePod:
			urls = append(urls, fmt.Sprintf("http://%s:%d/", c, AppPort))
		case m.opts.EnvoyBin != "":
			urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/", r.outPorts[c]))
		default:
			// Port mode without sidecars: the callee's first replica.
			urls = append(urls, "http://"+m.service(c).Replicas[0].AppAddr+"/")
		}
	}
	return strings.Join(urls, ",")
}

func (m *Mesh) startApps(ctx context.Context) error {
	type started struct {
		p *proc
		r *Replica
	}
	var all []started
	for si, s := range m.topo.Services {
		st := &m.services[si]
		for ri := range st.Replicas {
			r := &st.Replicas[ri]
			argv := m.opts.ServiceCmd(s)
			if len(argv) == 0 {
				return fmt.Errorf("mesh: no command for service %s (language %q)", s.Name, s.Language)
			}
			var cgs []string
			if m.cg != nil {
				cgs = m.cg.containerProcs(s.Name, ContainerApp, true)
			}
			if m.opts.Wrap != nil {
				// Only the app goes into the service's app container, not
				// the wrapper (a tracer is infrastructure, like the
				// sidecar): it starts in the sidecar's container, in the
				// controllers' hierarchies (it makes the app's v2 cgroup
				// below its own), and the app is moved to its container
				// once it listens (addAppTree), as a shell inside the pod
				// cannot see /sys/fs/cgroup.
				cgs = nil
				if m.cg != nil {
					cgs = m.cg.containerProcs(s.Name, ContainerSidecar, false)
				}
				argv = m.opts.Wrap(s.Name, argv)
			}
			env := append(os.Environ(),
				"SERVICE_NAME="+s.Name,
				"REPLICA="+strconv.Itoa(r.Index),
				"LISTEN="+listenAddr(m.mode, r.appPort),
				"ADMIN="+listenAddr(m.mode, r.adminPort),
				"CALLS="+m.callsEnv(s, *r),
				"WORK="+s.Work,
			)
			env = append(env, containerEnv(s.Name, ContainerApp))
			if m.opts.ForwardHeaders {
				env = append(env, "FORWARD_HEADERS=1")
			}
			if m.topo.GRPC() {
				env = append(env, "PROTOCOL=grpc")
			}
			if m.opts.OTLPEndpoint != "" {
				env = append(env, "ROOTLINE_OTLP_ENDPOINT="+m.PodAddr(m.opts.OTLPEndpoint))
			}
			env = append(env, m.opts.Env...)
			p, err := m.spawn(fmt.Sprintf("%s-%d.app", s.Name, r.Index), r.Netns, argv, env, cgs, false)
			if err != nil {
				return err
			}
			r.AppPID = p.pid()
			all = append(all, started{p, r})
		}
	}
	errs := make(chan error, len(all))
	for _, a := range all {
		go func() {
			errs <- waitListening(ctx, a.p, a.r.appPort, m.opts.ReadyTimeout)
		}()
	}
	var err error
	for range all {
		err = errors.Join(err, <-errs)
	}
	if err == nil && m.opts.Wrap != nil && m.cg != nil {
		for i := range m.services {
			m.addAppTree(&m.services[i])
		}
	}
	return err
}

// containerEnv names a pod's container for the node's agent as the
// OpenTelemetry operator does in a Kubernetes pod: service.name and
// k8s.container.name in OTEL_RESOURCE_ATTRIBUTES. The agent labels the
// container's kernel metrics with them (internal/kmetrics), so a sidecar's
// metrics count for its service, as a container of its own.
func containerEnv(svc, container string) string {
	return "OTEL_RESOURCE_ATTRIBUTES=service.name=" + svc + ",k8s.container.name=" + container
}

// sidecarEnv is the environment of svc's sidecars.
func (m *Mesh) sidecarEnv(svc string) []string {
	return append(os.Environ(), containerEnv(svc, ContainerSidecar))
}

// sidecarCgroups are the cgroup.procs files of svc's sidecar container, in
// every hierarchy (nil without cgroups): a sidecar starts in them, before
// it opens a socket, as a socket keeps the v2 cgroup of its creator.
func (m *Mesh) sidecarCgroups(svc string) []string {
	if m.cg == nil {
		return nil
	}
	return m.cg.containerProcs(svc, ContainerSidecar, true)
}

func listenAddr(mode Mode, port int) string {
	if mode == ModePod {
		return hostPort("0.0.0.0", port)
	}
	return hostPort("127.0.0.1", port)
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// proc is a process the mesh started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // set before done is closed
	// stopping is set when the mesh stops it (its exit is expected).
	stopping atomic.Bool
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// cgexec puts the shell in the cgroups listed in RL_CGROUP_PROCS before it
// execs the command, so the app and everything it forks start inside them.
const cgexec = `for f in $RL_CGROUP_PROCS; do echo $$ > "$f" || exit 97; done; unset RL_CGROUP_PROCS; exec "$@"`

// spawn starts argv (in netns when set, in the cgroups whose cgroup.procs
// files are given) with its output in Dir/logs/<name>.log.
func (m *Mesh) spawn(name, netns string, argv, env, cgroupProcs []string, envoy bool) (*proc, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("mesh: closed")
	}
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	if len(cgroupProcs) > 0 {
		argv = append([]string{"sh", "-c", cgexec, "rl-cgexec"}, argv...)
		env = append(slices.Clone(env), "RL_CGROUP_PROCS="+strings.Join(cgroupProcs, " "))
	}
	if err := os.MkdirAll(filepath.Join(m.dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(m.dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = procAttr(envoy && m.mode == ModePod)
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("mesh: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: lf, done: make(chan struct{})}
	m.mu.Lock()
	m.procs = append(m.procs, p)
	m.mu.Unlock()
	recordPID(m.opts.Prefix, p.pid())
	m.log.Debug("started", "proc", name, "pid", p.pid(), "argv", strings.Join(argv, " "))
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
		m.mu.Lock()
		closed := m.closed
		m.mu.Unlock()
		if !closed && !p.stopping.Load() {
			m.log.Warn("process exited", "proc", name, "pid", p.pid(), "err", p.err, "log", lf.Name())
		}
	}()
	return p, nil
}

// waitListening waits until a TCP socket listens on port in p's network
// namespace (read from /proc/<pid>/net/tcp*, so no connection is made).
func waitListening(ctx context.Context, p *proc, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("mesh: %s exited before listening on %d: %v: %s", p.name, port, p.err, logTail(p))
		}
		if listening(p.pid(), port) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mesh: %s not listening on %d after %s (see %s)", p.name, port, timeout, p.log.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the end of a process's log, for errors.
func logTail(p *proc) string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return "(no log)"
	}
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return fmt.Sprintf("%s ends with %q", p.log.Name(), strings.TrimSpace(string(b)))
}

// listening reports whether /proc/<pid>/net/tcp or tcp6 has a socket in
// LISTEN state (0A) on port.
func listening(pid, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// freePorts returns n free loopback ports. They are chosen below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), where no
// outgoing connection of another process can take one between now and the
// moment the service binds it, as happened with ports the kernel handed out
// from that range; each is checked free by listening on it. Without such a
// range, or after many taken ports, the kernel chooses.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo := ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if lo > belowEphemeral+1000 && tries < 50*n {
			addr = "127.0.0.1:" + strconv.Itoa(belowEphemeral+rand.IntN(lo-belowEphemeral))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" {
				continue // taken: another one
			}
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// belowEphemeral is the lowest port freePorts chooses: above the ports
// services are configured on by hand.
const belowEphemeral = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, 0 when it
// cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.Atoi(f[0])
	return v
}

// forwardGateway makes the loopback addresses pods need (OTLP receiver,
// Expose) reachable at the bridge gateway with the same port: by DNAT (see
// natGateway), else by a forwarder in this process.
func (m *Mesh) forwardGateway() error {
	if m.mode != ModePod {
		return nil
	}
	addrs := slices.Clone(m.opts.Expose)
	if m.opts.OTLPEndpoint != "" {
		addrs = append(addrs, m.opts.OTLPEndpoint)
	}
	if len(addrs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rest, err := m.natGateway(ctx, addrs)
	if err != nil {
		m.log.Warn("no DNAT to the gateway: forwarding pods' connections to host services in this process", "err", err)
	} else {
		m.natted = len(rest) < len(addrs)
	}
	for _, a := range rest {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("mesh: bad address %q: %w", a, err)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(m.gw, port))
		if err != nil {
			return fmt.Errorf("mesh: forward %s to pods: %w", a, err)
		}
		m.mu.Lock()
		m.fwd = append(m.fwd, l)
		m.mu.Unlock()
		go serveForward(l, a)
	}
	return nil
}

func serveForward(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.DialTimeout("tcp", target, 2*time.Second)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// Close undoes active faults, stops every process, and removes every
// namespace, link, qdisc and cgroup the mesh made. It is idempotent and safe
// to call from several goroutines; later calls return the first result.
func (m *Mesh) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return m.closeEr
	}
	m.closed = true
	undos := m.active
	m.active = map[int]func() error{}
	procs := slices.Clone(m.procs)
	fwd := m.fwd
	m.mu.Unlock()
	if m.stop != nil {
		m.stop()
	}

	var errs []error
	ids := make([]int, 0, len(undos))
	for id := range undos {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range slices.Backward(ids) {
		if err := undos[id](); err != nil {
			errs = append(errs, err)
		}
	}
	stopProcs(procs)
	for _, l := range fwd {
		l.Close()
	}
	if m.mode == ModePod {
		errs = append(errs, m.teardownNetwork())
	}
	if m.cg != nil {
		m.releaseInfra()
		errs = append(errs, m.cg.remove())
	}
	clearPIDs(m.opts.Prefix)
	if m.lock != nil {
		m.lock.Close()
	}
	m.removeDir()
	m.closeEr = errors.Join(errs...)
	close(m.done)
	m.log.Info("mesh closed", "err", m.closeEr)
	return m.closeEr
}

// Done is closed when the mesh has been closed.
func (m *Mesh) Done() <-chan struct{} { return m.done }

func (m *Mesh) removeDir() {
	if m.tempDir {
		os.RemoveAll(m.dir)
	}
}

// stopProcs sends SIGTERM to each process group, then SIGKILL to those
// still running after 3 s.
func stopProcs(all []*proc) {
	// A process already stopped (a hog of an undone fault) is skipped: its
	// group is gone, and its id may since belong to someone else's group.
	var procs []*proc
	for _, p := range all {
		if !p.stopping.Swap(true) {
			procs = append(procs, p)
		}
	}
	for _, p := range procs {
		if !p.exited() {
			_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		}
	}
	grace := time.Now().Add(3 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Until(grace)):
		}
	}
	for _, p := range procs {
		// The group may outlive its leader (children of a wrapper).
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	}
	end := time.Now().Add(3 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Until(end)):
		}
		// Until the last member of the group is gone (and reaped).
		for syscall.Kill(-p.pid(), 0) == nil && time.Now().Before(end) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// DefaultServiceCmd runs the demo's forwarding services of repoRoot by
// language: Go build/demo/svc-go, Java build/demo/java (class Svc), Python
// demo/services/python/svc.py. The JVMs compile with C1 only
// (-XX:TieredStopAtLevel=1): at the demo's rates C2 kept compiling for
// minutes — 40 % of the JVMs' CPU 25–40 s after start (perf) — and C1-only
// JVMs used a third less CPU per request (bench/RESULTS.md).
func DefaultServiceCmd(repoRoot string) func(Service) []string {
	return func(s Service) []string {
		switch strings.ToLower(s.Language) {
		case "go", "":
			return []string{filepath.Join(repoRoot, "build", "demo", "svc-go")}
		case "java":
			return []string{"java", "-XX:TieredStopAtLevel=1", "-cp", filepath.Join(repoRoot, "build", "demo", "java"), "Svc"}
		case "python":
			return []string{"python3", filepath.Join(repoRoot, "demo", "services", "python", "svc.py")}
		}
		return nil
	}
}
