package httpstream

import "bytes"

// MaxHeaderBytes bounds a header block, from the first byte of the start line
// through the final line break, and separately a chunked body's trailer
// section. A longer block makes the stream opaque (ReasonHeadersTooLarge).
const MaxHeaderBytes = 64 << 10

// MaxPipeline bounds how many requests a response parser remembers through
// ExpectResponse.
const MaxPipeline = 1 << 16

const (
	// maxMethodLen keeps a stream of token characters that is not HTTP from
	// being buffered as a method for long.
	maxMethodLen = 64
	// maxChunkLine bounds a chunk-size line with its extensions, as Go's
	// net/http does.
	maxChunkLine = 4096
	// arenaKeep is the capacity above which the per-Feed arenas are dropped
	// instead of reused, so one huge chunk does not pin memory.
	arenaKeep = 1 << 20
)

type state uint8

const (
	stIdle state = iota // between messages
	stMethod
	stTarget
	stVersion
	stStatus
	stReason
	stStartLF
	stHeaders
	stBodyLength
	stBodyClose
	stChunkSize
	stChunkExt
	stChunkSizeLF
	stChunkData
	stChunkDataCR
	stChunkDataLF
	stTrailerStart
	stTrailerLine
	stTrailerEndLF
	stOpaque
)

// inBlock reports whether s is inside a header block (start line included).
func (s state) inBlock() bool { return s >= stMethod && s <= stHeaders }

// span locates one header field in the block being parsed, relative to the
// block's first byte.
type span struct{ ns, ne, vs, ve int }

// Parser finds HTTP/1.x message boundaries in one direction of a connection.
// Feed it the stream's bytes in order, split anywhere; it reports what it
// found in each chunk as Events. It keeps at most one header block
// (MaxHeaderBytes) plus the header blocks of the current chunk, and never
// copies bodies.
//
// A stream that does not start like HTTP/1.x, or stops being parseable,
// becomes opaque: one EventOpaque is reported and the rest is ignored. The
// Parser never panics on any input.
//
// A Parser is not safe for concurrent use.
type Parser struct {
	kind   Kind
	state  state
	reason Reason // why the stream went opaque
	// pending is an opaque reason requested between Feeds (SetOpaque, a too
	// deep pipeline), reported at the start of the next Feed.
	pending Reason
	seen    bool // a header block completed: later garbage is "malformed", not "not-http"

	// buf is an arena for this Feed's header blocks; the block being parsed
	// is buf[blockStart:] and its current line starts at buf[lineStart].
	buf        []byte
	blockStart int
	lineStart  int
	spans      []span
	framingIdx []int // spans whose name may be Content-Length or Transfer-Encoding

	// Start line: n counts bytes of the current token (method, version,
	// status); positions are relative to the block.
	n           int
	methodEnd   int
	targetStart int
	targetEnd   int
	minor       int
	status      int

	hdrs   []Header
	msgs   []Message
	events []Event

	// remaining is the bytes left in a Content-Length body or a chunk, or the
	// chunk size being parsed; lineLen counts a chunk line's or the trailer
	// section's bytes.
	remaining int64
	lineLen   int

	// methods queues the methods of requests awaiting a response.
	methods []string
	mhead   int
}

// NewParser returns a Parser for a stream of the given kind.
func NewParser(kind Kind) *Parser {
	return &Parser{kind: kind}
}

// Kind returns the kind of stream the Parser reads.
func (p *Parser) Kind() Kind { return p.kind }

// ExpectResponse tells a response parser that a request with method was sent
// on the connection. Responses are matched to requests in order; the parser
// needs the method to know that a response to HEAD has no body and that a 2xx
// response to CONNECT starts a tunnel. A response that arrives with no method
// queued is treated as answering a GET.
func (p *Parser) ExpectResponse(method string) {
	if p.mhead == len(p.methods) {
		p.methods, p.mhead = p.methods[:0], 0
	}
	if len(p.methods)-p.mhead >= MaxPipeline {
		p.SetOpaque(ReasonPipelineTooDeep)
		return
	}
	p.methods = append(p.methods, method)
}

func (p *Parser) popMethod() string {
	if p.mhead == len(p.methods) {
		return ""
	}
	m := p.methods[p.mhead]
	p.mhead++
	if p.mhead >= 1024 && 2*p.mhead >= len(p.methods) {
		n := copy(p.methods, p.methods[p.mhead:])
		p.methods, p.mhead = p.methods[:n], 0
	}
	return m
}

// SetOpaque makes the stream opaque from the next Feed on, e.g. when the
// other direction saw a 101 Switching Protocols response. The next Feed
// reports EventOpaque with reason at offset 0 unless the stream is already
// opaque.
func (p *Parser) SetOpaque(reason Reason) {
	if p.state != stOpaque && p.pending == "" {
		p.pending = reason
	}
}

// Opaque reports whether the stream is opaque, and why.
func (p *Parser) Opaque() (Reason, bool) {
	return p.reason, p.state == stOpaque
}

// Feed parses the next chunk of the stream and returns what it found, in
// stream order. The returned slice, the Messages it points to and their bytes
// belong to the Parser and are valid until the next call to Feed or Close.
func (p *Parser) Feed(data []byte) []Event {
	p.events = p.events[:0]
	p.resetArena()
	if p.state == stOpaque {
		return p.events
	}
	if p.pending != "" {
		p.fail(0, p.pending)
		return p.events
	}
	for i := 0; i < len(data) && p.state != stOpaque; {
		switch p.state {
		case stIdle:
			i = p.idle(data, i)
		case stMethod, stTarget, stVersion, stStatus, stReason, stStartLF:
			i = p.startLine(data, i)
		case stHeaders:
			i = p.headerLines(data, i)
		case stBodyLength:
			n := int(min(p.remaining, int64(len(data)-i)))
			p.body(i, i+n, n)
			p.remaining -= int64(n)
			i += n
			if p.remaining == 0 {
				p.end(i)
			}
		case stBodyClose:
			p.body(i, len(data), len(data)-i)
			i = len(data)
		default:
			i = p.chunked(data, i)
		}
	}
	return p.events
}

// Close ends the stream (EOF). A body delimited by the connection's close
// ends here; a message cut short is reported ended and Truncated. The result
// is valid until the next call. Later Feeds report nothing.
func (p *Parser) Close() []Event {
	p.events = p.events[:0]
	p.resetArena()
	switch p.state {
	case stOpaque, stIdle:
	case stBodyClose:
		p.emit(Event{Kind: EventEnd})
	default:
		p.emit(Event{Kind: EventEnd, Truncated: true})
	}
	if p.state != stOpaque {
		p.state, p.reason = stOpaque, ReasonClosed
	}
	return p.events
}

// resetArena drops the previous Feed's header blocks, keeping an unfinished
// one at the front of buf.
func (p *Parser) resetArena() {
	p.hdrs, p.msgs = p.hdrs[:0], p.msgs[:0]
	if cap(p.events) > arenaKeep/64 {
		p.events = nil
	}
	if cap(p.hdrs) > arenaKeep/32 {
		p.hdrs = nil
	}
	if cap(p.msgs) > arenaKeep/128 {
		p.msgs = nil
	}
	if !p.state.inBlock() {
		p.buf, p.blockStart, p.lineStart = p.buf[:0], 0, 0
		if cap(p.buf) > arenaKeep {
			p.buf = nil
		}
		return
	}
	if p.blockStart > 0 {
		n := copy(p.buf, p.buf[p.blockStart:])
		p.lineStart -= p.blockStart
		p.buf, p.blockStart = p.buf[:n], 0
	}
}

func (p *Parser) emit(ev Event) { p.events = append(p.events, ev) }

// body reports n payload bytes ending at end, extending the chunk's body
// event of the message, so that tiny chunks cannot multiply events.
func (p *Parser) body(off, end, n int) {
	if k := len(p.events) - 1; k >= 0 && p.events[k].Kind == EventBody {
		p.events[k].End = end
		p.events[k].Len += n
		return
	}
	p.emit(Event{Kind: EventBody, Offset: off, End: end, Len: n})
}

// fail makes the stream opaque at offset i and returns i, so that callers
// can return it directly: Feed stops at an opaque stream.
func (p *Parser) fail(i int, reason Reason) int {
	p.state, p.reason, p.pending = stOpaque, reason, ""
	p.emit(Event{Kind: EventOpaque, Offset: i, End: i, Reason: reason})
	return i
}

// badStart is the reason for a start line that is not HTTP/1.x.
func (p *Parser) badStart() Reason {
	if p.seen {
		return ReasonMalformedStart
	}
	return ReasonNotHTTP
}

func (p *Parser) end(i int) {
	p.emit(Event{Kind: EventEnd, Offset: i, End: i})
	p.state = stIdle
}

// idle skips empty lines between messages (RFC 9112 §2.2) and starts the
// next message.
func (p *Parser) idle(data []byte, i int) int {
	for i < len(data) && (data[i] == '\r' || data[i] == '\n') {
		i++
	}
	if i == len(data) {
		return i
	}
	switch c := data[i]; {
	case c == 0x16: // a TLS handshake record
		return p.fail(i, ReasonTLS)
	case p.kind == Requests && !tokenTable[c], p.kind == Responses && c != 'H':
		return p.fail(i, p.badStart())
	}
	p.blockStart = len(p.buf)
	p.lineStart = p.blockStart
	p.spans, p.framingIdx = p.spans[:0], p.framingIdx[:0]
	p.n, p.minor, p.status = 0, 0, 0
	p.emit(Event{Kind: EventStart, Offset: i, End: i})
	if p.kind == Requests {
		p.state = stMethod
	} else {
		p.state = stVersion
	}
	return i
}

// startLine parses the request or status line byte by byte, so that a
// stream that is not HTTP is recognized within a few bytes rather than
// buffered.
func (p *Parser) startLine(data []byte, i int) int {
	i0 := i
	// rel+j is the block-relative position of data[j].
	rel := len(p.buf) - p.blockStart - i0
	for i < len(data) {
		if rel+i >= MaxHeaderBytes {
			return p.fail(i, ReasonHeadersTooLarge)
		}
		// Runs of ordinary bytes are skipped in tight loops; the byte that
		// ends a run goes through the state machine below.
		if j := p.scanRun(data, i, i+MaxHeaderBytes-(rel+i), rel); j > i {
			i = j
			continue
		}
		c := data[i]
		switch p.state {
		case stMethod:
			switch {
			case tokenTable[c] && rel+i < maxMethodLen:
			case c == ' ' && rel+i > 0:
				p.methodEnd = rel + i
				p.targetStart = rel + i + 1
				p.state = stTarget
			default:
				return p.fail(i, p.badStart())
			}
		case stTarget:
			switch {
			case c == ' ' && rel+i > p.targetStart:
				p.targetEnd = rel + i
				p.state, p.n = stVersion, 0
			case c <= ' ' || c == 0x7f:
				return p.fail(i, p.badStart())
			}
		case stVersion:
			if r := p.versionByte(c); r != "" {
				return p.fail(i, r)
			}
			if p.state == stHeaders { // a bare LF ended a request line
				return p.lineDone(data, i0, i+1)
			}
		case stStatus:
			switch {
			case p.n < 3 && '0' <= c && c <= '9' && (p.n > 0 || c > '0'):
				p.status = 10*p.status + int(c-'0')
				p.n++
			case p.n == 3 && c == ' ':
				p.state = stReason
			case p.n == 3 && c == '\r':
				p.state = stStartLF
			case p.n == 3 && c == '\n':
				return p.lineDone(data, i0, i+1)
			default:
				return p.fail(i, p.badStart())
			}
		case stReason:
			switch c {
			case '\r':
				p.state = stStartLF
			case '\n':
				return p.lineDone(data, i0, i+1)
			}
		case stStartLF:
			if c != '\n' {
				return p.fail(i, p.badStart())
			}
			return p.lineDone(data, i0, i+1)
		}
		i++
	}
	p.buf = append(p.buf, data[i0:i]...)
	return i
}

// scanRun returns the end of the run of bytes from data[i] that the current
// start-line state accepts without a transition, not going beyond lim.
func (p *Parser) scanRun(data []byte, i, lim, rel int) int {
	j := i
	switch p.state {
	case stMethod:
		lim = min(lim, i+maxMethodLen-(rel+i))
		for j < min(lim, len(data)) && tokenTable[data[j]] {
			j++
		}
	case stTarget:
		for j < min(lim, len(data)) && data[j] > ' ' && data[j] != 0x7f {
			j++
		}
	case stReason:
		for j < min(lim, len(data)) && data[j] != '\r' && data[j] != '\n' {
			j++
		}
	case stVersion:
		if p.n == 0 && j+8 <= min(lim, len(data)) && string(data[j:j+7]) == "HTTP/1." && '0' <= data[j+7] && data[j+7] <= '9' {
			p.minor, p.n = int(data[j+7]-'0'), 8
			j += 8
		}
	}
	return j
}

// versionByte matches one byte of "HTTP/1.x" and what follows it: the line
// end in a request, a space in a response. It returns a reason on mismatch.
func (p *Parser) versionByte(c byte) Reason {
	const prefix = "HTTP/"
	n := p.n
	p.n++
	switch {
	case n < len(prefix):
		if c != prefix[n] {
			return p.badStart()
		}
	case n == 5:
		if c == '2' {
			return ReasonHTTP2
		}
		if c != '1' {
			return p.badStart()
		}
	case n == 6:
		if c != '.' {
			return p.badStart()
		}
	case n == 7:
		if c < '0' || c > '9' {
			return p.badStart()
		}
		p.minor = int(c - '0')
	case p.kind == Requests && c == '\r':
		p.state = stStartLF
	case p.kind == Requests && c == '\n':
		p.state = stHeaders
	case p.kind == Responses && c == ' ':
		p.state, p.n = stStatus, 0
	default:
		return p.badStart()
	}
	return ""
}

// lineDone keeps the start line data[i0:i] and moves on to header lines.
func (p *Parser) lineDone(data []byte, i0, i int) int {
	p.buf = append(p.buf, data[i0:i]...)
	p.state = stHeaders
	p.lineStart = len(p.buf)
	return i
}

// headerLines collects header lines until the empty line that ends the block.
func (p *Parser) headerLines(data []byte, i int) int {
	if p.lineStart < len(p.buf) {
		// The line began in an earlier chunk: complete it in buf.
		room := MaxHeaderBytes - (len(p.buf) - p.blockStart)
		win := data[i:min(len(data), i+room)]
		j := bytes.IndexByte(win, '\n')
		if j < 0 {
			if len(data)-i > room {
				return p.fail(i+room, ReasonHeadersTooLarge)
			}
			p.buf = append(p.buf, data[i:]...)
			return len(data)
		}
		b0 := len(p.buf)
		p.buf = append(p.buf, win[:j+1]...)
		end := len(p.buf) - 1
		if end > p.lineStart && p.buf[end-1] == '\r' {
			end--
		}
		if end == p.lineStart {
			return p.headersDone(p.lineStart-b0+i, i+j+1)
		}
		if !p.headerLine(p.buf[p.lineStart:end], p.lineStart-p.blockStart) {
			return p.fail(i+j, ReasonMalformedHeader)
		}
		p.lineStart = len(p.buf)
		i += j + 1
	}
	// Lines wholly in data are parsed in place and kept in buf at once.
	i0 := i
	rel := len(p.buf) - p.blockStart - i0 // block-relative position of data[x] is rel+x
	for i < len(data) {
		room := MaxHeaderBytes - (rel + i)
		j := bytes.IndexByte(data[i:min(len(data), i+room)], '\n')
		if j < 0 {
			if len(data)-i > room {
				return p.fail(i+room, ReasonHeadersTooLarge)
			}
			break
		}
		end := i + j
		if end > i && data[end-1] == '\r' {
			end--
		}
		if end == i {
			p.buf = append(p.buf, data[i0:i+j+1]...)
			return p.headersDone(i, i+j+1)
		}
		if !p.headerLine(data[i:end], rel+i) {
			return p.fail(i+j, ReasonMalformedHeader)
		}
		i += j + 1
	}
	// The block goes on in the next chunk; an unfinished line stays at
	// lineStart.
	p.buf = append(p.buf, data[i0:]...)
	p.lineStart = p.blockStart + rel + i
	return len(data)
}

// headerLine records the field on line (line break excluded), which starts
// at block-relative position rel.
func (p *Parser) headerLine(line []byte, rel int) bool {
	if line[0] == ' ' || line[0] == '\t' {
		// Obsolete line folding continues the previous field's value.
		if len(p.spans) == 0 {
			return false
		}
		s := &p.spans[len(p.spans)-1]
		if vs, ve := trimOWS(line, 0, len(line)); vs < ve {
			if s.vs == s.ve {
				s.vs = rel + vs
			}
			s.ve = rel + ve
		}
		return true
	}
	// The name is a token; the first byte after it must be the colon.
	colon := 0
	for colon < len(line) && tokenTable[line[colon]] {
		colon++
	}
	if colon == 0 || colon == len(line) || line[colon] != ':' {
		return false
	}
	if colon == len("content-length") || colon == len("transfer-encoding") {
		p.framingIdx = append(p.framingIdx, len(p.spans))
	}
	vs, ve := trimOWS(line, colon+1, len(line))
	p.spans = append(p.spans, span{ns: rel, ne: rel + colon, vs: rel + vs, ve: rel + ve})
	return true
}

func trimOWS(b []byte, s, e int) (int, int) {
	for s < e && (b[s] == ' ' || b[s] == '\t') {
		s++
	}
	for e > s && (b[e-1] == ' ' || b[e-1] == '\t') {
		e--
	}
	return s, e
}

// headersDone completes the block whose final line break is at [brk, end)
// of the chunk, decides the body's framing and reports the message.
func (p *Parser) headersDone(brk, end int) int {
	block := p.buf[p.blockStart:len(p.buf):len(p.buf)]
	p.msgs = append(p.msgs, Message{})
	m := &p.msgs[len(p.msgs)-1]
	m.Request = p.kind == Requests
	m.Raw = block
	m.Minor = p.minor
	h0 := len(p.hdrs)
	for _, s := range p.spans {
		p.hdrs = append(p.hdrs, Header{Name: block[s.ns:s.ne:s.ne], Value: block[s.vs:s.ve:s.ve]})
	}
	m.Headers = p.hdrs[h0:len(p.hdrs):len(p.hdrs)]
	p.blockStart = len(p.buf)
	p.lineStart = p.blockStart
	p.seen = true

	var after Reason // the stream goes opaque once this message ends
	if m.Request {
		m.Method = internMethod(block[:p.methodEnd])
		m.Target = block[p.targetStart:p.targetEnd:p.targetEnd]
		if m.Method == "CONNECT" {
			after = ReasonConnect
		}
	} else {
		m.Status = p.status
		if p.status >= 200 || p.status == 101 { // 1xx but 101 precede the final response
			m.Method = p.popMethod()
		}
		switch {
		case p.status == 101:
			after = ReasonUpgrade
		case m.Method == "CONNECT" && p.status/100 == 2:
			after = ReasonConnect
		}
	}
	body, n, r := framing(m, p.framingIdx, after != "")
	if r != "" {
		return p.fail(end, r)
	}
	m.Body, m.ContentLength = body, n
	p.emit(Event{Kind: EventHeaders, Offset: brk, End: end, Msg: m})
	switch {
	case after != "":
		p.end(end)
		return p.fail(end, after)
	case body == BodyNone || body == BodyLength && n == 0:
		p.end(end)
	case body == BodyLength:
		p.state, p.remaining = stBodyLength, n
	case body == BodyChunked:
		p.state, p.remaining, p.n, p.lineLen = stChunkSize, 0, 0, 0
	default:
		p.state = stBodyClose
	}
	return end
}

// framing decides how m's body is delimited (RFC 9112 §6.3), looking at
// the headers at candidates. noBody is set for messages that are followed by
// a tunnel or another protocol.
func framing(m *Message, candidates []int, noBody bool) (BodyKind, int64, Reason) {
	var (
		hasTE, chunked bool
		hasCL, badCL   bool
		n              int64
	)
	for _, k := range candidates {
		switch h := m.Headers[k]; {
		case len(h.Name) == len("content-length") && equalFold(h.Name, "content-length"):
			v, ok := parseContentLength(h.Value)
			if !ok || hasCL && v != n {
				badCL = true
			}
			hasCL, n = true, v
		case len(h.Name) == len("transfer-encoding") && equalFold(h.Name, "transfer-encoding"):
			hasTE = true
			if last, ok := lastToken(h.Value); ok {
				chunked = equalFold(last, "chunked")
			}
		}
	}
	if noBody {
		return BodyNone, 0, ""
	}
	if !m.Request {
		s := m.Status
		if s < 200 || s == 204 || s == 304 || m.Method == "HEAD" {
			return BodyNone, 0, ""
		}
	}
	switch {
	case hasTE && chunked:
		return BodyChunked, 0, ""
	case hasTE && m.Request:
		return 0, 0, ReasonBadTransferEncoding
	case hasTE:
		return BodyClose, 0, ""
	case badCL:
		return 0, 0, ReasonBadContentLength
	case hasCL:
		return BodyLength, n, ""
	case m.Request:
		return BodyNone, 0, ""
	}
	return BodyClose, 0, ""
}

// parseContentLength parses a Content-Length value: digits, or a list of
// identical digit strings (RFC 9110 §8.6).
func parseContentLength(v []byte) (int64, bool) {
	n, seen := int64(-1), false
	for len(v) > 0 {
		var elem []byte
		if k := bytes.IndexByte(v, ','); k >= 0 {
			elem, v = v[:k], v[k+1:]
		} else {
			elem, v = v, nil
		}
		s, e := trimOWS(elem, 0, len(elem))
		elem = elem[s:e]
		if len(elem) == 0 {
			continue // an empty list element counts for nothing (RFC 9110 §5.6.1.2)
		}
		if len(elem) > 18 {
			return 0, false
		}
		var x int64
		for _, c := range elem {
			if c < '0' || c > '9' {
				return 0, false
			}
			x = 10*x + int64(c-'0')
		}
		if seen && x != n {
			return 0, false
		}
		n, seen = x, true
	}
	return n, seen
}

// lastToken returns the last non-empty element of a comma-separated list.
func lastToken(v []byte) ([]byte, bool) {
	for len(v) > 0 {
		k := bytes.LastIndexByte(v, ',')
		elem := v[k+1:]
		s, e := trimOWS(elem, 0, len(elem))
		if s < e {
			return elem[s:e], true
		}
		if k < 0 {
			break
		}
		v = v[:k]
	}
	return nil, false
}

// chunked parses a chunked body: size lines with extensions, data, and the
// trailer section.
func (p *Parser) chunked(data []byte, i int) int {
	for i < len(data) {
		switch p.state {
		case stChunkSize:
			c := data[i]
			if v := hexVal[c]; v >= 0 {
				if p.n >= 15 { // 15 hex digits are 2^60 bytes: more is not a real chunk
					return p.fail(i, ReasonBadChunk)
				}
				p.remaining = p.remaining<<4 | int64(v)
				p.n++
				p.lineLen++
				i++
				continue
			}
			if p.n == 0 {
				return p.fail(i, ReasonBadChunk)
			}
			i++
			p.lineLen++
			switch c {
			case ';', ' ', '\t':
				p.state = stChunkExt
			case '\r':
				p.state = stChunkSizeLF
			case '\n':
				p.chunkLineDone()
			default:
				return p.fail(i-1, ReasonBadChunk)
			}
		case stChunkExt:
			j := bytes.IndexByte(data[i:], '\n')
			n := j + 1
			if j < 0 {
				n = len(data) - i
			}
			if p.lineLen+n > maxChunkLine {
				return p.fail(i+maxChunkLine-p.lineLen, ReasonBadChunk)
			}
			p.lineLen += n
			i += n
			if j >= 0 {
				p.chunkLineDone()
			}
		case stChunkSizeLF:
			if data[i] != '\n' {
				return p.fail(i, ReasonBadChunk)
			}
			i++
			p.chunkLineDone()
		case stChunkData:
			n := int(min(p.remaining, int64(len(data)-i)))
			p.body(i, i+n, n)
			p.remaining -= int64(n)
			i += n
			if p.remaining == 0 {
				p.state = stChunkDataCR
			}
		case stChunkDataCR, stChunkDataLF:
			switch c := data[i]; {
			case c == '\r' && p.state == stChunkDataCR:
				p.state = stChunkDataLF
			case c == '\n':
				p.state, p.remaining, p.n, p.lineLen = stChunkSize, 0, 0, 0
			default:
				return p.fail(i, ReasonBadChunk)
			}
			i++
		case stTrailerStart:
			switch data[i] {
			case '\r':
				p.state = stTrailerEndLF
				i++
			case '\n':
				p.end(i + 1)
				return i + 1
			default:
				p.state = stTrailerLine
			}
		case stTrailerLine:
			j := bytes.IndexByte(data[i:], '\n')
			n := j + 1
			if j < 0 {
				n = len(data) - i
			}
			if p.lineLen+n > MaxHeaderBytes {
				return p.fail(i+MaxHeaderBytes-p.lineLen, ReasonTrailersTooLarge)
			}
			p.lineLen += n
			i += n
			if j >= 0 {
				p.state = stTrailerStart
			}
		case stTrailerEndLF:
			if data[i] != '\n' {
				return p.fail(i, ReasonBadChunk)
			}
			p.end(i + 1)
			return i + 1
		default:
			return i
		}
	}
	return i
}

func (p *Parser) chunkLineDone() {
	if p.remaining == 0 {
		p.state, p.lineLen = stTrailerStart, 0
		return
	}
	p.state = stChunkData
}

// internMethod returns method as a string without allocating for the
// registered methods.
func internMethod(b []byte) string {
	switch string(b) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "CONNECT":
		return "CONNECT"
	case "OPTIONS":
		return "OPTIONS"
	case "TRACE":
		return "TRACE"
	case "PATCH":
		return "PATCH"
	}
	return string(b)
}

// tokenTable marks the tchar bytes of RFC 9110 §5.6.2.
var tokenTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

var hexVal = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = int8(c - 'a' + 10)
		t[c-'a'+'A'] = int8(c - 'a' + 10)
	}
	return t
}()
