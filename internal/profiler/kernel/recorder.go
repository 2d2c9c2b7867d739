package kernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/procfs"
	"github.com/rootline/rootline/internal/profiler"
)

// Config configures a Recorder. Zero fields take DefaultConfig's values.
type Config struct {
	// MaxBytes bounds the memory of the buffered events (default 128 MiB,
	// ≈ 2.3 M events: ~20 s at 100 k scheduler events/s).
	MaxBytes int64 `yaml:"max_bytes"`
	// Retention drops events older than this even under MaxBytes (default 60s).
	Retention time.Duration `yaml:"retention"`
	// Preroll is how far before a dump's window events are replayed, so the
	// threads' states at the window's start are known (default 5s).
	Preroll time.Duration `yaml:"preroll"`
	// RingBufferBytes is the BPF ring buffers between kernel and reader,
	// all CPUs together (default 8 MiB; rounded up to a power of two, then
	// split among the possible CPUs, each ring a power of two ≥ 256 KiB).
	RingBufferBytes int `yaml:"ring_buffer_bytes"`
	// FlushInterval is how often the reader drains the ring buffer when the
	// kernel has not woken it (default 200ms).
	FlushInterval time.Duration `yaml:"flush_interval"`
	// All records every task, not only targets ("everything" switch).
	All bool `yaml:"all"`
	// NoFollowForks stops recording new child processes of targets
	// (followed by default: a target is a process tree).
	NoFollowForks bool `yaml:"no_follow_forks"`
	// SyscallHooks finds the syscall a thread blocks in with
	// raw_syscalls:sys_enter/sys_exit and task storage instead of the
	// registers saved at syscall entry. Slower for every process on the
	// machine (each syscall takes the tracing slow path); for kernels or
	// architectures where the saved registers do not tell (not x86-64, or
	// x86-64 with FRED).
	SyscallHooks bool `yaml:"syscall_hooks"`
	// Enqueue also records sched_wakeup, the time a woken thread is put on a
	// run queue (Wakeup.Enqueued). Off by default: it adds a third record
	// per wakeup, and run-queue waits are measured from sched_waking (as
	// perf sched does when the kernel has it).
	Enqueue bool `yaml:"enqueue"`
	// FollowDepth is how many hops back from the targets wakers are
	// followed: a thread that wakes a target (another process's, a kernel
	// worker) is recorded from then on, and so is a thread that wakes it,
	// up to this many hops (default 3; -1: wakers are not followed). It
	// also bounds the wakers a snapshot gives intervals.
	FollowDepth int `yaml:"follow_depth"`
	// FollowThreads bounds the threads followed at once (default 512), and
	// the wakers a snapshot gives intervals.
	FollowThreads int `yaml:"follow_threads"`
	// FollowTTL: a followed thread that has woken no tracked thread for this
	// long stops being followed (default 60s).
	FollowTTL time.Duration `yaml:"follow_ttl"`
	// FollowShare is the share of MaxBytes that holds the records of
	// followed wakers (those that involve no target), so that a busy waker
	// cannot push the targets' own history out (default 0.25).
	FollowShare float64 `yaml:"follow_share"`
	// CTF also writes each dump's window as a CTF 1.8 trace (the
	// "kernel-ctf" artifact, for babeltrace2 and Trace Compass). Off by
	// default: it holds the window's raw scheduler events, ~5× the
	// snapshot's bytes (bench/RESULTS.md), and nothing in Rootline reads it.
	CTF bool `yaml:"ctf"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxBytes:        128 << 20,
		Retention:       60 * time.Second,
		Preroll:         5 * time.Second,
		RingBufferBytes: 8 << 20,
		FlushInterval:   200 * time.Millisecond,
		FollowDepth:     defaultFollowDepth,
		FollowThreads:   defaultFollowThreads,
		FollowTTL:       60 * time.Second,
		FollowShare:     0.25,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.Retention <= 0 {
		c.Retention = d.Retention
	}
	if c.Preroll <= 0 {
		c.Preroll = d.Preroll
	}
	if c.RingBufferBytes <= 0 {
		c.RingBufferBytes = d.RingBufferBytes
	}
	c.RingBufferBytes = max(c.RingBufferBytes, os.Getpagesize())
	c.RingBufferBytes = 1 << bits.Len(uint(c.RingBufferBytes-1))
	if c.FlushInterval <= 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.FollowDepth == 0 {
		c.FollowDepth = d.FollowDepth
	}
	if c.FollowThreads <= 0 {
		c.FollowThreads = d.FollowThreads
	}
	if c.FollowTTL <= 0 {
		c.FollowTTL = d.FollowTTL
	}
	if c.FollowShare <= 0 || c.FollowShare >= 1 {
		c.FollowShare = d.FollowShare
	}
	return c
}

// following reports whether the recorder follows wakers (with All, every
// thread is recorded and none needs following).
func (c Config) following() bool { return c.FollowDepth > 0 && !c.All }

// followBytes is the share of MaxBytes kept for followed wakers' records.
func (c Config) followBytes() int64 {
	if !c.following() {
		return 0
	}
	return int64(float64(c.MaxBytes) * c.FollowShare)
}

// Recorder is the "kernel" profiler: a flight recorder of thread states and
// wakeups. It is safe for concurrent use.
type Recorder struct {
	cfg  Config
	log  *slog.Logger
	src  Source
	ring *ring
	devs *devNames
	host string

	mu      sync.Mutex // guards targets, cgroups and closed
	targets map[int]uint64
	cgroups map[uint64]bool // started with StartCgroup
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup

	// losses samples the source's cumulative Lost count every second, so
	// that a snapshot reports the records dropped around its window, not
	// since the recorder started.
	losses lossLog

	// gil says where target processes keep their interpreter lock.
	gil *interpLocks
	// obs tells Rootline's own processes (Thread.Observer).
	obs *observers

	readerTID atomic.Int32
	dumps     atomic.Uint64
	dumpErrs  atomic.Uint64
	runErr    atomic.Pointer[error]
}

var _ profiler.Profiler = (*Recorder)(nil)

// ErrUnavailable: the BPF recorder cannot run here (not root, BPF disabled,
// kernel without tp_btf or ring buffers, not Linux). New and Available wrap it.
var ErrUnavailable = errors.New("eBPF scheduler recorder unavailable")

// NewWithSource records the events of src (tests use a synthetic source).
// The Recorder owns src and closes it.
func NewWithSource(cfg Config, src Source, logger *slog.Logger) *Recorder {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	r := &Recorder{
		cfg:     cfg,
		log:     logger.With("component", "profiler/kernel"),
		src:     src,
		ring:    newRing(cfg.MaxBytes, cfg.followBytes()),
		devs:    newDevNames(),
		gil:     newInterpLocks(),
		obs:     newObservers("/proc"),
		host:    host,
		targets: map[int]uint64{},
		cgroups: map[uint64]bool{},
		done:    make(chan struct{}),
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		// The reader keeps its OS thread (never unlocked: the thread exits
		// with it), so its CPU time is that thread's.
		runtime.LockOSThread()
		r.readerTID.Store(int32(gettid()))
		if err := src.Run(sinkFunc(r.ring.add)); err != nil {
			r.runErr.Store(&err)
			r.log.Error("kernel event reader stopped", "err", err)
		}
	}()
	go r.maintain()
	r.log.Info("kernel recorder started", "max_bytes", cfg.MaxBytes, "all", cfg.All)
	return r
}

type sinkFunc func(ev *Event, comm, comm2 *Comm)

func (f sinkFunc) Event(ev *Event, comm, comm2 *Comm) { f(ev, comm, comm2) }

// maintain expires old events and forgets targets that exited.
func (r *Recorder) maintain() {
	defer r.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		now := kclock.Monotonic.Now()
		r.losses.add(now, r.src.Lost(), now-r.cfg.Retention.Nanoseconds()-r.cfg.Preroll.Nanoseconds())
		r.ring.expire(now - r.cfg.Retention.Nanoseconds())
		r.mu.Lock()
		for pid, st := range r.targets {
			if st != 0 && !procfs.Alive(pid, st) {
				_ = r.src.SetTarget(uint32(pid), false)
				r.targets[pid] = 0 // kept for dumps until Stop
			}
		}
		r.mu.Unlock()
	}
}

// Name implements profiler.Profiler.
func (r *Recorder) Name() string { return "kernel" }

// Supports implements profiler.Profiler: any process.
func (r *Recorder) Supports(t profiler.Target) bool { return t.PID > 0 }

// Start implements profiler.Profiler: the process (and, unless
// NoFollowForks, the children it forks from now on) is recorded.
func (r *Recorder) Start(ctx context.Context, t profiler.Target) error {
	if t.PID <= 0 {
		return fmt.Errorf("kernel: invalid pid %d: %w", t.PID, profiler.ErrNotSupported)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("kernel: recorder closed")
	}
	if st, ok := r.targets[t.PID]; ok && st != 0 {
		return nil
	}
	st, err := procfs.StartTime(t.PID)
	if err != nil {
		return fmt.Errorf("kernel: pid %d: %w", t.PID, profiler.ErrTargetGone)
	}
	if err := r.src.SetTarget(uint32(t.PID), true); err != nil {
		return fmt.Errorf("kernel: add target %d: %w", t.PID, err)
	}
	r.targets[t.PID] = st
	// Where its interpreter lock is, read while it lives (a dump may come
	// after it exited).
	go r.gil.of(uint32(t.PID))
	return nil
}

// StartCgroup records every task of the cgroup v2 with this id (the inode
// number of its directory under the unified hierarchy): a container. Only
// the tasks whose own cgroup it is are recorded, not those of its
// descendant cgroups. Starting a cgroup twice is a no-op.
func (r *Recorder) StartCgroup(id uint64) error {
	if id == 0 {
		return fmt.Errorf("kernel: invalid cgroup id 0: %w", profiler.ErrNotSupported)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("kernel: recorder closed")
	}
	if err := r.src.SetCgroup(id, true); err != nil {
		return fmt.Errorf("kernel: add cgroup %d: %w", id, err)
	}
	r.cgroups[id] = true
	return nil
}

// StopCgroup stops recording the cgroup. Its buffered events stay until
// they age out.
func (r *Recorder) StopCgroup(id uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cgroups[id] {
		return fmt.Errorf("kernel: cgroup %d: %w", id, profiler.ErrUnknownTarget)
	}
	delete(r.cgroups, id)
	if r.closed {
		return nil
	}
	return r.src.SetCgroup(id, false)
}

// Stop implements profiler.Profiler. Buffered events stay until they age out
// (they are shared with the threads that woke other targets).
func (r *Recorder) Stop(t profiler.Target) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.targets[t.PID]; !ok {
		return fmt.Errorf("kernel: pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	delete(r.targets, t.PID)
	if r.closed {
		return nil
	}
	return r.src.SetTarget(uint32(t.PID), false)
}

// Flush waits (bounded by the flush interval and ctx) until the records
// taken so far have reached the in-memory ring, so that Stats counts them.
// Dump does it itself.
func (r *Recorder) Flush(ctx context.Context) { r.src.Drain(ctx) }

// Dump implements profiler.Profiler: a "kernel" snapshot (the binary
// format, version 3, see Snapshot and snapbin.go) and, with Config.CTF, its "kernel-ctf" export (tar.gz of a
// CTF 1.8 trace).
func (r *Recorder) Dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	r.dumps.Add(1)
	arts, err := r.dump(ctx, t, w)
	if err != nil && !errors.Is(err, profiler.ErrTargetGone) {
		r.dumpErrs.Add(1)
	}
	return arts, err
}

func (r *Recorder) dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	h, err := r.hold(ctx, t, w)
	if err != nil {
		return nil, err
	}
	return h.encode()
}

// hold copies the window of t.PID (see Hold).
func (r *Recorder) hold(ctx context.Context, t profiler.Target, w profiler.Window) (*Held, error) {
	r.mu.Lock()
	st, started := r.targets[t.PID]
	r.mu.Unlock()
	// A process never started may still have been recorded: a child of a
	// target (followed forks), a member of a target cgroup, or Config.All.
	isAlive := started && st != 0 && procfs.Alive(t.PID, st)
	if !started {
		_, err := procfs.StartTime(t.PID)
		isAlive = err == nil
	}
	h, err := r.copyWindow(ctx, t, w, nil, !started, isAlive)
	if err == nil && !isAlive {
		h.gone = fmt.Errorf("kernel: pid %d exited: %w", t.PID, profiler.ErrTargetGone)
	}
	return h, err
}

// DumpCgroup is Dump for a cgroup v2 started with StartCgroup (a
// container): the snapshot's target threads are those of every process of
// the cgroup in the window, not of t.PID alone. dir is the cgroup's
// directory (e.g. /sys/fs/cgroup/unified/app); t names the artifacts (its
// PID, which may be 0, is the snapshot's pid).
//
// The records do not carry a cgroup id: the cgroup's processes are read
// from dir/cgroup.procs at dump time, plus the processes they forked in the
// window and its preroll (children start in their parent's cgroup). A
// process of the cgroup that exited before the dump and was not forked by
// one of those in that time is missing from the snapshot (its events stay
// in the buffer). When dir is gone the artifacts are Partial and the error
// wraps ErrTargetGone.
func (r *Recorder) DumpCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	r.dumps.Add(1)
	arts, err := r.dumpCgroup(ctx, id, dir, t, w)
	if err != nil && !errors.Is(err, profiler.ErrTargetGone) {
		r.dumpErrs.Add(1)
	}
	return arts, err
}

func (r *Recorder) dumpCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	h, err := r.holdCgroup(ctx, id, dir, t, w)
	if err != nil {
		return nil, err
	}
	return h.encode()
}

// holdCgroup copies the window of a cgroup's processes (see HoldCgroup).
func (r *Recorder) holdCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) (*Held, error) {
	r.mu.Lock()
	started := r.cgroups[id]
	r.mu.Unlock()
	if !started {
		return nil, fmt.Errorf("kernel: cgroup %d: %w", id, profiler.ErrUnknownTarget)
	}
	pids, err := cgroupProcs(dir)
	isAlive := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("kernel: cgroup %d: %w", id, err)
	}
	sel := &cgroupSel{id: id, dir: dir, members: map[uint32]bool{}}
	for _, p := range pids {
		sel.members[p] = true
	}
	h, err := r.copyWindow(ctx, t, w, sel, false, isAlive)
	if err == nil && !isAlive {
		h.gone = fmt.Errorf("kernel: cgroup %d (%s) was removed: %w", id, dir, profiler.ErrTargetGone)
	}
	return h, err
}

// cgroupSel selects the processes of a cgroup in a snapshot.
type cgroupSel struct {
	id      uint64
	dir     string
	members map[uint32]bool // tgids
}

// cgroupProcs reads the pids of a cgroup's cgroup.procs.
func cgroupProcs(dir string) ([]uint32, error) {
	data, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.ParseUint(f, 10, 32); err == nil && n > 0 {
			out = append(out, uint32(n))
		}
	}
	return out, nil
}

// copyWindow copies the records of the window for t.PID, or for the
// processes of a cgroup when sel is set, with what encoding them needs
// from the recorder's state now (comms, dropped records). needThreads: an
// empty snapshot is ErrUnknownTarget (the pid was never recorded).
func (r *Recorder) copyWindow(ctx context.Context, t profiler.Target, w profiler.Window, sel *cgroupSel, needThreads, isAlive bool) (*Held, error) {
	end := w.End
	if end.IsZero() || end.After(time.Now()) {
		end = time.Now()
	}
	start := w.Start
	if start.After(end) {
		return nil, fmt.Errorf("kernel: window starts after it ends")
	}
	r.src.Drain(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := &Held{r: r, t: t, spans: w.Spans, start: start, end: end, sel: sel, needThreads: needThreads, isAlive: isAlive}
	// The window in the recorder's clock, and the one offset the snapshot
	// is converted back with: the wall clock's at the window's end (a step
	// of the wall clock inside the window leaves the part before it off
	// by the step; steps before the window do not move it).
	h.mStart, h.mEnd = kclock.UnixMonotonic(start.UnixNano()), kclock.UnixMonotonic(end.UnixNano())
	h.offset = kclock.MonotonicUnix(h.mEnd) - h.mEnd
	procs := map[uint32]bool{uint32(t.PID): true}
	if sel != nil {
		procs = sel.members
	}
	h.win = r.ring.windowOf(h.mStart-r.cfg.Preroll.Nanoseconds(), h.mEnd, procs, sel != nil, max(r.cfg.FollowDepth, 1))
	h.comms = r.ring.commsOf(h.win.events)
	for pid := range procs {
		if rs := r.gil.of(pid); len(rs) > 0 {
			if h.gil == nil {
				h.gil = map[uint32][]addrRange{}
			}
			h.gil[pid] = rs
		}
	}
	h.lostTotal = r.src.Lost()
	h.lost = h.lostTotal - r.losses.before(h.mStart-r.cfg.Preroll.Nanoseconds())
	h.evicted = r.ring.stats().evicted
	return h, nil
}

// encode builds the artifacts of a copied window: the snapshot and, with
// Config.CTF, its CTF export.
func (h *Held) encode() ([]profiler.Artifact, error) {
	r, t, sel := h.r, h.t, h.sel
	comm := func(tid uint32) string { return h.comms[tid] }
	in := buildInput{pid: uint32(t.PID), start: h.mStart, end: h.mEnd, offset: h.offset, comm: comm,
		devName: r.devs.name, maxDepth: max(r.cfg.FollowDepth, 1), maxThreads: r.cfg.FollowThreads,
		recording: r.cfg.following() || r.cfg.All, complete: h.win.complete, gil: h.gil}
	if sel != nil {
		in.pids = sel.members
	}
	win := h.win
	// The intervals stay in the builder's compact form (ivs), named as the
	// encoders write them.
	snap, ivs := replay(win.events, in).snapshot(win.total)
	nEvents := win.total
	if h.needThreads && len(snap.Threads) == 0 {
		return nil, fmt.Errorf("kernel: pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	snap.Lost = h.lost
	r.obs.mark(snap, time.Now())
	var js bytes.Buffer
	if err := snap.encodeBinary(&js, ivs, true); err != nil {
		return nil, fmt.Errorf("kernel: encode snapshot: %w", err)
	}
	attrs := map[string]string{
		"events":     strconv.Itoa(nEvents),
		"threads":    strconv.Itoa(len(snap.Threads)),
		"intervals":  strconv.Itoa(ivs.Len()),
		"wakeups":    strconv.Itoa(len(snap.Wakeups)),
		"lost":       strconv.FormatUint(snap.Lost, 10),
		"lost_total": strconv.FormatUint(h.lostTotal, 10),
		// The format, for tools that read the artifact's metadata
		// before its bytes (the media type says it too).
		"format": fmt.Sprintf("rootline-kernel-snapshot-%d", SnapshotVersion),
	}
	attrs["evicted"] = strconv.FormatUint(h.evicted, 10)
	others, recorded := 0, 0
	for _, th := range snap.Threads {
		if !th.Target {
			others++
			if th.Recorded {
				recorded++
			}
		}
	}
	attrs["wakers"] = strconv.Itoa(others)
	attrs["wakers_recorded"] = strconv.Itoa(recorded)
	service := t.Service
	if service == "" {
		service = "unknown"
	}
	base := fmt.Sprintf("kernel-%s-%d", sanitize(service), t.PID)
	if sel != nil {
		base = fmt.Sprintf("kernel-%s-cgroup-%d", sanitize(service), sel.id)
		attrs["cgroup_id"] = strconv.FormatUint(sel.id, 10)
		attrs["cgroup"] = sel.dir
		procs := map[uint32]bool{}
		for _, th := range snap.Threads {
			if th.Target {
				procs[th.PID] = true
			}
		}
		attrs["processes"] = strconv.Itoa(len(procs))
	}
	start, end, isAlive := h.start, h.end, h.isAlive
	arts := []profiler.Artifact{
		{Kind: "kernel", MediaType: MediaType, FileName: base + FileExt,
			Data: js.Bytes(), Start: start, End: end, Partial: !isAlive, Attributes: attrs},
	}
	if r.cfg.CTF {
		var ctf bytes.Buffer
		if err := writeCTF(&ctf, snap, ivs, win.events, rawFilter(snap, h.mStart, h.mEnd), h.spans, h.offset, comm, r.host); err != nil {
			return nil, fmt.Errorf("kernel: encode CTF: %w", err)
		}
		arts = append(arts, profiler.Artifact{Kind: "kernel-ctf", MediaType: "application/gzip", FileName: base + ".ctf.tar.gz",
			Data: ctf.Bytes(), Start: start, End: end, Partial: !isAlive, Attributes: map[string]string{"format": "ctf-1.8", "lost": attrs["lost"],
				"spans": strconv.Itoa(len(h.spans))}})
	}
	return arts, h.gone
}

// sanitize keeps a service name safe in a file name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// Stats implements profiler.Profiler.
func (r *Recorder) Stats() map[string]float64 {
	rs := r.ring.stats()
	r.mu.Lock()
	targets, cgroups := len(r.targets), len(r.cgroups)
	r.mu.Unlock()
	m := map[string]float64{
		"events":         float64(rs.total),
		"events_evicted": float64(rs.evicted),
		"bytes_buffered": float64(rs.bytes),
		// The followed wakers' share of the memory (Config.FollowShare of
		// MaxBytes at most) and of the records.
		"followed_bytes_buffered":  float64(rs.followedBytes),
		"followed_events_buffered": float64(rs.followedEvents),
		"followed_events":          float64(rs.followed),
		"targets":                  float64(targets),
		"cgroups":                  float64(cgroups),
		"dumps":                    float64(r.dumps.Load()),
		"dump_errors":              float64(r.dumpErrs.Load()),
	}
	if d, ok := threadCPU(r.readerTID.Load()); ok {
		m["reader_cpu_seconds"] = d.Seconds()
	}
	for k, v := range r.src.Stats() {
		m[k] = v
	}
	return m
}

// threadCPU returns the CPU time of one of this process's threads from its
// schedstat.
func threadCPU(tid int32) (time.Duration, bool) {
	if tid == 0 {
		return 0, false
	}
	st, err := procfs.ThreadSchedstat(int(tid))
	return st.Run, err == nil
}

// Close implements profiler.Profiler.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	err := r.src.Close()
	r.wg.Wait()
	return err
}

// lossLog is the source's cumulative count of dropped records, sampled
// every second (by maintain), for as long as the ring keeps events. Safe for
// concurrent use.
type lossLog struct {
	mu      sync.Mutex
	samples []lossSample // in time order
}

type lossSample struct {
	mono int64 // CLOCK_MONOTONIC ns
	lost uint64
}

// add records the count at mono and forgets samples older than keep, except
// the newest of them (the baseline of a window that starts after it).
func (l *lossLog) add(mono int64, lost uint64, keep int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for i+1 < len(l.samples) && l.samples[i+1].mono < keep {
		i++
	}
	l.samples = append(l.samples[i:], lossSample{mono, lost})
}

// before is the count at the last sample at or before mono: what had been
// dropped before a window starting at mono (up to a second before it, as
// samples are a second apart). 0 when there is no sample that old (the
// recorder started after mono).
func (l *lossLog) before(mono int64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for _, s := range l.samples {
		if s.mono > mono {
			break
		}
		n = s.lost
	}
	return n
}
