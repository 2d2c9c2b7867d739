package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/profiler"
)

// CgroupProfiler is a profiler that can record a cgroup v2 as a whole (a
// container): the kernel flight recorder (kernel.Recorder) does so from BPF,
// by cgroup id, so that the container's new processes are recorded from
// their first scheduler event.
type CgroupProfiler interface {
	profiler.Profiler
	// StartCgroup records every task whose cgroup v2 has this id (the inode
	// of its directory).
	StartCgroup(id uint64) error
	// StopCgroup stops recording it.
	StopCgroup(id uint64) error
	// DumpCgroup dumps the window for the processes of the cgroup whose
	// directory is dir; t (a member, or PID 0) names the artifacts.
	DumpCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error)
}

// ContainerSpec names a cgroup v2 to record as a container: by path (Cgroup:
// relative to the cgroup2 mount, such as "/app.slice/x", or absolute under
// it, such as "/sys/fs/cgroup/unified/app") and/or by id (CgroupID: the
// inode of its directory). Service and InstanceID name its processes.
type ContainerSpec struct {
	Cgroup     string `yaml:"cgroup" json:"cgroup,omitempty"`
	CgroupID   uint64 `yaml:"cgroup_id" json:"cgroupId,omitempty"`
	Service    string `yaml:"service" json:"service,omitempty"`
	InstanceID string `yaml:"service_instance_id" json:"serviceInstanceId,omitempty"`
}

// ParseContainerSpec parses a --kernel.cgroup value: a cgroup path, or
// comma-separated key=value pairs with keys path, id, service and instance
// (e.g. "path=/app,service=checkout" or "id=4242").
func ParseContainerSpec(s string) (ContainerSpec, error) {
	var c ContainerSpec
	s = strings.TrimSpace(s)
	if s == "" {
		return c, errors.New("cgroup: empty")
	}
	if !strings.Contains(s, "=") {
		c.Cgroup = s
		return c, nil
	}
	err := eachKeyValue("cgroup", s, func(k, v string) error {
		switch k {
		case "path":
			c.Cgroup = v
		case "id":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("cgroup %q: id must be a positive integer (the inode of the cgroup's directory)", s)
			}
			c.CgroupID = n
		case "service":
			c.Service = v
		case "instance":
			c.InstanceID = v
		default:
			return fmt.Errorf("cgroup %q: unknown key %q (want path, id, service or instance)", s, k)
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	if c.Cgroup == "" && c.CgroupID == 0 {
		return c, fmt.Errorf("cgroup %q: needs path= or id=", s)
	}
	return c, nil
}

// String formats the spec as ParseContainerSpec reads it.
func (c ContainerSpec) String() string {
	var parts []string
	if c.Cgroup != "" {
		parts = append(parts, "path="+c.Cgroup)
	}
	if c.CgroupID != 0 {
		parts = append(parts, "id="+strconv.FormatUint(c.CgroupID, 10))
	}
	if c.Service != "" {
		parts = append(parts, "service="+c.Service)
	}
	if c.InstanceID != "" {
		parts = append(parts, "instance="+c.InstanceID)
	}
	return strings.Join(parts, ",")
}

// Container is a registered container as the API shows it.
type Container struct {
	// CgroupID is the cgroup v2 id (inode of Dir).
	CgroupID uint64 `json:"cgroupId"`
	// Path is the cgroup's path in the cgroup2 hierarchy ("/app").
	Path string `json:"path"`
	// Dir is its directory ("/sys/fs/cgroup/unified/app").
	Dir        string `json:"dir"`
	Service    string `json:"service,omitempty"`
	InstanceID string `json:"serviceInstanceId,omitempty"`
	// Kinds are the profilers recording the cgroup as a whole.
	Kinds []string `json:"kinds"`
	// PIDs are its processes that are targets now.
	PIDs []int `json:"pids"`
}

// container is one registered cgroup.
type container struct {
	cgroupRef
	service, instanceID string
	kinds               []string
	spec                *ContainerSpec // the configured spec, nil when registered by the API
}

// cgroupRef is a resolved cgroup v2.
type cgroupRef struct {
	id   uint64
	dir  string // absolute directory
	path string // relative to the cgroup2 mount, with a leading /
}

// Errors of resolveCgroup; the API maps them to statuses.
var (
	errCgroupNotFound = errors.New("no such cgroup")
	errCgroupInvalid  = errors.New("invalid cgroup")
	errNoCgroup2      = errors.New("no cgroup v2 hierarchy is mounted on this host")
	errNoCgroupProf   = errors.New("no profiler of this agent records cgroups (the kernel profiler is not running)")
)

// cgroup2Root finds the cgroup2 mount in /proc/self/mountinfo ("" if none).
func cgroup2Root() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(tail) >= 1 && tail[0] == "cgroup2" && fields[3] == "/" {
			return fields[4]
		}
	}
	return ""
}

// resolveCgroup finds the cgroup v2 a spec names. Errors wrap
// errCgroupNotFound, errCgroupInvalid or errNoCgroup2.
func resolveCgroup(root string, spec ContainerSpec) (cgroupRef, error) {
	if spec.Cgroup == "" && spec.CgroupID == 0 {
		return cgroupRef{}, fmt.Errorf("%w: give a cgroup path (relative to the cgroup2 mount, or absolute) or a cgroupId", errCgroupInvalid)
	}
	if root == "" {
		return cgroupRef{}, errNoCgroup2
	}
	var ref cgroupRef
	if spec.Cgroup != "" {
		dir, err := cgroupDir(root, spec.Cgroup)
		if err != nil {
			return cgroupRef{}, err
		}
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return cgroupRef{}, fmt.Errorf("%w %q: %s does not exist", errCgroupNotFound, spec.Cgroup, dir)
			}
			return cgroupRef{}, fmt.Errorf("cgroup %q: %w", spec.Cgroup, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return cgroupRef{}, fmt.Errorf("%w %q: %s is not a directory", errCgroupInvalid, spec.Cgroup, dir)
		}
		var sfs unix.Statfs_t
		if err := unix.Statfs(dir, &sfs); err != nil {
			return cgroupRef{}, fmt.Errorf("cgroup %q: %w", spec.Cgroup, err)
		}
		if sfs.Type != cgroup2SuperMagic {
			return cgroupRef{}, fmt.Errorf("%w %q: %s is not a cgroup v2 directory (the cgroup2 hierarchy is mounted at %s)", errCgroupInvalid, spec.Cgroup, dir, root)
		}
		ref = cgroupRef{id: st.Ino, dir: dir}
		if spec.CgroupID != 0 && spec.CgroupID != ref.id {
			return cgroupRef{}, fmt.Errorf("%w: cgroup %s has id %d, not %d", errCgroupInvalid, dir, ref.id, spec.CgroupID)
		}
	} else {
		var ok bool
		if ref, ok = findCgroupID(root, spec.CgroupID); !ok {
			return cgroupRef{}, fmt.Errorf("%w: no cgroup v2 has id %d under %s", errCgroupNotFound, spec.CgroupID, root)
		}
	}
	ref.path = "/" + strings.TrimPrefix(strings.TrimPrefix(ref.dir, root), "/")
	if ref.path == "/" {
		return cgroupRef{}, fmt.Errorf("%w: the root cgroup is not a container", errCgroupInvalid)
	}
	return ref, nil
}

// cgroupDir turns a cgroup path into its directory: a path under the
// cgroup2 mount or under /sys/fs/cgroup is taken as is (so that a v1 path is
// reported as such), any other is relative to the mount.
func cgroupDir(root, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path %q", errCgroupInvalid, p)
	}
	clean := filepath.Clean("/" + p)
	if within(clean, root) || within(clean, "/sys/fs/cgroup") {
		return clean, nil
	}
	return filepath.Join(root, clean), nil
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// findCgroupID walks the cgroup2 hierarchy for the directory with inode id.
func findCgroupID(root string, id uint64) (cgroupRef, bool) {
	var ref cgroupRef
	found := false
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Ino == id {
			ref, found = cgroupRef{id: id, dir: p}, true
			return filepath.SkipAll
		}
		return nil
	})
	return ref, found
}

// alive reports whether the cgroup is still there (same directory,
// same id: not removed, nor removed and created again).
func (c cgroupRef) alive() bool {
	var st unix.Stat_t
	return unix.Stat(c.dir, &st) == nil && st.Ino == c.id
}

// cgroupPIDs reads the processes of a cgroup (not of its descendants).
func cgroupPIDs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// cgroupProfilers returns the profilers that record cgroups.
func (a *Agent) cgroupProfilers() []CgroupProfiler {
	var out []CgroupProfiler
	for _, p := range a.profilers {
		if cp, ok := p.(CgroupProfiler); ok {
			out = append(out, cp)
		}
	}
	return out
}

// addContainer registers a resolved cgroup (a.scanMu held): every cgroup
// profiler records it. Registering it again renames it.
func (a *Agent) addContainer(ref cgroupRef, service, instanceID string, spec *ContainerSpec) (*container, error) {
	a.mu.Lock()
	if c, ok := a.containers[ref.id]; ok {
		renamed := false
		if service != "" && c.service != service {
			c.service, renamed = service, true
		}
		if instanceID != "" && c.instanceID != instanceID {
			c.instanceID, renamed = instanceID, true
		}
		if renamed {
			for _, t := range a.targets {
				if t.cgroup == ref.id {
					t.start = 0 // reconcile restarts it with the new names
				}
			}
		}
		if spec != nil {
			c.spec = spec
		}
		a.mu.Unlock()
		return c, nil
	}
	a.mu.Unlock()
	c := &container{cgroupRef: ref, service: service, instanceID: instanceID, spec: spec}
	for _, p := range a.cgroupProfilers() {
		if err := p.StartCgroup(ref.id); err != nil {
			a.logger.Warn("profiler cannot record cgroup", "profiler", p.Name(), "cgroup", ref.path, "cgroupId", ref.id, "err", err)
			continue
		}
		c.kinds = append(c.kinds, p.Name())
	}
	if len(c.kinds) == 0 {
		return nil, errNoCgroupProf
	}
	a.logger.Info("container added", "cgroup", ref.path, "cgroupId", ref.id, "service", service, "kinds", c.kinds)
	a.mu.Lock()
	a.containers[ref.id] = c
	a.mu.Unlock()
	return c, nil
}

// removeContainer stops recording a cgroup (a.scanMu held); its processes
// stop being targets at the next reconcile.
func (a *Agent) removeContainer(c *container, why string) {
	a.mu.Lock()
	delete(a.containers, c.id)
	a.mu.Unlock()
	for _, p := range a.cgroupProfilers() {
		if !slices.Contains(c.kinds, p.Name()) {
			continue
		}
		if err := p.StopCgroup(c.id); err != nil && !errors.Is(err, profiler.ErrUnknownTarget) {
			a.logger.Warn("stop recording cgroup", "profiler", p.Name(), "cgroup", c.path, "err", err)
		}
	}
	a.logger.Info("container removed", "cgroup", c.path, "cgroupId", c.id, "why", why)
}

// syncContainers (a.scanMu held) forgets the containers whose cgroup was
// removed and registers the configured ones that exist (again: a container
// restarted under the same cgroup path is followed).
func (a *Agent) syncContainers() {
	a.mu.Lock()
	cs := make([]*container, 0, len(a.containers))
	for _, c := range a.containers {
		cs = append(cs, c)
	}
	a.mu.Unlock()
	configured := map[*ContainerSpec]bool{}
	for _, c := range cs {
		if !c.alive() {
			a.removeContainer(c, "cgroup removed")
		} else if c.spec != nil {
			configured[c.spec] = true
		}
	}
	if len(a.cgroupProfilers()) == 0 {
		return // New warned
	}
	for i := range a.cfg.Containers {
		spec := &a.cfg.Containers[i]
		if configured[spec] {
			continue
		}
		ref, err := resolveCgroup(a.cgroupRoot, *spec)
		if err != nil {
			continue // not there (yet, or any more)
		}
		if _, err := a.addContainer(ref, spec.Service, spec.InstanceID, spec); err != nil {
			a.logger.Warn("configured cgroup not recorded", "cgroup", spec.String(), "err", err)
		}
	}
}

// containerList returns the registered containers, by path.
func (a *Agent) containerList() []Container {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Container, 0, len(a.containers))
	for _, c := range a.containers {
		out = append(out, a.containerLocked(c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func (a *Agent) containerLocked(c *container) Container {
	ct := Container{CgroupID: c.id, Path: c.path, Dir: c.dir, Service: c.service, InstanceID: c.instanceID,
		Kinds: append([]string{}, c.kinds...), PIDs: []int{}}
	for pid, t := range a.targets {
		if t.cgroup == c.id {
			ct.PIDs = append(ct.PIDs, pid)
		}
	}
	sort.Ints(ct.PIDs)
	return ct
}

// Containers returns the registered containers, by path.
func (a *Agent) Containers() []Container { return a.containerList() }

// AddContainer registers a container, as POST /api/v1/containers does.
func (a *Agent) AddContainer(spec ContainerSpec) (Container, error) {
	if len(a.cgroupProfilers()) == 0 {
		return Container{}, errNoCgroupProf
	}
	ref, err := resolveCgroup(a.cgroupRoot, spec)
	if err != nil {
		return Container{}, err
	}
	a.scanMu.Lock()
	if a.ctx.Err() != nil {
		a.scanMu.Unlock()
		return Container{}, errors.New("agent is shutting down")
	}
	c, err := a.addContainer(ref, spec.Service, spec.InstanceID, nil)
	a.scanMu.Unlock()
	if err != nil {
		return Container{}, err
	}
	a.reconcile()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.containerLocked(c), nil
}

// errConfiguredContainer: the API cannot remove a configured container.
var errConfiguredContainer = errors.New("configured with --kernel.cgroup: the API cannot remove it")

// RemoveContainer stops recording a container registered by the API (or
// AddContainer), as DELETE /api/v1/containers/{id} does; false if it was
// not registered.
func (a *Agent) RemoveContainer(id uint64) (bool, error) {
	a.scanMu.Lock()
	a.mu.Lock()
	c, ok := a.containers[id]
	a.mu.Unlock()
	if ok && c.spec != nil {
		a.scanMu.Unlock()
		return true, fmt.Errorf("cgroup %d (%s): %w", id, c.path, errConfiguredContainer)
	}
	if ok {
		a.removeContainer(c, "unregistered")
	}
	a.scanMu.Unlock()
	if ok {
		a.reconcile()
	}
	return ok, nil
}

// handleAddContainer registers a container (POST /api/v1/containers).
func (a *Agent) handleAddContainer(w http.ResponseWriter, r *http.Request) {
	var spec ContainerSpec
	if err := decodeJSON(w, r, &spec, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	c, err := a.AddContainer(spec)
	switch {
	case err == nil:
		writeJSON(w, http.StatusCreated, c)
	case errors.Is(err, errCgroupNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errCgroupInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errNoCgroup2), errors.Is(err, errNoCgroupProf):
		writeError(w, http.StatusNotImplemented, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// handleRemoveContainer forgets a container (DELETE /api/v1/containers/{id}).
func (a *Agent) handleRemoveContainer(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, "id must be a cgroup id (a positive integer)")
		return
	}
	ok, err := a.RemoveContainer(id)
	switch {
	case err != nil:
		writeError(w, http.StatusConflict, err.Error())
		return
	case !ok:
		writeError(w, http.StatusNotFound, fmt.Sprintf("cgroup %d is not a registered container", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
