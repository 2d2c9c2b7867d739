package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The span codec is the binary form spans take between Rootline's own
// processes and in stores that keep a span as one value: a record of the
// Kafka ingest stage, a row of the Cassandra span store. It keeps every field
// of a Span exactly (every field of a Value too, not only the one its type
// names), so a span decodes as it was encoded.
//
// Layout (varints are encoding/binary's; str = uvarint length + bytes):
//
//	spans = version:u8 n:uvarint span×n
//	span  = trace:16 span:8 parent:8 service:str name:str kind:u8 start:varint
//	        duration:varint status:u8 statusMsg:str scope:str
//	        attrs resource events links
//	attrs = n:uvarint { key:str type:u8 str:str int:varint float:8 LE }
//	events = n:uvarint { time:varint name:str attrs }
//	links  = n:uvarint { trace:16 span:8 attrs }
//
// Decoding never trusts a count: each is checked against the bytes left, so
// a corrupt or hostile value costs at most its own size and yields
// ErrBadEncoding.
const codecV1 = 1

// ErrBadEncoding is returned for bytes that are not a valid span encoding.
var ErrBadEncoding = errors.New("malformed span encoding")

// AppendSpans appends the encoding of spans to dst.
func AppendSpans(dst []byte, spans []*Span) []byte {
	dst = append(dst, codecV1)
	dst = binary.AppendUvarint(dst, uint64(len(spans)))
	for _, s := range spans {
		dst = appendSpan(dst, s)
	}
	return dst
}

// EncodedSize returns the length of the encoding of one span (without the
// version and count), for callers that split batches by size.
func EncodedSize(s *Span) int {
	return len(appendSpan(nil, s))
}

func appendSpan(b []byte, s *Span) []byte {
	b = append(b, s.TraceID[:]...)
	b = append(b, s.SpanID[:]...)
	b = append(b, s.ParentSpanID[:]...)
	b = appendStr(b, s.Service)
	b = appendStr(b, s.Name)
	b = append(b, byte(s.Kind))
	b = binary.AppendVarint(b, s.Start)
	b = binary.AppendVarint(b, s.Duration)
	b = append(b, byte(s.StatusCode))
	b = appendStr(b, s.StatusMessage)
	b = appendStr(b, s.Scope)
	b = appendKVs(b, s.Attributes)
	b = appendKVs(b, s.Resource)
	b = binary.AppendUvarint(b, uint64(len(s.Events)))
	for _, e := range s.Events {
		b = binary.AppendVarint(b, e.Time)
		b = appendStr(b, e.Name)
		b = appendKVs(b, e.Attributes)
	}
	b = binary.AppendUvarint(b, uint64(len(s.Links)))
	for _, l := range s.Links {
		b = append(b, l.TraceID[:]...)
		b = append(b, l.SpanID[:]...)
		b = appendKVs(b, l.Attributes)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendKVs(b []byte, kvs []KeyValue) []byte {
	b = binary.AppendUvarint(b, uint64(len(kvs)))
	for _, kv := range kvs {
		b = appendStr(b, kv.Key)
		b = append(b, byte(kv.Value.Type))
		b = appendStr(b, kv.Value.Str)
		b = binary.AppendVarint(b, kv.Value.Int)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(kv.Value.Float))
	}
	return b
}

// DecodeSpans decodes what AppendSpans encoded. The spans share nothing with
// data.
func DecodeSpans(data []byte) ([]*Span, error) {
	d := codecDecoder{b: data}
	if v := d.byte(); d.err == nil && v != codecV1 {
		return nil, fmt.Errorf("%w: version %d", ErrBadEncoding, v)
	}
	// A span takes at least 43 bytes.
	n := d.count(43)
	out := make([]*Span, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.span())
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the last span", ErrBadEncoding, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

type codecDecoder struct {
	b   []byte
	err error
}

func (d *codecDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or invalid %s", ErrBadEncoding, what)
	}
	d.b = nil
}

func (d *codecDecoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *codecDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *codecDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items of at least minSize bytes each.
func (d *codecDecoder) count(minSize int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/minSize) {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *codecDecoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *codecDecoder) fixed(dst []byte) {
	if len(d.b) < len(dst) {
		d.fail("id")
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

func (d *codecDecoder) kvs() []KeyValue {
	// key, type, str, int, float: at least 1+1+1+1+8 bytes.
	n := d.count(12)
	if n == 0 {
		return nil
	}
	out := make([]KeyValue, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var kv KeyValue
		kv.Key = d.str()
		kv.Value.Type = ValueType(d.byte())
		kv.Value.Str = d.str()
		kv.Value.Int = d.varint()
		if len(d.b) < 8 {
			d.fail("float")
			break
		}
		kv.Value.Float = math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		out = append(out, kv)
	}
	return out
}

func (d *codecDecoder) span() *Span {
	s := &Span{}
	d.fixed(s.TraceID[:])
	d.fixed(s.SpanID[:])
	d.fixed(s.ParentSpanID[:])
	s.Service = d.str()
	s.Name = d.str()
	s.Kind = SpanKind(d.byte())
	s.Start = d.varint()
	s.Duration = d.varint()
	s.StatusCode = StatusCode(d.byte())
	s.StatusMessage = d.str()
	s.Scope = d.str()
	s.Attributes = d.kvs()
	s.Resource = d.kvs()
	if n := d.count(3); n > 0 {
		s.Events = make([]Event, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			e := Event{Time: d.varint(), Name: d.str()}
			e.Attributes = d.kvs()
			s.Events = append(s.Events, e)
		}
	}
	if n := d.count(25); n > 0 {
		s.Links = make([]Link, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			var l Link
			d.fixed(l.TraceID[:])
			d.fixed(l.SpanID[:])
			l.Attributes = d.kvs()
			s.Links = append(s.Links, l)
		}
	}
	return s
}
