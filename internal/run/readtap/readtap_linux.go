//go:build linux

package readtap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// DefaultRingBytes is the ring buffer size: reads accumulate there between
// two ptrace stops of the supervised process.
const DefaultRingBytes = 8 << 20

// Offsets in struct rr_read (bpf/run_reads.h).
const (
	offTS       = 0
	offG        = 8
	offRunDelay = 16
	offTgid     = 24
	offTid      = 28
	offFD       = 32
	offSeq      = 36
	offOff      = 40
	offLen      = 44
	offFlags    = 52
	offData     = 56

	flagLast  = 1
	flagTrunc = 2
)

// Tap is a loaded read tap. Its methods are for one goroutine (the
// tracer's), except Close.
type Tap struct {
	objs    runReadsObjects
	links   []link.Link
	rd      *ringbuf.Reader
	rec     ringbuf.Record
	watched map[int]map[int]bool // tgid → fds
	partial map[int]*Read        // tid → a read whose last chunk is pending
	next    map[[2]int]uint32    // (tgid, fd) → the next expected Seq
}

// Open loads and attaches the programs with a ring buffer of ringBytes
// (a power of two ≥ 4096; 0 means DefaultRingBytes).
func Open(ringBytes int) (*Tap, error) {
	if ringBytes == 0 {
		ringBytes = DefaultRingBytes
	}
	if ringBytes < 4096 || ringBytes&(ringBytes-1) != 0 {
		return nil, fmt.Errorf("readtap: ring buffer size %d is not a power of two ≥ 4096", ringBytes)
	}
	spec, err := loadRunReads()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	spec.Maps[runReadsMapRrReads].MaxEntries = uint32(ringBytes)
	t := &Tap{watched: map[int]map[int]bool{}, partial: map[int]*Read{}, next: map[[2]int]uint32{}}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		return nil, fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	ensureTracefs()
	for _, a := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sys_enter_read", t.objs.RrEnterRead}, {"sys_exit_read", t.objs.RrExitRead},
		{"sys_enter_recvfrom", t.objs.RrEnterRecvfrom}, {"sys_exit_recvfrom", t.objs.RrExitRecvfrom},
	} {
		l, err := link.Tracepoint("syscalls", a.name, a.prog, nil)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("%w: attach syscalls:%s: %w", ErrUnavailable, a.name, err)
		}
		t.links = append(t.links, l)
	}
	t.rd, err = ringbuf.NewReader(t.objs.RrReads)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("%w: ring buffer: %w", ErrUnavailable, err)
	}
	// Drain never waits: records are submitted without wake-ups.
	t.rd.SetDeadline(time.Unix(1, 0))
	return t, nil
}

// Watch starts copying the reads of (tgid, fd).
func (t *Tap) Watch(tgid, fd int) error {
	k := runReadsRrKey{Tgid: uint32(tgid), Fd: int32(fd)}
	if err := t.objs.RrWatched.Put(&k, &runReadsRrWatch{}); err != nil {
		return fmt.Errorf("readtap: watch %d/%d: %w", tgid, fd, err)
	}
	m := t.watched[tgid]
	if m == nil {
		m = map[int]bool{}
		t.watched[tgid] = m
	}
	m[fd] = true
	t.next[[2]int{tgid, fd}] = 0
	return nil
}

// Unwatch stops copying the reads of (tgid, fd) (at its close).
func (t *Tap) Unwatch(tgid, fd int) {
	if !t.watched[tgid][fd] {
		return
	}
	delete(t.watched[tgid], fd)
	delete(t.next, [2]int{tgid, fd})
	k := runReadsRrKey{Tgid: uint32(tgid), Fd: int32(fd)}
	_ = t.objs.RrWatched.Delete(&k)
}

// UnwatchProcess forgets every socket of tgid (at its exit or exec).
func (t *Tap) UnwatchProcess(tgid int) {
	for fd := range t.watched[tgid] {
		t.Unwatch(tgid, fd)
	}
	delete(t.watched, tgid)
}

// Drain calls fn with every read completed so far, in the order each
// socket's reads were made, without waiting.
func (t *Tap) Drain(fn func(*Read)) error {
	if t.rd.AvailableBytes() == 0 {
		return nil
	}
	for {
		err := t.rd.ReadInto(&t.rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("readtap: %w", err)
		}
		t.chunk(t.rec.RawSample, fn)
	}
}

func (t *Tap) chunk(b []byte, fn func(*Read)) {
	if len(b) < offData {
		return
	}
	le := binary.LittleEndian
	tid := int(le.Uint32(b[offTid:]))
	off, n, flags := le.Uint32(b[offOff:]), int(le.Uint32(b[offLen:])), le.Uint32(b[offFlags:])
	if n > len(b)-offData {
		n = len(b) - offData
	}
	r := t.partial[tid]
	if off == 0 {
		if r != nil { // its last chunk was lost
			r.Incomplete = true
			t.emit(r, fn)
		}
		r = &Read{Mono: int64(le.Uint64(b[offTS:])), G: le.Uint64(b[offG:]), RunDelay: int64(le.Uint64(b[offRunDelay:])),
			Tgid: int(le.Uint32(b[offTgid:])), Tid: tid, FD: int(int32(le.Uint32(b[offFD:]))),
			Seq: le.Uint32(b[offSeq:])}
	} else if r == nil || int(off) != len(r.Data) {
		// A chunk of a read whose start was lost.
		if r == nil {
			r = &Read{Tgid: int(le.Uint32(b[offTgid:])), Tid: tid, FD: int(int32(le.Uint32(b[offFD:]))),
				Seq: le.Uint32(b[offSeq:]), Mono: int64(le.Uint64(b[offTS:]))}
		}
		r.Incomplete = true
	}
	r.Data = append(r.Data, b[offData:offData+n]...)
	if flags&flagTrunc != 0 {
		r.Incomplete = true
	}
	if flags&flagLast == 0 {
		t.partial[tid] = r
		return
	}
	delete(t.partial, tid)
	t.emit(r, fn)
}

// emit checks r's place in its socket's sequence and hands it over.
func (t *Tap) emit(r *Read, fn func(*Read)) {
	key := [2]int{r.Tgid, r.FD}
	want, ok := t.next[key]
	if !ok {
		return // unwatched since
	}
	if r.Seq != want {
		r.Incomplete = true // reads of this socket were lost in between
	}
	t.next[key] = r.Seq + 1
	fn(r)
}

// Lost returns the chunks dropped because the ring buffer was full.
func (t *Tap) Lost() uint64 {
	var v uint64
	_ = t.objs.RrLost.Lookup(uint32(0), &v)
	return v
}

// Close detaches the programs and frees the maps.
func (t *Tap) Close() error {
	for _, l := range t.links {
		_ = l.Close()
	}
	t.links = nil
	if t.rd != nil {
		_ = t.rd.Close()
	}
	return t.objs.Close()
}

// ensureTracefs mounts tracefs at /sys/kernel/tracing when neither it nor
// debugfs is mounted: `ip netns exec` (the demo's pod mode) gives the
// command a mount namespace with a fresh sysfs and neither of them, and
// attaching a tracepoint needs its id from tracefs. (On a host where tracefs
// is not mounted at all this mounts it where the kernel's own automount
// would.)
func ensureTracefs() {
	for _, p := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	_ = unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, "")
}
