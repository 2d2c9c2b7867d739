//go:build linux && amd64

package run

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/kclock"
	"github.com/rootline/rootline/internal/procfs"
	"github.com/rootline/rootline/internal/run/h2stream"
	"github.com/rootline/rootline/internal/run/httpstream"
	"github.com/rootline/rootline/internal/run/readtap"
	"github.com/rootline/rootline/internal/run/supervisor"
)

// Config configures a Tracer.
type Config struct {
	// Service is service.name of every span.
	Service string
	// Instance is service.instance.id; empty means host:pid.
	Instance string
	// Host is host.name; empty means os.Hostname.
	Host string
	// Sink receives the spans; nil drops them (propagation still works).
	Sink Sink
	// Logger receives rare log lines; nil discards them.
	Logger *slog.Logger
	// ProcRoot is /proc unless a test says otherwise.
	ProcRoot string
	// Now is time.Now unless a test says otherwise.
	Now func() time.Time
	// Reads, if set, observes read(2) and recvfrom(2) on sockets without
	// ptrace stops (readtap.Tap); the supervisor must then run with those
	// calls left out of its filter (see ReadSyscalls).
	Reads ReadSource
	// Stats receives the counters (nil: the tracer's own), so that a
	// metrics listener started before the tracer can read them.
	Stats *Stats
	// Omit are the propagation formats not written on outbound requests
	// (0: every format is written).
	Omit httpstream.Formats
	// Timing is the form of the timing fields written on responses
	// (httpstream.HeaderCompact); both forms are read whatever it says.
	Timing httpstream.TimingForm
	// InFlight, when set, is told of each request and call as it starts,
	// to report those still open long after their operation usually ends;
	// it must also be on the way of Sink's spans (InFlight.Emit).
	InFlight *InFlight
}

// propagated returns the formats the tracer writes.
func (c *Config) propagated() httpstream.Formats { return httpstream.AllFormats &^ c.Omit }

// ReadSource delivers the reads of watched sockets (readtap.Tap).
type ReadSource interface {
	Watch(tgid, fd int) error
	Unwatch(tgid, fd int)
	UnwatchProcess(tgid int)
	Drain(fn func(*readtap.Read)) error
}

// ReadSyscalls are the calls a ReadSource observes, to leave out of the
// supervisor's filter (supervisor.Config.Untraced).
var ReadSyscalls = []int{unix.SYS_READ, unix.SYS_RECVFROM}

// scratchSize is the per-thread mapping that holds iovec arrays and inserted
// lines: a held header block is at most httpstream.MaxHeaderBytes.
const scratchSize = 4 * httpstream.MaxHeaderBytes

var errNoScratch = errors.New("run: no scratch memory in the traced thread")

// maxIOV is the kernel's UIO_MAXIOV.
const maxIOV = 1024

// Tracer implements supervisor.Hooks for request tracing. Its methods run on
// the supervisor's tracing thread only.
type Tracer struct {
	cfg     Config
	log     *slog.Logger
	res     resource
	procs   map[int]*proc
	writes  map[int]*pendingWrite // by tid, between a rewritten write's entry and exit
	errOnce sync.Once
	// schedstat holds an open /proc/<pid>/task/<tid>/schedstat per thread.
	schedstat map[int]int
	// tasks are the traced threads by tid, for reads from cfg.Reads.
	tasks     map[int]*supervisor.Task
	tapWarned bool

	// Stats are the counters: the config's, or its own.
	Stats *Stats
}

type proc struct {
	pid     int
	goKnown bool
	isGo    bool
	conns   map[int]*conn
	scratch map[int]uint64 // tid → scratch address
	free    []uint64

	// Go only: requests bound to goroutines, and per thread the request
	// whose goroutine last made a traced call there.
	gctx    map[uint64]*request
	lastCtx map[int]*request
	open    []*request
	// Go net/http client hand-off (gohttp_linux.go): breakpoints by
	// address, requests by the outbound *http.Request, and writeLoop
	// goroutines about to write a request for the given inbound one.
	bps      map[uint64]*breakpoint
	handoff  map[uint64]*request
	delegate map[uint64]*request
	// HTTP/2 requests being served, oldest first (h2_linux.go).
	h2open []*request
	// grpc-go hand-off (grpcgo_linux.go): its types' layout (nil: no
	// breakpoints), requests by the field list of a call's HEADERS queued
	// for the loopy writer, and by the stream the loopy goroutine writes.
	grpc       *grpcLayout
	grpcHF     map[uint64]*request
	grpcStream map[gStream]*request
}

type conn struct {
	fd      int
	inbound bool
	in      *httpstream.Parser   // what the service reads
	out     *httpstream.Rewriter // what the service writes
	opaque  bool
	peer    string
	reqs    []*request // inbound: read, response not finished
	info    int        // inbound: 1xx responses written whose end is pending
	calls   []*call    // outbound: written, response not finished
	infoRsp bool       // outbound: the response being read is 1xx
	ends    int        // message ends of a write restarted after the scratch mmap
	h2      *h2conn    // HTTP/2: followed by h2_linux.go instead
	// up is the framing of what the service writes until the connection
	// is HTTP/2 (Upgrade: h2c); upSettings the HTTP2-Settings of an
	// upgrade request, upH2 that the response being read is a 101 to h2c.
	up         *h2stream.Upgradable
	upSettings h2stream.Settings
	upH2       bool
	// rdSeen, wrSeen: bytes were read, written (the HTTP/2 preface comes
	// first or not at all).
	rdSeen, wrSeen bool
}

type writeMode uint8

const (
	writeUnchanged writeMode = iota
	writeRewritten
	writeSkipped
)

type pendingWrite struct {
	c     *conn
	saved unix.PtraceRegs
	mode  writeMode
	ends  int
	at    time.Time // the entry stop: before any byte of the write left
}

// New returns a Tracer.
func New(cfg Config) *Tracer {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.Stats == nil {
		cfg.Stats = new(Stats)
	}
	return &Tracer{
		cfg: cfg, log: cfg.Logger.With("component", "tracer"), Stats: cfg.Stats,
		res:       resource{service: cfg.Service, instance: cfg.Instance, host: cfg.Host},
		procs:     map[int]*proc{},
		writes:    map[int]*pendingWrite{},
		schedstat: map[int]int{},
		tasks:     map[int]*supervisor.Task{},
	}
}

// Hooks returns the supervisor hooks of the tracer.
func (tr *Tracer) Hooks() supervisor.Hooks {
	return supervisor.Hooks{
		OnSyscallEnter: tr.enter,
		OnSyscallExit:  tr.exit,
		OnTaskStart:    tr.taskStart,
		OnTaskExit:     tr.taskExit,
		OnExec:         tr.exec,
		OnBreakpoint:   tr.breakpoint,
	}
}

func (tr *Tracer) proc(pid int) *proc {
	p := tr.procs[pid]
	if p == nil {
		p = &proc{pid: pid, conns: map[int]*conn{}, scratch: map[int]uint64{},
			gctx: map[uint64]*request{}, lastCtx: map[int]*request{},
			handoff: map[uint64]*request{}, delegate: map[uint64]*request{},
			grpcHF: map[uint64]*request{}, grpcStream: map[gStream]*request{}}
		tr.procs[pid] = p
	}
	if !p.goKnown {
		p.goKnown = true
		p.isGo = isGoBinary(fmt.Sprintf("%s/%d/exe", tr.cfg.ProcRoot, pid))
	}
	return p
}

// isGoBinary reports whether the executable was built by the Go toolchain.
func isGoBinary(exe string) bool {
	f, err := elf.Open(exe)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".go.buildinfo") != nil || f.Section(".gopclntab") != nil
}

func (tr *Tracer) conn(t *supervisor.Task, p *proc, fd int) *conn {
	if c := p.conns[fd]; c != nil {
		return c
	}
	var c *conn
	switch t.FD(fd) {
	case supervisor.FDInbound:
		c = &conn{fd: fd, inbound: true, in: httpstream.NewParser(httpstream.Requests),
			up: h2stream.NewUpgradable(httpstream.Responses)}
		// The service answered an upgrade to h2c: what it writes next is
		// HTTP/2, and so is what it reads.
		c.up.OnSwitch = func(wr *h2stream.Parser) { tr.upgradeInbound(p, c, wr) }
	case supervisor.FDOutbound:
		c = &conn{fd: fd, in: httpstream.NewParser(httpstream.Responses),
			up: h2stream.NewUpgradable(httpstream.Requests)}
	default:
		return nil
	}
	c.out = httpstream.NewRewriterFor(c.up)
	c.peer = peerOf(tr.cfg.ProcRoot, p.pid, fd)
	p.conns[fd] = c
	return c
}

// peerOf names a socket's peer from /proc (best effort; "" if unknown).
func peerOf(procRoot string, pid, fd int) string {
	l, err := os.Readlink(fmt.Sprintf("%s/%d/fd/%d", procRoot, pid, fd))
	if err != nil || !strings.HasPrefix(l, "socket:[") {
		return ""
	}
	return "" // resolving inodes via /proc/net/tcp costs more than it is worth per connection
}

func (tr *Tracer) enter(t *supervisor.Task, sc *supervisor.Syscall) bool {
	tr.drain()
	switch nr := sc.Nr; {
	case supervisor.IsRead(nr):
		p := tr.proc(t.Tgid)
		c := tr.conn(t, p, sc.FD())
		return c != nil && !c.opaque
	case supervisor.IsWrite(nr):
		p := tr.proc(t.Tgid)
		c := tr.conn(t, p, sc.FD())
		if c == nil || c.opaque {
			return false
		}
		return tr.writeEnter(t, p, c, sc)
	case nr == unix.SYS_CONNECT:
		tr.watch(t.Tgid, sc.FD())
	case nr == unix.SYS_ACCEPT || nr == unix.SYS_ACCEPT4:
		return tr.cfg.Reads != nil // to watch the new socket
	case nr == unix.SYS_CLOSE:
		if tr.cfg.Reads != nil {
			tr.cfg.Reads.Unwatch(t.Tgid, sc.FD())
		}
		if p := tr.procs[t.Tgid]; p != nil {
			if c := p.conns[sc.FD()]; c != nil {
				delete(p.conns, sc.FD())
				tr.closeConn(p, c)
			}
		}
	}
	return false
}

func (tr *Tracer) exit(t *supervisor.Task, sc *supervisor.Syscall) {
	tr.drain()
	if (sc.Nr == unix.SYS_ACCEPT || sc.Nr == unix.SYS_ACCEPT4) && sc.Ret >= 0 {
		tr.watch(t.Tgid, int(sc.Ret))
		return
	}
	if pw := tr.writes[t.Tid]; pw != nil && supervisor.IsWrite(sc.Nr) {
		delete(tr.writes, t.Tid)
		tr.writeExit(t, pw, sc)
		return
	}
	if supervisor.IsRead(sc.Nr) && sc.Ret > 0 {
		p := tr.procs[t.Tgid]
		if p == nil {
			return
		}
		if c := p.conns[sc.FD()]; c != nil && !c.opaque {
			tr.readExit(t, p, c, sc)
		}
	}
}

func (tr *Tracer) taskExit(t *supervisor.Task, _ unix.WaitStatus) {
	tr.drain()
	delete(tr.writes, t.Tid)
	if tr.tasks[t.Tid] == t {
		delete(tr.tasks, t.Tid)
	}
	if fd, ok := tr.schedstat[t.Tid]; ok {
		unix.Close(fd)
		delete(tr.schedstat, t.Tid)
	}
	p := tr.procs[t.Tgid]
	if p == nil {
		return
	}
	if a, ok := p.scratch[t.Tid]; ok {
		delete(p.scratch, t.Tid)
		p.free = append(p.free, a)
	}
	delete(p.lastCtx, t.Tid)
	if t.Tid == t.Tgid { // the process is gone: finish what it left open
		for fd, c := range p.conns {
			delete(p.conns, fd)
			tr.closeConn(p, c)
		}
		delete(tr.procs, t.Tgid)
		if tr.cfg.Reads != nil {
			tr.cfg.Reads.UnwatchProcess(t.Tgid)
		}
	}
}

func (tr *Tracer) exec(t *supervisor.Task) {
	tr.drain()
	for tid, o := range tr.tasks { // the other threads are gone; t may have taken the leader's tid
		if o.Tgid == t.Tgid {
			delete(tr.tasks, tid)
		}
	}
	tr.tasks[t.Tid] = t
	if tr.cfg.Reads != nil {
		// Sockets survive exec (unless close-on-exec, which is not known
		// here): watch them afresh for the new program's parsers.
		tr.cfg.Reads.UnwatchProcess(t.Tgid)
		tr.watchAll(t)
	}
	if p := tr.procs[t.Tgid]; p != nil {
		for _, c := range p.conns {
			tr.closeConn(p, c)
		}
	}
	delete(tr.procs, t.Tgid) // a new program: new memory, new binary kind
	if p := tr.proc(t.Tgid); p.isGo {
		if err := tr.placeGoBreakpoints(t, p); err != nil {
			tr.log.Info("Go client hand-off (net/http, grpc-go) not traced exactly; falling back to the heuristic", "pid", t.Tgid, "err", err)
		}
	}
}

// closeConn finishes what a closing connection left open.
func (tr *Tracer) closeConn(p *proc, c *conn) {
	now := tr.cfg.Now()
	if c.h2 != nil {
		tr.h2Close(p, c, now)
	}
	for _, r := range c.reqs {
		tr.finishRequest(p, r, now)
	}
	c.reqs = nil
	for _, cl := range c.calls {
		tr.finishCall(p, cl, now)
	}
	c.calls = nil
}

// current returns the request the calling thread or goroutine is servicing.
func (tr *Tracer) current(t *supervisor.Task, p *proc, sc *supervisor.Syscall) *request {
	if p.isGo {
		g := sc.Regs.R14
		if r := p.gctx[g]; r != nil && !r.done {
			p.lastCtx[t.Tid] = r
			return r
		}
		return nil
	}
	if r, _ := t.Context.(*request); r != nil && !r.done {
		return r
	}
	return nil
}

// handedOver guesses, for a Go goroutine without a binding that writes a
// request, the request that handed the work over (see the package doc).
func (tr *Tracer) handedOver(t *supervisor.Task, p *proc) *request {
	if r := p.lastCtx[t.Tid]; r != nil && !r.done && r.inCall == 0 {
		return r
	}
	var best *request
	for _, r := range p.open {
		if !r.done && r.inCall == 0 && (best == nil || r.start.After(best.start)) {
			best = r
		}
	}
	return best
}

// bind binds r to the thread t or, in a Go program, to the goroutine g.
func (tr *Tracer) bind(t *supervisor.Task, p *proc, g uint64, r *request) {
	if p.isGo {
		p.gctx[g] = r
		p.lastCtx[t.Tid] = r
		p.open = append(p.open, r)
		return
	}
	t.Context = r
}

func (tr *Tracer) unbind(p *proc, r *request) {
	if !p.isGo {
		return // threads drop a done request lazily (current checks done)
	}
	dropRequest(p.gctx, r)
	dropRequest(p.lastCtx, r)
	dropRequest(p.handoff, r)
	dropRequest(p.delegate, r)
	dropRequest(p.grpcHF, r)
	dropRequest(p.grpcStream, r)
	for i, b := range p.open {
		if b == r {
			p.open = append(p.open[:i], p.open[i+1:]...)
			break
		}
	}
}

// dropRequest deletes every entry of m that points at r.
func dropRequest[K comparable](m map[K]*request, r *request) {
	for k, b := range m {
		if b == r {
			delete(m, k)
		}
	}
}

// touch records that thread tid worked on r now, for its run-queue wait
// and its thread intervals.
func (tr *Tracer) touch(r *request, pid, tid int) {
	now := tr.cfg.Now()
	for i := range r.threads {
		if r.threads[i].tid == tid {
			r.threads[i].last = now
			return
		}
	}
	d, ok := tr.runDelay(pid, tid)
	r.threads = append(r.threads, threadDelay{tid: tid, delay: d, ok: ok, first: now, last: now})
}

// localWait sums the run-queue delay r's threads accumulated since they
// first worked on it (the Mirage wait model's local_wait).
func (tr *Tracer) localWait(r *request) time.Duration {
	var sum time.Duration
	for _, t := range r.threads {
		if !t.ok {
			continue
		}
		if d, ok := tr.runDelay(r.pid, t.tid); ok && d > t.delay {
			sum += d - t.delay
		}
	}
	return sum
}

// runDelay reads a thread's total run-queue wait: the second field of
// /proc/<pid>/task/<tid>/schedstat, in nanoseconds. The file stays open per
// thread (pread at offset 0 re-reads it) until the thread exits.
func (tr *Tracer) runDelay(pid, tid int) (time.Duration, bool) {
	fd, ok := tr.schedstat[tid]
	if !ok {
		var err error
		fd, err = unix.Open(tr.cfg.ProcRoot+"/"+strconv.Itoa(pid)+"/task/"+strconv.Itoa(tid)+"/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, false
		}
		tr.schedstat[tid] = fd
	}
	var buf [96]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n <= 0 {
		return 0, false
	}
	return parseRunDelay(buf[:n])
}

// parseRunDelay returns the run delay (second field) of a schedstat line.
func parseRunDelay(b []byte) (time.Duration, bool) {
	st, err := procfs.ParseSchedstat(b)
	return st.Wait, err == nil
}

// ---- reads ----

func (tr *Tracer) readExit(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall) {
	if peek(sc) {
		return // MSG_PEEK: the bytes will be read again
	}
	data, err := tr.readBuffers(t, sc, int(sc.Ret))
	if err != nil {
		tr.fail(err)
		return
	}
	tr.feed(t, p, c, data, readAt{g: sc.Regs.R14, now: tr.cfg.Now(), delay: -1})
}

// readAt is what is known of a read besides its bytes.
type readAt struct {
	g     uint64        // the goroutine (Go programs)
	now   time.Time     // when it returned
	delay time.Duration // the thread's run-queue wait so far; < 0: read it now
}

// feed parses what thread t read from c.
func (tr *Tracer) feed(t *supervisor.Task, p *proc, c *conn, data []byte, at readAt) {
	if !c.rdSeen && (c.inbound && isH2Start(data) || !c.inbound && !c.wrSeen && c.h2 == nil && isH2ServerStart(data)) {
		tr.startH2(c)
	}
	c.rdSeen = true
	if c.h2 != nil {
		tr.h2Read(t, p, c, data, at)
		return
	}
	now := at.now
	for _, ev := range c.in.Feed(data) {
		if ev.Kind == httpstream.EventOpaque && ev.Reason == httpstream.ReasonUpgrade && c.upH2 && tr.upgradeOutbound(p, c) {
			// The rest is the server's HTTP/2, from its SETTINGS on.
			tr.h2Read(t, p, c, data[ev.Offset:], at)
			return
		}
		switch ev.Kind {
		case httpstream.EventHeaders:
			if c.inbound {
				tr.requestRead(t, p, c, at, ev.Msg)
			} else {
				tr.responseHeaders(c, ev.Msg)
			}
		case httpstream.EventEnd:
			if !c.inbound {
				tr.responseEnd(p, c, now)
			}
		case httpstream.EventOpaque:
			c.opaque = true
			c.out.SetOpaque(ev.Reason)
			tr.Stats.Opaque.Add(1)
		}
	}
}

func peek(sc *supervisor.Syscall) bool {
	switch sc.Nr {
	case unix.SYS_RECVFROM:
		return sc.Args[3]&unix.MSG_PEEK != 0
	case unix.SYS_RECVMSG:
		return sc.Args[2]&unix.MSG_PEEK != 0
	}
	return false
}

// newRequest returns the request of an inbound head: the caller's context,
// or a new trace.
func (tr *Tracer) newRequest(p *proc, c *conn, hs httpstream.Headers) *request {
	ctx, ok := httpstream.ExtractContext(hs)
	if !ok {
		rid := ctx.RequestID
		ctx = httpstream.NewRootContext(nil)
		ctx.SpanID = httpstream.SpanID{} // a root SERVER span has no parent
		ctx.Sampled = !httpstream.SamplingDenied(hs)
		if rid != "" {
			ctx.RequestID = rid
		}
	}
	return &request{ctx: ctx, span: httpstream.NewSpanID(nil), peer: c.peer, pid: p.pid, goProc: p.isGo}
}

func (tr *Tracer) requestRead(t *supervisor.Task, p *proc, c *conn, at readAt, m *httpstream.Message) {
	r := tr.newRequest(p, c, m.Headers)
	r.start, r.method, r.target, r.host = at.now, m.Method, string(m.Target), string(m.Headers.Get("host"))
	c.upSettings = upgradeSettings(m)
	c.reqs = append(c.reqs, r)
	c.out.ExpectResponse(m.Method)
	if at.delay >= 0 {
		r.threads = append(r.threads, threadDelay{tid: t.Tid, delay: at.delay, ok: true, first: at.now, last: at.now})
	} else {
		tr.touch(r, p.pid, t.Tid)
	}
	tr.bind(t, p, at.g, r)
	if f := tr.cfg.InFlight; f != nil {
		f.StartServer(r)
	}
}

func (tr *Tracer) responseHeaders(c *conn, m *httpstream.Message) {
	c.upH2 = m.Status == 101 && h2stream.IsH2cUpgrade(m.Headers.Get("upgrade"))
	c.infoRsp = m.Status < 200
	if c.infoRsp || len(c.calls) == 0 {
		return
	}
	cl := c.calls[0]
	cl.status = m.Status
	tm, err := httpstream.ParseTiming(m.Headers)
	if err != nil {
		tr.Stats.TimingInvalid.Add(1)
		return
	}
	cl.timing, cl.timed = tm, true
}

func (tr *Tracer) responseEnd(p *proc, c *conn, now time.Time) {
	if c.infoRsp {
		c.infoRsp = false
		return
	}
	if len(c.calls) == 0 {
		return
	}
	cl := c.calls[0]
	c.calls = c.calls[1:]
	tr.finishCall(p, cl, now)
}

func (tr *Tracer) finishCall(p *proc, cl *call, now time.Time) {
	if r := cl.parent; r != nil {
		r.inCall--
		if net, remote, ok := cl.waits(now); ok {
			r.maxNet = max(r.maxNet, net)
			r.maxRemote = max(r.maxRemote, remote)
		}
	}
	if cl.own {
		return
	}
	tr.Stats.Calls.Add(1)
	if tr.cfg.Sink != nil {
		tr.cfg.Sink.Emit(tr.res.clientSpan(cl, p.pid, now))
	}
}

func (tr *Tracer) finishRequest(p *proc, r *request, now time.Time) {
	if r.done {
		return
	}
	r.done = true
	r.end = now
	if r.local == 0 {
		r.local = tr.localWait(r)
	}
	tr.unbind(p, r)
	tr.Stats.Requests.Add(1)
	if tr.cfg.Sink != nil {
		tr.cfg.Sink.Emit(tr.res.serverSpan(r))
	}
}

// ---- writes ----

func (tr *Tracer) writeEnter(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall) bool {
	iov, err := tr.writeIOV(t, sc)
	if err != nil {
		tr.giveUp(c, err)
		return false
	}
	bufs := make([][]byte, len(iov))
	for i, v := range iov {
		bufs[i] = make([]byte, v.len)
		if _, err := t.ReadMem(uintptr(v.base), bufs[i]); err != nil {
			tr.giveUp(c, err)
			return false
		}
	}
	now := tr.cfg.Now()
	if !c.wrSeen && c.h2 == nil {
		if first := firstBytes(bufs, len(h2stream.Preface)); !c.inbound && isH2Start(first) || c.inbound && !c.rdSeen && isH2ServerStart(first) {
			tr.startH2(c)
		}
	}
	c.wrSeen = true
	// By message, not by connection: a write can hold a 101 to h2c and
	// the first HTTP/2 frames after it.
	inject := func(dst []byte, m *httpstream.Message) []byte {
		switch _, h2 := m.Ext.(*h2stream.Block); {
		case h2:
			return tr.h2Inject(t, p, c, sc, dst, m, now)
		case c.inbound:
			return tr.injectResponse(t, p, c, dst, m, now)
		default:
			return tr.injectRequest(t, p, c, sc, dst, m, now)
		}
	}
	out := c.out.WriteV(bufs, inject)
	if c.h2 != nil {
		tr.h2Wrote(t, p, c, sc, now)
	}
	// A write restarted after the scratch mmap is not parsed again: its
	// message ends were counted by the first pass.
	out.Ends, c.ends = out.Ends+c.ends, 0
	pw := &pendingWrite{c: c, saved: *sc.Regs, ends: out.Ends, at: now}
	switch {
	case out.Unchanged:
		pw.mode = writeUnchanged
	case out.Len == 0:
		pw.mode = writeSkipped
		r := *sc.Regs
		if err := t.SkipSyscall(&r); err != nil {
			tr.giveUp(c, err)
			return false
		}
	default:
		pw.mode = writeRewritten
		restart, err := tr.rewrite(t, p, sc, iov, out)
		if restart {
			// The call was turned into an mmap of the thread's scratch
			// area and runs again: the Rewriter sees the same bytes again
			// and returns the same output from its queue.
			c.ends = out.Ends
			return false
		}
		if err != nil {
			tr.giveUp(c, err)
			return false
		}
		tr.Stats.Rewrites.Add(1)
	}
	tr.writes[t.Tid] = pw
	return true
}

func (tr *Tracer) writeExit(t *supervisor.Task, pw *pendingWrite, sc *supervisor.Syscall) {
	c := pw.c
	n := sc.Ret
	var m int
	if n < 0 {
		m = c.out.Sent(0)
	} else {
		m = c.out.Sent(int(n))
	}
	if pw.ends > 0 && c.inbound {
		// The span ends when the response's last bytes were handed to the
		// kernel: the entry stop, which precedes the caller's receipt even
		// when this exit stop is handled late on a busy machine.
		tr.responsesEnded(t, c, pw.ends, pw.at)
	}
	regs := pw.saved // the application's argument registers, as it passed them
	switch {
	case pw.mode == writeUnchanged && (n < 0 || int64(m) == n):
		return
	case n < 0 && m == 0:
		regs.Rax = uint64(n)
	case m == 0:
		// Only added bytes reached the wire: run the application's call
		// again; the Rewriter sends the rest of its output first.
		regs.Rip -= 2
		regs.Rax = pw.saved.Orig_rax
		tr.Stats.Restarts.Add(1)
	default:
		regs.Rax = uint64(m)
	}
	if err := t.SetRegs(&regs); err != nil {
		tr.fail(err)
	}
}

func (tr *Tracer) responsesEnded(t *supervisor.Task, c *conn, n int, now time.Time) {
	p := tr.procs[t.Tgid]
	for ; n > 0; n-- {
		if c.info > 0 {
			c.info--
			continue
		}
		if len(c.reqs) == 0 {
			return
		}
		r := c.reqs[0]
		c.reqs = c.reqs[1:]
		if p != nil {
			tr.finishRequest(p, r, now)
		}
	}
}

func (tr *Tracer) injectResponse(t *supervisor.Task, p *proc, c *conn, dst []byte, m *httpstream.Message, now time.Time) []byte {
	if m.Status < 200 {
		c.info++
		return nil
	}
	var r *request
	for _, q := range c.reqs {
		if !q.final {
			r = q
			break
		}
	}
	if r == nil {
		return nil
	}
	r.final = true
	r.status = m.Status
	tr.touch(r, p.pid, t.Tid)
	r.local = tr.localWait(r)
	if httpstream.HasTiming(m.Headers) {
		// The application's own (or a downstream's it passes on): a second
		// set would conflict with it at the caller.
		return nil
	}
	return httpstream.AppendTiming(dst, httpstream.Timing{
		ServerTime: now.Sub(r.start), HasServerTime: true, Waits: r.waits(),
	}, tr.cfg.Timing)
}

func (tr *Tracer) injectRequest(t *supervisor.Task, p *proc, c *conn, sc *supervisor.Syscall, dst []byte, m *httpstream.Message, now time.Time) []byte {
	c.in.ExpectResponse(m.Method)
	c.upSettings = upgradeSettings(m)
	cl := &call{start: now, method: m.Method, target: string(m.Target),
		host: string(m.Headers.Get("host")), tid: t.Tid, span: httpstream.NewSpanID(nil)}
	c.calls = append(c.calls, cl)
	if _, own := httpstream.ExtractContext(m.Headers); own {
		cl.own = true
		tr.Stats.OwnContext.Add(1)
	}
	var r *request
	if p.isGo {
		if d := p.delegate[sc.Regs.R14]; d != nil {
			delete(p.delegate, sc.Regs.R14)
			if !d.done {
				r = d
			}
		}
	}
	if r == nil {
		r = tr.current(t, p, sc)
	}
	if r == nil && p.isGo {
		r = tr.handedOver(t, p)
	}
	var ctx httpstream.Context
	if r != nil {
		r.inCall++
		cl.parent = r
		tr.touch(r, p.pid, t.Tid)
		ctx = r.context()
	} else {
		tr.Stats.Unbound.Add(1)
		ctx = httpstream.NewRootContext(nil)
		ctx.SpanID = httpstream.SpanID{}
	}
	cl.traceID, cl.parentS = ctx.TraceID, ctx.SpanID
	if f := tr.cfg.InFlight; f != nil && !cl.own {
		f.StartCall(cl, p.pid)
	}
	return httpstream.AppendInjectFormats(dst, ctx, cl.span, m.Headers, tr.cfg.propagated())
}

// firstBytes returns up to n bytes from the start of bufs.
func firstBytes(bufs [][]byte, n int) []byte {
	var b []byte
	for _, v := range bufs {
		if len(b) >= n {
			break
		}
		b = append(b, v[:min(len(v), n-len(b))]...)
	}
	return b
}

// ---- tracee memory ----

type iovec struct{ base, len uint64 }

// writeIOV returns the buffers a write-family call passes.
func (tr *Tracer) writeIOV(t *supervisor.Task, sc *supervisor.Syscall) ([]iovec, error) {
	switch sc.Nr {
	case unix.SYS_WRITE, unix.SYS_SENDTO:
		return []iovec{{sc.Args[1], sc.Args[2]}}, nil
	case unix.SYS_WRITEV:
		return readIOV(t, sc.Args[1], sc.Args[2])
	case unix.SYS_SENDMSG:
		var h [56]byte
		if _, err := t.ReadMem(uintptr(sc.Args[1]), h[:]); err != nil {
			return nil, err
		}
		return readIOV(t, binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:]))
	}
	return nil, fmt.Errorf("run: not a write: %d", sc.Nr)
}

func readIOV(t *supervisor.Task, addr, n uint64) ([]iovec, error) {
	if n > maxIOV {
		return nil, fmt.Errorf("run: %d iovecs", n)
	}
	if n == 0 {
		return nil, nil
	}
	raw := make([]byte, 16*n)
	if _, err := t.ReadMem(uintptr(addr), raw); err != nil {
		return nil, err
	}
	v := make([]iovec, n)
	for i := range v {
		v[i] = iovec{binary.LittleEndian.Uint64(raw[16*i:]), binary.LittleEndian.Uint64(raw[16*i+8:])}
	}
	return v, nil
}

// readBuffers copies the first n bytes a read-family call returned.
func (tr *Tracer) readBuffers(t *supervisor.Task, sc *supervisor.Syscall, n int) ([]byte, error) {
	var iov []iovec
	switch sc.Nr {
	case unix.SYS_READ, unix.SYS_RECVFROM:
		iov = []iovec{{sc.Args[1], sc.Args[2]}}
	case unix.SYS_READV:
		v, err := readIOV(t, sc.Args[1], sc.Args[2])
		if err != nil {
			return nil, err
		}
		iov = v
	case unix.SYS_RECVMSG:
		var h [56]byte
		if _, err := t.ReadMem(uintptr(sc.Args[1]), h[:]); err != nil {
			return nil, err
		}
		v, err := readIOV(t, binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:]))
		if err != nil {
			return nil, err
		}
		iov = v
	}
	data := make([]byte, 0, n)
	for _, v := range iov {
		k := min(int(v.len), n-len(data))
		if k <= 0 {
			break
		}
		b := data[len(data) : len(data)+k]
		if _, err := t.ReadMem(uintptr(v.base), b); err != nil {
			return nil, err
		}
		data = data[:len(data)+k]
	}
	return data, nil
}

// rewrite turns the intercepted write into writev/sendmsg over the output's
// segments. It reports restart when the call was instead turned into an mmap
// of the thread's scratch area and runs again.
func (tr *Tracer) rewrite(t *supervisor.Task, p *proc, sc *supervisor.Syscall, iov []iovec, out httpstream.Output) (restart bool, err error) {
	base, ok := p.scratch[t.Tid]
	if ok && base == 0 {
		return false, errNoScratch
	}
	if !ok {
		if n := len(p.free); n > 0 {
			base, p.free = p.free[n-1], p.free[:n-1]
			p.scratch[t.Tid] = base
		} else {
			ret, err := t.InjectSyscall(unix.SYS_MMAP, 0, scratchSize,
				unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uint64(0), 0)
			if err != nil {
				return false, err
			}
			if ret < 0 {
				p.scratch[t.Tid] = 0 // the restarted call then passes unchanged
				tr.log.Warn("mmap in traced process failed", "pid", t.Tgid, "err", unix.Errno(-ret))
				return true, nil
			}
			tr.Stats.Scratch.Add(1)
			p.scratch[t.Tid] = uint64(ret)
			return true, nil
		}
	}
	segs := out.Segments
	if len(segs) > maxIOV {
		return false, fmt.Errorf("run: %d segments", len(segs))
	}
	// Layout: [msghdr 56][iovec × len(segs)][inserted bytes].
	hdr := 64
	dataOff := hdr + 16*len(segs)
	buf := make([]byte, dataOff, dataOff+1024)
	for i, s := range segs {
		var addr uint64
		if s.Data != nil {
			addr = base + uint64(len(buf))
			buf = append(buf, s.Data...)
			binary.LittleEndian.PutUint64(buf[hdr+16*i+8:], uint64(len(s.Data)))
		} else {
			addr = iov[s.Buf].base + uint64(s.Off)
			binary.LittleEndian.PutUint64(buf[hdr+16*i+8:], uint64(s.Len))
		}
		binary.LittleEndian.PutUint64(buf[hdr+16*i:], addr)
	}
	if len(buf) > scratchSize {
		return false, fmt.Errorf("run: rewrite needs %d bytes of scratch", len(buf))
	}
	regs := *sc.Regs
	switch sc.Nr {
	case unix.SYS_WRITE, unix.SYS_WRITEV:
		regs.Orig_rax = unix.SYS_WRITEV
		regs.Rsi = base + uint64(hdr)
		regs.Rdx = uint64(len(segs))
	case unix.SYS_SENDTO, unix.SYS_SENDMSG:
		if sc.Nr == unix.SYS_SENDMSG {
			if _, err := t.ReadMem(uintptr(sc.Args[1]), buf[:56]); err != nil {
				return false, err
			}
			regs.Rdx = sc.Args[2] // flags
		} else {
			binary.LittleEndian.PutUint64(buf[0:], sc.Args[4]) // msg_name
			binary.LittleEndian.PutUint64(buf[8:], sc.Args[5]) // msg_namelen
			binary.LittleEndian.PutUint64(buf[32:], 0)         // msg_control
			binary.LittleEndian.PutUint64(buf[40:], 0)         // msg_controllen
			binary.LittleEndian.PutUint64(buf[48:], 0)         // msg_flags
			regs.Rdx = sc.Args[3]                              // flags
		}
		binary.LittleEndian.PutUint64(buf[16:], base+uint64(hdr))
		binary.LittleEndian.PutUint64(buf[24:], uint64(len(segs)))
		regs.Orig_rax = unix.SYS_SENDMSG
		regs.Rsi = base
	}
	if _, err := t.WriteMem(uintptr(base), buf); err != nil {
		return false, err
	}
	return false, t.SetRegs(&regs)
}

// giveUp passes a connection through untouched from now on, after a failure
// that left its Rewriter out of step with what the application wrote.
func (tr *Tracer) giveUp(c *conn, err error) {
	c.opaque = true
	c.out.SetOpaque("rewrite failed")
	tr.fail(err)
}

func (tr *Tracer) fail(err error) {
	tr.Stats.Errors.Add(1)
	tr.errOnce.Do(func() { tr.log.Warn("tracing error; the call passes unchanged (logged once)", "err", err) })
}

// ---- reads observed without ptrace (Config.Reads) ----

func (tr *Tracer) taskStart(t *supervisor.Task) {
	tr.tasks[t.Tid] = t
	if tr.cfg.Reads != nil && t.Tid == t.Tgid && t.ParentTid != 0 {
		// A forked child: its copies of the parent's sockets are its own.
		tr.watchAll(t)
	}
}

// watch starts observing the reads of a classified socket.
func (tr *Tracer) watch(tgid, fd int) {
	if tr.cfg.Reads == nil {
		return
	}
	if err := tr.cfg.Reads.Watch(tgid, fd); err != nil {
		tr.fail(err)
	}
}

// watchAll watches every classified socket of t's process.
func (tr *Tracer) watchAll(t *supervisor.Task) {
	t.EachFD(func(fd int, k supervisor.FDKind) {
		if k == supervisor.FDInbound || k == supervisor.FDOutbound {
			tr.watch(t.Tgid, fd)
		}
	})
}

// drain handles the reads the ReadSource saw since the last stop: each of
// them happened before the call the current stop is about.
func (tr *Tracer) drain() {
	if tr.cfg.Reads == nil {
		return
	}
	if err := tr.cfg.Reads.Drain(tr.tapRead); err != nil {
		tr.fail(err)
	}
}

func (tr *Tracer) tapRead(r *readtap.Read) {
	tr.Stats.TapReads.Add(1)
	t := tr.tasks[r.Tid]
	if t == nil || t.Tgid != r.Tgid {
		return // the thread is gone (its process's sockets are closed)
	}
	p := tr.proc(r.Tgid)
	c := tr.conn(t, p, r.FD)
	if c == nil || c.opaque {
		return
	}
	if r.Incomplete {
		// Bytes of this stream are missing: parsing on would misread it.
		c.opaque = true
		c.out.SetOpaque("reads lost by the eBPF read tap")
		tr.Stats.Opaque.Add(1)
		tr.Stats.TapGaps.Add(1)
		if !tr.tapWarned {
			tr.tapWarned = true
			tr.log.Warn("reads of a connection were lost (the eBPF read tap's buffer overflowed); passing it through untraced", "pid", r.Tgid, "fd", r.FD)
		}
		return
	}
	tr.feed(t, p, c, r.Data, readAt{g: r.G, now: time.Unix(0, kclock.MonotonicUnix(r.Mono)), delay: time.Duration(r.RunDelay)})
}
