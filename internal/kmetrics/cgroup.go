package kmetrics

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Cgroups locates the cgroup hierarchies a container key can come from: the
// v2 (unified) hierarchy, and the v1 hierarchy of the cpu controller on
// hybrid hosts.
type Cgroups struct {
	// V2Root is the cgroup2 mount ("/sys/fs/cgroup" on v2-only hosts,
	// "/sys/fs/cgroup/unified" on hybrid ones); empty when absent.
	V2Root string
	// V1CPURoot is the cgroup v1 mount holding the cpu controller; empty
	// when absent.
	V1CPURoot string
	// ProcRoot is /proc.
	ProcRoot string
}

// Container is a cgroup a metric key stands for.
type Container struct {
	// Key is the BPF container key: the cgroup id (inode of its directory),
	// with V1Bit set for a v1 cpu cgroup.
	Key uint64 `json:"key"`
	// Path is the cgroup's path inside its hierarchy ("/app.slice/x").
	Path string `json:"path"`
	// V1 is set for a cgroup v1 (cpu controller) container.
	V1 bool `json:"v1,omitempty"`
}

// Name is the container label: the v2 path, or "cpu:" and the v1 path.
func (c Container) Name() string {
	if c.V1 {
		return "cpu:" + c.Path
	}
	return c.Path
}

// DetectCgroups finds the hierarchies in /proc/self/mountinfo.
func DetectCgroups() Cgroups {
	c := Cgroups{ProcRoot: "/proc"}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return c
	}
	defer f.Close()
	c.V2Root, c.V1CPURoot = parseMountinfo(f)
	return c
}

func parseMountinfo(f interface{ Read([]byte) (int, error) }) (v2, v1cpu string) {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 || fields[3] != "/" {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = fields[4]
			}
		case "cgroup":
			for opt := range strings.SplitSeq(tail[2], ",") {
				if opt == "cpu" && v1cpu == "" {
					v1cpu = fields[4]
				}
			}
		}
	}
	return v2, v1cpu
}

// pidCgroups returns a process's v2 path and v1 cpu path from
// /proc/<pid>/cgroup ("" when not listed).
func (c Cgroups) pidCgroups(pid int) (v2, v1cpu string, err error) {
	data, err := os.ReadFile(filepath.Join(c.ProcRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", "", err
	}
	v2, v1cpu, _ = parseProcCgroup(string(data))
	return v2, v1cpu, nil
}

func parseProcCgroup(s string) (v2, v1cpu string, ok bool) {
	for line := range strings.Lines(s) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ok = true
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for ctrl := range strings.SplitSeq(parts[1], ",") {
			if ctrl == "cpu" {
				v1cpu = parts[2]
			}
		}
	}
	return v2, v1cpu, ok
}

// PIDContainer returns the container of a process: its v2 cgroup, unless that
// is the root and its v1 cpu cgroup is not (then the v1 one).
func (c Cgroups) PIDContainer(pid int) (Container, error) {
	v2, v1, err := c.pidCgroups(pid)
	if err != nil {
		return Container{}, err
	}
	if (v2 == "" || v2 == "/") && v1 != "" && v1 != "/" && c.V1CPURoot != "" {
		return c.container(v1, true)
	}
	if v2 != "" && c.V2Root != "" {
		return c.container(v2, false)
	}
	return Container{}, fmt.Errorf("kmetrics: pid %d: no cgroup v2 or v1 cpu cgroup", pid)
}

func (c Cgroups) container(rel string, v1 bool) (Container, error) {
	root := c.V2Root
	if v1 {
		root = c.V1CPURoot
	}
	if root == "" {
		return Container{}, errors.New("kmetrics: cgroup hierarchy not mounted")
	}
	rel = "/" + strings.Trim(rel, "/")
	ino, err := inode(filepath.Join(root, rel))
	if err != nil {
		return Container{}, fmt.Errorf("kmetrics: cgroup %s: %w", rel, err)
	}
	ct := Container{Key: ino, Path: rel, V1: v1}
	if v1 {
		ct.Key |= V1Bit
	}
	return ct, nil
}

// PathContainer resolves a container named in the API: an absolute path
// under a hierarchy's mount (/sys/fs/cgroup/cpu/x is v1, …/unified/x is v2),
// "cpu:/x" for a v1 cpu cgroup, or "/x" for a v2 cgroup.
func (c Cgroups) PathContainer(name string) (Container, error) {
	if rel, ok := strings.CutPrefix(name, "cpu:"); ok {
		return c.container(rel, true)
	}
	if c.V2Root != "" {
		if rel, ok := cutDir(name, c.V2Root); ok {
			return c.container(rel, false)
		}
	}
	if c.V1CPURoot != "" {
		if rel, ok := cutDir(name, c.V1CPURoot); ok {
			return c.container(rel, true)
		}
	}
	return c.container(name, false)
}

func cutDir(p, root string) (string, bool) {
	p = filepath.Clean(p)
	if p == root {
		return "/", true
	}
	rel, ok := strings.CutPrefix(p, root+"/")
	return "/" + rel, ok
}

// FindKey walks the hierarchy of key for the cgroup with that id.
func (c Cgroups) FindKey(key uint64) (Container, bool) {
	root, v1 := c.V2Root, false
	if key&V1Bit != 0 {
		root, v1 = c.V1CPURoot, true
	}
	if root == "" {
		return Container{}, false
	}
	want := key &^ V1Bit
	var found Container
	ok := false
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if ino, err := inode(p); err == nil && ino == want {
			rel, _ := cutDir(p, root)
			found, ok = Container{Key: key, Path: rel, V1: v1}, true
			return filepath.SkipAll
		}
		return nil
	})
	return found, ok
}

func inode(p string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Throttled reads how a container's CPU quota throttled it (readThrottled):
// from its own cgroup's cpu.stat, or, for a v2 cgroup without the cpu
// controller on a hybrid host (where cpu is a v1 controller), from the v1
// cpu cgroup of its first member — where a quota on it is set.
func (c Cgroups) Throttled(ct Container) (nr, ns uint64, ok bool) {
	root := c.V2Root
	if ct.V1 {
		root = c.V1CPURoot
	}
	if root == "" {
		return 0, 0, false
	}
	if nr, ns, ok = readThrottled(filepath.Join(root, ct.Path, "cpu.stat"), ct.V1); ok || ct.V1 || c.V1CPURoot == "" {
		return nr, ns, ok
	}
	procs, err := os.ReadFile(filepath.Join(root, ct.Path, "cgroup.procs"))
	if err != nil {
		return 0, 0, false
	}
	first, _, _ := strings.Cut(string(procs), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, 0, false
	}
	_, v1, err := c.pidCgroups(pid)
	if err != nil || v1 == "" {
		return 0, 0, false
	}
	return readThrottled(filepath.Join(c.V1CPURoot, v1, "cpu.stat"), true)
}

// readThrottled reads a cgroup's cpu.stat: how many periods its CPU quota
// ran out in (nr_throttled) and for how long it held the cgroup's threads
// off the CPUs, in ns summed over CPUs (v2 throttled_usec, v1
// throttled_time); false when the file has no bandwidth statistics (a v2
// cgroup without the cpu controller) or cannot be read.
func readThrottled(path string, v1 bool) (nr, ns uint64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	timeKey, unit := "throttled_usec", uint64(1000)
	if v1 {
		timeKey, unit = "throttled_time", 1
	}
	var haveNr, haveTime bool
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_throttled":
			nr, haveNr = n, true
		case timeKey:
			ns, haveTime = n*unit, true
		}
	}
	return nr, ns, haveNr && haveTime
}
