package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/rootline/rootline/internal/model"
)

// Spans are stored in segments: one row per trace per write batch, holding
// all of that trace's spans of the batch in a compact binary form. Writing
// one blob per trace instead of one wide row per span roughly triples
// ingest with this pure-Go SQLite (BenchmarkWriteSpans); the per-span search
// keys live in the narrow span_index table.
//
// Layout (varints are encoding/binary's; "str" is defined below):
//
//	segment = version:u8 n:uvarint base:varint header×n body×n
//	header  = span:8 parent:8 service:uvarint op:uvarint resource:uvarint
//	          (start-base):varint duration:varint flags:u8
//	body    = status:u8 statusMsg:str scope:str attrs events links
//	attrs   = n:uvarint { key:str value }
//	value   = head:u8 [type:u8 has:u8 if head==0xff] [str] [int:varint]
//	          [float:8 LE]; head = type<<3 | hasFloat<<2 | hasInt<<1 | hasStr
//	events  = n:uvarint { (time-start):varint name:str attrs }
//	links   = n:uvarint { trace:16 span:8 attrs }
//	str     = uvarint(len<<1) bytes      a literal, remembered by the reader
//	        | uvarint(i<<1 | 1)          the i-th literal of this segment
//
// Headers come first so the search and purge paths can read ids and times
// without decoding attributes. Strings repeat a lot within a trace
// (attribute keys, methods, routes, user agents); the per-segment dictionary
// stores each once. Every field of model.Value is kept, not only the one its
// type names, so a span reads back exactly as written.
const segmentV1 = 1

var errCorrupt = errors.New("sqlite: corrupt span data")

// maxDictString bounds the strings the encoder remembers; longer ones are
// rarely repeated and would only grow the map.
const maxDictString = 256

// spanKeys are the interned ids and flags of one span, resolved by the
// writer.
type spanKeys struct {
	service, op, resource int64
	flags                 int64 // flagAnomalous | flagError
}

// encoder builds segments; it is reused across segments and batches.
type encoder struct {
	buf  []byte
	dict map[string]int
}

func (e *encoder) str(s string) {
	if e.dict != nil && len(s) > 0 && len(s) <= maxDictString {
		if i, ok := e.dict[s]; ok {
			e.buf = binary.AppendUvarint(e.buf, uint64(i)<<1|1)
			return
		}
		e.dict[s] = len(e.dict)
	}
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s))<<1)
	e.buf = append(e.buf, s...)
}

func (e *encoder) value(v model.Value) {
	var has byte
	if v.Str != "" {
		has |= 1
	}
	if v.Int != 0 {
		has |= 2
	}
	if v.Float != 0 || math.Signbit(v.Float) {
		has |= 4
	}
	if v.Type >= 0 && v.Type < 31 {
		e.buf = append(e.buf, byte(v.Type)<<3|has)
	} else {
		e.buf = append(e.buf, 0xff, byte(v.Type), has)
	}
	if has&1 != 0 {
		e.str(v.Str)
	}
	if has&2 != 0 {
		e.buf = binary.AppendVarint(e.buf, v.Int)
	}
	if has&4 != 0 {
		e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(v.Float))
	}
}

func (e *encoder) kvs(kvs []model.KeyValue) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(kvs)))
	for i := range kvs {
		e.str(kvs[i].Key)
		e.value(kvs[i].Value)
	}
}

// segment encodes spans (all of one trace) with their interned ids and
// returns the encoding, valid until the next call.
func (e *encoder) segment(spans []*model.Span, keys []spanKeys) []byte {
	if e.dict == nil {
		e.dict = make(map[string]int)
	}
	clear(e.dict)
	base := spans[0].Start
	e.buf = append(e.buf[:0], segmentV1)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(spans)))
	e.buf = binary.AppendVarint(e.buf, base)
	for i, s := range spans {
		e.buf = append(e.buf, s.SpanID[:]...)
		e.buf = append(e.buf, s.ParentSpanID[:]...)
		e.buf = binary.AppendUvarint(e.buf, uint64(keys[i].service))
		e.buf = binary.AppendUvarint(e.buf, uint64(keys[i].op))
		e.buf = binary.AppendUvarint(e.buf, uint64(keys[i].resource))
		e.buf = binary.AppendVarint(e.buf, s.Start-base)
		e.buf = binary.AppendVarint(e.buf, s.Duration)
		e.buf = append(e.buf, byte(keys[i].flags))
	}
	for _, s := range spans {
		e.buf = append(e.buf, byte(s.StatusCode))
		e.str(s.StatusMessage)
		e.str(s.Scope)
		e.kvs(s.Attributes)
		e.buf = binary.AppendUvarint(e.buf, uint64(len(s.Events)))
		for i := range s.Events {
			ev := &s.Events[i]
			e.buf = binary.AppendVarint(e.buf, ev.Time-s.Start)
			e.str(ev.Name)
			e.kvs(ev.Attributes)
		}
		e.buf = binary.AppendUvarint(e.buf, uint64(len(s.Links)))
		for i := range s.Links {
			l := &s.Links[i]
			e.buf = append(e.buf, l.TraceID[:]...)
			e.buf = append(e.buf, l.SpanID[:]...)
			e.kvs(l.Attributes)
		}
	}
	return e.buf
}

// appendKVs encodes a bare attribute list without a dictionary (the
// resources.data column, which is also the resource's identity). A decoder
// reads it like any other attribute list.
func appendKVs(b []byte, kvs []model.KeyValue) []byte {
	e := encoder{buf: b}
	e.kvs(kvs)
	return e.buf
}

// header is the decoded fixed part of a span in a segment.
type header struct {
	spanID, parentID model.SpanID
	service, op      int64
	resource         int64
	start, duration  int64
	flags            int64
}

// decoder reads the format above. The first error sticks; later reads return
// zero values, so callers check err once at the end.
type decoder struct {
	b       []byte
	dict    []string
	rawDict [][]byte
	err     error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	x := d.uvarint()
	if x&1 == 1 {
		i := x >> 1
		if i >= uint64(len(d.dict)) {
			d.fail()
			return ""
		}
		return d.dict[i]
	}
	n := x >> 1
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	if n > 0 && n <= maxDictString {
		d.dict = append(d.dict, s)
	}
	return s
}

func (d *decoder) fixed(dst []byte) {
	if len(d.b) < len(dst) {
		d.fail()
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

// count reads a collection length and bounds it by the bytes left (every
// element takes at least one byte), so corrupt data cannot make us allocate
// huge slices.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) value() model.Value {
	var v model.Value
	head := d.byte()
	var has byte
	if head == 0xff {
		v.Type = model.ValueType(int8(d.byte()))
		has = d.byte()
	} else {
		v.Type = model.ValueType(head >> 3)
		has = head & 7
	}
	if has&1 != 0 {
		v.Str = d.str()
	}
	if has&2 != 0 {
		v.Int = d.varint()
	}
	if has&4 != 0 {
		var b [8]byte
		d.fixed(b[:])
		v.Float = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	}
	return v
}

func (d *decoder) kvs() []model.KeyValue {
	n := d.count()
	if n == 0 {
		return nil
	}
	kvs := make([]model.KeyValue, n)
	for i := range kvs {
		kvs[i].Key = d.str()
		kvs[i].Value = d.value()
	}
	return kvs
}

// headers decodes the span headers of a segment and leaves d at the bodies.
func (d *decoder) headers(dst []header) []header {
	if v := d.byte(); v != segmentV1 {
		if d.err == nil {
			d.err = fmt.Errorf("%w: unknown segment version %d", errCorrupt, v)
		}
		return dst
	}
	// A header takes at least 22 bytes.
	n := d.count()
	if n > len(d.b)/22+1 {
		d.fail()
		return dst
	}
	base := d.varint()
	for range n {
		var h header
		d.fixed(h.spanID[:])
		d.fixed(h.parentID[:])
		h.service = int64(d.uvarint())
		h.op = int64(d.uvarint())
		h.resource = int64(d.uvarint())
		h.start = base + d.varint()
		h.duration = d.varint()
		h.flags = int64(d.byte())
		dst = append(dst, h)
	}
	return dst
}

// decodeHeaders returns the span headers of a segment.
func decodeHeaders(data []byte) ([]header, error) {
	d := decoder{b: data}
	hs := d.headers(nil)
	return hs, d.err
}

// decodeSegment decodes a whole segment. The spans get their headers and
// bodies; naming (service, operation, resource) is left to the caller, which
// resolves hdrs[i]'s ids.
func decodeSegment(trace model.TraceID, data []byte) ([]*model.Span, []header, error) {
	d := decoder{b: data}
	hdrs := d.headers(nil)
	if d.err != nil {
		return nil, nil, d.err
	}
	spans := make([]*model.Span, len(hdrs))
	all := make([]model.Span, len(hdrs))
	for i := range spans {
		h := &hdrs[i]
		s := &all[i]
		s.TraceID, s.SpanID, s.ParentSpanID = trace, h.spanID, h.parentID
		s.Start, s.Duration = h.start, h.duration
		s.StatusCode = model.StatusCode(int8(d.byte()))
		s.StatusMessage = d.str()
		s.Scope = d.str()
		s.Attributes = d.kvs()
		if n := d.count(); n > 0 {
			s.Events = make([]model.Event, n)
			for j := range s.Events {
				e := &s.Events[j]
				e.Time = s.Start + d.varint()
				e.Name = d.str()
				e.Attributes = d.kvs()
			}
		}
		if n := d.count(); n > 0 {
			s.Links = make([]model.Link, n)
			for j := range s.Links {
				l := &s.Links[j]
				d.fixed(l.TraceID[:])
				d.fixed(l.SpanID[:])
				l.Attributes = d.kvs()
			}
		}
		spans[i] = s
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	if len(d.b) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return spans, hdrs, nil
}

// decodeKVs decodes a bare attribute list (the resources.data column).
func decodeKVs(data []byte) ([]model.KeyValue, error) {
	d := decoder{b: data}
	kvs := d.kvs()
	if d.err == nil && len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return kvs, d.err
}

// The functions below walk a segment without building spans, for the
// search path that checks tags on many candidate spans. Strings stay byte
// slices into the segment (rawDict is the dictionary of those).

func (d *decoder) strBytes() []byte {
	x := d.uvarint()
	if x&1 == 1 {
		i := x >> 1
		if i >= uint64(len(d.rawDict)) {
			d.fail()
			return nil
		}
		return d.rawDict[i]
	}
	n := x >> 1
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	if n > 0 && n <= maxDictString {
		d.rawDict = append(d.rawDict, s)
	}
	return s
}

// rawValue reads a value; Str is left empty and returned as bytes instead.
func (d *decoder) rawValue() (model.Value, []byte) {
	var v model.Value
	var str []byte
	head := d.byte()
	var has byte
	if head == 0xff {
		v.Type = model.ValueType(int8(d.byte()))
		has = d.byte()
	} else {
		v.Type = model.ValueType(head >> 3)
		has = head & 7
	}
	if has&1 != 0 {
		str = d.strBytes()
	}
	if has&2 != 0 {
		v.Int = d.varint()
	}
	if has&4 != 0 {
		var b [8]byte
		d.fixed(b[:])
		v.Float = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	}
	return v, str
}

func (d *decoder) skipKVs() {
	for n := d.count(); n > 0 && d.err == nil; n-- {
		d.strBytes()
		d.rawValue()
	}
}

func (d *decoder) skipBody() {
	d.byte()
	d.strBytes()
	d.strBytes()
	d.skipKVs()
	for n := d.count(); n > 0 && d.err == nil; n-- {
		d.varint()
		d.strBytes()
		d.skipKVs()
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		var id [24]byte
		d.fixed(id[:])
		d.skipKVs()
	}
}

// valueText reports whether v (with its string field in str) has the text
// form text, as model.Value.String renders it.
func valueText(v model.Value, str []byte, text string) bool {
	if v.Type == model.TypeString {
		return string(str) == text
	}
	v.Str = string(str)
	return v.String() == text
}

// tagMatcher checks TraceQuery.Tags against spans in encoded segments.
type tagMatcher struct {
	keys, vals []string
	hit        []bool
	d          decoder
}

func newTagMatcher(tags map[string]string) *tagMatcher {
	m := &tagMatcher{}
	for k, v := range tags {
		m.keys = append(m.keys, k)
		m.vals = append(m.vals, v)
	}
	m.hit = make([]bool, len(m.keys))
	return m
}

// spanAttrs matches the span attributes of the idx-th span of a segment.
// It returns, in m.hit, which tags matched, and the span's resource id for
// the caller to match the rest against.
func (m *tagMatcher) spanAttrs(data []byte, idx int) (resource int64, err error) {
	clear(m.hit)
	d := &m.d
	*d = decoder{b: data, rawDict: d.rawDict[:0]}
	if v := d.byte(); v != segmentV1 {
		return 0, fmt.Errorf("%w: unknown segment version %d", errCorrupt, v)
	}
	n := d.count()
	if idx < 0 || idx >= n {
		return 0, fmt.Errorf("%w: span %d of a %d-span segment", errCorrupt, idx, n)
	}
	d.varint()
	for i := range n {
		var skip [16]byte
		d.fixed(skip[:])
		d.uvarint()
		d.uvarint()
		res := int64(d.uvarint())
		d.varint()
		d.varint()
		d.byte()
		if i == idx {
			resource = res
		}
	}
	for range idx {
		d.skipBody()
	}
	d.byte()
	d.strBytes()
	d.strBytes()
	for n := d.count(); n > 0 && d.err == nil; n-- {
		key := d.strBytes()
		v, str := d.rawValue()
		for i, k := range m.keys {
			if !m.hit[i] && string(key) == k && valueText(v, str, m.vals[i]) {
				m.hit[i] = true
			}
		}
	}
	return resource, d.err
}
