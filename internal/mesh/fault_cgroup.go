package mesh

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Every service is a pod, as in Kubernetes: a cgroup <name>/<service> whose
// two leaves are its containers, <name>/<service>/app for the apps of its
// replicas and <name>/<service>/envoy for their sidecars. The layout is the
// same in the cpu and cpuset hierarchies (cgroup v1 controllers, the hybrid
// layout of this machine kind, or v2 when the unified hierarchy has them)
// and in the unified (v2) hierarchy even where it has no controllers: that
// is the hierarchy whose cgroup ids the agent's kernel metrics key
// containers by, and a socket carries its creator's v2 cgroup, so the
// sidecar's TCP retransmissions count for the sidecar's container. Processes
// sit in leaves only (v2's no-internal-processes rule). The faults change
// the app container's limits, so a sidecar keeps its CPU as the app loses
// its own, as with a per-container limit in a pod; new threads and children
// inherit the cgroups.

const cgroupRoot = "/sys/fs/cgroup"

// CgroupPath is the cgroup path (as the agent names containers: from the
// hierarchy's root) under which the mesh of Options.Prefix prefix puts its
// pods.
func CgroupPath(prefix string) string {
	if prefix == "" {
		prefix = "rl"
	}
	return "/" + cgroupName(prefix)
}

// cgroupName is the parent cgroup of a mesh's services.
func cgroupName(prefix string) string {
	if prefix == "rl" {
		return "rootline-demo"
	}
	return "rootline-demo-" + prefix
}

// The containers of a service's pod.
const (
	// ContainerApp is the container of a service's apps.
	ContainerApp = "app"
	// ContainerSidecar is the container of a service's Envoy sidecars.
	ContainerSidecar = "envoy"
)

type cgroups struct {
	name   string
	cpu    string // v1 cpu hierarchy mount, or ""
	cpuset string // v1 cpuset hierarchy mount, or ""
	v2     string // v2 mount with the cpu controller, or ""
	v2set  bool   // v2 has cpuset too
	// unified is the v2 mount whatever its controllers (v2 itself when it
	// has the cpu controller), or "": the containers' identity.
	unified string
	log     *slog.Logger
	made    []string // directories made, parents first
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func v1Mount(ctrl, file string) string {
	for _, d := range []string{ctrl, ctrl + ",cpuacct", "cpuacct," + ctrl} {
		p := filepath.Join(cgroupRoot, d)
		if fileExists(filepath.Join(p, file)) {
			return p
		}
	}
	return ""
}

// v2Mount is the unified hierarchy if its root offers the cpu controller.
func v2Mount() (string, bool) {
	for _, p := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		b, err := os.ReadFile(filepath.Join(p, "cgroup.controllers"))
		if err != nil {
			continue
		}
		ctrls := strings.Fields(string(b))
		has := func(c string) bool {
			for _, x := range ctrls {
				if x == c {
					return true
				}
			}
			return false
		}
		if has("cpu") {
			return p, has("cpuset")
		}
	}
	return "", false
}

// unifiedMount is the cgroup v2 hierarchy's mount, with or without
// controllers ("" when there is none).
func unifiedMount() string {
	for _, p := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		if fileExists(filepath.Join(p, "cgroup.controllers")) {
			return p
		}
	}
	return ""
}

func newCgroups(name string, log *slog.Logger) (*cgroups, error) {
	cg := &cgroups{name: name, log: log}
	cg.cpu = v1Mount("cpu", "cpu.cfs_quota_us")
	cg.cpuset = v1Mount("cpuset", "cpuset.cpus")
	if cg.cpu == "" {
		cg.v2, cg.v2set = v2Mount()
		if cg.v2 == "" {
			return nil, errors.New("no cgroup cpu controller (v1 cpu or v2 cpu)")
		}
		if err := writeFile(filepath.Join(cg.v2, "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, err
		}
		if cg.v2set {
			_ = writeFile(filepath.Join(cg.v2, "cgroup.subtree_control"), "+cpuset")
		}
	}
	cg.unified = cg.v2
	if cg.unified == "" {
		cg.unified = unifiedMount()
	}
	for _, root := range cg.allRoots() {
		if err := cg.mkdir(filepath.Join(root, name)); err != nil {
			return nil, errors.Join(err, cg.remove())
		}
	}
	if err := cg.delegate(filepath.Join(cg.v2, name)); err != nil {
		return nil, errors.Join(err, cg.remove())
	}
	return cg, nil
}

// delegate hands v2's controllers down to dir's children (nothing to do
// when v2 has none).
func (cg *cgroups) delegate(dir string) error {
	if cg.v2 == "" {
		return nil
	}
	ctl := "+cpu"
	if cg.v2set {
		ctl += " +cpuset"
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), ctl)
}

// roots are the hierarchies of the controllers the faults change.
func (cg *cgroups) roots() []string {
	var r []string
	for _, p := range []string{cg.cpu, cg.cpuset, cg.v2} {
		if p != "" {
			r = append(r, p)
		}
	}
	return r
}

// allRoots are roots and the unified hierarchy.
func (cg *cgroups) allRoots() []string {
	r := cg.roots()
	if cg.unified != "" && cg.unified != cg.v2 {
		r = append(r, cg.unified)
	}
	return r
}

func writeFile(p, v string) error {
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", v, p, err)
	}
	return nil
}

// mkdir makes a cgroup; a new v1 cpuset cgroup gets its parent's CPUs and
// memory nodes (it is empty, and refuses tasks, until they are set).
func (cg *cgroups) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("cgroup: %w", err)
	}
	cg.made = append(cg.made, dir)
	if cg.cpuset != "" && strings.HasPrefix(dir, cg.cpuset+"/") {
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				return err
			}
			if err := writeFile(filepath.Join(dir, f), strings.TrimSpace(string(v))); err != nil {
				return err
			}
		}
	}
	return nil
}

// addService makes svc's pod and its two containers in every hierarchy.
func (cg *cgroups) addService(svc string) error {
	pod := filepath.Join(cg.name, svc)
	for _, root := range cg.allRoots() {
		if err := cg.mkdir(filepath.Join(root, pod)); err != nil {
			return err
		}
	}
	if err := cg.delegate(filepath.Join(cg.v2, pod)); err != nil {
		return err
	}
	for _, root := range cg.allRoots() {
		for _, c := range []string{ContainerApp, ContainerSidecar} {
			if err := cg.mkdir(filepath.Join(root, pod, c)); err != nil {
				return err
			}
		}
	}
	return nil
}

// procsFiles are the cgroup.procs files that put a process in svc's app
// container in the controllers' hierarchies (what the faults limit).
func (cg *cgroups) procsFiles(svc string) []string {
	return cg.containerProcs(svc, ContainerApp, false)
}

// containerProcs are the cgroup.procs files that put a process in
// container c of svc's pod: in the controllers' hierarchies, and in the
// unified one when unified is set. A process that keeps its own v2 cgroup
// (an app under rootline run, whose eBPF datapath follows the cgroup the
// run made for it) is moved in the controllers' hierarchies only.
func (cg *cgroups) containerProcs(svc, c string, unified bool) []string {
	roots := cg.roots()
	if unified {
		roots = cg.allRoots()
	}
	var fs []string
	for _, root := range roots {
		fs = append(fs, filepath.Join(root, cg.name, svc, c, "cgroup.procs"))
	}
	return fs
}

// addPID moves pid into svc's app container (controllers only, see
// procsFiles).
func (cg *cgroups) addPID(svc string, pid int) error {
	var errs []error
	for _, f := range cg.procsFiles(svc) {
		errs = append(errs, writeFile(f, strconv.Itoa(pid)))
	}
	return errors.Join(errs...)
}

// dir is svc's app container in the cpu controller (what cpu-throttle
// limits).
func (cg *cgroups) dir(svc string) string {
	if cg.cpu != "" {
		return filepath.Join(cg.cpu, cg.name, svc, ContainerApp)
	}
	return filepath.Join(cg.v2, cg.name, svc, ContainerApp)
}

// unifiedDir is container c of svc's pod in the unified hierarchy, the
// cgroup the agent knows the container by; "" without one.
func (cg *cgroups) unifiedDir(svc, c string) string {
	if cg.unified == "" {
		return ""
	}
	return filepath.Join(cg.unified, cg.name, svc, c)
}

// setQuota limits svc to cpus CPUs per period; the returned function lifts it.
func (cg *cgroups) setQuota(svc string, cpus float64) (func() error, error) {
	d := cg.dir(svc)
	if cg.cpu != "" {
		period := 100000
		if b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_period_us")); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 {
				period = p
			}
		}
		quota := max(int(cpus*float64(period)), 1000)
		if err := writeFile(filepath.Join(d, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
			return nil, err
		}
		return func() error { return writeFile(filepath.Join(d, "cpu.cfs_quota_us"), "-1") }, nil
	}
	const period = 100000
	quota := max(int(cpus*period), 1000)
	if err := writeFile(filepath.Join(d, "cpu.max"), fmt.Sprintf("%d %d", quota, period)); err != nil {
		return nil, err
	}
	return func() error { return writeFile(filepath.Join(d, "cpu.max"), fmt.Sprintf("max %d", period)) }, nil
}

// setWeight gives pod times the default CPU weight (v1 cpu.shares 1024,
// v2 cpu.weight 100) among the mesh's pods.
func (cg *cgroups) setWeight(pod string, times int) error {
	if cg.cpu != "" {
		return writeFile(filepath.Join(cg.cpu, cg.name, pod, "cpu.shares"), strconv.Itoa(1024*times))
	}
	return writeFile(filepath.Join(cg.v2, cg.name, pod, "cpu.weight"), strconv.Itoa(min(100*times, 10000)))
}

// pin confines svc's cgroup to one CPU (cpuset.cpus); the returned
// function gives it back its CPUs.
func (cg *cgroups) pin(svc string, cpu int) (func() error, error) {
	var d string
	switch {
	case cg.cpuset != "":
		d = filepath.Join(cg.cpuset, cg.name, svc, ContainerApp)
	case cg.v2set:
		d = filepath.Join(cg.v2, cg.name, svc, ContainerApp)
	default:
		return nil, errors.New("no cgroup cpuset controller to pin the service to a CPU")
	}
	f := filepath.Join(d, "cpuset.cpus")
	old, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	prev := strings.TrimSpace(string(old))
	if prev == "" {
		// v2: empty means the parent's CPUs.
		if b, err := os.ReadFile(filepath.Join(d, "cpuset.cpus.effective")); err == nil {
			prev = strings.TrimSpace(string(b))
		}
	}
	if err := writeFile(f, strconv.Itoa(cpu)); err != nil {
		return nil, err
	}
	return func() error { return writeFile(f, prev) }, nil
}

// remove deletes the cgroups made, children first; processes still inside
// (leftovers of a wrapper) are killed.
func (cg *cgroups) remove() error {
	var errs []error
	for i := len(cg.made) - 1; i >= 0; i-- {
		if err := rmCgroup(cg.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	cg.made = nil
	return errors.Join(errs...)
}

// rmCgroup kills what is left in dir and removes it, retrying while the
// kernel finishes the exits.
func rmCgroup(dir string) error {
	var err error
	for range 50 {
		if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, _ := strconv.Atoi(f); pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cgroup: remove %s: %w", dir, err)
}

// removeCgroups deletes <name> and its children in every hierarchy (stale
// state cleanup).
func removeCgroups(name string, log *slog.Logger) error {
	var errs []error
	for _, root := range []string{v1Mount("cpu", "cpu.cfs_quota_us"), v1Mount("cpuset", "cpuset.cpus"), v1Mount("memory", "memory.limit_in_bytes"), cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		if root == "" {
			continue
		}
		dir := filepath.Join(root, name)
		if !fileExists(filepath.Join(dir, "cgroup.procs")) {
			continue
		}
		log.Info("removing leftover cgroup", "dir", dir)
		errs = append(errs, rmTree(dir))
	}
	return errors.Join(errs...)
}

// rmTree removes the cgroup dir and its descendants, deepest first.
func rmTree(dir string) error {
	var errs []error
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, rmTree(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(append(errs, rmCgroup(dir))...)
}
