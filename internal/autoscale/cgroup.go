package autoscale

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroup is one replica's CPU-limited cgroup: in the hybrid layout the v1 cpu
// hierarchy (quota) and the v1 cpuacct hierarchy (usage), else the v2
// hierarchy with the cpu controller (cpu.max, cpu.stat).
type cgroup struct {
	cpu, acct string // v1 directories
	v2        string // v2 directory
}

const (
	v1CPU  = "/sys/fs/cgroup/cpu"
	v1Acct = "/sys/fs/cgroup/cpuacct"
	v2Root = "/sys/fs/cgroup"
)

// newCgroup creates rel (e.g. "rootline-autoscale-x/r0") with a CPU quota of
// quota CPUs (0.25 is a quarter of one CPU) per 100 ms period.
func newCgroup(rel string, quota float64) (*cgroup, error) {
	period := 100000
	q := int(quota * float64(period))
	if q < 1000 {
		return nil, fmt.Errorf("autoscale: CPU quota %g too small (at least 0.01)", quota)
	}
	if fileExists(filepath.Join(v1CPU, "cpu.cfs_quota_us")) && fileExists(filepath.Join(v1Acct, "cpuacct.usage")) {
		c := &cgroup{cpu: filepath.Join(v1CPU, rel), acct: filepath.Join(v1Acct, rel)}
		for _, d := range []string{c.cpu, c.acct} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("autoscale: cgroup: %w", err)
			}
		}
		if err := writeFile(filepath.Join(c.cpu, "cpu.cfs_period_us"), strconv.Itoa(period)); err != nil {
			return nil, err
		}
		return c, writeFile(filepath.Join(c.cpu, "cpu.cfs_quota_us"), strconv.Itoa(q))
	}
	ctl, err := os.ReadFile(filepath.Join(v2Root, "cgroup.controllers"))
	if err != nil || !strings.Contains(" "+string(ctl)+" ", " cpu ") {
		return nil, errors.New("autoscale: no cgroup cpu controller (v1 cpu+cpuacct or v2 cpu)")
	}
	c := &cgroup{v2: filepath.Join(v2Root, rel)}
	// Each level above the replica must delegate the cpu controller.
	dir := v2Root
	for _, part := range strings.Split(filepath.Dir(rel), "/") {
		if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, err
		}
		dir = filepath.Join(dir, part)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("autoscale: cgroup: %w", err)
		}
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.v2, 0o755); err != nil {
		return nil, fmt.Errorf("autoscale: cgroup: %w", err)
	}
	return c, writeFile(filepath.Join(c.v2, "cpu.max"), fmt.Sprintf("%d %d", q, period))
}

// add moves pid into the cgroup.
func (c *cgroup) add(pid int) error {
	for _, d := range []string{c.cpu, c.acct, c.v2} {
		if d == "" {
			continue
		}
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// usage is the CPU time the cgroup's tasks used since it was created.
func (c *cgroup) usage() (time.Duration, error) {
	if c.acct != "" {
		b, err := os.ReadFile(filepath.Join(c.acct, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(n), err
	}
	b, err := os.ReadFile(filepath.Join(c.v2, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond, err
		}
	}
	return 0, errors.New("autoscale: no usage_usec in cpu.stat")
}

// path is the cgroup the kernel metrics key the replica by (the v1 cpu
// cgroup in the hybrid layout), as the kmetrics config API names it.
func (c *cgroup) path() string {
	if c.cpu != "" {
		return c.cpu
	}
	return c.v2
}

// remove deletes the (empty) cgroup directories.
func (c *cgroup) remove() error {
	var errs []error
	for _, d := range []string{c.cpu, c.acct, c.v2} {
		if d != "" {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// newGroup creates the experiment's parent cgroup rel with a CPU weight of
// shares (cgroup v1 cpu.shares; 1024 is one ordinary task's weight) and no
// quota: the replicas' cgroups and the infra cgroup (Envoy, the load
// generator) go under it. Zero shares leaves the default weight.
func newGroup(rel string, shares int) (*cgroup, error) {
	if fileExists(filepath.Join(v1CPU, "cpu.shares")) && fileExists(filepath.Join(v1Acct, "cpuacct.usage")) {
		c := &cgroup{cpu: filepath.Join(v1CPU, rel), acct: filepath.Join(v1Acct, rel)}
		for _, d := range []string{c.cpu, c.acct} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("autoscale: cgroup: %w", err)
			}
		}
		if shares > 0 {
			return c, writeFile(filepath.Join(c.cpu, "cpu.shares"), strconv.Itoa(shares))
		}
		return c, nil
	}
	if err := writeFile(filepath.Join(v2Root, "cgroup.subtree_control"), "+cpu"); err != nil {
		return nil, err
	}
	c := &cgroup{v2: filepath.Join(v2Root, rel)}
	if err := os.MkdirAll(c.v2, 0o755); err != nil {
		return nil, fmt.Errorf("autoscale: cgroup: %w", err)
	}
	if shares > 0 {
		// cpu.weight is 1…10000 with 100 for an ordinary task.
		w := max(1, min(10000, shares*100/1024))
		return c, writeFile(filepath.Join(c.v2, "cpu.weight"), strconv.Itoa(w))
	}
	return c, nil
}

// leave moves pid back to the root cgroups (so its cgroup can be removed).
func leave(pid int) {
	for _, root := range []string{v1CPU, v1Acct, v2Root} {
		if fileExists(filepath.Join(root, "cgroup.procs")) {
			_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func writeFile(p, s string) error {
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		return fmt.Errorf("autoscale: write %s: %w", p, err)
	}
	return nil
}
