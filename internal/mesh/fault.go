package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault names.
const (
	FaultCPUThrottle    = "cpu-throttle"    // cgroup CPU quota on the service's apps
	FaultCPUHog         = "cpu-hog"         // busy processes in the service's cgroup, under a pod CPU limit
	FaultNetBandwidth   = "net-bandwidth"   // tbf on the service's links (pod mode)
	FaultNetDelay       = "net-delay"       // Envoy fault filter on calls into the service
	FaultLock           = "lock"            // app: hot lock the request threads wait for, held across a slow call
	FaultGC             = "gc"              // app: allocation storm
	FaultSlowDownstream = "slow-downstream" // app: slow calls to its downstreams
	FaultDisk           = "disk"            // app: fsync storm
	FaultCPU            = "cpu"             // app: extra CPU work per request
	FaultPacketLoss     = "packet-loss"     // a BPF dropper on the service's links (pod mode)
	FaultNoisyNeighbour = "noisy-neighbour" // busy processes on the service's CPU, outside its cgroup
	FaultMemory         = "memory-pressure" // a memory limit just above the apps' memory, filled with page cache by a co-process
	// FaultNone injects nothing: a fault-free run of a fault suite, where
	// no incident should open. It takes no service; its amount is how long
	// the stretch lasts ("none", "none=10m").
	FaultNone = "none"
)

// ExpectedCause is the cause a diagnosis should name for a fault of name in
// a service of language (default.yaml's languages): the ground truth of a
// fault suite. "" when the fault has none the kernel can measure: a
// slow-downstream fault is a timer sleep in the service, which is the
// program's own choice (docs/diagnosis.md), and none injects nothing. An
// allocation storm is a GC cause only where the runtime stops the program
// to collect or sizes a heap of its own (the JVM, whose JFR records the
// pauses, and whose request threads fault in the heap pages its collector
// commits: docs/diagnosis.md); Go collects
// concurrently and CPython frees by reference counting, so there it is the
// service's own CPU.
func ExpectedCause(name, language string) string {
	switch name {
	case FaultLock:
		return "lock"
	case FaultCPUThrottle:
		return "cpu-throttle"
	case FaultCPUHog:
		// The busy processes share the service's cgroup and its quota: the
		// service's threads are held off by the quota the hogs use up.
		return "cpu-throttle"
	case FaultNetBandwidth, FaultNetDelay, FaultPacketLoss:
		return "network"
	case FaultNoisyNeighbour:
		return "cpu-contention"
	case FaultMemory:
		return "memory"
	case FaultDisk:
		return "disk"
	case FaultCPU:
		return "cpu"
	case FaultGC:
		if language == "java" {
			return "gc"
		}
		return "cpu"
	}
	return ""
}

// DefaultAmounts are the amounts used when Fault.Amount is empty. The app's
// own default applies to app faults not listed.
var DefaultAmounts = map[string]string{
	FaultCPUThrottle:  "20%",
	FaultCPUHog:       "2",
	FaultNetBandwidth: "2mbit",
	FaultNetDelay:     "100ms",
	// The hot lock: a holder in the service keeps it 20 ms at a time (then
	// 0–10 ms free), each request takes it: ~8 ms more per request on
	// average, up to 20 ms, whatever the rate.
	FaultLock: "20ms",
	// A tenth of the packets: TCP recovers most by retransmission after a
	// timeout (200 ms at least), which is what makes a lossy link slow.
	FaultPacketLoss:     "10%",
	FaultNoisyNeighbour: "2",
	// The room above the apps' anonymous memory that the co-process's page
	// cache fills.
	FaultMemory: "8MB",
}

// appFaults maps fault names to the name the app's POST /fault takes.
var appFaults = map[string]string{
	FaultLock: "lock", FaultGC: "gc", FaultSlowDownstream: "slow", FaultDisk: "disk", FaultCPU: "cpu",
}

// FaultNames lists every fault Inject knows.
func FaultNames() []string {
	return []string{FaultLock, FaultCPUThrottle, FaultCPUHog, FaultNetBandwidth, FaultNetDelay,
		FaultGC, FaultSlowDownstream, FaultDisk, FaultCPU, FaultPacketLoss, FaultNoisyNeighbour, FaultMemory}
}

// Fault is a slowdown of one service.
type Fault struct {
	// Name is one of FaultNames.
	Name string
	// Service is the target service (all its replicas).
	Service string
	// Amount depends on the fault: cpu-throttle a share of one CPU ("20%",
	// "0.2", "200m"); cpu-hog the number of busy processes (the pod's limit
	// is CPUHogLimit); net-bandwidth a
	// tc rate ("2mbit"); net-delay a duration ("100ms"); app faults pass it
	// to the app ("20ms"); memory-pressure the room above the apps'
	// anonymous memory ("8MB"). Empty: DefaultAmounts.
	Amount string
}

func (f Fault) String() string {
	if f.Name == FaultNone && f.Amount == "" {
		return FaultNone
	}
	if f.Name == FaultNone {
		return FaultNone + "=" + f.Amount
	}
	s := f.Name + "@" + f.Service
	if f.Amount != "" {
		s += "=" + f.Amount
	}
	return s
}

// ParseFault parses name@service or name@service=amount.
func ParseFault(s string) (Fault, error) {
	if rest, ok := strings.CutPrefix(s, FaultNone); ok && (rest == "" || rest[0] == '=') {
		// none[=duration]: how long the fault-free stretch lasts.
		f := Fault{Name: FaultNone, Amount: strings.TrimPrefix(rest, "=")}
		if d, err := time.ParseDuration(f.Amount); f.Amount != "" && (err != nil || d <= 0) {
			return Fault{}, fmt.Errorf("mesh: fault %q: want none or none=DURATION", s)
		}
		return f, nil
	}
	name, rest, ok := strings.Cut(s, "@")
	if !ok || name == "" || rest == "" {
		return Fault{}, fmt.Errorf("mesh: fault %q: want name@service[=amount]", s)
	}
	svc, amount, _ := strings.Cut(rest, "=")
	f := Fault{Name: name, Service: svc, Amount: amount}
	for _, n := range FaultNames() {
		if n == name {
			return f, nil
		}
	}
	return Fault{}, fmt.Errorf("mesh: unknown fault %q (known: %s)", name, strings.Join(FaultNames(), ", "))
}

// Inject starts f and returns the function that stops it. Close stops the
// faults still active. An unavailable fault (not root, port mode, no
// sidecars) returns an error wrapping ErrNeedRoot, ErrPortMode or
// ErrNoSidecar.
func (m *Mesh) Inject(f Fault) (undo func() error, err error) {
	if f.Name == FaultNone {
		return func() error { return nil }, nil
	}
	st := m.service(f.Service)
	if st == nil {
		return nil, fmt.Errorf("mesh: fault %s: unknown service %q", f.Name, f.Service)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("mesh: closed")
	}
	if f.Amount == "" {
		f.Amount = DefaultAmounts[f.Name]
	}
	var stop func() error
	switch f.Name {
	case FaultCPUThrottle:
		stop, err = m.cpuThrottle(st, f.Amount)
	case FaultCPUHog:
		stop, err = m.cpuHog(st, f.Amount)
	case FaultNetBandwidth:
		stop, err = m.netBandwidth(st, f.Amount)
	case FaultNetDelay:
		stop, err = m.netDelay(st, f.Amount)
	case FaultPacketLoss:
		stop, err = m.packetLoss(st, f.Amount)
	case FaultNoisyNeighbour:
		stop, err = m.noisyNeighbour(st, f.Amount)
	case FaultMemory:
		stop, err = m.memoryPressure(st, f.Amount)
	default:
		name, ok := appFaults[f.Name]
		if !ok {
			return nil, fmt.Errorf("mesh: unknown fault %q (known: %s)", f.Name, strings.Join(FaultNames(), ", "))
		}
		stop, err = m.appFault(st, name, f.Amount)
	}
	if err != nil {
		return nil, fmt.Errorf("mesh: fault %s: %w", f, err)
	}
	m.mu.Lock()
	if m.closed {
		// Close ran meanwhile and could not see this fault to undo it.
		m.mu.Unlock()
		return nil, errors.Join(errors.New("mesh: closed"), stop())
	}
	m.log.Info("fault injected", "fault", f.String())
	id := m.nextID
	m.nextID++
	var once sync.Once
	var onceErr error
	undo = func() error {
		once.Do(func() {
			m.mu.Lock()
			delete(m.active, id)
			m.mu.Unlock()
			onceErr = stop()
			m.log.Info("fault removed", "fault", f.String(), "err", onceErr)
		})
		return onceErr
	}
	m.active[id] = undo
	m.mu.Unlock()
	return undo, nil
}

// forReplicas runs do on each replica and, if one fails, undo on those done.
func forReplicas(st *ServiceState, do func(Replica) error, undo func(Replica) error) (func() error, error) {
	var done []Replica
	for _, r := range st.Replicas {
		if err := do(r); err != nil {
			for _, d := range done {
				_ = undo(d)
			}
			return nil, err
		}
		done = append(done, r)
	}
	return func() error {
		var errs []error
		for _, r := range done {
			errs = append(errs, undo(r))
		}
		return errors.Join(errs...)
	}, nil
}

// parseCPUs reads "20%", "0.2" or "200m" as a share of one CPU.
func parseCPUs(s string) (float64, error) {
	var v float64
	var err error
	switch {
	case strings.HasSuffix(s, "%"):
		v, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		v /= 100
	case strings.HasSuffix(s, "m"):
		v, err = strconv.ParseFloat(strings.TrimSuffix(s, "m"), 64)
		v /= 1000
	default:
		v, err = strconv.ParseFloat(s, 64)
	}
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad CPU amount %q (want 20%%, 0.2 or 200m)", s)
	}
	return v, nil
}

func (m *Mesh) cpuThrottle(st *ServiceState, amount string) (func() error, error) {
	cpus, err := parseCPUs(amount)
	if err != nil {
		return nil, err
	}
	if m.cg == nil {
		if !m.root {
			return nil, ErrNeedRoot
		}
		return nil, errors.New("no usable cgroup cpu controller")
	}
	m.addAppTree(st)
	return m.cg.setQuota(st.Name, cpus)
}

// addAppTree puts everything the replicas' apps run into the service's
// cgroups, also what they forked before being placed there; a wrapper
// (Options.Wrap, e.g. a tracer) at the root of the tree stays out.
func (m *Mesh) addAppTree(st *ServiceState) {
	for _, r := range st.Replicas {
		tree := processTree(r.AppPID)
		if m.opts.Wrap != nil && len(tree) > 0 && tree[0] == r.AppPID {
			tree = tree[1:]
		}
		for _, pid := range tree {
			_ = m.cg.addPID(st.Name, pid)
		}
	}
}

// CPUHogLimit is the CPU limit (CPUs) the service's cgroup gets while a
// cpu-hog fault runs: the neighbours then take the service's own CPU, as in
// a Kubernetes pod with a limit, instead of the whole machine's (on a 2-CPU
// machine that hosts the whole mesh, an unbounded hog slows every service).
const CPUHogLimit = 0.5

func (m *Mesh) cpuHog(st *ServiceState, amount string) (func() error, error) {
	n, err := m.busyCount(st, FaultCPUHog, amount)
	if err != nil {
		return nil, err
	}
	restore, err := m.cg.setQuota(st.Name, CPUHogLimit)
	if err != nil {
		return nil, err
	}
	// The hogs share the service's cgroup (its pod): its CPU limit and its
	// share of the machine.
	return m.busy(st.Name+".hog", n, m.cg.procsFiles(st.Name), -1, restore)
}

// busyCount reads the number of busy processes of a fault on st and puts
// st's whole app tree in its cgroups, which the fault changes.
func (m *Mesh) busyCount(st *ServiceState, fault, amount string) (int, error) {
	n, err := strconv.Atoi(amount)
	if err != nil || n < 1 || n > 64 {
		return 0, fmt.Errorf("bad %s amount %q (want a number of busy processes)", fault, amount)
	}
	if m.cg == nil {
		if !m.root {
			return 0, ErrNeedRoot
		}
		return 0, errors.New("no usable cgroup cpu controller")
	}
	m.addAppTree(st)
	return n, nil
}

// busy starts n busy shell loops named label0…, in the cgroups of
// cgroupProcs (none: the mesh's own), pinned to CPU cpu when ≥ 0, and
// returns the function that stops them and then calls restore.
func (m *Mesh) busy(label string, n int, cgroupProcs []string, cpu int, restore func() error) (func() error, error) {
	var procs []*proc
	stop := func() error {
		stopProcs(procs)
		return restore()
	}
	for i := range n {
		p, err := m.spawn(fmt.Sprintf("%s%d", label, i), "", []string{"sh", "-c", "while :; do :; done"}, os.Environ(), cgroupProcs, false)
		// The shell joins the cgroups before it execs the loop (cgexec);
		// joined from here too, so that it is inside them when the fault
		// counts as injected, whenever the shell gets a CPU.
		for _, f := range cgroupProcs {
			if err == nil {
				err = writeFile(f, strconv.Itoa(p.cmd.Process.Pid))
			}
		}
		if err == nil && cpu >= 0 {
			err = pinPID(p.cmd.Process.Pid, cpu)
		}
		if err != nil {
			if p != nil {
				procs = append(procs, p)
			}
			return nil, errors.Join(err, stop())
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// parseRate reads a tc rate (bit, kbit, mbit, gbit, bps, kbps, mbps) as
// bytes per second.
func parseRate(s string) (float64, error) {
	units := []struct {
		suffix string
		bytes  float64
	}{{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1}, {"bit", 1.0 / 8}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err == nil && v > 0 {
				return v * u.bytes, nil
			}
			break
		}
	}
	return 0, fmt.Errorf("bad rate %q (want e.g. 2mbit)", s)
}

func (m *Mesh) netBandwidth(st *ServiceState, amount string) (func() error, error) {
	rate, err := parseRate(amount)
	if err != nil {
		return nil, err
	}
	if m.mode != ModePod {
		return nil, fmt.Errorf("shapes a pod's link: %w", ErrPortMode)
	}
	// A bucket of 1/20 s of traffic (at least two 9000-byte frames' worth),
	// and a queue that holds up to half a second before dropping.
	burst := max(int(rate/20), 18000)
	tbf := func(dev string) []string {
		return []string{"tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", amount,
			"burst", strconv.Itoa(burst), "latency", "500ms"}
	}
	ctx := context.Background()
	return forReplicas(st, func(r Replica) error {
		// Egress of the host end is traffic into the service; egress of the
		// pod's eth0 is traffic out of it (its responses).
		if err := run(ctx, "", tbf(r.Veth)...); err != nil {
			return err
		}
		return run(ctx, "", append([]string{"ip", "netns", "exec", r.Netns}, tbf("eth0")...)...)
	}, func(r Replica) error {
		return errors.Join(
			run(ctx, "", "tc", "qdisc", "del", "dev", r.Veth, "root"),
			run(ctx, "", "ip", "netns", "exec", r.Netns, "tc", "qdisc", "del", "dev", "eth0", "root"))
	})
}

func (m *Mesh) netDelay(st *ServiceState, amount string) (func() error, error) {
	d, err := time.ParseDuration(amount)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("bad delay %q (want e.g. 100ms)", amount)
	}
	if m.opts.EnvoyBin == "" {
		return nil, fmt.Errorf("delays with Envoy's fault filter: %w", ErrNoSidecar)
	}
	ms := strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	return forReplicas(st, func(r Replica) error {
		return envoyRuntime(r.EnvoyAdmin, map[string]string{rtDelayPercent: "100", rtDelayDuration: ms})
	}, func(r Replica) error {
		return envoyRuntime(r.EnvoyAdmin, map[string]string{rtDelayPercent: "0"})
	})
}

// parseShare reads "10%" or "0.1" as a share in (0, 1].
func parseShare(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if strings.HasSuffix(s, "%") {
		v /= 100
	}
	if err != nil || v <= 0 || v > 1 {
		return 0, fmt.Errorf("bad share %q (want 10%% or 0.1)", s)
	}
	return v, nil
}

func (m *Mesh) packetLoss(st *ServiceState, amount string) (func() error, error) {
	p, err := parseShare(amount)
	if err != nil {
		return nil, err
	}
	if m.mode != ModePod {
		return nil, fmt.Errorf("drops on a pod's link: %w", ErrPortMode)
	}
	if !m.root {
		return nil, ErrNeedRoot
	}
	stops := map[string]func() error{}
	return forReplicas(st, func(r Replica) error {
		// On the host end of the pod's link: its egress is traffic into
		// the service (requests, its callees' answers), its ingress what
		// the service sends.
		stop, err := attachDropper(r.Veth, p)
		if err == nil {
			stops[r.Veth] = stop
		}
		return err
	}, func(r Replica) error { return stops[r.Veth]() })
}

// NeighbourWeight is how many times a service's CPU weight the pod of its
// noisy neighbour gets: a pod that requests ten times the service's CPU
// (Kubernetes sets a pod's cgroup weight from its CPU request), on a node
// where both want the same CPU. At an equal weight the service, which needs
// about 1 % of a CPU, kept half of it whatever the neighbour's number of
// busy processes, and only its wake-up latency grew (bench/RESULTS.md).
const NeighbourWeight = 10

// noisyNeighbour confines the service's apps to one CPU (its cgroup's
// cpuset) and starts n busy processes pinned to the same CPU outside its
// cgroups, in a pod of their own of NeighbourWeight times the service's CPU
// weight: another workload of the node that wants the CPU the service runs
// on, as in an oversubscribed node. The service has no CPU limit; its
// threads wait in the run queue.
func (m *Mesh) noisyNeighbour(st *ServiceState, amount string) (func() error, error) {
	n, err := m.busyCount(st, FaultNoisyNeighbour, amount)
	if err != nil {
		return nil, err
	}
	pod := st.Name + "-neighbour"
	if err := m.cg.addService(pod); err != nil {
		return nil, err
	}
	if err := m.cg.setWeight(pod, NeighbourWeight); err != nil {
		return nil, err
	}
	cpu := runtime.NumCPU() - 1
	restore, err := m.cg.pin(st.Name, cpu)
	if err != nil {
		return nil, err
	}
	return m.busy(st.Name+".neighbour", n, m.cg.procsFiles(pod), cpu, restore)
}

// appFault turns a fault of the app itself on through its ADMIN endpoint.
func (m *Mesh) appFault(st *ServiceState, name, amount string) (func() error, error) {
	post := func(r Replica, on bool) error {
		body, _ := json.Marshal(map[string]any{"name": name, "on": on, "amount": amount})
		resp, err := adminClient.Post("http://"+r.AdminAddr+"/fault", "application/json", bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("app admin of %s-%d: %w", r.Service, r.Index, err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("app admin of %s-%d: %s: %s", r.Service, r.Index, resp.Status, bytes.TrimSpace(msg))
		}
		return nil
	}
	return forReplicas(st, func(r Replica) error { return post(r, true) }, func(r Replica) error { return post(r, false) })
}

// processTree is pid and its descendants (by /proc/*/stat ppid).
func processTree(pid int) []int {
	if pid <= 0 {
		return nil
	}
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		fs := strings.Fields(s[i+1:])
		if len(fs) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(fs[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}
