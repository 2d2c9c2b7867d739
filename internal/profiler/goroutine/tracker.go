//go:build linux && amd64

package goroutine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/rootline/rootline/internal/kclock"
)

// Tracker attaches the uprobe to the Go processes added to it and reads
// their goroutines' status changes.
type Tracker struct {
	objs   goSchedObjects
	rd     *ringbuf.Reader
	offset int64

	mu    sync.Mutex
	procs map[uint32]*proc
}

type proc struct {
	link    link.Link
	reasons []string
}

// New loads the tracker's BPF program. Close releases it.
func New() (*Tracker, error) {
	t := &Tracker{procs: map[uint32]*proc{}, offset: kclock.Monotonic.Offset()}
	if err := loadGoSchedObjects(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("load the goroutine tracker: %w", err)
	}
	rd, err := ringbuf.NewReader(t.objs.GsEvents)
	if err != nil {
		t.objs.Close()
		return nil, err
	}
	t.rd = rd
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

// Read returns the next event; it blocks until one comes or the tracker is
// closed (ringbuf.ErrClosed).
func (t *Tracker) Read() (Event, error) {
	rec, err := t.rd.Read()
	if err != nil {
		return Event{}, err
	}
	var e goSchedGoSchedEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &e); err != nil {
		return Event{}, err
	}
	ev := Event{TS: int64(e.KtimeNs) + t.offset, PID: e.Tgid, TID: e.Tid, Goid: e.Goid, Old: e.Oldval, New: e.Newval}
	if e.Newval == Waiting {
		t.mu.Lock()
		if p := t.procs[e.Tgid]; p != nil && int(e.Reason) < len(p.reasons) {
			ev.Reason = p.reasons[e.Reason]
		} else {
			ev.Reason = "reason " + strconv.Itoa(int(e.Reason))
		}
		t.mu.Unlock()
	}
	return ev, nil
}

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
