//go:build linux

package datapath

import (
	"context"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/bpfring"
	"github.com/rootline/rootline/internal/procfs"
)

// DefaultRingBytes is the events ring buffer: span events wait there until
// user space reads them (Read's poll interval; the programs never wake the
// reader, which would cost every request a wake-up).
const DefaultRingBytes = 4 << 20

// Config configures Open.
type Config struct {
	// Cgroup is the cgroup v2 directory the service runs in (see
	// NewCgroup); only its processes are followed.
	Cgroup string
	// RingBytes is the events ring buffer size (a power of two ≥ 4096);
	// 0 means DefaultRingBytes. Runs share a datapath with the runs that
	// use the same size.
	RingBytes int
	// Private loads a datapath of the run's own instead of joining the one
	// the node's runs share (see shared_linux.go).
	Private bool
	// Omit are the propagation formats (httpstream.Formats bits, RD_PROP_*
	// in bpf/run_datapath.h) the run does not write on outbound requests;
	// 0 writes them all.
	Omit uint32
	// LongTiming writes the timing fields on responses in the long form
	// (rootline-server-time and rootline-wait) instead of the compact rl
	// line (httpstream.HeaderCompact). Both are read either way.
	LongTiming bool
}

// Datapath is the datapath of one `rootline run`: its own programs and
// events ring, and the programs and maps it shares with the node's other
// runs (or its own copies of them, when private). Read runs on one
// goroutine; AddGo, Stats and Close may be called from any.
type Datapath struct {
	objs        runObjects           // the maps and the run's own programs
	shared      sharedPrograms       // loaded by this run, or found pinned
	sharedLinks map[string]link.Link // sharedLinked
	sharedFound bool                 // the shared programs were found pinned (another run loaded them)
	ring        *ebpf.Map
	links       []link.Link
	rd          *bpfring.Reader // waits in the netpoller (see package bpfring)

	slot, gen uint32
	pin       string    // the shared datapath's pin directory; "" when private
	owners    *ebpf.Map // its slot registry
	// SharedErr says why the run has a private datapath although it did not
	// ask for one (nil when shared, or asked private).
	SharedErr error

	mu     sync.Mutex
	probed map[string]error // executables given Go probes
	closed bool
}

// Open loads the run's programs, joins (or loads) the shared ones, and
// attaches them to the cgroup cfg.Cgroup.
func Open(cfg Config) (*Datapath, error) {
	if cfg.RingBytes == 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.RingBytes < 4096 || cfg.RingBytes&(cfg.RingBytes-1) != 0 {
		return nil, fmt.Errorf("datapath: ring buffer size %d is not a power of two ≥ 4096", cfg.RingBytes)
	}
	id, err := CgroupID(cfg.Cgroup)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if cfg.Private {
		return open(cfg, id, "")
	}
	root, rerr := bpffsRoot()
	if root == "" {
		d, err := open(cfg, id, "")
		if d != nil {
			d.SharedErr = rerr
		}
		return d, err
	}
	d, err := open(cfg, id, root)
	var se *shareError
	if errors.As(err, &se) {
		if d, err = open(cfg, id, ""); d != nil {
			d.SharedErr = se.err
		}
	}
	return d, err
}

// shareError: the shared datapath could not be joined (the run then loads
// its own).
type shareError struct{ err error }

func (e *shareError) Error() string { return "shared datapath: " + e.err.Error() }

// open loads the datapath: shared through the BPF file system at root, or
// private when root is "".
func open(cfg Config, cgroup uint64, root string) (d *Datapath, err error) {
	spec, err := loadRunDatapath()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var specs runDatapathSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	specs.RdRings.InnerMap.MaxEntries = uint32(cfg.RingBytes)
	d = &Datapath{probed: map[string]error{}, gen: 1}
	opts := loadOptions()
	if root != "" {
		name := pinName(cfg.RingBytes)
		unlock, err := lockShared(name)
		if err != nil {
			return nil, &shareError{err}
		}
		defer unlock()
		d.pin = filepath.Join(root, "rootline", name)
		if err := os.MkdirAll(d.pin, 0o700); err != nil {
			return nil, &shareError{err}
		}
		if d.owners, err = ownersMap(d.pin); err != nil {
			return nil, &shareError{err}
		}
		var reclaimed bool
		if d.slot, d.gen, reclaimed, err = claimSlot(d.owners); err != nil {
			d.owners.Close()
			return nil, &shareError{err}
		}
		defer func() {
			if err == nil && reclaimed {
				purgeSlot(d.objs.RdConns, d.objs.RdReqs, d.slot, d.gen)
			}
		}()
		for _, m := range specs.shared() {
			m.Pinning = ebpf.PinByName
		}
		opts.Maps.PinPath = d.pin
		if progs, links, ok := loadShared(d.pin); ok {
			d.shared, d.sharedLinks = progs, links
			d.sharedFound = true
			for _, name := range sharedProgNames {
				delete(spec.Programs, name)
			}
		}
	}
	// Failures from here on give the slot back (the lock is held) and close
	// what was made.
	undo := func() {
		if d.pin != "" {
			d.release()
		}
		d.teardown()
	}
	ncpu, _ := ebpf.PossibleCPU()
	wake := uint64(cfg.RingBytes) / 4 / uint64(max(ncpu, 1))
	for _, v := range []struct {
		spec *ebpf.VariableSpec
		val  any
	}{{specs.RdCgroup, cgroup}, {specs.RdSlot, d.slot}, {specs.RdGen, d.gen}, {specs.RdWakeBytes, wake},
		{specs.RdNoprop, cfg.Omit}, {specs.RdTiming, timingForm(cfg.LongTiming)}} {
		if err := v.spec.Set(v.val); err != nil {
			undo()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		undo()
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: load BPF: %+v", ErrUnavailable, ve)
		}
		if d.pin != "" && errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, &shareError{err}
		}
		return nil, fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	err = coll.Assign(&d.objs)
	if err == nil && !d.sharedFound {
		err = coll.Assign(&d.shared)
	}
	coll.Close() // what was not assigned: nothing
	if err != nil {
		undo()
		return nil, fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	fail := func(what string, err error) (*Datapath, error) {
		undo()
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	if !d.sharedFound {
		// The first run (or a private one) attaches the shared programs.
		d.sharedLinks = map[string]link.Link{}
		if err := link.RawAttachProgram(link.RawAttachProgramOptions{
			Target: d.objs.RdSocks.FD(), Program: d.shared.RdMsg, Attach: ebpf.AttachSkMsgVerdict}); err != nil {
			return fail("attach sk_msg", err)
		}
		named := d.shared.named()
		for _, name := range sharedLinked {
			l, err := link.AttachTracing(link.TracingOptions{Program: *named[name], AttachType: ebpf.AttachTraceRawTp})
			if err != nil {
				return fail("attach "+name, err)
			}
			d.sharedLinks[name] = l
		}
		if d.pin != "" {
			for name, p := range named {
				if err := (*p).Pin(filepath.Join(d.pin, "prog_"+name)); err != nil {
					return fail("pin "+name, err)
				}
			}
			for name, l := range d.sharedLinks {
				if err := l.Pin(filepath.Join(d.pin, "link_"+name)); err != nil {
					return fail("pin "+name, err)
				}
			}
		}
	}
	if d.ring, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rd_events", Type: ebpf.RingBuf, MaxEntries: uint32(cfg.RingBytes)}); err != nil {
		return fail("ring buffer", err)
	}
	if err := d.objs.RdRings.Put(d.slot, d.ring); err != nil {
		return fail("ring buffer", err)
	}
	if err := d.objs.RdGens.Put(d.slot, d.gen); err != nil {
		return fail("slot", err)
	}
	if err := d.objs.RdRunpids.Put(uint32(os.Getpid()), d.slot); err != nil {
		return fail("slot", err)
	}
	for _, p := range []*ebpf.Program{d.objs.RdFork, d.objs.RdExit, d.objs.RdExec} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return fail("attach "+p.String(), err)
		}
		d.links = append(d.links, l)
	}
	// sock_ops last: from here on connections are followed.
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cfg.Cgroup, Attach: ebpf.AttachCGroupSockOps, Program: d.objs.RdSockops})
	if err != nil {
		return fail("attach sock_ops to "+cfg.Cgroup, err)
	}
	d.links = append(d.links, l)
	if d.rd, err = bpfring.NewReader(d.ring); err != nil {
		return fail("ring buffer", err)
	}
	return d, nil
}

// Shared reports whether the run uses the datapath the node's runs share.
func (d *Datapath) Shared() bool { return d.pin != "" }

// Close detaches the run's programs; the service keeps running, untraced.
// The last run of a shared datapath takes the shared programs with it.
func (d *Datapath) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	var errs []error
	// The run's programs first: no new connection, event or Go hand-off.
	for i := len(d.links) - 1; i >= 0; i-- {
		errs = append(errs, d.links[i].Close())
	}
	d.links = nil
	if d.pin != "" {
		if unlock, err := lockShared(filepath.Base(d.pin)); err == nil {
			d.release()
			unlock()
		} else {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, d.teardown())...)
}

// teardown closes the run's descriptors (programs detach with them).
func (d *Datapath) teardown() error {
	var errs []error
	for i := len(d.links) - 1; i >= 0; i-- {
		errs = append(errs, d.links[i].Close())
	}
	d.links = nil
	if d.rd != nil {
		errs = append(errs, d.rd.Close())
		d.rd = nil
	}
	if d.pin == "" && d.objs.RdSocks != nil && d.shared.RdMsg != nil {
		// Connections leave the sockhash (and tcp_bpf) as they close; the
		// map goes with the last reference.
		_ = link.RawDetachProgram(link.RawDetachProgramOptions{
			Target: d.objs.RdSocks.FD(), Program: d.shared.RdMsg, Attach: ebpf.AttachSkMsgVerdict})
	}
	d.closeShared()
	if d.ring != nil {
		errs = append(errs, d.ring.Close())
		d.ring = nil
	}
	errs = append(errs, d.objs.Close())
	d.objs = runObjects{}
	return errors.Join(errs...)
}

// release gives the slot back (with the shared datapath's lock held), and
// unpins the shared datapath if no other run uses it.
func (d *Datapath) release() {
	if d.owners != nil {
		var o owner
		if d.owners.Lookup(d.slot, &o) == nil && (o.PID != uint32(os.Getpid()) || o.Gen != d.gen) {
			// Not ours any more (taken as a dead run's: cannot happen to
			// a live run, but never clear another run's slot).
			d.owners.Close()
			d.owners = nil
			return
		}
	}
	if m := d.objs.RdGens; m != nil {
		_ = m.Put(d.slot, uint32(0))
	}
	if m := d.objs.RdRings; m != nil {
		_ = m.Delete(d.slot)
	}
	if m := d.objs.RdRunpids; m != nil {
		_ = m.Delete(uint32(os.Getpid()))
	}
	if d.owners == nil {
		return
	}
	_ = d.owners.Put(d.slot, owner{Gen: d.gen})
	if !othersAlive(d.owners, d.slot) {
		unpinAll(d.pin)
	}
	d.owners.Close()
	d.owners = nil
}

// closeShared closes this run's descriptors of the shared programs.
func (d *Datapath) closeShared() {
	for _, l := range d.sharedLinks {
		l.Close()
	}
	d.shared.Close()
	d.shared, d.sharedLinks, d.sharedFound = sharedPrograms{}, nil, false
}

// Go functions probed for the net/http client hand-off.
const (
	goRoundTrip = "net/http.(*persistConn).roundTrip"
	goReqWrite  = "net/http.(*Request).write"
)

// AddGo binds the requests of Go process pid to goroutines and, once per
// executable, puts the net/http client probes on exe (ProbeGo). It reports
// whether the probes are there.
func (d *Datapath) AddGo(pid int, exe string) (bool, error) {
	if err := d.MarkGo(pid); err != nil {
		return false, err
	}
	return d.ProbeGo(exe)
}

// MarkGo binds the requests of process pid to goroutines (R14) rather than
// threads.
func (d *Datapath) MarkGo(pid int) error {
	if err := d.objs.RdGopids.Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("datapath: mark %d as Go: %w", pid, err)
	}
	return nil
}

// ProbeGo puts the net/http client probes on a Go executable, once per
// file; they apply to the run's processes only, so they may be placed
// before the program starts. It reports whether the probes are there (a Go
// program without net/http's client has none: its calls are then made
// outside any request).
func (d *Datapath) ProbeGo(exe string) (bool, error) {
	real, err := filepath.EvalSymlinks(exe)
	if err != nil {
		real = exe
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err, ok := d.probed[real]; ok {
		return err == nil, err
	}
	err = d.probeGo(real)
	d.probed[real] = err
	return err == nil, err
}

var errNoHTTPClient = errors.New("no net/http client in the executable")

func (d *Datapath) probeGo(exe string) error {
	f, err := elf.Open(exe)
	if err != nil {
		return err
	}
	addrs := GoFunctions(f, []string{goRoundTrip, goReqWrite})
	// Uprobes take file offsets.
	for name, va := range addrs {
		addrs[name] = 0
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Vaddr <= va && va < p.Vaddr+p.Memsz {
				off := va - p.Vaddr + p.Off
				addrs[name] = off + probeOffset(p.ReaderAt, off-p.Off)
			}
		}
		if addrs[name] == 0 {
			delete(addrs, name)
		}
	}
	f.Close()
	if len(addrs) < 2 {
		return errNoHTTPClient
	}
	x, err := link.OpenExecutable(exe)
	if err != nil {
		return err
	}
	for name, prog := range map[string]*ebpf.Program{goRoundTrip: d.objs.RdGoRoundtrip, goReqWrite: d.objs.RdGoReqwrite} {
		// Address (a file offset) overrides the symbol lookup (stripped
		// binaries): the probe is on the function's frame push (see
		// probeOffset), where the arguments are still in their registers.
		l, err := x.Uprobe(name, prog, &link.UprobeOptions{Address: addrs[name]})
		if err != nil {
			return fmt.Errorf("uprobe %s: %w", name, err)
		}
		d.links = append(d.links, l)
	}
	return nil
}

// probeOffset returns where, from a Go function's entry at off in seg (a
// PT_LOAD segment), its Go probe goes: on the PUSHQ BP that follows the
// stack check of the prologue (LEAQ -n(SP), R12; CMPQ R12/SP, 16(R14);
// JBE morestack), when nothing before it writes the argument registers
// the probes read (AX, BX) or the goroutine (R14) — else on the entry (0).
// A uprobe on an instruction the kernel cannot emulate (the LEAQ or CMPQ)
// runs it out of line and takes a second trap to step it; PUSH is emulated,
// so the probe costs one trap instead of two.
func probeOffset(seg io.ReaderAt, off uint64) uint64 {
	code := make([]byte, 32)
	n, _ := seg.ReadAt(code, int64(off))
	code = code[:n]
	for pos := 0; pos < len(code); {
		in, err := x86asm.Decode(code[pos:], 64)
		if err != nil {
			return 0
		}
		switch in.Op {
		case x86asm.PUSH:
			if in.Args[0] == x86asm.RBP {
				return uint64(pos)
			}
			return 0
		case x86asm.CMP, x86asm.JBE:
		case x86asm.LEA:
			if r, ok := in.Args[0].(x86asm.Reg); !ok || r == x86asm.RAX || r == x86asm.RBX || r == x86asm.R14 ||
				r == x86asm.EAX || r == x86asm.EBX || r == x86asm.R14L {
				return 0
			}
		default:
			return 0
		}
		pos += in.Len
	}
	return 0
}

// IsGo reports whether the executable is a Go program.
func IsGo(exe string) bool {
	f, err := elf.Open(exe)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil
}

// Stats reads the programs' counters.
func (d *Datapath) Stats() Stats {
	var st Stats
	get := func(i uint32) uint64 {
		var per []uint64
		if err := d.objs.RdStats.Lookup(d.slot*statsPerSlot+i, &per); err != nil {
			return 0
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n
	}
	st.Lost, st.NoConn, st.Injected, st.Skipped, st.Opaque, st.NoReq = get(0), get(1), get(2), get(3), get(4), get(5)
	st.GoRoundTrips, st.GoHandoffs, st.H2 = get(6), get(7), get(8)
	return st
}

// Drain returns once Read has passed on every event submitted before the
// call, or after timeout (Read not running, or slow).
func (d *Datapath) Drain(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = d.rd.Drain(ctx)
}

// Read calls fn with every event, in order, until Close. The events ring
// buffer is read at least every poll, and as soon as a quarter of it is
// pending (the programs wake the reader then), and on Drain. idle, if not
// nil, is called each time the events pending at a poll or a Drain have
// been passed on (to send what they made in the same wake-up).
func (d *Datapath) Read(poll time.Duration, fn func(*Event), idle func()) error {
	var rec ringbuf.Record
	var ev Event
	tids := make([]int, 0, 8)
	var fixed runDatapathRdEvent
	d.rd.SetDeadline(time.Now().Add(poll))
	for {
		err := d.rd.ReadInto(&rec)
		switch {
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		case errors.Is(err, ringbuf.ErrFlushed):
			if idle != nil {
				idle()
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			if idle != nil {
				idle()
			}
			d.rd.SetDeadline(time.Now().Add(poll))
			continue
		case err != nil:
			return fmt.Errorf("datapath: %w", err)
		}
		if decode(rec.RawSample, &ev, tids[:0], &fixed) {
			fn(&ev)
		}
	}
}

const headOff = int(unsafe.Offsetof(runDatapathRdEvent{}.Head))

// decode fills ev from a raw struct rd_event (bpf/run_datapath.h). The
// record may be shorter than the struct (the head is sent only as long as
// it is), so its fixed part is copied into fixed, the caller's scratch,
// rather than the buffer cast; fixed.Head is not used.
func decode(b []byte, ev *Event, tids []int, fixed *runDatapathRdEvent) bool {
	if len(b) < headOff {
		return false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(fixed)), headOff), b)
	r := fixed
	*ev = Event{
		Type: r.Type, Flags: r.Flags, Tgid: int(r.Tgid), Tid: int(r.Tid), Mono: int64(r.Ts), Conn: r.Sk,
		TraceID: r.Trace, SpanID: r.Span, ParentID: r.Parent, StartMono: int64(r.Start),
		Local: time.Duration(r.LocalNs), SockWait: time.Duration(r.SockNs), Net: time.Duration(r.NetNs), Remote: time.Duration(r.RemoteNs),
		ServerTime: time.Duration(r.ServerNs), Status: int(r.Status), LocalPort: int(r.Lport),
	}
	for i := 0; i < int(min(r.Ntids, 8)); i++ {
		tids = append(tids, int(r.Tids[i]))
	}
	if ev.Type == EvCallEnd && r.Ntids == 0 && r.Tids[0] != 0 {
		tids = append(tids, int(r.Tids[0]))
	}
	ev.Tids = tids
	if r.Rport != 0 {
		var a netip.Addr
		if r.Flags&256 != 0 {
			var ip [16]byte
			for i := range 4 {
				binary.LittleEndian.PutUint32(ip[4*i:], r.Raddr[i])
			}
			a = netip.AddrFrom16(ip)
		} else {
			var ip [4]byte
			binary.LittleEndian.PutUint32(ip[:], r.Raddr[0])
			a = netip.AddrFrom4(ip)
		}
		ev.Peer = netip.AddrPortFrom(a.Unmap(), r.Rport)
	}
	n := int(min(r.HeadLen, uint32(len(r.Head))))
	if n > len(b)-headOff {
		n = len(b) - headOff
	}
	ev.Head = b[headOff : headOff+n]
	if ev.Type == EvExec {
		if i := strings.IndexByte(string(ev.Head), 0); i >= 0 {
			ev.Head = ev.Head[:i]
		}
	}
	return true
}

// GoFunctions finds the entry addresses of names in a Go executable, from
// the symbol table or, in a stripped binary, from .gopclntab.
func GoFunctions(f *elf.File, names []string) map[string]uint64 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]uint64{}
	if syms, err := f.Symbols(); err == nil {
		for _, s := range syms {
			if want[s.Name] && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				out[s.Name] = s.Value
			}
		}
	}
	if len(out) == len(want) {
		return out
	}
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return out
	}
	data, err := pcln.Data()
	if err != nil {
		return out
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return out
	}
	for name := range want {
		if fn := tab.LookupFunc(name); fn != nil {
			out[name] = fn.Entry
		}
	}
	return out
}

// CgroupID is the id of a cgroup v2 directory (its inode number), the value
// bpf_get_current_cgroup_id returns for its processes.
func CgroupID(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("%s is not on a cgroup v2 file system", dir)
	}
	return st.Ino, nil
}

// V2Mount is the cgroup v2 hierarchy's mount point: /sys/fs/cgroup on a
// unified system, /sys/fs/cgroup/unified on a hybrid one ("" if none).
func V2Mount() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var fs unix.Statfs_t
		if unix.Statfs(p, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	return ""
}

// NewCgroup makes a cgroup v2 for a run, named name, below the cgroup v2
// the calling process is in, and returns its directory. remove deletes it
// (once its processes have exited).
func NewCgroup(name string) (dir string, remove func() error, err error) {
	mnt, unmount := V2Mount(), func() {}
	if mnt == "" {
		// `ip netns exec` (how the demo mesh starts its pods) mounts a
		// fresh /sys without the cgroup file systems in a mount namespace
		// of its own: mount the v2 hierarchy for this run.
		if mnt, err = os.MkdirTemp("", "rootline-cgroup2-"); err != nil {
			return "", nil, fmt.Errorf("%w: no cgroup v2 hierarchy mounted: %w", ErrUnavailable, err)
		}
		if err := unix.Mount("cgroup2", mnt, "cgroup2", 0, ""); err != nil {
			os.Remove(mnt)
			return "", nil, fmt.Errorf("%w: no cgroup v2 hierarchy mounted, and mounting one failed: %w", ErrUnavailable, err)
		}
		unmount = func() {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
			_ = os.Remove(mnt)
		}
	}
	parent := mnt
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				parent = filepath.Join(mnt, rest)
			}
		}
	}
	removeStale(parent)
	dir = filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		unmount()
		return "", nil, fmt.Errorf("%w: make cgroup %s: %w", ErrUnavailable, dir, err)
	}
	remove = func() error {
		defer unmount()
		var err error
		// The last processes may take a moment to leave after exiting;
		// processes still running (the command's background children) will
		// not: the cgroup stays, and a later run removes it once empty.
		for i := 0; i < 50; i++ {
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
				return nil
			}
			if n := running(dir); n > 0 && i >= 2 {
				return fmt.Errorf("remove cgroup %s: processes still running in it: %d: %w", dir, n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return dir, remove, nil
}

// running counts the processes of the cgroup in dir that have not exited.
func running(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	n := 0
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && procfs.Running(pid) {
			n++
		}
	}
	return n
}

// removeStale removes the empty cgroups of runs that were killed before
// they could remove their own (rmdir fails on a cgroup that has processes).
func removeStale(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		pid, ok := strings.CutPrefix(e.Name(), "rootline-run-")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && unix.Kill(n, 0) == nil {
			continue // its run is alive
		}
		_ = unix.Rmdir(filepath.Join(parent, e.Name()))
	}
}

// CgroupName names a run's cgroup after the supervising process.
func CgroupName() string { return "rootline-run-" + strconv.Itoa(os.Getpid()) }

// loadOptions: ROOTLINE_BPF_LOG=1 asks the verifier for its full log.
func loadOptions() *ebpf.CollectionOptions {
	if os.Getenv("ROOTLINE_BPF_LOG") == "" {
		return &ebpf.CollectionOptions{}
	}
	return &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}
}

// timingForm is rd_timing's value (RD_TIMING_* in bpf/run_datapath.h).
func timingForm(long bool) uint32 {
	if long {
		return 1
	}
	return 0
}
