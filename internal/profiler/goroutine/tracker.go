//go:build linux && amd64

package goroutine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/rootline/rootline/internal/bpfring"
	"github.com/rootline/rootline/internal/kclock"
)

// Tracker attaches the uprobe to the Go processes added to it and reads
// their goroutines' status changes.
type Tracker struct {
	objs goSchedObjects
	rd   *bpfring.Reader // waits in the netpoller
	rec  ringbuf.Record  // Read's, reused

	mu    sync.Mutex
	procs map[uint32]*proc
}

type proc struct {
	link    link.Link
	reasons []string
}

// ringBytes is the ring buffer's size; the reader is woken once a quarter
// of it is pending, else polls every pollInterval.
const (
	ringBytes    = 4 << 20
	pollInterval = 100 * time.Millisecond
)

// New loads the tracker's BPF program. Close releases it.
func New() (*Tracker, error) {
	t := &Tracker{procs: map[uint32]*proc{}}
	if err := loadGoSchedObjects(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("load the goroutine tracker: %w", err)
	}
	if err := t.objs.GsConfig.Put(uint32(0), goSchedGoSchedConfig{WakeupBytes: ringBytes / 4}); err != nil {
		t.objs.Close()
		return nil, err
	}
	rd, err := bpfring.NewReader(t.objs.GsEvents)
	if err != nil {
		t.objs.Close()
		return nil, err
	}
	t.rd = rd
	t.rd.SetDeadline(time.Now().Add(pollInterval))
	return t, nil
}

// Add tracks the goroutines of process pid, a Go program.
func (t *Tracker) Add(pid uint32) error {
	exe := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/exe"
	l, err := ReadLayout(exe)
	if err != nil {
		return err
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return err
	}
	key := pid
	val := goSchedGoSchedLayout{GoidOff: l.GoidOff, WaitreasonOff: l.WaitReasonOff}
	if err := t.objs.GsLayout.Put(&key, &val); err != nil {
		return err
	}
	up, err := ex.Uprobe("runtime.casgstatus", t.objs.GoCasgstatus, &link.UprobeOptions{PID: int(pid)})
	if err != nil {
		_ = t.objs.GsLayout.Delete(&key)
		return fmt.Errorf("uprobe runtime.casgstatus of %d: %w", pid, err)
	}
	t.mu.Lock()
	t.procs[pid] = &proc{link: up, reasons: l.WaitReasons}
	t.mu.Unlock()
	return nil
}

// Remove stops tracking pid.
func (t *Tracker) Remove(pid uint32) error {
	t.mu.Lock()
	p := t.procs[pid]
	delete(t.procs, pid)
	t.mu.Unlock()
	if p == nil {
		return nil
	}
	key := pid
	return errors.Join(p.link.Close(), t.objs.GsLayout.Delete(&key))
}

// Read reads the next event into e; it blocks until one comes or the
// tracker is closed (ringbuf.ErrClosed). It is not safe for concurrent
// use (one reader).
func (t *Tracker) Read(e *Event) error {
	var ev goSchedGoSchedEvent
	const size = int(unsafe.Sizeof(ev))
	for {
		err := t.rd.ReadInto(&t.rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, ringbuf.ErrFlushed):
			t.rd.SetDeadline(time.Now().Add(pollInterval))
			continue
		case err != nil:
			return err
		case len(t.rec.RawSample) < size:
			continue
		}
		// The layout is struct go_sched_event (bpf/go_sched.h), generated
		// by bpf2go; copied out of the record's buffer, which is reused.
		ev = *(*goSchedGoSchedEvent)(unsafe.Pointer(&t.rec.RawSample[0]))
		*e = Event{TS: kclock.MonotonicUnix(int64(ev.KtimeNs)), PID: ev.Tgid, TID: ev.Tid, Goid: ev.Goid, Old: ev.Oldval, New: ev.Newval}
		if ev.Newval == Waiting {
			e.Reason = t.reason(ev.Tgid, ev.Reason)
		}
		return nil
	}
}

// reason names wait reason r of process pid.
func (t *Tracker) reason(pid uint32, r uint8) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil && int(r) < len(p.reasons) {
		return p.reasons[r]
	}
	return "reason " + strconv.Itoa(int(r))
}

// Drain returns once Read has returned every event submitted before the
// call (or ctx ends).
func (t *Tracker) Drain(ctx context.Context) error { return t.rd.Drain(ctx) }

// Lost is the events dropped because the ring buffer was full.
func (t *Tracker) Lost() (uint64, error) {
	var per []uint64
	if err := t.objs.GsLost.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches every process and releases the program.
func (t *Tracker) Close() error {
	t.mu.Lock()
	var errs []error
	for pid, p := range t.procs {
		errs = append(errs, p.link.Close())
		delete(t.procs, pid)
	}
	t.mu.Unlock()
	errs = append(errs, t.rd.Close(), t.objs.Close())
	return errors.Join(errs...)
}
