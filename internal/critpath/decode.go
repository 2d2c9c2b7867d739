package critpath

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// The kernel snapshot formats this package reads (the "kernel" artifact,
// written by internal/profiler/kernel, see its package doc and snapbin.go):
//
//   - version 3 (kernel.MediaType, application/vnd.rootline.kernel-snapshot+zstd):
//     the binary format, read with kernel.ReadBinarySnapshot and indexed
//     here without building the recorder's Interval values;
//   - versions 1 and 2 (kernel.MediaTypeJSON,
//     application/vnd.rootline.kernel-snapshot+json+gzip): a gzipped JSON
//     object with start_ns, end_ns, pid, lost, threads [{tid, pid, comm,
//     target}], intervals [{tid, state, reason, start_ns, end_ns, wakeup}]
//     and wakeups [{ts_ns, waker, context}]. Fields this package does not
//     use, and fields a newer recorder adds, are skipped.
//
// Decode tells them apart by their first bytes, not by the media type.

// MediaType is the media type of a kernel snapshot artifact as recorders
// write it (version 3); MediaTypeJSON that of the gzipped JSON ones stored
// before (versions 1 and 2). Both are read.
const (
	MediaType     = kernel.MediaType
	MediaTypeJSON = kernel.MediaTypeJSON
)

// IsSnapshot reports whether an artifact of kind and mediaType is a kernel
// snapshot this package reads.
func IsSnapshot(kind, mediaType string) bool {
	return kind == KernelKind && (mediaType == MediaType || mediaType == MediaTypeJSON)
}

// Interval states and reasons of the format.
const (
	fmtRunning   = "running"
	fmtRunqueue  = "runqueue"
	fmtThrottled = "throttled" // a run-queue reason
	fmtSteal     = "steal"     // a run-queue reason
	fmtPageFault = "pagefault" // a blocked reason
)

// Limits of a snapshot: an artifact is untrusted input.
const (
	// maxDecompressed bounds the JSON a snapshot may inflate to.
	maxDecompressed = 4 << 30
	// maxDepth bounds the nesting of values this package skips.
	maxSkipDepth = 64
	// maxString bounds one string (comm, reason…).
	maxString = 1 << 16
)

// Decode reads a kernel snapshot (the binary format, or gzipped JSON) into
// a Timeline. It returns an error wrapping ErrBadSnapshot for input that is
// not a snapshot (including one that decompresses past its format's bound
// or nests too deep); nothing is retained from input that fails.
func Decode(r io.Reader) (*Timeline, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if head, _ := br.Peek(8); kernel.IsBinarySnapshot(head) {
		data, err := io.ReadAll(io.LimitReader(br, kernel.MaxBinarySnapshotBytes+1))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		return decodeBinary(data)
	}
	return decodeJSON(br)
}

// DecodeBytes is Decode of an artifact held in memory.
func DecodeBytes(data []byte) (*Timeline, error) {
	if kernel.IsBinarySnapshot(data) {
		return decodeBinary(data)
	}
	return decodeJSON(bytes.NewReader(data))
}

// decodeBinary indexes a version 3 snapshot.
func decodeBinary(data []byte) (*Timeline, error) {
	bs, err := kernel.ReadBinarySnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	tl := &Timeline{Start: bs.Start, End: bs.End, PID: bs.PID, Lost: bs.Lost, byTID: make(map[uint32]int32, len(bs.Threads))}
	tl.details.code(nil, nil, nil) // code 0: nothing
	for _, t := range bs.Threads {
		tl.addThread(thread{tid: t.TID, pid: t.PID, comm: t.Comm, target: t.Target, observer: t.Observer})
	}
	// What each kind of interval and wakeup is here, once per kind.
	type ivKind struct {
		detail uint16
		kind   uint8
	}
	ik := make([]ivKind, len(bs.IntervalKinds))
	for i, k := range bs.IntervalKinds {
		ik[i] = ivKind{detail: tl.details.code([]byte(k.Reason), []byte(k.Syscall), []byte(k.Device)), kind: intervalKind(k.State, k.Reason)}
	}
	type wkKind struct {
		ctx    uint8
		causal bool
	}
	wk := make([]wkKind, len(bs.WakeupKinds))
	for i, k := range bs.WakeupKinds {
		c := contextCode(k.Context)
		wk[i] = wkKind{ctx: c, causal: k.Causal || c == cThread}
	}
	if bs.NumWakeups > 0 {
		tl.wakeups = make([]wake, bs.NumWakeups)
	}
	if err := bs.EachWakeup(func(k int, w *kernel.PackedWakeup) {
		m := wk[w.Kind]
		tl.wakeups[k] = wake{ts: w.TS, waker: w.Waker, ctx: m.ctx, causal: m.causal}
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	raws := make([]rawIv, bs.NumIntervals)
	if err := bs.EachInterval(func(k int, p *kernel.PackedInterval) {
		m := ik[p.Kind]
		raws[k] = rawIv{iv: iv{start: p.Start, end: p.End, wake: p.Wakeup, detail: m.detail, kind: m.kind, cpu1: cpuCode(int64(p.CPU))}, tid: p.TID}
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	if err := tl.place(raws); err != nil {
		return nil, err
	}
	return tl, nil
}

// intervalKind is the timeline's kind of an interval of state and reason.
func intervalKind(state, reason string) uint8 {
	switch {
	case state == fmtRunning:
		return kRunning
	case state == fmtRunqueue:
		return runqueueKind(reason)
	}
	return kBlocked
}

// runqueueKind is the kind of a RUNQUEUE interval of reason: held off by
// its cgroup's quota, a run's stolen time, or waiting for a CPU.
func runqueueKind[S string | []byte](reason S) uint8 {
	switch string(reason) {
	case fmtThrottled:
		return kThrottled
	case fmtSteal:
		return kSteal
	}
	return kRunqueue
}

// decodeJSON reads a gzipped JSON snapshot (versions 1 and 2).
func decodeJSON(r io.Reader) (*Timeline, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: neither the binary format nor gzipped JSON: %v", ErrBadSnapshot, err)
	}
	in := newInflater(io.LimitReader(zr, maxDecompressed+1))
	defer in.close()
	d := newDecoder(in)
	tl, err := d.snapshot()
	if err != nil {
		if errors.Is(err, ErrBadSnapshot) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	return tl, nil
}

// inflater inflates in a goroutine of its own, a chunk ahead of the parser:
// on a machine with two cores or more, parsing costs no wall time beyond
// inflating.
type inflater struct {
	chunks chan []byte
	free   chan []byte
	done   chan struct{}
	cur    []byte // the chunk being read, and what is left of it
	buf    []byte
	err    error
	errc   chan error
}

const inflateChunk = 256 << 10

func newInflater(r io.Reader) *inflater {
	in := &inflater{chunks: make(chan []byte, 2), free: make(chan []byte, 3), done: make(chan struct{}), errc: make(chan error, 1)}
	for range 3 {
		in.free <- make([]byte, inflateChunk)
	}
	go func() {
		defer close(in.chunks)
		for {
			var b []byte
			select {
			case b = <-in.free:
			case <-in.done:
				return
			}
			n, err := io.ReadFull(r, b)
			if n > 0 {
				select {
				case in.chunks <- b[:n]:
				case <-in.done:
					return
				}
			}
			if err != nil {
				if err == io.ErrUnexpectedEOF {
					err = io.EOF
				}
				in.errc <- err
				return
			}
		}
	}()
	return in
}

func (in *inflater) Read(p []byte) (int, error) {
	for len(in.cur) == 0 {
		if in.buf != nil {
			in.free <- in.buf[:cap(in.buf)]
			in.buf = nil
		}
		if in.err != nil {
			return 0, in.err
		}
		b, ok := <-in.chunks
		if !ok {
			in.err = <-in.errc
			return 0, in.err
		}
		in.buf, in.cur = b, b
	}
	n := copy(p, in.cur)
	in.cur = in.cur[n:]
	return n, nil
}

// close stops the inflating goroutine (the parser may stop early).
func (in *inflater) close() {
	close(in.done)
	for range in.chunks {
	}
}

// decoder is a JSON scanner specialised for the snapshot: the bulk of a
// snapshot (intervals and wakeups) is parsed from a window of the inflated
// stream, without reflection or allocation per element.
type decoder struct {
	r    io.Reader
	slow int    // elements the fast paths declined (see fastInterval)
	b    []byte // the window: b[i:] is not consumed yet
	i    int
	n    int64 // bytes dropped from the window's front
	eof  bool
	err  error  // a read error other than EOF
	buf  []byte // unescaped strings
}

func newDecoder(r io.Reader) *decoder {
	return &decoder{r: r, b: make([]byte, 0, 1<<20)}
}

func (d *decoder) fail(format string, a ...any) error {
	if d.err != nil {
		return d.err
	}
	return fmt.Errorf("%w: at byte %d: %s", ErrBadSnapshot, d.n+int64(d.i), fmt.Sprintf(format, a...))
}

// fill makes at least k bytes available after d.i, unless the input ends
// first.
func (d *decoder) fill(k int) {
	if len(d.b)-d.i >= k || d.eof {
		return
	}
	rest := copy(d.b, d.b[d.i:])
	d.n += int64(d.i)
	d.b, d.i = d.b[:rest], 0
	if k > cap(d.b) {
		nb := make([]byte, rest, k+cap(d.b))
		copy(nb, d.b)
		d.b = nb
	}
	for len(d.b) < k && !d.eof {
		n, err := d.r.Read(d.b[len(d.b):cap(d.b)])
		d.b = d.b[:len(d.b)+n]
		if err != nil {
			d.eof = true
			if err != io.EOF {
				d.err = err
			}
		}
	}
}

// peek returns the next byte that is not white space, without consuming it.
func (d *decoder) peek() (byte, error) {
	for {
		if d.i >= len(d.b) {
			d.fill(1)
			if d.i >= len(d.b) {
				return 0, d.fail("unexpected end of input")
			}
		}
		switch c := d.b[d.i]; c {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return c, nil
		}
	}
}

func (d *decoder) next() (byte, error) {
	c, err := d.peek()
	if err == nil {
		d.i++
	}
	return c, err
}

func (d *decoder) expect(want byte) error {
	c, err := d.next()
	if err != nil {
		return err
	}
	if c != want {
		return d.fail("want %q, got %q", want, c)
	}
	return nil
}

// str reads a string. The result is valid until the next call.
func (d *decoder) str() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	for scanned := 0; ; {
		j := bytes.IndexByte(d.b[d.i+scanned:], '"')
		if j < 0 {
			if len(d.b)-d.i > maxString {
				return nil, d.fail("string longer than %d bytes", maxString)
			}
			scanned = len(d.b) - d.i
			if d.fill(len(d.b) - d.i + 4096); d.eof && len(d.b)-d.i == scanned {
				return nil, d.fail("unterminated string")
			}
			continue
		}
		end := d.i + scanned + j
		if !complete(d.b[d.i : end+1]) {
			scanned += j + 1
			continue
		}
		s := d.b[d.i:end]
		d.i = end + 1
		if bytes.IndexByte(s, '\\') < 0 {
			return s, nil
		}
		u, err := strconv.Unquote(`"` + string(s) + `"`)
		if err != nil {
			return nil, d.fail("bad string: %v", err)
		}
		d.buf = append(d.buf[:0], u...)
		return d.buf, nil
	}
}

// complete reports whether b (a string's bytes after its opening quote, up
// to a quote) ends with a quote that is not escaped.
func complete(b []byte) bool {
	if len(b) == 0 || b[len(b)-1] != '"' {
		return false
	}
	n := 0
	for i := len(b) - 2; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return n%2 == 0
}

// int reads a JSON number that must be an integer.
func (d *decoder) int() (int64, error) {
	if _, err := d.peek(); err != nil {
		return 0, err
	}
	d.fill(24)
	b, i := d.b, d.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	var v uint64
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		v = v*10 + uint64(b[i]-'0')
		i++
		if i-start > 19 {
			return 0, d.fail("integer out of range")
		}
	}
	if i == start {
		return 0, d.fail("want a number")
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, d.fail("number is not an integer")
	}
	if v > 1<<63-1 {
		return 0, d.fail("integer out of range")
	}
	d.i = i
	if neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

// skip consumes one value of any type.
// boolean reads a JSON true or false (anything else counts as false and is
// skipped).
func (d *decoder) boolean() (bool, error) {
	c, err := d.peek()
	if err != nil {
		return false, err
	}
	return c == 't', d.skip(0)
}

func (d *decoder) skip(depth int) error {
	if depth > maxSkipDepth {
		return d.fail("nested deeper than %d", maxSkipDepth)
	}
	c, err := d.peek()
	if err != nil {
		return err
	}
	switch c {
	case '"':
		_, err := d.str()
		return err
	case '{':
		return d.object(func(string) error { return d.skip(depth + 1) })
	case '[':
		return d.array(func() error { return d.skip(depth + 1) })
	}
	// A number or a literal: everything up to a delimiter.
	for {
		if d.i >= len(d.b) {
			if d.fill(1); d.i >= len(d.b) {
				return nil
			}
		}
		switch c := d.b[d.i]; {
		case c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return nil
		case c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c >= 'a' && c <= 'z':
			d.i++
		default:
			return d.fail("unexpected %q", c)
		}
	}
}

// object reads {"key": value, …}, calling field for each key (which must
// consume the value).
func (d *decoder) object(field func(key string) error) error {
	return d.seq('{', '}', func() error {
		k, err := d.str()
		if err != nil {
			return err
		}
		key := internKey(k)
		if err := d.expect(':'); err != nil {
			return err
		}
		return field(key)
	})
}

// array reads [value, …], calling elem for each.
func (d *decoder) array(elem func() error) error { return d.seq('[', ']', elem) }

// seq reads open, elements separated by commas, close.
func (d *decoder) seq(open, close byte, elem func() error) error {
	if err := d.expect(open); err != nil {
		return err
	}
	c, err := d.peek()
	if err != nil {
		return err
	}
	if c == close {
		_, _ = d.next()
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		c, err := d.next()
		if err != nil {
			return err
		}
		if c == close {
			return nil
		}
		if c != ',' {
			return d.fail("want , or %c, got %q", close, c)
		}
	}
}

// internKey returns the keys the format uses without allocating.
func internKey(k []byte) string {
	switch string(k) {
	case "tid":
		return "tid"
	case "pid":
		return "pid"
	case "state":
		return "state"
	case "reason":
		return "reason"
	case "start_ns":
		return "start_ns"
	case "end_ns":
		return "end_ns"
	case "wakeup":
		return "wakeup"
	case "cpu":
		return "cpu"
	case "syscall":
		return "syscall"
	case "ts_ns":
		return "ts_ns"
	case "wakee":
		return "wakee"
	case "waker":
		return "waker"
	case "context":
		return "context"
	}
	return string(k)
}

// rawIv is an interval before it is grouped by thread.
type rawIv struct {
	iv
	tid uint32
}

func (d *decoder) snapshot() (*Timeline, error) {
	tl := &Timeline{byTID: map[uint32]int32{}}
	tl.details.code(nil, nil, nil) // code 0: nothing
	var raws []rawIv
	var version int64
	seenStart, seenEnd := false, false
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "version":
			version, err = d.int()
		case "pid":
			var v int64
			v, err = d.int()
			tl.PID = uint32(v)
		case "start_ns":
			tl.Start, err = d.int()
			seenStart = true
		case "end_ns":
			tl.End, err = d.int()
			seenEnd = true
		case "lost":
			var v int64
			v, err = d.int()
			tl.Lost = uint64(max(v, 0))
		case "threads":
			err = d.array(func() error { return d.thread(tl) })
		case "intervals":
			err = d.array(func() error {
				if r, ok := d.fastInterval(tl); ok {
					raws = append(raws, r)
					return nil
				}
				d.slow++
				r, err := d.interval(tl)
				raws = append(raws, r)
				return err
			})
		case "wakeups":
			err = d.array(func() error {
				if w, ok := d.fastWakeup(); ok {
					tl.wakeups = append(tl.wakeups, w)
					return nil
				}
				d.slow++
				w, err := d.wakeup()
				tl.wakeups = append(tl.wakeups, w)
				return err
			})
		default:
			err = d.skip(0)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, err := d.peek(); err == nil {
		return nil, d.fail("data after the snapshot")
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.n+int64(len(d.b)) > maxDecompressed {
		return nil, fmt.Errorf("%w: inflates to more than %d bytes", ErrBadSnapshot, int64(maxDecompressed))
	}
	if version < 1 || !seenStart || !seenEnd {
		return nil, fmt.Errorf("%w: not a kernel snapshot (version %d, start and end present: %v)", ErrBadSnapshot, version, seenStart && seenEnd)
	}
	return tl, tl.place(raws)
}

func (d *decoder) thread(tl *Timeline) error {
	var t thread
	err := d.object(func(key string) error {
		var err error
		var v int64
		switch key {
		case "tid":
			v, err = d.int()
			t.tid = uint32(v)
		case "pid":
			v, err = d.int()
			t.pid = uint32(v)
		case "comm":
			var b []byte
			b, err = d.str()
			t.comm = string(b)
		case "target":
			t.target, err = d.boolean()
		case "observer":
			t.observer, err = d.boolean()
		default:
			err = d.skip(0)
		}
		return err
	})
	if err != nil {
		return err
	}
	tl.addThread(t)
	return nil
}

// addThread adds a thread of the snapshot's list. A thread listed again
// keeps what it was first listed with.
func (tl *Timeline) addThread(t thread) {
	if i, ok := tl.byTID[t.tid]; ok {
		if tl.threads[i].pid == 0 {
			tl.threads[i].pid, tl.threads[i].comm, tl.threads[i].target, tl.threads[i].observer = t.pid, t.comm, t.target, t.observer
		}
		return
	}
	tl.byTID[t.tid] = int32(len(tl.threads))
	tl.threads = append(tl.threads, t)
}

func (d *decoder) interval(tl *Timeline) (rawIv, error) {
	r := rawIv{iv: iv{wake: -1}}
	st := kBlocked
	var reason, syscall, device []byte
	err := d.object(func(key string) error {
		var err error
		var v int64
		switch key {
		case "tid":
			v, err = d.int()
			r.tid = uint32(v)
		case "state":
			var b []byte
			if b, err = d.str(); err == nil {
				switch string(b) {
				case fmtRunning:
					st = kRunning
				case fmtRunqueue:
					st = kRunqueue
				}
			}
		case "reason", "syscall", "device":
			var b []byte
			if b, err = d.str(); err == nil {
				switch key {
				case "reason":
					reason = append(reason[:0], b...)
				case "syscall":
					syscall = append(syscall[:0], b...)
				default:
					device = append(device[:0], b...)
				}
			}
		case "start_ns":
			r.start, err = d.int()
		case "end_ns":
			r.end, err = d.int()
		case "cpu":
			v, err = d.int()
			r.cpu1 = cpuCode(v)
		case "wakeup":
			v, err = d.int()
			if v < -1 || v > 1<<31-1 {
				return d.fail("wakeup index %d", v)
			}
			r.wake = int32(v)
		default:
			err = d.skip(0)
		}
		return err
	})
	r.detail = tl.details.code(reason, syscall, device)
	r.kind = st
	if st == kRunqueue {
		r.kind = runqueueKind(reason)
	}
	return r, err
}

func (d *decoder) wakeup() (wake, error) {
	var w wake
	err := d.object(func(key string) error {
		var err error
		var v int64
		switch key {
		case "ts_ns":
			w.ts, err = d.int()
		case "waker":
			v, err = d.int()
			w.waker = uint32(v)
		case "context":
			var b []byte
			if b, err = d.str(); err == nil {
				w.ctx = contextCode(string(b))
			}
		case "causal":
			w.causal, err = d.boolean()
		default:
			err = d.skip(0)
		}
		return err
	})
	w.causal = w.causal || w.ctx == cThread
	return w, err
}

// place groups the intervals by thread, each thread's in time order, and
// checks what the critical path relies on.
func (tl *Timeline) place(raws []rawIv) error {
	for i := range raws {
		r := &raws[i]
		if r.end < r.start {
			return fmt.Errorf("%w: interval %d of thread %d ends before it starts", ErrBadSnapshot, i, r.tid)
		}
		if r.wake < -1 || int(r.wake) >= len(tl.wakeups) {
			return fmt.Errorf("%w: interval %d of thread %d: wakeup %d of %d", ErrBadSnapshot, i, r.tid, r.wake, len(tl.wakeups))
		}
	}
	// Each interval's thread, looked up once per run of one thread's
	// intervals (a snapshot lists them thread by thread).
	idx := make([]int32, len(raws))
	var lastTID uint32
	last := int32(-1)
	for i := range raws {
		if last < 0 || raws[i].tid != lastTID {
			lastTID, last = raws[i].tid, tl.threadIndex(raws[i].tid)
		}
		idx[i] = last
	}
	counts := make([]int, len(tl.threads))
	for _, t := range idx {
		counts[t]++
	}
	all := make([]iv, len(raws))
	off := 0
	for i := range tl.threads {
		tl.threads[i].ivs = all[off : off : off+counts[i]]
		off += counts[i]
	}
	for i := range raws {
		th := &tl.threads[idx[i]]
		th.ivs = append(th.ivs, raws[i].iv)
	}
	for i := range tl.threads {
		th := &tl.threads[i]
		if !slices.IsSortedFunc(th.ivs, func(a, b iv) int { return compareInt64(a.start, b.start) }) {
			slices.SortStableFunc(th.ivs, func(a, b iv) int { return compareInt64(a.start, b.start) })
		}
		for j := 1; j < len(th.ivs); j++ {
			if th.ivs[j].start < th.ivs[j-1].end {
				return fmt.Errorf("%w: thread %d has overlapping intervals at %d", ErrBadSnapshot, th.tid, th.ivs[j].start)
			}
		}
	}
	return nil
}

// The fast paths read an interval or a wakeup laid out exactly as the
// recorder writes them (internal/profiler/kernel, Snapshot.Encode): fields
// in that order, no white space, no escapes. Anything else (another
// writer, a field added by a newer recorder) makes them decline without
// consuming input, and the generic scanner reads the element.

// scan is a cursor over the window for the fast paths.
type scan struct {
	b  []byte
	i  int
	ok bool
}

func (s *scan) lit(l string) {
	if s.ok && len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return
	}
	s.ok = false
}

// opt consumes l if it is next and reports whether it was.
func (s *scan) opt(l string) bool {
	if s.ok && len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

func (s *scan) int() int64 {
	if !s.ok {
		return 0
	}
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' && s.i-start < 19 {
		v = v*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	// 19 digits fit in a uint64; longer numbers go the generic way.
	if s.i == start || v > 1<<63-1 || s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.ok = false
		return 0
	}
	if neg {
		return -int64(v)
	}
	return int64(v)
}

// strOpen reads the rest of a string whose opening quote was consumed and
// leaves its closing quote: the recorder writes the state, reason and
// syscall as one run `"state":"…","reason":"…` whose quotes close later.
func (s *scan) strOpen() []byte {
	if !s.ok {
		return nil
	}
	j := bytes.IndexByte(s.b[s.i:], '"')
	if j < 0 || bytes.IndexByte(s.b[s.i:s.i+j], '\\') >= 0 {
		s.ok = false
		return nil
	}
	v := s.b[s.i : s.i+j]
	s.i += j
	return v
}

// str reads the rest of a string whose opening quote was consumed; it
// declines strings with escapes.
func (s *scan) str() []byte {
	if !s.ok {
		return nil
	}
	j := bytes.IndexByte(s.b[s.i:], '"')
	if j < 0 || bytes.IndexByte(s.b[s.i:s.i+j], '\\') >= 0 {
		s.ok = false
		return nil
	}
	v := s.b[s.i : s.i+j]
	s.i += j + 1
	return v
}

// fastWindow is how much of the window a fast path may look at: more than
// any element the recorder writes.
const fastWindow = 512

func (d *decoder) fastInterval(tl *Timeline) (rawIv, bool) {
	if _, err := d.peek(); err != nil {
		return rawIv{}, false
	}
	d.fill(fastWindow)
	sc := scan{b: d.b[d.i:min(len(d.b), d.i+fastWindow)], ok: true}
	r := rawIv{iv: iv{wake: -1}}
	sc.lit(`{"tid":`)
	tid := sc.int()
	sc.lit(`,"state":"`)
	switch string(sc.strOpen()) {
	case fmtRunning:
		r.kind = kRunning
	case fmtRunqueue:
		r.kind = kRunqueue
	default:
		r.kind = kBlocked
	}
	var reason, syscall, device []byte
	if sc.opt(`","reason":"`) {
		reason = sc.strOpen()
		if r.kind == kRunqueue {
			r.kind = runqueueKind(reason)
		}
	}
	if sc.opt(`","syscall":"`) {
		syscall = sc.strOpen()
	}
	sc.lit(`"`)
	if sc.opt(`,"device":"`) {
		device = sc.str()
	}
	sc.lit(`,"start_ns":`)
	r.start = sc.int()
	sc.lit(`,"end_ns":`)
	r.end = sc.int()
	sc.lit(`,"cpu":`)
	r.cpu1 = cpuCode(sc.int())
	sc.lit(`,"wakeup":`)
	w := sc.int()
	sc.lit(`}`)
	if !sc.ok || tid < 0 || tid > 1<<32-1 || w < -1 || w > 1<<31-1 {
		return rawIv{}, false
	}
	r.detail = tl.details.code(reason, syscall, device)
	r.tid, r.wake = uint32(tid), int32(w)
	d.i += sc.i
	return r, true
}

func (d *decoder) fastWakeup() (wake, bool) {
	if _, err := d.peek(); err != nil {
		return wake{}, false
	}
	d.fill(fastWindow)
	sc := scan{b: d.b[d.i:min(len(d.b), d.i+fastWindow)], ok: true}
	var w wake
	sc.lit(`{"ts_ns":`)
	w.ts = sc.int()
	sc.lit(`,"wakee":`)
	sc.int()
	sc.lit(`,"waker":`)
	waker := sc.int()
	sc.lit(`,"context":"`)
	w.ctx = contextCode(string(sc.str()))
	if sc.opt(`,"detail":"`) {
		sc.str()
	}
	if sc.opt(`,"causal":true`) {
		w.causal = true
	}
	if sc.opt(`,"device":"`) {
		sc.str()
	}
	sc.lit(`,"cpu":`)
	sc.int()
	if sc.opt(`,"enqueued_ns":`) {
		sc.int()
	}
	sc.lit(`}`)
	if !sc.ok || waker < 0 || waker > 1<<32-1 {
		return wake{}, false
	}
	w.waker = uint32(waker)
	w.causal = w.causal || w.ctx == cThread
	d.i += sc.i
	return w, true
}
