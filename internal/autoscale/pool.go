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
	"sync"
	"sync/atomic"
	"time"
)

// PoolConfig describes the replicas.
type PoolConfig struct {
	// Command starts one replica; it gets the replica's listening socket as
	// file descriptor 3 (ExtraFiles[0]) and its name in REPLICA_NAME.
	Command []string
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
// Each slot keeps its listening socket for the whole run (a restarted replica
// inherits it), so an address never moves and no port is ever raced for.
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
	ln   *net.TCPListener
	file *os.File
	cg   *cgroup
	cmd  *exec.Cmd
	done chan struct{}
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
	for i := range cfg.Max {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			p.Close()
			return nil, err
		}
		f, err := ln.File()
		if err != nil {
			ln.Close()
			p.Close()
			return nil, err
		}
		s := &slot{name: fmt.Sprintf("r%d", i), ln: ln, file: f}
		p.slots = append(p.slots, s)
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
func (p *Pool) Port(i int) int { return p.slots[i].ln.Addr().(*net.TCPAddr).Port }

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
	cmd.ExtraFiles = []*os.File{s.file}
	cmd.Env = append(os.Environ(), "REPLICA_NAME="+s.name, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("autoscale: start replica %s: %w", s.name, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	if err := s.cg.add(cmd.Process.Pid); err != nil {
		p.stop(s)
		return err
	}
	url := fmt.Sprintf("http://%s/healthz", s.ln.Addr())
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

func (p *Pool) stop(s *slot) {
	if s.cmd == nil {
		return
	}
	terminate(s.cmd.Process, s.done)
	s.cmd = nil
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
		if s.file != nil {
			s.file.Close()
		}
		if s.ln != nil {
			s.ln.Close()
		}
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
