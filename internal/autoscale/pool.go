package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/mesh"
)

// PoolConfig describes the replicas.
type PoolConfig struct {
	// Command starts one replica: a demo service (demo/services/), or any
	// program that follows their environment contract as far as listening
	// goes. It gets its slot's address in LISTEN (127.0.0.1:port), the
	// slot's name in SERVICE_NAME, GOMAXPROCS=1, and Env; it must answer
	// GET /healthz with 200 once it serves.
	Command []string
	// Env is added to every replica's environment (WORK for a demo service).
	Env []string
	// Max replicas; each has a fixed slot (listener, cgroup) for the run.
	Max int
	// CPUQuota per replica in CPUs (0.25: a quarter of one CPU).
	CPUQuota float64
	// CgroupName is the parent cgroup of the replicas' cgroups.
	CgroupName string
	// Shares is the parent cgroup's CPU weight (cgroup v1 cpu.shares, 1024
	// for one ordinary task; 0 leaves the default). On a shared machine a
	// weight well above the other tasks' makes the replicas' quotas, not
	// what other processes leave over, the limit of their capacity, as a
	// Kubernetes pod's CPU request does on a busy node.
	Shares int
	// Dir receives the EDS file Envoy watches.
	Dir string
	// Cluster is the Envoy cluster name of the replicas.
	Cluster string
	// Drain is how long a replica taken out of Envoy's endpoints keeps
	// running before it is stopped (requests in flight finish).
	Drain  time.Duration
	Logger *slog.Logger
}

// Pool owns the replica processes and the EDS file listing the running ones.
// Each slot has one port for the whole run, so an address never moves. The
// ports are chosen below the kernel's ephemeral range (mesh.FreePorts), and
// while no replica runs on it the pool listens on the slot's port itself: no
// other process's outgoing connection or service can take it in between.
type Pool struct {
	cfg   PoolConfig
	slots []*slot
	mu    sync.Mutex
	n     int // running replicas: slots [0, n)
	// running is n for readers that must not wait for a scaling step (a
	// replica's drain holds mu for a second).
	running atomic.Int32
	eds     string
	group   *cgroup // parent of the replicas' cgroups
	infra   *cgroup // Envoy and the load generator
	moved   []int   // pids moved into infra
}

type slot struct {
	name string
	port int
	ln   *net.TCPListener // the port held while no replica runs, or nil
	cg   *cgroup
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *slot) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// hold listens on the slot's port while no replica does. A replica that has
// just exited may leave the port briefly in use: it retries for a second.
func (s *slot) hold() error {
	if s.ln != nil {
		return nil
	}
	var err error
	for range 20 {
		var ln *net.TCPListener
		if ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: s.port}); err == nil {
			s.ln = ln
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("autoscale: hold port %d of replica %s: %w", s.port, s.name, err)
}

// release stops listening on the slot's port, for its replica to bind it.
func (s *slot) release() {
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
}

// NewPool creates the slots (listeners, cgroups) and an empty EDS file; no
// replica runs yet.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if cfg.Max < 1 || len(cfg.Command) == 0 {
		return nil, errors.New("autoscale: pool needs a command and at least one replica")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg, eds: filepath.Join(cfg.Dir, "eds.json")}
	var err error
	if p.group, err = newGroup(cfg.CgroupName, cfg.Shares); err != nil {
		return nil, err
	}
	if p.infra, err = newGroup(filepath.Join(cfg.CgroupName, "infra"), 0); err != nil {
		p.Close()
		return nil, err
	}
	ports, err := mesh.FreePorts(cfg.Max)
	if err != nil {
		p.Close()
		return nil, err
	}
	for i, port := range ports {
		s := &slot{name: fmt.Sprintf("r%d", i), port: port}
		p.slots = append(p.slots, s)
		if err := s.hold(); err != nil {
			p.Close()
			return nil, err
		}
		if s.cg, err = newCgroup(filepath.Join(cfg.CgroupName, s.name), cfg.CPUQuota); err != nil {
			p.Close()
			return nil, err
		}
	}
	if err := p.writeEDS(0); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// AddInfra moves pid (Envoy, the load generator) into the experiment's
// cgroup beside the replicas, without a quota: it shares their weight.
func (p *Pool) AddInfra(pid int) error {
	if err := p.infra.add(pid); err != nil {
		return err
	}
	p.mu.Lock()
	p.moved = append(p.moved, pid)
	p.mu.Unlock()
	return nil
}

// EDSPath is the file Envoy's cluster reads its endpoints from.
func (p *Pool) EDSPath() string { return p.eds }

// Replicas is the number of running replicas.
func (p *Pool) Replicas() int {
	return int(p.running.Load())
}

// Port is slot i's port.
func (p *Pool) Port(i int) int { return p.slots[i].port }

// Cgroups are the slots' cgroups (all, running or not).
func (p *Pool) cgroups() []*cgroup {
	out := make([]*cgroup, len(p.slots))
	for i, s := range p.slots {
		out[i] = s.cg
	}
	return out
}

// Scale starts or stops replicas until n run (clamped to [0, Max]). A new
// replica joins Envoy's endpoints once it answers /healthz; a leaving one is
// taken out of the endpoints first and stopped after Drain.
func (p *Pool) Scale(ctx context.Context, n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = max(0, min(n, len(p.slots)))
	for p.n < n {
		s := p.slots[p.n]
		if err := p.start(ctx, s); err != nil {
			return err
		}
		p.n++
		p.running.Store(int32(p.n))
		if err := p.writeEDS(p.n); err != nil {
			return err
		}
		p.cfg.Logger.Info("replica started", "replica", s.name, "port", p.Port(p.n-1), "replicas", p.n)
	}
	for p.n > n {
		p.n--
		p.running.Store(int32(p.n))
		s := p.slots[p.n]
		if err := p.writeEDS(p.n); err != nil {
			return err
		}
		select {
		case <-time.After(p.cfg.Drain):
		case <-ctx.Done():
		}
		p.stop(s)
		p.cfg.Logger.Info("replica stopped", "replica", s.name, "replicas", p.n)
	}
	return nil
}

func (p *Pool) start(ctx context.Context, s *slot) error {
	cmd := exec.Command(p.cfg.Command[0], p.cfg.Command[1:]...)
	cmd.Env = append(os.Environ(), "SERVICE_NAME="+s.name, "LISTEN="+s.addr(), "GOMAXPROCS=1")
	cmd.Env = append(cmd.Env, p.cfg.Env...)
	cmd.Stderr = os.Stderr
	s.release()
	if err := cmd.Start(); err != nil {
		return errors.Join(fmt.Errorf("autoscale: start replica %s: %w", s.name, err), s.hold())
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	if err := s.cg.add(cmd.Process.Pid); err != nil {
		p.stop(s)
		return err
	}
	url := fmt.Sprintf("http://%s/healthz", s.addr())
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("autoscale: replica %s exited at start", s.name)
		case <-ctx.Done():
			p.stop(s)
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(s)
			return fmt.Errorf("autoscale: replica %s not healthy after 10s", s.name)
		}
	}
}

// stop ends the slot's replica and holds its port again.
func (p *Pool) stop(s *slot) {
	if s.cmd == nil {
		return
	}
	terminate(s.cmd.Process, s.done)
	s.cmd = nil
	if err := s.hold(); err != nil {
		p.cfg.Logger.Warn("port not held while its replica is stopped", "replica", s.name, "err", err)
	}
}

// writeEDS lists slots [0, n) in the EDS file: written beside it and renamed
// over it, the move Envoy's watched directory reacts to.
func (p *Pool) writeEDS(n int) error {
	lbs := []map[string]any{}
	for i := range n {
		lbs = append(lbs, map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": "127.0.0.1", "port_value": p.Port(i)}}}})
	}
	doc := map[string]any{
		"version_info": fmt.Sprint(time.Now().UnixNano()),
		"resources": []any{map[string]any{
			"@type":        "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
			"cluster_name": p.cfg.Cluster,
			"endpoints":    []any{map[string]any{"lb_endpoints": lbs}},
		}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	tmp := filepath.Join(p.cfg.Dir, ".eds.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.eds)
}

// Close stops every replica and removes the cgroups.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, s := range p.slots {
		p.stop(s)
		s.release()
		if s.cg != nil {
			errs = append(errs, s.cg.remove())
		}
	}
	p.n = 0
	p.running.Store(0)
	for _, pid := range p.moved {
		leave(pid)
	}
	for _, g := range []*cgroup{p.infra, p.group} {
		if g != nil {
			errs = append(errs, g.remove())
		}
	}
	return errors.Join(errs...)
}
