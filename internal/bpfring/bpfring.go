// Package bpfring reads a BPF ring buffer the way cilium/ebpf's
// ringbuf.Reader does, but waits for records in Go's network poller instead
// of in a blocking epoll_wait system call.
//
// Why: a goroutine blocked in a system call holds its P (the Go scheduler's
// processor) until sysmon, the runtime's monitor thread, takes it back, and
// sysmon keeps waking up every 20 µs–10 ms while any P is in a system call.
// A reader that waits in epoll_wait for up to its flush interval, the whole
// life of the process, so keeps sysmon busy: in the demo mesh each
// `rootline run` spent about half of its CPU time (~370 sysmon wake-ups a
// second, 2–5 ms of CPU a second per process) on that, none of it on spans.
// Waiting in the network poller parks the goroutine with no P held, as a
// socket read does, and costs nothing while nothing arrives.
//
// The ring buffer's file descriptor is pollable (EPOLLIN when records are
// pending); a non-blocking duplicate of it is registered with the network
// poller (edge-triggered), and the BPF side's wake-ups (ring buffer
// submissions without BPF_RB_NO_WAKEUP, or with BPF_RB_FORCE_WAKEUP) become
// readiness events. Records submitted with BPF_RB_NO_WAKEUP are found at the
// deadline, as with ringbuf.Reader.
//
// NewMultiReader reads several ring buffers (e.g. one per CPU, so that
// producers on different CPUs do not contend for one ring's lock) with one
// goroutine: their fds are in an epoll instance of their own, whose fd is
// pollable too and is what the network poller waits on.
package bpfring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// past is a deadline that has passed: the inner reader's ReadInto then
// returns what is pending and never blocks.
var past = time.Unix(1, 0)

// Reader reads records from a BPF ring buffer map. ReadInto and Close may
// be called from different goroutines, Flush and SetDeadline from any.
type Reader struct {
	rds []*ringbuf.Reader
	cur int // index in rds of the ring being drained
	// f is in the netpoller: a non-blocking duplicate of the map's fd (one
	// ring), or an epoll fd watching every ring's fd.
	f  *os.File
	rc syscall.RawConn

	mu       sync.Mutex // held by ReadInto; Close takes it to close rd
	closed   bool
	closing  atomic.Bool  // set before f is closed
	deadline atomic.Int64 // Unix ns; 0: none

	// Flush generations: Flush takes the next one; ReadInto notices it
	// (seen), then, once every record submitted before it has been
	// returned, reports it served (with ErrFlushed), which is what Drain
	// waits for.
	flushGen atomic.Uint64
	seen     uint64 // under mu: the latest generation ReadInto noticed
	serving  uint64 // under mu: the generation being served
	drainMu  sync.Mutex
	served   uint64        // under drainMu
	servedCh chan struct{} // under drainMu: closed and replaced when served grows
	done     chan struct{} // closed by Close
}

// NewReader opens a reader of the ring buffer map m.
func NewReader(m *ebpf.Map) (*Reader, error) {
	return NewMultiReader([]*ebpf.Map{m})
}

// NewMultiReader opens one reader of the ring buffer maps ms: ReadInto
// returns the records of each in order, the rings one after the other.
func NewMultiReader(ms []*ebpf.Map) (_ *Reader, err error) {
	if len(ms) == 0 {
		return nil, errors.New("ring buffer: no map")
	}
	r := &Reader{servedCh: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			for _, rd := range r.rds {
				rd.Close()
			}
		}
	}()
	for _, m := range ms {
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return nil, err
		}
		rd.SetDeadline(past) // rd only ever drains what is pending
		r.rds = append(r.rds, rd)
	}
	fd, err := pollFD(ms)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring buffer: non-blocking fd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "bpf-ringbuf")
	// SetReadDeadline fails unless the netpoller took the fd.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("ring buffer: not pollable here: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ring buffer: %w", err)
	}
	r.f, r.rc = f, rc
	return r, nil
}

// pollFD returns a new fd that is readable when a ring of ms has records: a
// duplicate of the only map's fd, or an epoll fd watching every map's (an
// epoll fd is itself pollable; each wake-up of a ring wakes its pollers).
func pollFD(ms []*ebpf.Map) (int, error) {
	if len(ms) == 1 {
		fd, err := unix.FcntlInt(uintptr(ms[0].FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("ring buffer: dup fd: %w", err)
		}
		return fd, nil
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("ring buffer: epoll: %w", err)
	}
	for i, m := range ms {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, m.FD(), &ev); err != nil {
			unix.Close(ep)
			return -1, fmt.Errorf("ring buffer: epoll add: %w", err)
		}
	}
	return ep, nil
}

// pending reports whether a ring has records (or discarded ones) to read.
func (r *Reader) pending() bool {
	for _, rd := range r.rds {
		if rd.AvailableBytes() > 0 {
			return true
		}
	}
	return false
}

// SetDeadline sets when ReadInto stops waiting for records and returns
// os.ErrDeadlineExceeded (after every record pending then); zero: never.
func (r *Reader) SetDeadline(t time.Time) {
	if t.IsZero() {
		r.deadline.Store(0)
		return
	}
	r.deadline.Store(t.UnixNano())
}

// Flush makes a waiting or the next ReadInto return the records pending now
// followed by ringbuf.ErrFlushed (as ringbuf.Reader.Flush).
func (r *Reader) Flush() error {
	_, err := r.flush()
	return err
}

func (r *Reader) flush() (uint64, error) {
	gen := r.flushGen.Add(1)
	// Wake a waiter: a deadline in the past unblocks it. If it has not
	// started waiting yet, it sees the new generation before it waits.
	if err := r.f.SetReadDeadline(past); err != nil && !errors.Is(err, os.ErrClosed) {
		return gen, err
	}
	return gen, nil
}

// Drain returns once the consumer has read every record submitted before
// the call: it flushes, then waits until ReadInto has returned all of them
// and the ErrFlushed after them (so the consumer, which called ReadInto
// again, is done with them). Errors: ctx's, or ringbuf.ErrClosed.
func (r *Reader) Drain(ctx context.Context) error {
	if r.closing.Load() {
		return ringbuf.ErrClosed
	}
	gen, err := r.flush()
	if err != nil {
		return err
	}
	r.drainMu.Lock()
	for r.served < gen {
		ch := r.servedCh
		r.drainMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ringbuf.ErrClosed
		}
		r.drainMu.Lock()
	}
	r.drainMu.Unlock()
	return nil
}

// ReadInto reads the next record into rec, waiting for one until the
// deadline. Errors: os.ErrDeadlineExceeded once the deadline has passed
// and the ring is empty, ringbuf.ErrFlushed once after Flush and the
// records pending then, ringbuf.ErrClosed after Close.
func (r *Reader) ReadInto(rec *ringbuf.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.closed {
			return ringbuf.ErrClosed
		}
		for range r.rds {
			rd := r.rds[r.cur]
			if rd.AvailableBytes() > 0 {
				err := rd.ReadInto(rec)
				if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, ringbuf.ErrFlushed) {
					return err // a record, or a real error
				}
				// Only discarded records were pending: this ring is empty.
			}
			r.cur = (r.cur + 1) % len(r.rds)
		}
		if gen := r.flushGen.Load(); gen != r.seen {
			// A Flush since the last look: what was submitted before it
			// is in the rings now; read it before answering.
			r.seen, r.serving = gen, gen
			continue
		}
		if r.serving != 0 {
			r.drainMu.Lock()
			r.served = max(r.served, r.serving)
			close(r.servedCh)
			r.servedCh = make(chan struct{})
			r.drainMu.Unlock()
			r.serving = 0
			return ringbuf.ErrFlushed
		}
		d := r.deadline.Load()
		if d != 0 && time.Now().UnixNano() >= d {
			return os.ErrDeadlineExceeded
		}
		var until time.Time
		if d != 0 {
			until = time.Unix(0, d)
		}
		if err := r.f.SetReadDeadline(until); err != nil {
			return ringbuf.ErrClosed // only fails once closed
		}
		err := r.rc.Read(func(uintptr) bool {
			return r.pending() || r.flushGen.Load() != r.seen
		})
		switch {
		case r.closing.Load():
			return ringbuf.ErrClosed
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
			// Records, a flush, or the deadline: the loop tells which.
		default:
			return fmt.Errorf("ring buffer: wait: %w", err)
		}
	}
}

// Close interrupts ReadInto (it returns ringbuf.ErrClosed) and frees the
// reader.
func (r *Reader) Close() error {
	r.closing.Store(true)
	err := r.f.Close() // wakes a waiting ReadInto, which then lets go of mu
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	close(r.done)
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	for _, rd := range r.rds {
		err = errors.Join(err, rd.Close())
	}
	return err
}
