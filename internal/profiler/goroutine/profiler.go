//go:build linux && amd64

package goroutine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/rootline/rootline/internal/profiler"
)

// Config tunes the profiler.
type Config struct {
	// Keep is how long a process's events are kept (default 1 min, as the
	// kernel recorder keeps its records).
	Keep time.Duration
	// MaxEvents bounds the events kept per process (default 250,000, about
	// 12 MB); the oldest go first.
	MaxEvents int
}

func (c Config) withDefaults() Config {
	if c.Keep <= 0 {
		c.Keep = time.Minute
	}
	if c.MaxEvents <= 0 {
		c.MaxEvents = 250_000
	}
	return c
}

// Profiler is the "goroutines" profiler: the goroutine status changes of
// the Go programs among the agent's targets, dumped per window as one
// artifact (Encode) that critical paths read to follow a Go request's
// goroutine across threads and through its waits in user space.
type Profiler struct {
	cfg Config
	log *slog.Logger
	tr  *Tracker

	mu       sync.Mutex
	procs    map[uint32]*events
	supports map[string]bool // by executable path

	wg                    sync.WaitGroup
	read, dumps, dumpErrs atomic.Uint64
}

// events is one process's recent events, oldest first from start.
type events struct {
	list  []Event
	start int
}

var _ profiler.Profiler = (*Profiler)(nil)

// NewProfiler loads the tracker's BPF program and starts reading.
func NewProfiler(cfg Config, logger *slog.Logger) (*Profiler, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tr, err := New()
	if err != nil {
		return nil, err
	}
	p := &Profiler{cfg: cfg.withDefaults(), log: logger, tr: tr, procs: map[uint32]*events{}, supports: map[string]bool{}}
	p.wg.Add(1)
	go p.loop()
	return p, nil
}

func (p *Profiler) loop() {
	defer p.wg.Done()
	var e Event
	for {
		err := p.tr.Read(&e)
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		p.read.Add(1)
		p.mu.Lock()
		ev := p.procs[e.PID]
		if ev != nil {
			ev.list = append(ev.list, e)
			ev.trim(e.TS-int64(p.cfg.Keep), p.cfg.MaxEvents)
		}
		p.mu.Unlock()
	}
}

// trim drops the events before from, and the oldest beyond max.
func (ev *events) trim(from int64, max int) {
	for ev.start < len(ev.list) && (ev.list[ev.start].TS < from || len(ev.list)-ev.start > max) {
		ev.start++
	}
	if ev.start > len(ev.list)/2 && ev.start > 1024 {
		n := copy(ev.list, ev.list[ev.start:])
		clear(ev.list[n:])
		ev.list, ev.start = ev.list[:n], 0
	}
}

// Name implements profiler.Profiler.
func (p *Profiler) Name() string { return Kind }

// Supports implements profiler.Profiler: Go programs built with DWARF.
func (p *Profiler) Supports(t profiler.Target) bool {
	if t.PID <= 0 || t.JVM {
		return false
	}
	exe := t.Exe
	if exe == "" {
		exe = "/proc/" + strconv.Itoa(t.PID) + "/exe"
	}
	p.mu.Lock()
	ok, seen := p.supports[exe]
	p.mu.Unlock()
	if seen {
		return ok
	}
	_, err := ReadLayout("/proc/" + strconv.Itoa(t.PID) + "/exe")
	ok = err == nil
	if err != nil && !errors.Is(err, ErrNotGo) {
		p.log.Info("a Go program's goroutines cannot be followed", "pid", t.PID, "exe", exe, "err", err)
	}
	p.mu.Lock()
	p.supports[exe] = ok
	p.mu.Unlock()
	return ok
}

// Start implements profiler.Profiler.
func (p *Profiler) Start(ctx context.Context, t profiler.Target) error {
	pid := uint32(t.PID)
	p.mu.Lock()
	_, ok := p.procs[pid]
	if !ok {
		p.procs[pid] = &events{}
	}
	p.mu.Unlock()
	if ok {
		return nil
	}
	if err := p.tr.Add(pid); err != nil {
		p.mu.Lock()
		delete(p.procs, pid)
		p.mu.Unlock()
		if errors.Is(err, ErrNotGo) || errors.Is(err, ErrNoDWARF) {
			return fmt.Errorf("goroutines: pid %d: %w: %v", pid, profiler.ErrNotSupported, err)
		}
		return fmt.Errorf("goroutines: pid %d: %w", pid, err)
	}
	return nil
}

// Stop implements profiler.Profiler.
func (p *Profiler) Stop(t profiler.Target) error {
	pid := uint32(t.PID)
	p.mu.Lock()
	_, ok := p.procs[pid]
	delete(p.procs, pid)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("goroutines: pid %d: %w", pid, profiler.ErrUnknownTarget)
	}
	return p.tr.Remove(pid)
}

// leadIn is how far before a window its events are dumped too: the
// goroutine each thread ran when the window began.
const leadIn = time.Second

// Dump implements profiler.Profiler: one artifact of t's events in w.
func (p *Profiler) Dump(ctx context.Context, t profiler.Target, w profiler.Window) ([]profiler.Artifact, error) {
	p.dumps.Add(1)
	pid := uint32(t.PID)
	from, to := w.Start.Add(-leadIn).UnixNano(), w.End.UnixNano()
	// The events until now are read before the window is copied.
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = p.tr.Drain(dctx)
	cancel()
	p.mu.Lock()
	ev := p.procs[pid]
	var out []Event
	if ev != nil {
		out = inWindow(ev.list[ev.start:], from, to)
	}
	p.mu.Unlock()
	if ev == nil {
		p.dumpErrs.Add(1)
		return nil, fmt.Errorf("goroutines: pid %d: %w", pid, profiler.ErrUnknownTarget)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, pid, out); err != nil {
		p.dumpErrs.Add(1)
		return nil, err
	}
	return []profiler.Artifact{{Kind: Kind, MediaType: MediaType, FileName: FileName, Data: buf.Bytes(),
		Start: w.Start, End: w.End, Attributes: map[string]string{"events": strconv.Itoa(len(out))}}}, nil
}

// inWindow copies the events of list with from ≤ TS ≤ to, sorted by TS. The
// ring buffer holds them in the order they were reserved, and an event is
// dated after its reservation: two CPUs' events can be out of time order by
// the time between the two (a thread's own events are always in order).
func inWindow(list []Event, from, to int64) []Event {
	var out []Event
	for _, e := range list {
		if e.TS >= from && e.TS <= to {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, byTS)
	return out
}

// Stats implements profiler.Profiler.
func (p *Profiler) Stats() map[string]float64 {
	lost, _ := p.tr.Lost()
	p.mu.Lock()
	var kept int
	for _, ev := range p.procs {
		kept += len(ev.list) - ev.start
	}
	procs := len(p.procs)
	p.mu.Unlock()
	return map[string]float64{"events": float64(p.read.Load()), "events_lost": float64(lost), "events_kept": float64(kept),
		"targets": float64(procs), "dumps": float64(p.dumps.Load()), "dump_errors": float64(p.dumpErrs.Load())}
}

// Close implements profiler.Profiler.
func (p *Profiler) Close() error {
	err := p.tr.Close()
	p.wg.Wait()
	return err
}
