package cpu

import (
	"bytes"
	"compress/gzip"
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
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpfring"
	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/procfs"
	"github.com/rootline/rootline/internal/profiler"
)

// ErrUnavailable: eBPF CPU sampling cannot run here (not root, no BPF ring
// buffers or perf-event programs, BPF disabled…). New and Available wrap it.
var ErrUnavailable = errors.New("eBPF CPU sampler unavailable")

// Config configures a Sampler. Zero fields take DefaultConfig's values.
type Config struct {
	// FrequencyHz is the sampling frequency per CPU (default 99: off the
	// common 100 Hz timers, so samples do not lock step with them).
	FrequencyHz int `yaml:"frequency_hz"`
	// Retention is how long samples are kept (default 120s).
	Retention time.Duration `yaml:"retention"`
	// MaxBytes bounds the memory of all buffered samples (default 64 MiB);
	// the oldest samples of the growing target are dropped first.
	MaxBytes int64 `yaml:"max_bytes"`
	// RingBufferBytes is the size of the BPF ring buffer between kernel and
	// reader (default 4 MiB, rounded up to a power of two ≥ one page).
	RingBufferBytes int `yaml:"ring_buffer_bytes"`
	// All samples every process instead of only started targets (samples of
	// processes never started are still discarded by the reader).
	All bool `yaml:"all"`
	// FlushInterval is how often the reader drains the ring buffer when the
	// kernel has not woken it (wake-ups are batched: one per quarter of the
	// ring buffer). Dump drains it first, so it only bounds memory latency
	// (default 200ms).
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MapsRefresh is how often /proc/<pid>/maps of live targets is re-read so
	// that a target that exits can still be symbolized (default 5s).
	MapsRefresh time.Duration `yaml:"maps_refresh"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		FrequencyHz:     99,
		Retention:       120 * time.Second,
		MaxBytes:        64 << 20,
		RingBufferBytes: 4 << 20,
		FlushInterval:   200 * time.Millisecond,
		MapsRefresh:     5 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.FrequencyHz <= 0 {
		c.FrequencyHz = d.FrequencyHz
	}
	if c.Retention <= 0 {
		c.Retention = d.Retention
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = d.MaxBytes
	}
	if c.RingBufferBytes <= 0 {
		c.RingBufferBytes = d.RingBufferBytes
	}
	page := os.Getpagesize()
	if c.RingBufferBytes < page {
		c.RingBufferBytes = page
	}
	c.RingBufferBytes = 1 << bits.Len(uint(c.RingBufferBytes-1))
	if c.FlushInterval <= 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.MapsRefresh <= 0 {
		c.MapsRefresh = d.MapsRefresh
	}
	return c
}

// Sampler is the "cpu" profiler. It is safe for concurrent use.
type Sampler struct {
	cfg    Config
	log    *slog.Logger
	objs   cpuSampleObjects
	events []*perfEvent
	rd     *bpfring.Reader // waits in the netpoller (see package bpfring)
	store  *store
	sym    *symbolizer

	mu        sync.Mutex // serializes Start/Stop/Close and the targets map in BPF
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
	samples   atomic.Uint64
	decErrs   atomic.Uint64
	dumps     atomic.Uint64
	dumpErr   atomic.Uint64
	readerTID atomic.Int32
}

var _ profiler.Profiler = (*Sampler)(nil)

// New loads the BPF program, attaches it to every online CPU and starts the
// reader. It records nothing until Start (unless Config.All). The error
// wraps ErrUnavailable when BPF cannot be used here. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Sampler, error) {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{
		cfg:   cfg,
		log:   logger.With("component", "profiler/cpu"),
		store: newStore(cfg.MaxBytes, cfg.Retention),
		sym:   newSymbolizer(),
		done:  make(chan struct{}),
	}
	spec, err := loadCpuSample()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	spec.Maps[cpuSampleMapCpuEvents].MaxEntries = uint32(cfg.RingBufferBytes)
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("%w: load BPF (root or CAP_BPF+CAP_PERFMON needed): %w", ErrUnavailable, err)
	}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	var all uint32
	if cfg.All {
		all = 1
	}
	if err := s.objs.CpuConfig.Put(uint32(0), cpuSampleCpuSampleConfig{All: all, WakeupBytes: uint32(cfg.RingBufferBytes / 4)}); err != nil {
		return nil, fmt.Errorf("cpu: write config: %w", err)
	}
	if s.rd, err = bpfring.NewReader(s.objs.CpuEvents); err != nil {
		return nil, fmt.Errorf("%w: ring buffer: %w", ErrUnavailable, err)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	for _, c := range cpus {
		ev, err := openPerfEvent(c, cfg.FrequencyHz, s.objs.CpuSample)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		s.events = append(s.events, ev)
	}
	ok = true
	s.wg.Add(2)
	go s.read()
	go s.maintain()
	s.log.Info("cpu sampler started", "cpus", len(cpus), "hz", cfg.FrequencyHz,
		"ring_buffer_bytes", cfg.RingBufferBytes)
	return s, nil
}

// release frees kernel resources; used by New on failure and by Close.
func (s *Sampler) release() error {
	var errs []error
	for _, ev := range s.events {
		errs = append(errs, ev.close())
	}
	s.events = nil
	if s.rd != nil {
		errs = append(errs, s.rd.Close())
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

// read drains the ring buffer until Close. It runs on its own OS thread so
// its CPU time can be measured (Stats "reader_cpu_seconds"). The thread is
// not unlocked: it exits with the goroutine, so its tid is never reused by
// other goroutines of this process.
func (s *Sampler) read() {
	defer s.wg.Done()
	runtime.LockOSThread()
	var rec ringbuf.Record
	var ev cpuSampleCpuSampleEvent
	const evSize = int(unsafe.Sizeof(ev))
	s.readerTID.Store(int32(unix.Gettid()))
	s.rd.SetDeadline(time.Now().Add(s.cfg.FlushInterval))
	for {
		if err := s.rd.ReadInto(&rec); err != nil {
			switch {
			case errors.Is(err, ringbuf.ErrClosed):
				return
			case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
				s.rd.SetDeadline(time.Now().Add(s.cfg.FlushInterval))
			default:
				s.decErrs.Add(1)
			}
			continue
		}
		if len(rec.RawSample) < evSize {
			s.decErrs.Add(1)
			continue
		}
		// The layout is struct cpu_sample_event (bpf/cpu_sample.h), generated
		// by bpf2go; copy it out of the record buffer, which is reused.
		ev = *(*cpuSampleCpuSampleEvent)(unsafe.Pointer(&rec.RawSample[0]))
		s.samples.Add(1)
		smp := sample{
			unixNs: kclock.MonotonicUnix(int64(ev.KtimeNs)),
			tid:    ev.Tid,
			user:   frames(ev.User[:], ev.UserLen),
			kern:   frames(ev.Kern[:], ev.KernLen),
		}
		comm := unsafe.Slice((*byte)(unsafe.Pointer(&ev.Comm[0])), len(ev.Comm))
		if i := bytes.IndexByte(comm, 0); i >= 0 {
			comm = comm[:i]
		}
		s.store.add(int(ev.Tgid), smp, comm)
	}
}

// readerCPU returns the CPU time of the reader's OS thread so far, from
// its schedstat (no cost in the reader itself).
func (s *Sampler) readerCPU() (time.Duration, bool) {
	tid := s.readerTID.Load()
	if tid == 0 {
		return 0, false
	}
	st, err := procfs.ThreadSchedstat(int(tid))
	return st.Run, err == nil
}

// drain makes the reader empty the ring buffer and waits (up to one flush
// interval) until it has, so a dump sees the samples taken until now.
func (s *Sampler) drain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FlushInterval)
	defer cancel()
	_ = s.rd.Drain(ctx)
}

// frames copies the valid prefix of a stack array; n is bpf_get_stack's
// return value (bytes, or a negative errno).
func frames(a []uint64, n int32) []uint64 {
	if n <= 0 {
		return nil
	}
	k := min(int(n)/8, len(a))
	out := make([]uint64, k)
	copy(out, a[:k])
	return out
}

// maintain re-reads the maps of live targets and notices targets that exit,
// removing them from the BPF target map (their pid may be reused).
func (s *Sampler) maintain() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.MapsRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.store.expire(time.Now())
		s.store.mu.Lock()
		var live []*targetBuf
		for _, tb := range s.store.targets {
			if tb.alive {
				live = append(live, tb)
			}
		}
		s.store.mu.Unlock()
		for _, tb := range live {
			if s.alive(tb) {
				_ = s.sym.refresh(tb.target.PID)
				continue
			}
			s.markGone(tb)
		}
	}
}

// alive reports whether tb's process still runs (same pid, same start time).
func (s *Sampler) alive(tb *targetBuf) bool {
	st, err := procfs.StartTime(tb.target.PID)
	return err == nil && st == tb.procStart
}

func (s *Sampler) markGone(tb *targetBuf) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store.mu.Lock()
	was := tb.alive
	tb.alive = false
	s.store.mu.Unlock()
	if was && !s.closed {
		_ = s.objs.CpuTargets.Delete(uint32(tb.target.PID))
		s.log.Debug("target exited", "pid", tb.target.PID)
	}
}

// Name implements profiler.Profiler.
func (s *Sampler) Name() string { return "cpu" }

// Supports implements profiler.Profiler: any process can be sampled.
func (s *Sampler) Supports(t profiler.Target) bool { return t.PID > 0 }

// Start implements profiler.Profiler.
func (s *Sampler) Start(ctx context.Context, t profiler.Target) error {
	if t.PID <= 0 {
		return fmt.Errorf("cpu: invalid pid %d: %w", t.PID, profiler.ErrNotSupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("cpu: sampler closed")
	}
	s.store.mu.Lock()
	tb, ok := s.store.targets[t.PID]
	s.store.mu.Unlock()
	if ok && tb.alive {
		return nil
	}
	st, err := procfs.StartTime(t.PID)
	if err != nil {
		return fmt.Errorf("cpu: pid %d: %w", t.PID, profiler.ErrTargetGone)
	}
	if err := s.sym.refresh(t.PID); err != nil {
		s.log.Warn("cannot read maps; frames will be unsymbolized", "pid", t.PID, "err", err)
	}
	s.store.mu.Lock()
	s.store.targets[t.PID] = &targetBuf{target: t, comms: map[uint32]string{}, alive: true, procStart: st}
	s.store.mu.Unlock()
	if err := s.objs.CpuTargets.Put(uint32(t.PID), uint8(1)); err != nil {
		s.store.remove(t.PID)
		return fmt.Errorf("cpu: add target %d: %w", t.PID, err)
	}
	return nil
}

// Stop implements profiler.Profiler.
func (s *Sampler) Stop(t profiler.Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.store.remove(t.PID) {
		return fmt.Errorf("cpu: pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	if !s.closed {
		if err := s.objs.CpuTargets.Delete(uint32(t.PID)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("cpu: remove target %d: %w", t.PID, err)
		}
	}
	s.sym.forget(t.PID)
	return nil
}

// Dump implements profiler.Profiler: one "cpu" artifact, a gzipped pprof
// profile of t's samples in w. If t exited, frames are symbolized from the
// cached maps, the artifact is Partial and the error wraps ErrTargetGone.
func (s *Sampler) Dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	s.dumps.Add(1)
	arts, err := s.dump(ctx, t, w)
	if err != nil {
		s.dumpErr.Add(1)
	}
	return arts, err
}

func (s *Sampler) dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	s.store.mu.Lock()
	tb := s.store.targets[t.PID]
	var alive bool
	if tb != nil {
		alive = tb.alive
	}
	s.store.mu.Unlock()
	if tb == nil {
		return nil, fmt.Errorf("cpu: pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	if alive && (!s.alive(tb) || s.sym.refresh(t.PID) != nil) {
		s.markGone(tb)
		alive = false
	}
	start, end := w.Start, w.End
	if end.IsZero() {
		end = time.Now()
	}
	if end.After(time.Now().Add(-2 * s.cfg.FlushInterval)) {
		s.drain(ctx)
	}
	smps, maxUser, ok := s.store.window(t.PID, start.UnixNano(), end.UnixNano())
	if !ok {
		return nil, fmt.Errorf("cpu: pid %d: %w", t.PID, profiler.ErrUnknownTarget)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ms, mapsKnown := s.sym.cachedMaps(t.PID)
	if !alive && len(smps) == 0 {
		return nil, fmt.Errorf("cpu: pid %d: no samples in window: %w", t.PID, profiler.ErrTargetGone)
	}

	period := int64(time.Second) / int64(s.cfg.FrequencyHz)
	b := newBuilder(period, start, end)
	perfMap := loadPerfMap(t.PID)
	var kern *symtab
	for i := range smps {
		smp := &smps[i]
		locs := make([]*profile.Location, 0, len(smp.kern)+len(smp.user))
		if len(smp.kern) > 0 && kern == nil {
			kern = s.sym.kallsyms()
		}
		for j, a := range smp.kern {
			pc := a
			if j > 0 && pc > 0 {
				pc--
			}
			locs = append(locs, b.kernelLocation(kern, a, pc))
		}
		for j, a := range smp.user {
			pc := a
			if j > 0 && pc > 0 {
				pc-- // return address: look up the call instruction
			}
			locs = append(locs, b.userLocation(s.sym, t.PID, ms, perfMap, a, pc))
		}
		b.p.Sample = append(b.p.Sample, &profile.Sample{
			Location: locs,
			Value:    []int64{1, period},
			Label:    map[string][]string{LabelThread: {smp.comm}},
			NumLabel: map[string][]int64{LabelTID: {int64(smp.tid)}, LabelTimeNs: {smp.unixNs}},
			NumUnit:  map[string][]string{LabelTimeNs: {"nanoseconds"}},
		})
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := b.p.WriteUncompressed(zw); err != nil {
		return nil, fmt.Errorf("cpu: encode profile: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("cpu: encode profile: %w", err)
	}
	mapsState := "live"
	switch {
	case !mapsKnown:
		mapsState = "unknown"
	case !alive:
		mapsState = "cached"
	}
	service := t.Service
	if service == "" {
		service = "unknown"
	}
	art := profiler.Artifact{
		Kind:      "cpu",
		MediaType: "application/vnd.google.protobuf+gzip",
		FileName:  fmt.Sprintf("cpu-%s-%d.pb.gz", sanitize(service), t.PID),
		Data:      buf.Bytes(),
		Start:     start,
		End:       end,
		Partial:   !alive,
		Attributes: map[string]string{
			"samples":             strconv.Itoa(len(smps)),
			"lost":                strconv.FormatUint(lostTotal(s.objs.CpuLost), 10),
			"unwound_frames_max":  strconv.Itoa(maxUser),
			"symbolized_frames":   strconv.Itoa(b.resolved),
			"unsymbolized_frames": strconv.Itoa(b.unresolved),
			"frequency_hz":        strconv.Itoa(s.cfg.FrequencyHz),
			"maps":                mapsState,
		},
	}
	if !alive {
		return []profiler.Artifact{art}, fmt.Errorf("cpu: pid %d exited (frames from %s maps): %w", t.PID, mapsState, profiler.ErrTargetGone)
	}
	return []profiler.Artifact{art}, nil
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
func (s *Sampler) Stats() map[string]float64 {
	s.store.mu.Lock()
	buffered, targets, evicted := s.store.bytes, len(s.store.targets), s.store.dropped
	s.store.mu.Unlock()
	m := map[string]float64{
		"samples":         float64(s.samples.Load()),
		"decode_errors":   float64(s.decErrs.Load()),
		"bytes_buffered":  float64(buffered),
		"samples_evicted": float64(evicted),
		"targets":         float64(targets),
		"dumps":           float64(s.dumps.Load()),
		"dump_errors":     float64(s.dumpErr.Load()),
	}
	if d, ok := s.readerCPU(); ok {
		m["reader_cpu_seconds"] = d.Seconds()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return m
	}
	m["lost"] = float64(lostTotal(s.objs.CpuLost))
	// They stay 0 unless BPF run-time statistics are on (rootline agent
	// --bpf-stats, kernel.bpf_stats_enabled): they cost every BPF program
	// run on the machine two clock reads, so the sampler does not turn them
	// on itself.
	if st, err := s.objs.CpuSample.Stats(); err == nil {
		m["bpf_run_time_seconds"] = st.Runtime.Seconds()
		m["bpf_run_count"] = float64(st.RunCount)
	}
	return m
}

// Close implements profiler.Profiler: detaches, stops the reader and frees
// every recording.
func (s *Sampler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	err := s.release() // closing the ring-buffer reader ends read()
	s.mu.Unlock()
	s.wg.Wait()
	s.store.mu.Lock()
	s.store.targets = map[int]*targetBuf{}
	s.store.bytes = 0
	s.store.mu.Unlock()
	return err
}
