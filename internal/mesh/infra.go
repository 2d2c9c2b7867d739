package mesh

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// InfraPod is the pod, beside the services', that the observer's own
// processes run in (AdoptInfra): Rootline's server and the demo's load
// generator, the node agent.
//
// The CPU scheduler weighs a cgroup's tasks against its sibling cgroups as
// a whole: in the root cgroup, every runnable thread of the observer would
// weigh as much as the whole mesh (whose pods share one default weight
// under the mesh's cgroup), and under CPU contention the services would
// queue behind it (measured: a JVM service's run-queue wait behind the
// demo's server during a noisy-neighbour fault, 426 of its 795 ms). On a
// Kubernetes node the server and the agent are pods among the others, with
// a pod's weight: so they are here.
const InfraPod = "rootline-system"

// infra is a process AdoptInfra moved, and the cpu cgroup it came from.
type infra struct {
	pid   int
	procs string // the cgroup.procs file of its cgroup before
}

// AdoptInfra moves the processes pids (all their threads, and the children
// they start afterwards) into the mesh's InfraPod in the cpu controller's
// hierarchy, with a pod's default CPU weight. Close moves them back before
// it removes the pod. Without cgroups (not root, no cpu controller) it
// does nothing.
func (m *Mesh) AdoptInfra(pids ...int) error {
	if m.cg == nil {
		return nil
	}
	for _, s := range m.services {
		if s.Name == InfraPod {
			return fmt.Errorf("mesh: a service named %s: the name of the pod of Rootline's own processes", InfraPod)
		}
	}
	root := m.cg.cpu
	if root == "" {
		root = m.cg.v2
	}
	dir := filepath.Join(root, m.cg.name, InfraPod)
	if !fileExists(filepath.Join(dir, "cgroup.procs")) {
		if err := m.cg.mkdir(dir); err != nil {
			return err
		}
	}
	var errs []error
	for _, pid := range pids {
		from, err := cpuCgroupOf(pid, root, m.cg.cpu == "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			errs = append(errs, err)
			continue
		}
		m.mu.Lock()
		m.infra = append(m.infra, infra{pid: pid, procs: filepath.Join(from, "cgroup.procs")})
		m.mu.Unlock()
	}
	return errors.Join(errs...)
}

// releaseInfra moves the adopted processes back to their cgroups (those
// that exited are gone already), so that removing the pod kills none.
func (m *Mesh) releaseInfra() {
	m.mu.Lock()
	adopted := m.infra
	m.infra = nil
	m.mu.Unlock()
	for _, a := range adopted {
		if err := writeFile(a.procs, strconv.Itoa(a.pid)); err != nil && fileExists(filepath.Join("/proc", strconv.Itoa(a.pid))) {
			m.log.Warn("mesh: could not move a process out of the infrastructure pod", "pid", a.pid, "err", err)
		}
	}
}

// cpuCgroupOf is the directory of pid's cgroup in the cpu hierarchy mounted
// at root: the v1 line naming the cpu controller of /proc/<pid>/cgroup, or
// its v2 line when v2 is set.
func cpuCgroupOf(pid int, root string, v2 bool) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", fmt.Errorf("mesh: the cgroups of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		match := v2 && parts[0] == "0" && parts[1] == ""
		if !v2 {
			for _, c := range strings.Split(parts[1], ",") {
				match = match || c == "cpu"
			}
		}
		if match {
			return filepath.Join(root, parts[2]), nil
		}
	}
	return "", fmt.Errorf("mesh: process %d is in no cgroup of the cpu controller", pid)
}
