package mesh

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The memory-pressure fault: the service's apps get a memory limit a little
// above their anonymous memory, and a co-process in the same memory cgroup
// keeps reading a file larger than the room left, as a noisy log shipper in
// the same pod does. Its page cache is charged to the cgroup and fills it, so
// the service's own new pages are charged against a full cgroup and its
// threads reclaim the co-process's cache (direct reclaim) before they get
// them. Page cache is clean and reclaimable, so nothing is killed: without
// swap, a limit below the apps' anonymous memory would kill them instead.

// memRoot is the hierarchy of the services' memory cgroups: the v1 memory
// controller's mount, or the unified hierarchy when it has the memory
// controller. The cgroups are made when a memory fault first needs them.
func (cg *cgroups) memRoot() (root string, v2 bool, err error) {
	if p := v1Mount("memory", "memory.limit_in_bytes"); p != "" {
		return p, false, nil
	}
	for _, p := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		if b, err := os.ReadFile(filepath.Join(p, "cgroup.controllers")); err == nil && strings.Contains(" "+string(b)+" ", " memory ") {
			return p, true, nil
		}
	}
	return "", false, errors.New("no cgroup memory controller (v1 memory or v2 memory)")
}

// memLimit puts pids in svc's memory cgroup and limits it to limit bytes;
// the returned function lifts the limit (the processes stay: a v1 cgroup
// cannot give its charges back). procs is the cgroup's cgroup.procs.
func (cg *cgroups) memLimit(svc string, pids []int, limit int64) (procs string, lift func() error, err error) {
	root, v2, err := cg.memRoot()
	if err != nil {
		return "", nil, err
	}
	parent := filepath.Join(root, cg.name)
	if v2 {
		// A v2 child gets the memory controller only if its parent
		// hands it down.
		_ = writeFile(filepath.Join(root, "cgroup.subtree_control"), "+memory")
	}
	for _, d := range []string{parent, filepath.Join(parent, svc)} {
		if !fileExists(d) {
			if err := cg.mkdir(d); err != nil {
				return "", nil, err
			}
		}
	}
	if v2 {
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+memory"); err != nil {
			return "", nil, err
		}
	}
	dir := filepath.Join(parent, svc)
	procs = filepath.Join(dir, "cgroup.procs")
	for _, pid := range pids {
		if err := writeFile(procs, strconv.Itoa(pid)); err != nil {
			return "", nil, err
		}
	}
	file, unlimited := "memory.limit_in_bytes", "-1"
	if v2 {
		file, unlimited = "memory.max", "max"
	}
	if err := writeFile(filepath.Join(dir, file), strconv.FormatInt(limit, 10)); err != nil {
		return "", nil, err
	}
	return procs, func() error { return writeFile(filepath.Join(dir, file), unlimited) }, nil
}

// anonBytes is the anonymous memory (RssAnon) of pids, in bytes.
func anonBytes(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for l := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				n += kb << 10
			}
		}
	}
	return n
}

// parseBytes reads a size: a number of bytes with an optional KB, MB or GB
// suffix (powers of 1024).
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if n, ok := strings.CutSuffix(strings.ToUpper(s), u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 8MB)", s)
	}
	return int64(v * float64(mult)), nil
}

// Sizes of the memory fault's file: larger than the cgroup's room, so that
// every pass of the reader charges new pages (the previous pass's are
// reclaimed first), within what a shared disk bears.
const (
	memFillExtra = 64 << 20
	memFillMax   = 1 << 30
)

func (m *Mesh) memoryPressure(st *ServiceState, amount string) (func() error, error) {
	headroom, err := parseBytes(amount)
	if err != nil {
		return nil, err
	}
	if m.cg == nil {
		if !m.root {
			return nil, ErrNeedRoot
		}
		return nil, errors.New("no usable cgroup controllers")
	}
	var pids []int
	for _, r := range st.Replicas {
		tree := processTree(r.AppPID)
		if m.opts.Wrap != nil && len(tree) > 0 && tree[0] == r.AppPID {
			tree = tree[1:] // the wrapper (a tracer) is no part of the pod
		}
		pids = append(pids, tree...)
	}
	if len(pids) == 0 {
		return nil, errors.New("no running app processes")
	}
	limit := anonBytes(pids) + headroom
	fill := filepath.Join(m.dir, "memory-"+st.Name+".fill")
	if err := writeFill(fill, min(limit+memFillExtra, memFillMax)); err != nil {
		return nil, err
	}
	procs, lift, err := m.cg.memLimit(st.Name, pids, limit)
	if err != nil {
		return nil, errors.Join(err, os.Remove(fill))
	}
	restore := func() error { return errors.Join(lift(), os.Remove(fill)) }
	m.log.Info("memory limit", "service", st.Name, "limit_bytes", limit, "headroom_bytes", headroom, "fill", fill)
	// The reader enters only the memory cgroup: it takes no CPU quota of
	// the service, so the fault is memory alone.
	p, err := m.spawn(st.Name+".pagecache", "", []string{"sh", "-c", `while :; do cat "$0" > /dev/null || exit 1; done`, fill}, os.Environ(), []string{procs}, false)
	if err != nil {
		return nil, errors.Join(err, restore())
	}
	return func() error {
		stopProcs([]*proc{p})
		return restore()
	}, nil
}

// writeFill writes a file of size bytes and drops it from the page cache,
// so that the reader's reads charge its pages to the reader's cgroup: pages
// already cached stay charged to whoever read or wrote them first.
func writeFill(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) // not zeros: no filesystem shortcut
	}
	for n := int64(0); n < size; n += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), size-n)]); err != nil {
			return errors.Join(fmt.Errorf("memory fault: write %s: %w", path, err), f.Close(), os.Remove(path))
		}
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close(), os.Remove(path))
	}
	err = dropCache(f)
	return errors.Join(err, f.Close())
}
