package httpstream

// InjectFunc appends the header lines to insert into a message, each a
// complete "Name: value\r\n" line, to dst and returns the result; returning
// dst as it is leaves the message unchanged. dst is empty, with room the
// Rewriter reuses once the lines are sent, so that appending to it (as
// AppendInjectHeaders and AppendTimingHeaders do) costs no allocation. A
// result that is not an append to dst is kept as it is until sent, so it
// must not be modified afterwards.
//
// It is called once per message, when the message's header block is
// complete; m is valid only during the call. A result that does not end in
// '\n' is ignored, so that a bad callback cannot merge its bytes into the
// application's next line.
type InjectFunc func(dst []byte, m *Message) []byte

// Segment is one piece of a Write's output: either bytes the Rewriter owns
// (Data != nil: inserted lines, or a header block kept from earlier writes)
// or a range of the caller's input (Data == nil: iov[Buf][Off:Off+Len]; Buf
// is 0 for Write).
type Segment struct {
	Data []byte
	Buf  int
	Off  int
	Len  int
}

// Output is what to send on the wire for one Write or WriteV: Segments in
// order, Len bytes in all. Unchanged reports that the segments are exactly
// the input, so the application's write may proceed unmodified. Segments is
// valid until the next call to the Rewriter.
type Output struct {
	Segments []Segment
	Len      int
	// Unchanged is true when the output is the input byte for byte.
	Unchanged bool
	// Ends counts the messages whose last byte was in this call's new input
	// (bytes not seen by an earlier call): a response writer learns when a
	// response is complete.
	Ends int
}

// AppendTo appends the output's bytes to dst; in are the input buffers given
// to Write (one) or WriteV (all of them).
func (o Output) AppendTo(dst []byte, in ...[]byte) []byte {
	for _, s := range o.Segments {
		if s.Data != nil {
			dst = append(dst, s.Data...)
		} else {
			dst = append(dst, in[s.Buf][s.Off:s.Off+s.Len]...)
		}
	}
	return dst
}

// Rewriter inserts header lines into the HTTP/1.x messages of one outbound
// byte stream (what the application writes) and keeps every other byte as it
// is: the wire carries the application's bytes plus, right before the final
// line break of each header block, the lines InjectFunc returned.
//
// # Contract
//
// The Rewriter sits between the application's write calls and the socket.
// For every write the application makes:
//
//  1. out := r.Write(p, inject) (or r.WriteV(iov, inject) for writev and
//     sendmsg), where p is the bytes the application asks to write.
//  2. Send out on the socket; if out.Unchanged the original call may run as
//     is. If out.Len == 0 skip the call: the Rewriter holds an unfinished
//     header block, and Sent(0) acknowledges all of p.
//  3. m := r.Sent(n), with n the number of out's bytes the kernel accepted
//     (0 on error or EAGAIN). Before the next Write, always (a Write that
//     follows a Write without Sent counts the first as Sent(0)).
//  4. Tell the application that m bytes were written. If m == 0, return the
//     kernel's error (EAGAIN for a non-blocking socket); if n > 0 but m == 0
//     the socket took only bytes the Rewriter added, so report EAGAIN or
//     EINTR, or better send the rest of out (r.Write again) first.
//
// What remains of out after a partial send stays queued in the Rewriter: the
// next Write, which carries the unacknowledged bytes again, returns it first.
//
// m counts the input bytes whose output reached the wire, plus the trailing
// bytes of an unfinished header block, which the Rewriter copies and keeps
// (at most MaxHeaderBytes). Bytes beyond m are the application's to write
// again: the Rewriter assumes that its next write starts with exactly those
// bytes, as a retry does (the bytes, not their layout in buffers, matter). It
// parses them only once and sends only what of their output did not reach
// the wire, so a header line cut by a partial write is never sent twice.
// Lines the Rewriter added and the kernel took only in part are finished
// before any later byte.
//
// Whenever output remains unsent, some input byte remains unacknowledged, so
// the application is bound to write again: the Rewriter never holds bytes
// the application believes sent but that are not, apart from an unfinished
// header block, which the application has to complete anyway.
//
// Bodies are never copied: their output Segments point into the input. A
// header block is copied only when it is split across writes. A stream that
// goes opaque (TLS, HTTP/2, not HTTP, malformed) passes through unchanged
// from then on.
//
// A Rewriter is not safe for concurrent use.
type Rewriter struct {
	p Framing

	// An unfinished header block starts at stream position blockPos; held
	// keeps its bytes that came in earlier calls. Input before queued is
	// queued as output, or held.
	held     []byte
	blockPos int64
	inHeader bool
	queued   int64

	// acked is the stream position up to which the application was told its
	// bytes were written; processed the position up to which the parser has
	// seen them. Positions count the application's bytes, not output bytes.
	acked, processed int64

	// q holds the output not yet sent, in order, from q[qhead]. The last
	// Output is q[qhead:qhead+covered], clipped to input positions below
	// coverEnd.
	q           []pending
	qhead       int
	covered     int
	coverEnd    int64
	outstanding bool

	// arena holds inserted lines until they are sent; it is reused once the
	// queue is empty.
	arena []byte

	ends    int
	out     []Segment
	bufEnds []int64  // end of each input buffer of the last Write, relative to acked
	iov     [][]byte // the input buffers during WriteV
	one     [1][]byte
}

// minArenaRoom is the room an InjectFunc gets to append to without
// allocating: enough for every propagation header with a long tracestate.
const minArenaRoom = 2048

// pending is one piece of unsent output: owned bytes (data != nil), the input
// range [a, b), or, when a == b, a marker: once everything before it is
// sent, the acknowledgment reaches a (or the end of the current write, if
// that comes first), which covers the held bytes of an unfinished block.
type pending struct {
	data []byte
	a, b int64
}

// NewRewriter returns a Rewriter for an outbound stream of the given kind:
// Requests for a client's connection, Responses for a server's.
func NewRewriter(kind Kind) *Rewriter {
	return &Rewriter{p: NewParser(kind)}
}

// Framing is what a Rewriter needs of the parser of the stream it rewrites:
// the HTTP/1.x Parser, or another protocol's (internal/run/h2stream). Feed
// MUST report an EventStart where bytes start that may need rewriting (the
// Rewriter holds them from there), then EventHeaders where they end (the
// InjectFunc is called for it), EventRelease where they turn out to need
// nothing (the held bytes go out unchanged), or EventOpaque; and EventEnd
// where a message ends. The Rewriter feeds it every byte once, in order.
type Framing interface {
	Feed(data []byte) []Event
	SetOpaque(reason Reason)
	Opaque() (Reason, bool)
	ExpectResponse(method string)
}

// Rebuilder is a Framing whose rewritten blocks are not the held bytes with
// lines inserted before a line break but bytes it builds: Rebuild returns
// what replaces the whole block (from its EventStart to its EventHeaders)
// given the block's bytes and the lines the InjectFunc returned, or nil to
// leave the block as it is. block is only valid during the call.
type Rebuilder interface {
	Rebuild(m *Message, block, lines []byte) []byte
}

// SelectiveRebuilder is a Rebuilder that rebuilds some messages only (one
// that follows a stream from one protocol into another): the others get
// their lines inserted before their final line break.
type SelectiveRebuilder interface {
	Rebuilder
	Rebuilds(m *Message) bool
}

func rebuilds(f Framing, m *Message) bool {
	if s, ok := f.(SelectiveRebuilder); ok {
		return s.Rebuilds(m)
	}
	return true
}

// NewRewriterFor returns a Rewriter of a stream that f parses.
func NewRewriterFor(f Framing) *Rewriter {
	return &Rewriter{p: f}
}

// ExpectResponse queues the method of a request the peer sent, for a
// Rewriter of Responses (see Parser.ExpectResponse).
func (r *Rewriter) ExpectResponse(method string) { r.p.ExpectResponse(method) }

// SetOpaque stops all rewriting from the next Write on (see
// Parser.SetOpaque); an unfinished header block is then sent as it is.
func (r *Rewriter) SetOpaque(reason Reason) { r.p.SetOpaque(reason) }

// Opaque reports whether the stream went opaque, and why.
func (r *Rewriter) Opaque() (Reason, bool) { return r.p.Opaque() }

// Write processes one write of p and returns what to send instead. See the
// type's contract; Sent must follow.
func (r *Rewriter) Write(p []byte, inject InjectFunc) Output {
	r.one[0] = p
	out := r.WriteV(r.one[:], inject)
	r.one[0] = nil
	return out
}

// WriteV is Write for a write made of several buffers (writev, sendmsg):
// their concatenation is the input, and the output's input Segments name the
// buffer they point into.
func (r *Rewriter) WriteV(iov [][]byte, inject InjectFunc) Output {
	if r.outstanding {
		r.Sent(0)
	}
	r.bufEnds = r.bufEnds[:0]
	r.iov = iov
	pos := r.acked
	for _, b := range iov {
		end := pos + int64(len(b))
		if end > r.processed {
			r.process(b[r.processed-pos:], r.processed, inject)
			r.processed = end
		}
		pos = end
		r.bufEnds = append(r.bufEnds, pos-r.acked)
	}
	if r.inHeader && r.queued < r.processed {
		// Keep the unfinished block's bytes from this call: the application
		// is told they were written, so its next write will not carry them.
		for i, b := range iov {
			bs := r.acked
			if i > 0 {
				bs += r.bufEnds[i-1]
			}
			lo, hi := max(r.queued, bs), min(r.processed, bs+int64(len(b)))
			if lo < hi {
				r.held = append(r.held, b[lo-bs:hi-bs]...)
			}
		}
		r.queued = r.processed
		r.q = append(r.q, pending{a: r.processed, b: r.processed})
	}
	r.iov = nil
	r.outstanding = true
	out := r.output(pos)
	out.Ends, r.ends = r.ends, 0
	return out
}

// Sent records that n bytes of the last Output reached the wire and returns
// how many bytes of the last Write's input the application must be told
// were written (see the type's contract).
func (r *Rewriter) Sent(n int) int {
	if !r.outstanding {
		return 0
	}
	r.outstanding = false
	budget, ack, end := int64(max(n, 0)), r.acked, r.coverEnd
	for stop := r.qhead + r.covered; r.qhead < stop; {
		s := &r.q[r.qhead]
		if s.data != nil {
			if budget < int64(len(s.data)) {
				s.data = s.data[budget:]
				break
			}
			budget -= int64(len(s.data))
		} else if s.a == s.b {
			ack = max(ack, min(s.a, end))
			if s.a > end {
				break
			}
		} else {
			b := min(s.b, end)
			if budget < b-s.a {
				if budget > 0 {
					s.a += budget
					ack = s.a
				}
				break
			}
			budget -= b - s.a
			ack = b
			if b < s.b {
				s.a = b
				break
			}
		}
		*s = pending{}
		r.qhead++
	}
	if r.qhead == len(r.q) {
		r.q, r.qhead = r.q[:0], 0
		r.arena = r.arena[:0]
	} else if r.qhead >= 64 && 2*r.qhead >= len(r.q) {
		n := copy(r.q, r.q[r.qhead:])
		clear(r.q[n:])
		r.q, r.qhead = r.q[:n], 0
	}
	m := ack - r.acked
	r.acked = ack
	return int(m)
}

// process parses q, the input from stream position base on, and queues its
// output. A header block's bytes from this call are queued as references
// into the caller's buffers; those from earlier calls come from held.
func (r *Rewriter) process(q []byte, base int64, inject InjectFunc) {
	evs := r.p.Feed(q)
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case EventStart:
			at := base + int64(ev.Offset)
			r.addRef(r.queued, at)
			r.queued, r.blockPos, r.inHeader = at, at, true
		case EventHeaders:
			ins := r.inject(inject, ev.Msg)
			held := r.held
			r.held, r.inHeader = nil, false
			brk := base + int64(ev.Offset) // where the final line break starts
			if rb, ok := r.p.(Rebuilder); ok && rebuilds(r.p, ev.Msg) {
				r.replace(rb, ev.Msg, brk, held, ins)
				continue
			}
			switch k := brk - r.blockPos; {
			case len(ins) == 0:
				r.addOwned(held)
			case brk >= r.queued:
				r.addOwned(held)
				r.addRef(r.queued, brk)
				r.addOwned(ins)
				r.queued = brk
			case k >= 0 && k <= int64(len(held)): // the final CR came in an earlier call
				r.addOwned(held[:k])
				r.addOwned(ins)
				r.addOwned(held[k:])
			default: // unreachable; never corrupt the stream
				r.addOwned(held)
			}
		case EventEnd:
			r.ends++
		case EventOpaque, EventRelease:
			if r.inHeader {
				r.addOwned(r.held)
				r.held, r.inHeader = nil, false
			}
		}
	}
	if !r.inHeader {
		end := base + int64(len(q))
		r.addRef(r.queued, end)
		r.queued = end
	}
}

// replace queues what a Rebuilder makes of the block [blockPos, brk): held
// (its bytes from earlier calls) and q's bytes up to brk. The marker after
// the rebuilt bytes acknowledges the application's bytes of the block only
// once all of them are sent, as for a held block.
func (r *Rewriter) replace(rb Rebuilder, m *Message, brk int64, held, ins []byte) {
	var rep []byte
	if len(ins) > 0 && brk >= r.queued {
		block := r.appendInput(held[:len(held):len(held)], r.queued, brk)
		if int64(len(block)) == int64(len(held))+brk-r.queued {
			rep = rb.Rebuild(m, block, ins)
		}
	}
	if len(rep) == 0 {
		r.addOwned(held)
		return
	}
	r.addOwned(rep)
	r.q = append(r.q, pending{a: brk, b: brk})
	r.queued = brk
}

// appendInput appends the input bytes at stream positions [a, b) of the
// current WriteV's buffers to dst.
func (r *Rewriter) appendInput(dst []byte, a, b int64) []byte {
	pos := r.acked
	for _, buf := range r.iov {
		end := pos + int64(len(buf))
		if lo, hi := max(a, pos), min(b, end); lo < hi {
			dst = append(dst, buf[lo-pos:hi-pos]...)
		}
		pos = end
	}
	return dst
}

// inject calls fn for m and returns the lines to insert, keeping those
// appended to the arena there.
func (r *Rewriter) inject(fn InjectFunc, m *Message) []byte {
	if fn == nil {
		return nil
	}
	if cap(r.arena)-len(r.arena) < minArenaRoom {
		// Lines still queued keep the old arena alive.
		r.arena = make([]byte, 0, max(4*minArenaRoom, 2*cap(r.arena)))
	}
	dst := r.arena[len(r.arena):len(r.arena)]
	ins := fn(dst, m)
	if len(ins) == 0 || ins[len(ins)-1] != '\n' {
		return nil
	}
	if &ins[0] == &dst[:1][0] { // appended in place
		r.arena = r.arena[:len(r.arena)+len(ins)]
		ins = ins[:len(ins):len(ins)]
	}
	return ins
}

func (r *Rewriter) addOwned(b []byte) {
	if len(b) > 0 {
		r.q = append(r.q, pending{data: b})
	}
}

func (r *Rewriter) addRef(a, b int64) {
	if a >= b {
		return
	}
	if n := len(r.q); n > r.qhead {
		if last := &r.q[n-1]; last.data == nil && last.a < last.b && last.b == a {
			last.b = b
			return
		}
	}
	r.q = append(r.q, pending{a: a, b: b})
}

// output builds the Output for an input that ends at stream position end:
// the queued output up to that position. Owned bytes at its tail stay queued
// for the next write, so that the output always ends with the application's
// own bytes.
func (r *Rewriter) output(end int64) Output {
	r.out = r.out[:0]
	var (
		total, keepTotal  int64
		keepOut, covered  int
		bi                int
		allRefs, refTotal = true, int64(0)
	)
loop:
	for k := r.qhead; k < len(r.q); k++ {
		s := r.q[k]
		switch {
		case s.data != nil:
			r.out = append(r.out, Segment{Data: s.data})
			total += int64(len(s.data))
			continue
		case s.a == s.b:
			// A marker past end still acknowledges the held bytes up to end.
		default:
			if s.a >= end {
				break loop
			}
			b := min(s.b, end)
			bi = r.appendRef(bi, s.a-r.acked, b-s.a)
			total += b - s.a
		}
		covered, keepOut, keepTotal = k-r.qhead+1, len(r.out), total
		if s.b > end {
			break
		}
	}
	r.out = r.out[:keepOut]
	r.covered, r.coverEnd = covered, end
	for _, s := range r.out {
		if s.Data != nil {
			allRefs = false
			break
		}
		refTotal += int64(s.Len)
	}
	return Output{
		Segments:  r.out,
		Len:       int(keepTotal),
		Unchanged: allRefs && refTotal == end-r.acked,
	}
}

// appendRef appends the input range [off, off+n), relative to acked, split
// at buffer boundaries; bi is the buffer to start looking from.
func (r *Rewriter) appendRef(bi int, off, n int64) int {
	for n > 0 {
		for off >= r.bufEnds[bi] {
			bi++
		}
		var start int64
		if bi > 0 {
			start = r.bufEnds[bi-1]
		}
		l := min(n, r.bufEnds[bi]-off)
		r.out = append(r.out, Segment{Buf: bi, Off: int(off - start), Len: int(l)})
		off += l
		n -= l
	}
	return bi
}
