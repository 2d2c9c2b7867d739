package h2stream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// genOpts shapes a generated HTTP/2 stream.
type genOpts struct {
	client     bool   // the client's direction (preface, requests)
	streams    int    // header blocks
	tableSize  uint32 // the encoder's dynamic table (0: 4096)
	bigValues  bool   // metadata values up to ~20 KiB (blocks past one frame)
	continuing bool   // blocks cut into CONTINUATION frames by the writer
	padding    bool   // padded HEADERS frames
	ownContext bool   // some requests carry their own traceparent
}

// genBlock is what the generator wrote in one header block.
type genBlock struct {
	stream uint32
	fields []hpack.HeaderField
	wire   int // its frames' bytes, with their headers
}

// genStream writes an HTTP/2 direction with x/net's Framer and HPACK
// encoder, as an application would.
func genStream(rng *rand.Rand, o genOpts) ([]byte, []genBlock) {
	var buf, hb bytes.Buffer
	if o.client {
		buf.WriteString(Preface)
	}
	fr := http2.NewFramer(&buf, nil)
	fr.AllowIllegalWrites = true // frames past 16 KiB when the peer allows them
	enc := hpack.NewEncoder(&hb)
	if o.tableSize > 0 {
		enc.SetMaxDynamicTableSizeLimit(o.tableSize)
		enc.SetMaxDynamicTableSize(o.tableSize)
	}
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	var blocks []genBlock
	id := uint32(1)
	if !o.client {
		id = 1
	}
	for n := 0; n < o.streams; n++ {
		var fields []hpack.HeaderField
		if o.client {
			fields = append(fields,
				hpack.HeaderField{Name: ":method", Value: "POST"},
				hpack.HeaderField{Name: ":scheme", Value: "http"},
				hpack.HeaderField{Name: ":path", Value: fmt.Sprintf("/pkg.Svc/M%d", rng.IntN(4))},
				hpack.HeaderField{Name: ":authority", Value: "svc:50051"},
				hpack.HeaderField{Name: "content-type", Value: "application/grpc"},
				hpack.HeaderField{Name: "te", Value: "trailers"})
			if o.ownContext && rng.IntN(3) == 0 {
				fields = append(fields, hpack.HeaderField{Name: "traceparent", Value: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
			}
		} else {
			fields = append(fields, hpack.HeaderField{Name: ":status", Value: "200"},
				hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
		}
		for k := rng.IntN(5); k > 0; k-- {
			v := strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(40))
			if o.bigValues && rng.IntN(3) == 0 {
				v = strings.Repeat("v", 1000+rng.IntN(20000))
			}
			fields = append(fields, hpack.HeaderField{Name: fmt.Sprintf("x-md-%d", rng.IntN(8)), Value: v, Sensitive: rng.IntN(10) == 0})
		}
		if o.tableSize > 0 && rng.IntN(4) == 0 {
			enc.SetMaxDynamicTableSize(uint32(rng.IntN(int(o.tableSize) + 1)))
		}
		hb.Reset()
		for _, f := range fields {
			_ = enc.WriteField(f)
		}
		blk := hb.Bytes()
		end := rng.IntN(3) == 0
		cut := len(blk)
		if o.continuing && len(blk) > 1 {
			cut = 1 + rng.IntN(len(blk)-1)
		}
		cut = min(cut, 16000) // room for padding within 16 KiB
		var pad uint8
		if o.padding && rng.IntN(2) == 0 {
			pad = uint8(rng.IntN(20))
		}
		start := buf.Len()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:cut], EndStream: end,
			EndHeaders: cut == len(blk), PadLength: pad})
		for rest := blk[cut:]; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(16384))
			_ = fr.WriteContinuation(id, k == len(rest), rest[:k])
			rest = rest[k:]
		}
		blocks = append(blocks, genBlock{stream: id, fields: fields, wire: buf.Len() - start})
		if !end {
			for k := rng.IntN(3); k > 0; k-- {
				_ = fr.WriteData(id, false, bytes.Repeat([]byte{byte(k)}, rng.IntN(3000)))
			}
			switch rng.IntN(6) {
			case 0:
				_ = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			case 1:
				_ = fr.WritePing(false, [8]byte{1})
				_ = fr.WriteData(id, true, nil)
			default:
				_ = fr.WriteWindowUpdate(0, 100)
				_ = fr.WriteData(id, true, []byte("end"))
			}
		}
		if o.client {
			id += 2
		} else {
			id++
		}
	}
	_ = fr.WriteGoAway(id, http2.ErrCodeNo, []byte("bye"))
	return buf.Bytes(), blocks
}

// peerFrame is what the peer decoding the wire output reads.
type peerFrame struct {
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32
	data   string              // payload of frames that are not header blocks
	fields []hpack.HeaderField // header blocks, decoded
}

// readAsPeer decodes a direction as the peer does (x/net's strict Framer
// with its HPACK decoder), checking frame sizes against maxFrame.
func readAsPeer(t *testing.T, wire []byte, client bool, maxFrame uint32) []peerFrame {
	t.Helper()
	if client {
		if !bytes.HasPrefix(wire, []byte(Preface)) {
			t.Fatalf("wire lost the preface: %q", clip(wire))
		}
		wire = wire[len(Preface):]
	}
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	fr.SetMaxReadFrameSize(maxFrame)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 24
	var out []peerFrame
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("the peer cannot read frame %d: %v (%v)", len(out), err, fr.ErrorDetail())
			}
			return out
		}
		h := f.Header()
		pf := peerFrame{typ: h.Type, flags: h.Flags, stream: h.StreamID}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			pf.fields = slices.Clone(f.Fields)
			pf.flags &^= http2.FlagHeadersEndHeaders | http2.FlagHeadersPadded
		case *http2.DataFrame:
			pf.data = string(f.Data())
		case *http2.SettingsFrame:
			pf.data = fmt.Sprint(f)
		case *http2.RSTStreamFrame:
			pf.data = f.ErrCode.String()
		case *http2.GoAwayFrame:
			pf.data = fmt.Sprint(f.LastStreamID, f.ErrCode, string(f.DebugData()))
		case *http2.PingFrame:
			pf.data = string(f.Data[:])
		case *http2.WindowUpdateFrame:
			pf.data = fmt.Sprint(f.Increment)
		}
		out = append(out, pf)
	}
}

// tpInjector adds a traceparent to every request block without one, and a
// rootline-server-time to every response block, counting them.
type tpInjector struct{ n int }

func (c *tpInjector) inject(dst []byte, m *httpstream.Message) []byte {
	b := m.Ext.(*Block)
	if m.Request {
		if m.Headers.Has("traceparent") {
			return dst
		}
		c.n++
		return append(dst, fmt.Sprintf("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-%016x-01\r\nb3: s%d\r\n", b.Stream, b.Stream)...)
	}
	c.n++
	return append(dst, fmt.Sprintf("rootline-server-time: %d\r\n", b.Stream)...)
}

// expectAdded returns what the peer must decode from a block the injector
// saw: nothing added to a block longer than the Parser holds.
func expectAdded(b genBlock, client bool) []hpack.HeaderField {
	if b.wire > MaxBlockBytes {
		return nil
	}
	if client {
		for _, f := range b.fields {
			if f.Name == "traceparent" {
				return nil
			}
		}
		return []hpack.HeaderField{
			{Name: "traceparent", Value: fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e4736-%016x-01", b.stream)},
			{Name: "b3", Value: fmt.Sprintf("s%d", b.stream)},
		}
	}
	return []hpack.HeaderField{{Name: "rootline-server-time", Value: fmt.Sprint(b.stream)}}
}

// simulateWrites drives a Rewriter with the stream cut into random writes,
// iovecs and partial sends, and returns the wire.
func simulateWrites(t *testing.T, r *httpstream.Rewriter, stream []byte, rng *rand.Rand, inject httpstream.InjectFunc, maxWrite int) []byte {
	t.Helper()
	var wire, flat []byte
	for pos, rounds := 0, 0; pos < len(stream); rounds++ {
		if rounds > 100*len(stream)+1000 {
			t.Fatalf("no progress at %d of %d", pos, len(stream))
		}
		p := bytes.Clone(stream[pos : pos+min(len(stream)-pos, 1+rng.IntN(maxWrite))])
		var iov [][]byte
		for rest := p; len(rest) > 0; {
			k := 1 + rng.IntN(len(rest))
			iov, rest = append(iov, rest[:k]), rest[k:]
		}
		out := r.WriteV(iov, inject)
		flat = out.AppendTo(flat[:0], iov...)
		k := len(flat)
		if k > 0 && rng.IntN(3) == 0 {
			k = rng.IntN(k + 1)
		}
		wire = append(wire, flat[:k]...)
		m := r.Sent(k)
		if m < 0 || m > len(p) || k == len(flat) && m != len(p) {
			t.Fatalf("Sent(%d of %d) = %d for a write of %d", k, len(flat), m, len(p))
		}
		clear(p)
		pos += m
	}
	return wire
}

func clip(b []byte) []byte { return b[:min(len(b), 80)] }

// TestRewriterFields checks, for streams an x/net Framer and HPACK encoder
// write, that what a strict peer decodes from the Rewriter's output is the
// application's frames, with exactly the added fields at the end of each
// header block, whatever the writes, iovecs and partial sends; and that the
// frames stay within the peer's frame size.
func TestRewriterFields(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        genOpts
		maxFrame uint32
	}{
		{"requests", genOpts{client: true, streams: 40, ownContext: true}, 16384},
		{"responses", genOpts{streams: 40}, 16384},
		{"small table", genOpts{client: true, streams: 60, tableSize: 64}, 16384},
		{"no table", genOpts{client: true, streams: 20, tableSize: 1}, 16384},
		{"continuation and padding", genOpts{client: true, streams: 30, continuing: true, padding: true}, 16384},
		{"large metadata", genOpts{client: true, streams: 30, bigValues: true, continuing: true}, 16384},
		{"large metadata, large frames", genOpts{client: true, streams: 30, bigValues: true}, 1 << 20},
		{"response trailers large", genOpts{streams: 30, bigValues: true, padding: true}, 16384},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(12) {
				checkRewrite(t, tc.o, tc.maxFrame, seed)
			}
		})
	}
}

func checkRewrite(t *testing.T, o genOpts, maxFrame uint32, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	stream, blocks := genStream(rng, o)
	want := readAsPeer(t, stream, o.client, 1<<24-1)
	p := NewParser(o.client)
	p.Apply(Settings{MaxFrameSize: maxFrame, HeaderTableSize: 4096, HasTableSize: true})
	r := httpstream.NewRewriterFor(p)
	var c tpInjector
	wire := simulateWrites(t, r, stream, rng, c.inject, 1+int(seed*997%40000))
	if reason, op := p.Opaque(); op {
		t.Fatalf("seed %d: went opaque: %s", seed, reason)
	}
	got := readAsPeer(t, wire, o.client, maxFrame)
	if added := comparePeer(t, seed, got, want, blocks, o.client); c.n != added {
		t.Fatalf("seed %d: inject added to %d blocks, the peer got fields in %d", seed, c.n, added)
	}
}

// comparePeer checks that the peer's frames are the application's, with
// CONTINUATIONs merged by the Framer, and the added fields at the end of
// each block; it returns the number of blocks that got fields.
func comparePeer(t *testing.T, seed uint64, got, want []peerFrame, blocks []genBlock, client bool) int {
	t.Helper()
	bi, added := 0, 0
	if len(got) != len(want) {
		t.Fatalf("seed %d: peer read %d frames, the application wrote %d", seed, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if w.typ == http2.FrameHeaders {
			b := blocks[bi]
			bi++
			add := expectAdded(b, client)
			if len(add) > 0 {
				added++
			}
			if wf := append(slices.Clone(w.fields), add...); !slices.Equal(g.fields, wf) {
				t.Fatalf("seed %d: block %d (stream %d):\n got  %v\n want %v", seed, bi-1, b.stream, g.fields, wf)
			}
			g.fields, w.fields = nil, nil
		}
		if g.typ != w.typ || g.flags != w.flags || g.stream != w.stream || g.data != w.data {
			t.Fatalf("seed %d: frame %d: got %v %v %d %q, want %v %v %d %q", seed, i, g.typ, g.flags, g.stream, clip([]byte(g.data)), w.typ, w.flags, w.stream, clip([]byte(w.data)))
		}
	}
	return added
}

// TestParserEvents checks the stream events of a parse, whatever the cuts.
func TestParserEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stream, blocks := genStream(rng, genOpts{client: true, streams: 25, continuing: true, padding: true, tableSize: 200})
	summary := func(cuts int) []string {
		p := NewParser(true)
		var out []string
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(max(1, len(stream)/cuts)))
			p.Feed(rest[:k])
			rest = rest[k:]
			for _, ev := range p.Events() {
				out = append(out, fmt.Sprint(ev.Kind, ev.Stream, ev.EndStream, ev.Code, ev.LastStream, ev.Fields, ev.Reason))
			}
		}
		return out
	}
	whole := summary(1)
	n := 0
	for _, s := range whole {
		if strings.HasPrefix(s, fmt.Sprint(EvHeaders)) {
			n++
		}
	}
	if n != len(blocks) {
		t.Fatalf("%d header blocks reported, %d written:\n%s", n, len(blocks), strings.Join(whole, "\n"))
	}
	for _, cuts := range []int{2, 10, 1000, 100000} {
		if got := summary(cuts); !slices.Equal(got, whole) {
			t.Fatalf("%d cuts: events differ", cuts)
		}
	}
}

// TestParserOpaque: what is not HTTP/2, or stops being followable, goes
// opaque and reports why; nothing panics.
func TestParserOpaque(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client bool
		data   string
		reason httpstream.Reason
	}{
		{"http1", true, "GET / HTTP/1.1\r\n\r\n", ReasonPreface},
		{"continuation alone", false, "\x00\x00\x00\x09\x04\x00\x00\x00\x01", ReasonSequence},
		{"data in a block", false, "\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01", ReasonSequence},
		{"bad hpack index", false, "\x00\x00\x01\x01\x04\x00\x00\x00\x01\xff", ReasonHPACK},
		{"headers on stream 0", false, "\x00\x00\x01\x01\x04\x00\x00\x00\x00\x88", ReasonFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParser(tc.client)
			p.Feed([]byte(tc.data))
			if r, ok := p.Opaque(); !ok || r != tc.reason {
				t.Fatalf("opaque %v %q, want %q", ok, r, tc.reason)
			}
		})
	}
}

// TestRebuildLimits: a block whose last frame cannot grow within the peer's
// SETTINGS_MAX_FRAME_SIZE gets its fields in a CONTINUATION frame (END_HEADERS
// moves there, END_STREAM stays); a block past the peer's
// SETTINGS_MAX_HEADER_LIST_SIZE gets none.
func TestRebuildLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		valueLen  int
		pad       uint8
		peerList  uint32
		wantAdded bool
		wantConts int
	}{
		{"fits", 100, 0, 0, true, 0},
		{"full frame", 16300, 0, 0, true, 1},
		{"full padded frame", 16250, 90, 0, true, 1},
		{"list size at the limit", 100, 0, 100 + 200, false, 0},
		{"list size below the limit", 100, 0, 1 << 20, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf, hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			fields := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/a.B/C"},
				{Name: "x-big", Value: strings.Repeat("#", tc.valueLen)}} // Huffman coding does not shorten it
			for _, f := range fields {
				_ = enc.WriteField(f)
			}
			buf.WriteString(Preface)
			fr := http2.NewFramer(&buf, nil)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true, PadLength: tc.pad})
			stream := buf.Bytes()
			p := NewParser(true)
			p.Apply(Settings{MaxHeaderListSize: tc.peerList})
			r := httpstream.NewRewriterFor(p)
			var c tpInjector
			out := r.Write(stream, c.inject)
			wire := out.AppendTo(nil, stream)
			if m := r.Sent(len(wire)); m != len(stream) {
				t.Fatalf("Sent = %d, want %d", m, len(stream))
			}
			conts := 0
			for off := len(Preface); off < len(wire); {
				n := int(wire[off])<<16 | int(wire[off+1])<<8 | int(wire[off+2])
				if n > 16384 {
					t.Fatalf("a frame of %d bytes", n)
				}
				if http2.FrameType(wire[off+3]) == http2.FrameContinuation {
					conts++
				}
				off += 9 + n
			}
			if conts != tc.wantConts {
				t.Fatalf("%d CONTINUATION frames, want %d", conts, tc.wantConts)
			}
			got := readAsPeer(t, wire, true, 16384)
			if len(got) != 1 || got[0].flags != http2.FlagHeadersEndStream {
				t.Fatalf("peer read %+v", got)
			}
			want := fields
			if tc.wantAdded {
				want = append(slices.Clone(fields), expectAdded(genBlock{stream: 3, fields: fields}, true)...)
			}
			if !slices.Equal(got[0].fields, want) {
				t.Fatalf("peer decoded %d fields %v, want %d", len(got[0].fields), got[0].fields[len(got[0].fields)-1], len(want))
			}
		})
	}
}
