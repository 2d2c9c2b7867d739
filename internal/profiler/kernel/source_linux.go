package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpfring"
	"github.com/rootline/rootline/internal/kclock"
)

// bpfSource is the Source backed by bpf/sched_recorder.c.
type bpfSource struct {
	objs schedRecorderObjects
	// bits is sr_target_bits mapped into this process (tgidWords words, two
	// bits per tgid: target, has followed threads): SetTarget sets and
	// clears target bits with atomic operations, as the BPF programs do for
	// followed children.
	bits []uint64
	mem  []byte
	// fbits is sr_follow_bits mapped likewise: Run clears the bits of the
	// wakers it stops following.
	fbits []uint64
	fmem  []byte
	links []link.Link
	rings []*ebpf.Map     // one per CPU, in sr_rings
	rd    *bpfring.Reader // reads every ring; waits in the netpoller (see package bpfring)
	flush time.Duration
	// syscallHooks: sys_enter/sys_exit are attached.
	syscallHooks bool
	// enqueue: sched_wakeup is attached.
	enqueue bool

	mu      sync.Mutex // guards links, targets, cgroups and closed
	all     bool
	targets map[uint32]bool
	cgroups int
	closed  bool

	done     chan struct{}
	readErrs atomic.Uint64
	unpaired atomic.Uint64 // switches dropped: no clock pair (clockPairs)
	pairs    atomic.Uint64 // clock pairs read (0: switches timed by the helper)

	// Following wakers (sourceConfig.followDepth > 0).
	followTTL   time.Duration
	followed    atomic.Int64  // threads followed now (as Run knows them)
	followCuts  atomic.Uint64 // wakers not followed: beyond the depth or the map full
	unfollowed  atomic.Uint64 // threads Run stopped following (TTL)
	unthrottles atomic.Uint64 // unthrottle records
}

// sourceConfig is what newBPFSource needs from Config.
type sourceConfig struct {
	ringBytes   int
	all         bool
	followForks bool
	// syscallHooks attaches sys_enter/sys_exit (Config.SyscallHooks).
	syscallHooks bool
	// enqueue attaches sched_wakeup (Config.Enqueue).
	enqueue bool
	flush   time.Duration
	// followDepth > 0 follows wakers that many hops back, at most
	// followThreads at once, each until it has woken no tracked thread
	// for followTTL (Config.Follow*).
	followDepth, followThreads int
	followTTL                  time.Duration
}

// tgidWords is sr_target_bits' size in 64-bit words (SR_TGID_WORDS: two
// bits per tgid), tidWords sr_follow_bits' (SR_TID_WORDS).
const (
	tgidWords = 1 << 17
	tidWords  = 1 << 16
)

// tgidTarget is tgid's word in sr_target_bits and its target bit
// (TGID_TARGET).
func tgidTarget(tgid uint32) (word int, bit uint64) {
	return int(tgid >> 5), 1 << ((tgid & 31) * 2)
}

// newBPFSource loads and attaches the programs. The error wraps
// ErrUnavailable when BPF cannot be used here.
func newBPFSource(sc sourceConfig) (*bpfSource, error) {
	spec, err := loadSchedRecorder()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	perCPU := ringBytesPerCPU(sc.ringBytes, cpus)
	sizeRings(spec, cpus, perCPU)
	if sc.followDepth > 0 {
		spec.Maps[schedRecorderMapSrFollow].MaxEntries = uint32(max(sc.followThreads, 1))
	}
	s := &bpfSource{flush: sc.flush, done: make(chan struct{}), targets: map[uint32]bool{}, followTTL: sc.followTTL}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("%w: load BPF (root or CAP_BPF+CAP_PERFMON needed): %w", ErrUnavailable, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.release()
		}
	}()
	if s.mem, err = unix.Mmap(s.objs.SrTargetBits.FD(), 0, tgidWords*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("%w: map the target bitmap: %w", ErrUnavailable, err)
	}
	s.bits = unsafe.Slice((*uint64)(unsafe.Pointer(&s.mem[0])), tgidWords)
	if s.fmem, err = unix.Mmap(s.objs.SrFollowBits.FD(), 0, tidWords*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("%w: map the followed-thread bitmap: %w", ErrUnavailable, err)
	}
	s.fbits = unsafe.Slice((*uint64)(unsafe.Pointer(&s.fmem[0])), tidWords)
	if s.rings, err = addRings(spec, s.objs.SrRings, cpus); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cfg := schedRecorderSrConfig{WakeupBytes: uint32(perCPU / 4), SelfTgid: uint32(os.Getpid())}
	if sc.all {
		cfg.All = 1
	}
	if sc.followForks {
		cfg.FollowForks = 1
	}
	if sc.syscallHooks {
		cfg.SyscallHooks = 1
	}
	if sc.followDepth > 0 {
		cfg.FollowDepth = uint32(sc.followDepth)
	}
	s.syscallHooks = sc.syscallHooks
	s.enqueue = sc.enqueue
	if err := s.objs.SrCfg.Put(uint32(0), cfg); err != nil {
		return nil, fmt.Errorf("kernel: write config: %w", err)
	}
	if s.rd, err = bpfring.NewMultiReader(s.rings); err != nil {
		return nil, fmt.Errorf("%w: ring buffer: %w", ErrUnavailable, err)
	}
	// Attach once to find out now whether this kernel can; then stay
	// attached only while there is something to record.
	s.all = sc.all
	if err := s.attach(); err != nil {
		return nil, err
	}
	if !s.all {
		s.detach()
	}
	ok = true
	return s, nil
}

// attach attaches every program (interrupt context first, so that wakeups
// are attributed from the first record on); a no-op when attached.
func (s *bpfSource) attach() error {
	if len(s.links) > 0 {
		return nil
	}
	for _, p := range s.programs() {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			s.detach()
			return fmt.Errorf("%w: attach %s: %w", ErrUnavailable, p.name, err)
		}
		s.links = append(s.links, l)
	}
	return nil
}

// detach detaches every program: with no target, the recorder costs the
// machine nothing.
func (s *bpfSource) detach() {
	for _, l := range s.links {
		_ = l.Close()
	}
	s.links = nil
}

// update attaches or detaches the programs as targets come and go (with
// s.mu held). Children of a removed target that BPF followed are not
// recorded while nothing is attached.
func (s *bpfSource) update() error {
	if s.all || len(s.targets) > 0 || s.cgroups > 0 {
		return s.attach()
	}
	s.detach()
	return nil
}

type namedProg struct {
	name string
	prog *ebpf.Program
}

func (s *bpfSource) programs() []namedProg {
	o := &s.objs
	ps := []namedProg{
		{"irq_handler_entry", o.SrIrqEntry}, {"irq_handler_exit", o.SrIrqExit},
		{"softirq_entry", o.SrSoftirqEntry}, {"softirq_exit", o.SrSoftirqExit},
		{"hrtimer_expire_entry", o.SrHrtimerEntry}, {"hrtimer_expire_exit", o.SrHrtimerExit},
		{"softirq_raise", o.SrSoftirqRaise},
		{"block_rq_insert", o.SrRqInsert}, {"block_rq_merge", o.SrRqMerge},
		{"block_rq_issue", o.SrRqIssue}, {"block_rq_complete", o.SrRqComplete},
		{"sched_process_fork", o.SrFork}, {"sched_process_exec", o.SrExec}, {"sched_process_exit", o.SrExit},
		{"sched_waking", o.SrWaking}, {"sched_wakeup_new", o.SrWakeupNew},
	}
	if s.enqueue {
		ps = append(ps, namedProg{"sched_wakeup", o.SrWakeup})
	}
	if s.syscallHooks {
		ps = append(ps, namedProg{"sys_enter", o.SrSysEnter}, namedProg{"sys_exit", o.SrSysExit})
	}
	return append(ps, namedProg{"sched_switch", o.SrSwitch})
}

func (s *bpfSource) release() error {
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	if s.rd != nil {
		errs = append(errs, s.rd.Close())
	}
	for _, m := range s.rings {
		errs = append(errs, m.Close())
	}
	s.rings = nil
	if s.mem != nil {
		s.bits = nil
		errs = append(errs, unix.Munmap(s.mem))
		s.mem = nil
	}
	if s.fmem != nil {
		s.fbits = nil
		errs = append(errs, unix.Munmap(s.fmem))
		s.fmem = nil
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

// Run implements Source (records it cannot read are counted as
// read_errors in Stats). It runs on its own OS thread (never unlocked, so
// its tid is not reused by other goroutines) so that its CPU time can be
// read from /proc. It also stops following the wakers that have woken no
// tracked thread for followTTL (see followSet).
func (s *bpfSource) Run(sink Sink) error {
	runtime.LockOSThread()
	var rec ringbuf.Record
	var ev Event
	var clocks clockPairs
	fs := followSet{src: s, last: map[uint32]int64{}, ttl: s.followTTL.Nanoseconds()}
	n := 0
	const size = int(unsafe.Sizeof(schedRecorderSrEvent{}))
	s.rd.SetDeadline(time.Now().Add(s.flush))
	for {
		if err := s.rd.ReadInto(&rec); err != nil {
			switch {
			case errors.Is(err, ringbuf.ErrClosed):
				return nil
			case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
				s.rd.SetDeadline(time.Now().Add(s.flush))
				fs.sweep(sink)
				continue
			default:
				s.readErrs.Add(1)
				continue
			}
		}
		if len(rec.RawSample) < size {
			s.readErrs.Add(1)
			continue
		}
		// struct sr_event (bpf/sched_recorder.h), generated by bpf2go; the
		// record buffer is reused, so only pointers into it for this call.
		r := (*schedRecorderSrEvent)(unsafe.Pointer(&rec.RawSample[0]))
		ts := int64(r.Ts)
		switch {
		case r.Type == EvClock:
			clocks.pair(uint16(r.Cpu), ts, int64(r.Arg))
			s.pairs.Add(1)
			continue
		case r.Flags&FlagRQClock != 0:
			var ok bool
			if ts, ok = clocks.mono(uint16(r.Cpu), ts); !ok {
				s.unpaired.Store(clocks.unpaired)
				continue
			}
			r.Flags &^= FlagRQClock
		}
		ev = Event{
			TS: ts, Arg: r.Arg, TID: r.Tid, TGID: r.Tgid, TID2: r.Tid2, TGID2: r.Tgid2,
			Syscall: r.Syscall, Detail: r.Detail, Dev: r.Dev, TargetCPU: uint16(r.TargetCpu), CPU: uint16(r.Cpu),
			Flags: r.Flags, Type: uint8(r.Type), Ctx: uint8(r.Ctx), Prio: r.Prio, Prio2: r.Prio2,
		}
		switch ev.Type {
		case EvWaking:
			if ev.Flags&(FlagWakerFollowed|FlagCutDepth|FlagCutCount) != 0 {
				fs.waking(&ev)
			}
		case EvExit:
			if ev.Flags&FlagFollowed != 0 {
				fs.exited(ev.TID)
			}
		case EvUnthrottle:
			s.unthrottles.Add(1)
		}
		sink.Event(&ev, (*Comm)(unsafe.Pointer(&r.Comm)), (*Comm)(unsafe.Pointer(&r.Comm2)))
		// A busy reader may not see a deadline for a while: look at the
		// clock every few thousand records, not at each.
		if n++; n%4096 == 0 {
			fs.sweep(sink)
		}
	}
}

// followSet is Run's view of the followed wakers: when each last woke a
// tracked thread. A waker that has not done so for ttl stops being
// followed: its entry leaves sr_follow and its bit sr_follow_bits, and an
// EvUnfollow tells the builder that its states are unknown from then on.
// Owned by Run's goroutine.
type followSet struct {
	src       *bpfSource
	last      map[uint32]int64 // tid → monotonic ns of its last wakeup of a tracked thread
	ttl       int64
	nextSweep int64
	sweeps    int
}

func (f *followSet) waking(ev *Event) {
	if ev.Flags&(FlagCutDepth|FlagCutCount) != 0 {
		f.src.followCuts.Add(1)
	}
	if ev.Flags&FlagWakerFollowed != 0 {
		if _, ok := f.last[ev.TID2]; !ok {
			f.src.followed.Add(1)
		}
		f.last[ev.TID2] = ev.TS
	}
}

func (f *followSet) exited(tid uint32) {
	if _, ok := f.last[tid]; ok {
		delete(f.last, tid)
		f.src.followed.Add(-1)
	}
}

// sweep, at most once a second, stops following the wakers idle for ttl.
// Every tenth sweep it also adopts the entries of sr_follow it has no
// record of (their wakeup record was lost), so that they expire too.
func (f *followSet) sweep(sink Sink) {
	if f.ttl <= 0 {
		return
	}
	now := kclock.Monotonic.Now()
	if now < f.nextSweep {
		return
	}
	f.nextSweep = now + time.Second.Nanoseconds()
	f.sweeps++
	if f.sweeps%10 == 0 {
		var tid, depth uint32
		it := f.src.objs.SrFollow.Iterate()
		for it.Next(&tid, &depth) {
			if _, ok := f.last[tid]; !ok {
				f.last[tid] = now
				f.src.followed.Add(1)
			}
		}
	}
	for tid, last := range f.last {
		if now-last < f.ttl {
			continue
		}
		// The bit first: from now on BPF records nothing of tid.
		if int(tid>>6) < len(f.src.fbits) {
			atomic.AndUint64(&f.src.fbits[tid>>6], ^(uint64(1) << (tid & 63)))
		}
		_ = f.src.objs.SrFollow.Delete(tid)
		delete(f.last, tid)
		f.src.followed.Add(-1)
		f.src.unfollowed.Add(1)
		ev := Event{Type: EvUnfollow, TS: kclock.Monotonic.Now(), TID: tid, Flags: FlagFollowed}
		sink.Event(&ev, nil, nil)
	}
}

// Drain implements Source.
func (s *bpfSource) Drain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*s.flush)
	defer cancel()
	_ = s.rd.Drain(ctx)
}

// SetTarget implements Source.
func (s *bpfSource) SetTarget(tgid uint32, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kernel: source closed")
	}
	w, bit := tgidTarget(tgid)
	if w >= len(s.bits) {
		return fmt.Errorf("kernel: pid %d beyond the target bitmap (%d pids)", tgid, 32*len(s.bits))
	}
	word := &s.bits[w]
	if on {
		if err := s.objs.SrTargets.Put(tgid, uint8(1)); err != nil {
			return err
		}
		atomic.OrUint64(word, bit)
		s.targets[tgid] = true
		return s.update()
	}
	delete(s.targets, tgid)
	atomic.AndUint64(word, ^bit)
	if err := s.objs.SrTargets.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return s.update()
}

// SetCgroup implements Source.
func (s *bpfSource) SetCgroup(id uint64, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kernel: source closed")
	}
	if on {
		if err := s.objs.SrCgroups.Update(id, uint8(1), ebpf.UpdateNoExist); err != nil {
			if errors.Is(err, ebpf.ErrKeyExist) {
				return nil
			}
			return err
		}
		s.cgroups++
	} else {
		if err := s.objs.SrCgroups.Delete(id); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil
			}
			return err
		}
		s.cgroups--
	}
	var cfg schedRecorderSrConfig
	if err := s.objs.SrCfg.Lookup(uint32(0), &cfg); err != nil {
		return err
	}
	cfg.Cgroups = 0
	if s.cgroups > 0 {
		cfg.Cgroups = 1
	}
	if err := s.objs.SrCfg.Put(uint32(0), cfg); err != nil {
		return err
	}
	return s.update()
}

// Lost implements Source: the sum of the per-CPU drop counters.
func (s *bpfSource) Lost() uint64 {
	var per []uint64
	if err := s.objs.SrLost.Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// Stats implements Source: BPF run time and count summed over the programs.
// They stay 0 unless kernel.bpf_stats_enabled is set (the recorder does not
// turn it on: it costs two clock reads per run of every BPF program).
func (s *bpfSource) Stats() map[string]float64 {
	m := map[string]float64{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return m
	}
	m["lost"] = float64(s.Lost())
	m["read_errors"] = float64(s.readErrs.Load())
	m["clock_pairs"] = float64(s.pairs.Load())
	m["clock_unpaired"] = float64(s.unpaired.Load())
	m["followed_threads"] = float64(s.followed.Load())
	m["follow_cuts"] = float64(s.followCuts.Load())
	m["unfollowed_threads"] = float64(s.unfollowed.Load())
	m["unthrottles"] = float64(s.unthrottles.Load())
	var rt time.Duration
	var n uint64
	for _, p := range s.programs() {
		st, err := p.prog.Stats()
		if err != nil {
			continue
		}
		rt += st.Runtime
		n += st.RunCount
	}
	m["bpf_run_time_seconds"] = rt.Seconds()
	m["bpf_run_count"] = float64(n)
	return m
}

// Close implements Source.
func (s *bpfSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	return s.release()
}

// Available reports whether this process can run the recorder: it loads the
// BPF objects once and unloads them. The error wraps ErrUnavailable.
func Available() error {
	spec, err := loadSchedRecorder()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	sizeRings(spec, 1, os.Getpagesize())
	var objs schedRecorderObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	rings, err := addRings(spec, objs.SrRings, 1)
	for _, m := range rings {
		m.Close()
	}
	return errors.Join(err, objs.Close())
}

// minRingBytes is the smallest per-CPU ring: ~2,700 records.
const minRingBytes = 256 << 10

// ringBytesPerCPU splits total bytes among cpus rings: each a power of two
// (a ring buffer's size must be), at least minRingBytes.
func ringBytesPerCPU(total, cpus int) int {
	per := max(total/max(cpus, 1), minRingBytes, os.Getpagesize())
	return 1 << (bits.Len(uint(per)) - 1) // round down to a power of two
}

// sizeRings sizes sr_rings for cpus rings of bytes each.
func sizeRings(spec *ebpf.CollectionSpec, cpus, bytes int) {
	outer := spec.Maps[schedRecorderMapSrRings]
	outer.MaxEntries = uint32(cpus)
	outer.InnerMap.MaxEntries = uint32(bytes)
}

// addRings creates one ring per CPU and puts it in sr_rings.
func addRings(spec *ebpf.CollectionSpec, outer *ebpf.Map, cpus int) ([]*ebpf.Map, error) {
	var rings []*ebpf.Map
	for cpu := range cpus {
		m, err := ebpf.NewMap(spec.Maps[schedRecorderMapSrRings].InnerMap)
		if err == nil {
			rings = append(rings, m)
			err = outer.Put(uint32(cpu), m)
		}
		if err != nil {
			for _, m := range rings {
				m.Close()
			}
			return nil, fmt.Errorf("ring buffer of CPU %d: %w", cpu, err)
		}
	}
	return rings, nil
}

// New loads the BPF programs and starts recording (nothing until Start,
// unless Config.All). The error wraps ErrUnavailable when BPF cannot be
// used here. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Recorder, error) {
	cfg = cfg.withDefaults()
	sc := sourceConfig{ringBytes: cfg.RingBufferBytes, all: cfg.All,
		followForks: !cfg.NoFollowForks, syscallHooks: cfg.SyscallHooks, enqueue: cfg.Enqueue, flush: cfg.FlushInterval}
	if cfg.following() {
		sc.followDepth, sc.followThreads, sc.followTTL = cfg.FollowDepth, cfg.FollowThreads, cfg.FollowTTL
	}
	src, err := newBPFSource(sc)
	if err != nil {
		return nil, err
	}
	return NewWithSource(cfg, src, logger), nil
}

// gettid is the calling thread's id.
func gettid() int { return unix.Gettid() }
