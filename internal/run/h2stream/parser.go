package h2stream

import (
	"bytes"
	"encoding/binary"
	"errors"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// Preface is the client connection preface (RFC 9113 §3.4).
const Preface = http2.ClientPreface

const (
	// MaxBlockBytes bounds a header block (its frames, with their headers)
	// held for rewriting; a longer one passes unchanged. HPACK decoding
	// goes on past it.
	MaxBlockBytes = httpstream.MaxHeaderBytes
	// maxFramePayload bounds the payload of a frame that is copied to be
	// parsed (HEADERS, CONTINUATION, SETTINGS, GOAWAY...): the largest frame
	// HTTP/2 allows.
	maxFramePayload = 1<<24 - 1
	// maxString bounds one decoded header name or value.
	maxString = 1 << 20
	// maxFields bounds the fields of one header block that are kept.
	maxFields = 1024
	// defaultTableSize and defaultFrameSize are HTTP/2's initial settings.
	defaultTableSize = 4096
	defaultFrameSize = 16384
)

// Reasons a connection goes opaque (besides httpstream's).
const (
	ReasonPreface  httpstream.Reason = "no http2 client preface"
	ReasonFrame    httpstream.Reason = "malformed http2 frame"
	ReasonHPACK    httpstream.Reason = "hpack decoding error"
	ReasonSequence httpstream.Reason = "header block interrupted"
)

// ErrOpaque is returned by Parser.Err once the stream is opaque.
var ErrOpaque = errors.New("h2stream: stream is opaque")

// EventKind says what a stream Event reports.
type EventKind uint8

const (
	// EvHeaders: a complete header block on Stream (Fields; EndStream when
	// its HEADERS frame ended the stream). A PUSH_PROMISE's block is
	// reported with Push set and Stream the promised stream.
	EvHeaders EventKind = iota + 1
	// EvEndStream: a DATA frame with END_STREAM on Stream ended.
	EvEndStream
	// EvReset: RST_STREAM on Stream with Code.
	EvReset
	// EvGoAway: GOAWAY with LastStream and Code.
	EvGoAway
	// EvSettings: a SETTINGS frame (not an acknowledgment); Settings has
	// the values it set.
	EvSettings
	// EvOpaque: the stream went opaque for Reason; nothing follows.
	EvOpaque
)

// Event is one thing a Parser found, in stream order.
type Event struct {
	Kind       EventKind
	Stream     uint32
	EndStream  bool
	Push       bool
	Fields     []hpack.HeaderField
	Code       http2.ErrCode
	LastStream uint32
	Settings   Settings
	Reason     httpstream.Reason
}

// Settings are the SETTINGS values a peer announced that matter here; 0 is
// "not set by this frame".
type Settings struct {
	HeaderTableSize   uint32
	MaxFrameSize      uint32
	MaxHeaderListSize uint32
	HasTableSize      bool
}

// Parser follows one direction of an HTTP/2 connection: the frames, the
// header blocks decoded with the direction's HPACK state, the stream
// events. It implements httpstream.Framing (and Rebuilder) for an
// httpstream.Rewriter of the direction the service writes.
//
// A Parser is not safe for concurrent use. It never panics on any input: a
// stream it cannot follow goes opaque (EvOpaque, then nothing).
type Parser struct {
	client  bool // the client-to-server direction: starts with Preface
	preface int  // preface bytes matched

	hdr  [9]byte
	nhdr int
	fh   http2.FrameHeader
	need uint32 // payload bytes still to come of the current frame
	keep bool   // the current frame's payload is copied
	pay  []byte

	fr  *http2.Framer
	src bytes.Reader

	dec       *hpack.Decoder
	fields    []hpack.HeaderField
	decErr    error
	inBlock   bool
	push      bool
	blockID   uint32
	blockEnd  bool
	blockLen  int  // bytes of the block's frames so far
	held      bool // the block is held by the Rewriter (an EventStart was reported)
	listBytes uint32

	// The peer's limits for what is written in this direction (set from
	// the other direction's SETTINGS, see Apply): Rebuild keeps to them.
	peerFrame uint32
	peerList  uint32

	opaque  bool
	reason  httpstream.Reason
	pending httpstream.Reason

	events []httpstream.Event
	evs    []Event
}

// Block is a header block the service writes, as an InjectFunc sees it in
// its httpstream.Message's Ext.
type Block struct {
	Stream    uint32
	EndStream bool
	Fields    []hpack.HeaderField
	// ListSize is the block's header list size as SETTINGS_MAX_HEADER_LIST_SIZE
	// counts it (names, values and 32 bytes per field).
	ListSize uint32
}

// NewParser returns a Parser of one direction: client is true for the
// client-to-server direction, which starts with the connection preface.
func NewParser(client bool) *Parser {
	p := &Parser{client: client, peerFrame: defaultFrameSize}
	p.fr = http2.NewFramer(nil, &p.src)
	p.fr.SetMaxReadFrameSize(maxFramePayload)
	p.fr.AllowIllegalReads = true // the Parser checks what matters itself
	p.dec = hpack.NewDecoder(defaultTableSize, func(f hpack.HeaderField) {
		p.listBytes += f.Size()
		if len(p.fields) < maxFields {
			p.fields = append(p.fields, f)
		}
	})
	p.dec.SetMaxStringLength(maxString)
	return p
}

// Apply takes the SETTINGS the other end of this direction announced (the
// peer of the writer): the HPACK table size the writer's encoder may use,
// and the frame and header list sizes the peer accepts.
func (p *Parser) Apply(s Settings) {
	if s.HasTableSize {
		// The encoder may use any size up to the largest announced: the
		// decoder here only observes, and the peer enforces.
		p.allowTable(s.HeaderTableSize)
	}
	if s.MaxFrameSize >= defaultFrameSize {
		p.peerFrame = s.MaxFrameSize
	}
	if s.MaxHeaderListSize > 0 {
		p.peerList = s.MaxHeaderListSize
	}
}

func (p *Parser) allowTable(n uint32) {
	if n > defaultTableSize {
		p.dec.SetAllowedMaxDynamicTableSize(n)
	}
}

// Events returns the stream events found since the last call; the slice is
// valid until the next Feed.
func (p *Parser) Events() []Event {
	ev := p.evs
	p.evs = p.evs[:0]
	return ev
}

// ExpectResponse does nothing: HTTP/2 matches responses by stream.
func (p *Parser) ExpectResponse(string) {}

// SetOpaque makes the stream opaque from the next Feed on.
func (p *Parser) SetOpaque(reason httpstream.Reason) {
	if !p.opaque && p.pending == "" {
		p.pending = reason
	}
}

// Opaque reports whether the stream is opaque, and why.
func (p *Parser) Opaque() (httpstream.Reason, bool) { return p.reason, p.opaque }

func (p *Parser) fail(off int, reason httpstream.Reason) {
	if p.opaque {
		return
	}
	p.opaque, p.reason = true, reason
	p.events = append(p.events, httpstream.Event{Kind: httpstream.EventOpaque, Offset: off, End: off, Reason: reason})
	p.evs = append(p.evs, Event{Kind: EvOpaque, Reason: reason})
}

// Feed follows the next bytes of the direction. The httpstream Events it
// returns (for a Rewriter) are: EventStart where a frame starts, EventRelease
// once it is known not to start a header block that may get fields,
// EventHeaders where such a block ends (the InjectFunc is then called; Block
// describes it), EventOpaque. Stream events are collected for Events.
func (p *Parser) Feed(data []byte) []httpstream.Event {
	p.events = p.events[:0]
	if p.opaque {
		return p.events
	}
	if p.pending != "" {
		p.fail(0, p.pending)
		return p.events
	}
	i := 0
	for i < len(data) && !p.opaque {
		switch {
		case p.client && p.preface < len(Preface):
			n := min(len(Preface)-p.preface, len(data)-i)
			if string(data[i:i+n]) != Preface[p.preface:p.preface+n] {
				p.fail(i, ReasonPreface)
				return p.events
			}
			p.preface += n
			i += n
		case p.nhdr < 9:
			if p.nhdr == 0 && !p.inBlock {
				// Held until the frame's type is known: a HEADERS frame
				// split across writes is rewritten whole.
				p.events = append(p.events, httpstream.Event{Kind: httpstream.EventStart, Offset: i, End: i})
				p.held = true
			}
			n := copy(p.hdr[p.nhdr:], data[i:])
			p.nhdr += n
			i += n
			if p.nhdr == 9 {
				p.frameHeader(i)
			}
		default:
			n := int(min(uint32(len(data)-i), p.need))
			if p.keep {
				p.pay = append(p.pay, data[i:i+n]...)
			}
			p.need -= uint32(n)
			i += n
		}
		if p.nhdr == 9 && p.need == 0 && !p.opaque {
			p.frameDone(i)
		}
	}
	return p.events
}

// frameHeader takes a complete frame header; i is the offset after it.
func (p *Parser) frameHeader(i int) {
	fh, err := http2.ReadFrameHeader(bytes.NewReader(p.hdr[:]))
	if err != nil {
		p.fail(i, ReasonFrame)
		return
	}
	p.fh, p.need, p.pay = fh, fh.Length, p.pay[:0]
	switch {
	case p.inBlock && fh.Type != http2.FrameContinuation,
		!p.inBlock && fh.Type == http2.FrameContinuation,
		p.inBlock && fh.StreamID != p.blockID:
		p.fail(i, ReasonSequence)
		return
	}
	switch fh.Type {
	case http2.FrameHeaders, http2.FrameContinuation, http2.FramePushPromise,
		http2.FrameSettings, http2.FrameRSTStream, http2.FrameGoAway:
		p.keep = true
	default:
		p.keep = false
	}
	if fh.Type == http2.FrameHeaders || fh.Type == http2.FrameContinuation {
		p.blockLen += 9 + int(fh.Length)
		if p.held && p.blockLen > MaxBlockBytes {
			p.release(i)
		}
		return
	}
	if p.held {
		p.release(i)
	}
}

// release lets the held bytes go unchanged.
func (p *Parser) release(i int) {
	p.held = false
	p.events = append(p.events, httpstream.Event{Kind: httpstream.EventRelease, Offset: i, End: i})
}

// frameDone handles a frame whose payload is complete; i is the offset
// after it.
func (p *Parser) frameDone(i int) {
	p.nhdr = 0
	fh := p.fh
	if fh.Type == http2.FrameData {
		if fh.Flags.Has(http2.FlagDataEndStream) && fh.StreamID != 0 {
			p.evs = append(p.evs, Event{Kind: EvEndStream, Stream: fh.StreamID})
		}
		return
	}
	if !p.keep {
		return
	}
	p.src.Reset(p.pay)
	f, err := p.fr.ReadFrameForHeader(fh)
	if err != nil {
		p.fail(i, ReasonFrame)
		return
	}
	switch f := f.(type) {
	case *http2.HeadersFrame:
		p.startBlock(f.StreamID, f.StreamEnded(), false)
		p.fragment(i, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.PushPromiseFrame:
		if p.held {
			p.release(i)
		}
		p.startBlock(f.PromiseID, false, true)
		p.fragment(i, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		p.fragment(i, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		if f.IsAck() {
			return
		}
		var s Settings
		_ = f.ForeachSetting(func(st http2.Setting) error {
			switch st.ID {
			case http2.SettingHeaderTableSize:
				s.HeaderTableSize, s.HasTableSize = st.Val, true
			case http2.SettingMaxFrameSize:
				s.MaxFrameSize = st.Val
			case http2.SettingMaxHeaderListSize:
				s.MaxHeaderListSize = st.Val
			}
			return nil
		})
		p.evs = append(p.evs, Event{Kind: EvSettings, Settings: s})
	case *http2.RSTStreamFrame:
		p.evs = append(p.evs, Event{Kind: EvReset, Stream: f.StreamID, Code: f.ErrCode})
	case *http2.GoAwayFrame:
		p.evs = append(p.evs, Event{Kind: EvGoAway, LastStream: f.LastStreamID, Code: f.ErrCode})
	}
}

func (p *Parser) startBlock(id uint32, end, push bool) {
	p.inBlock, p.blockID, p.blockEnd, p.push = true, id, end, push
	p.fields, p.listBytes, p.decErr = p.fields[:0], 0, nil
}

// fragment decodes a piece of the current block; done: END_HEADERS.
func (p *Parser) fragment(i int, frag []byte, done bool) {
	if _, err := p.dec.Write(frag); err != nil {
		p.fail(i, ReasonHPACK)
		return
	}
	if !done {
		return
	}
	if err := p.dec.Close(); err != nil {
		p.fail(i, ReasonHPACK)
		return
	}
	p.inBlock = false
	fields := make([]hpack.HeaderField, len(p.fields))
	copy(fields, p.fields)
	p.evs = append(p.evs, Event{Kind: EvHeaders, Stream: p.blockID, EndStream: p.blockEnd, Push: p.push, Fields: fields})
	held := p.held
	p.held, p.blockLen = false, 0
	if held && !p.push {
		b := &Block{Stream: p.blockID, EndStream: p.blockEnd, Fields: fields, ListSize: p.listBytes}
		m := &httpstream.Message{Headers: Headers(fields), Ext: b}
		if v := get(fields, ":method"); v != "" {
			m.Request, m.Method, m.Target = true, v, []byte(get(fields, ":path"))
		}
		p.events = append(p.events, httpstream.Event{Kind: httpstream.EventHeaders, Offset: i, End: i, Msg: m})
	}
}

// Headers converts fields to httpstream's form, for its context and timing
// functions.
func Headers(fields []hpack.HeaderField) httpstream.Headers {
	h := make(httpstream.Headers, len(fields))
	for i, f := range fields {
		h[i] = httpstream.Header{Name: []byte(f.Name), Value: []byte(f.Value)}
	}
	return h
}

// get returns the value of the first field named name.
func get(fields []hpack.HeaderField, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// Rebuild returns the header block block of m (its frames, as the application
// wrote them) with lines ("Name: value\r\n" each, as an httpstream.InjectFunc
// returns them) added as literal fields without indexing at its end, or nil
// to leave it as it is: lines that are not well formed, a block that is not
// one whole HEADERS frame sequence, or fields past the peer's
// SETTINGS_MAX_HEADER_LIST_SIZE.
func (p *Parser) Rebuild(m *httpstream.Message, block, lines []byte) []byte {
	b, _ := m.Ext.(*Block)
	enc, size, ok := encodeLines(nil, lines)
	if b == nil || !ok || len(enc) == 0 {
		return nil
	}
	if p.peerList > 0 && b.ListSize+size > p.peerList {
		return nil
	}
	// The frames of the block: the last one has END_HEADERS.
	last := -1
	for off := 0; off < len(block); {
		if len(block)-off < 9 {
			return nil
		}
		n := int(uint32(block[off])<<16 | uint32(block[off+1])<<8 | uint32(block[off+2]))
		if off+9+n > len(block) {
			return nil
		}
		last = off
		off += 9 + n
		if off == len(block) && block[last+4]&byte(http2.FlagHeadersEndHeaders) == 0 {
			return nil
		}
	}
	if last < 0 {
		return nil
	}
	n := int(uint32(block[last])<<16 | uint32(block[last+1])<<8 | uint32(block[last+2]))
	typ, flags := http2.FrameType(block[last+3]), http2.Flags(block[last+4])
	pad := 0
	if typ == http2.FrameHeaders && flags.Has(http2.FlagHeadersPadded) {
		if n < 1 {
			return nil
		}
		pad = int(block[last+9])
	}
	if pad > n {
		return nil
	}
	out := make([]byte, 0, len(block)+len(enc)+9)
	if uint32(n+len(enc)) <= p.peerFrame {
		// The last frame grows: its fields, ours, then its padding.
		fragEnd := last + 9 + n - pad
		out = append(out, block[:fragEnd]...)
		out = append(out, enc...)
		out = append(out, block[fragEnd:]...)
		putLength(out[last:], uint32(n+len(enc)))
		return out
	}
	// END_HEADERS moves to CONTINUATION frames carrying the fields.
	out = append(out, block...)
	out[last+4] &^= byte(http2.FlagHeadersEndHeaders)
	stream := binary.BigEndian.Uint32(block[last+5:]) & (1<<31 - 1)
	for len(enc) > 0 {
		k := min(len(enc), int(p.peerFrame))
		var fh [9]byte
		putLength(fh[:], uint32(k))
		fh[3] = byte(http2.FrameContinuation)
		if k == len(enc) {
			fh[4] = byte(http2.FlagContinuationEndHeaders)
		}
		binary.BigEndian.PutUint32(fh[5:], stream)
		out = append(out, fh[:]...)
		out = append(out, enc[:k]...)
		enc = enc[k:]
	}
	return out
}

func putLength(b []byte, n uint32) {
	b[0], b[1], b[2] = byte(n>>16), byte(n>>8), byte(n)
}

// encodeLines appends the HPACK encoding of "Name: value\r\n" lines as
// literal header fields without indexing, with literal names, to dst; size
// is their header list size. Names are lower-cased; a line without a colon,
// or a byte that cannot be in a field, makes ok false.
func encodeLines(dst, lines []byte) (out []byte, size uint32, ok bool) {
	for len(lines) > 0 {
		line, rest, found := bytes.Cut(lines, []byte("\n"))
		if !found {
			return dst, 0, false
		}
		lines = rest
		line = bytes.TrimSuffix(line, []byte("\r"))
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 {
			return dst, 0, false
		}
		value = bytes.TrimLeft(value, " \t")
		for _, c := range name {
			if c <= ' ' || c >= 0x7f || c == ':' {
				return dst, 0, false
			}
		}
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return dst, 0, false
			}
		}
		dst = AppendLiteral(dst, string(bytes.ToLower(name)), string(value))
		size += uint32(len(name) + len(value) + 32)
	}
	return dst, size, true
}

// AppendLiteral appends name and value as a literal header field without
// indexing and with a literal name (RFC 7541 §6.2.2), neither Huffman-coded.
func AppendLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0)
	dst = appendString(dst, name)
	return appendString(dst, value)
}

func appendString(dst []byte, s string) []byte {
	dst = appendVarInt(dst, 7, uint64(len(s)))
	return append(dst, s...)
}

// appendVarInt appends i as an HPACK integer with an n-bit prefix (RFC 7541
// §5.1), the prefix byte's other bits zero.
func appendVarInt(dst []byte, n byte, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(dst, byte(i))
	}
	dst = append(dst, byte(k))
	i -= k
	for ; i >= 128; i >>= 7 {
		dst = append(dst, byte(0x80|i&0x7f))
	}
	return append(dst, byte(i))
}
