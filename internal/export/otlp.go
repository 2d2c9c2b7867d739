package export

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/rootline/rootline/internal/model"
)

// AppendOTLP appends spans to dst as the protobuf bytes of an OTLP
// ExportTraceServiceRequest (what OTLP/HTTP carries), grouped by resource as
// ToPdata groups them, and returns the extended buffer. It writes the wire
// format directly: the same message as
// ptraceotlp.NewExportRequestFromTraces(ToPdata(spans)).MarshalProto(),
// without building the pdata tree, for senders of many small batches
// (`rootline run` ships once a second from every traced process).
func AppendOTLP(dst []byte, spans []*model.Span) []byte {
	type group struct {
		first *model.Span
		spans []*model.Span
	}
	var groups []group
	for _, s := range spans {
		i := slices.IndexFunc(groups, func(g group) bool { return sameResource(g.first, s) })
		if i < 0 {
			groups = append(groups, group{first: s})
			i = len(groups) - 1
		}
		groups[i].spans = append(groups[i].spans, s)
	}
	var e enc
	e.b = dst
	for _, g := range groups {
		rs := e.open(1)  // ExportTraceServiceRequest.resource_spans
		res := e.open(1) // ResourceSpans.resource
		hasService := false
		for _, kv := range g.first.Resource {
			e.keyValue(1, kv) // Resource.attributes
			hasService = hasService || kv.Key == model.AttrServiceName
		}
		if !hasService {
			e.keyValue(1, model.String(model.AttrServiceName, g.first.Service))
		}
		e.close(res)
		ss := e.open(2) // ResourceSpans.scope_spans
		sc := e.open(1) // ScopeSpans.scope
		e.str(1, g.first.Scope)
		e.close(sc)
		for _, s := range g.spans {
			e.span(s)
		}
		e.close(ss)
		e.close(rs)
	}
	return e.b
}

// sameResource reports whether a and b go under one ResourceSpans (ToPdata's
// resourceKey, compared without building it).
func sameResource(a, b *model.Span) bool {
	return a.Service == b.Service && a.Scope == b.Scope && slices.Equal(a.Resource, b.Resource)
}

// enc writes protobuf fields. A nested message is opened with room for a
// two-byte length, which close fills in (moving the message when its length
// needs another size).
type enc struct{ b []byte }

const lenRoom = 2

func (e *enc) tag(field, wire int) { e.b = binary.AppendUvarint(e.b, uint64(field<<3|wire)) }

func (e *enc) open(field int) int {
	e.tag(field, 2)
	e.b = append(e.b, make([]byte, lenRoom)...)
	return len(e.b)
}

func (e *enc) close(start int) {
	n := len(e.b) - start
	var lb [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(lb[:], uint64(n))
	if l != lenRoom {
		if l > lenRoom {
			e.b = append(e.b, make([]byte, l-lenRoom)...)
		}
		copy(e.b[start-lenRoom+l:], e.b[start:start+n])
		e.b = e.b[:start-lenRoom+l+n]
	}
	copy(e.b[start-lenRoom:], lb[:l])
}

func (e *enc) str(field int, s string) {
	if s == "" {
		return
	}
	e.tag(field, 2)
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *enc) bytes(field int, b []byte) {
	e.tag(field, 2)
	e.b = binary.AppendUvarint(e.b, uint64(len(b)))
	e.b = append(e.b, b...)
}

func (e *enc) varint(field int, v uint64) {
	if v == 0 {
		return
	}
	e.tag(field, 0)
	e.b = binary.AppendUvarint(e.b, v)
}

func (e *enc) fixed64(field int, v uint64) {
	if v == 0 {
		return
	}
	e.tag(field, 1)
	e.b = binary.LittleEndian.AppendUint64(e.b, v)
}

func (e *enc) traceID(field int, id model.TraceID) {
	if !id.IsZero() {
		e.bytes(field, id[:])
	}
}

func (e *enc) spanID(field int, id model.SpanID) {
	if !id.IsZero() {
		e.bytes(field, id[:])
	}
}

// keyValue writes a KeyValue message as field. Values are always written,
// zero ones included (an AnyValue with its field set), as pdata does.
func (e *enc) keyValue(field int, kv model.KeyValue) {
	m := e.open(field)
	e.str(1, kv.Key)
	v := e.open(2) // KeyValue.value (AnyValue)
	switch kv.Value.Type {
	case model.TypeBool:
		e.tag(2, 0)
		e.b = append(e.b, byte(b2u(kv.Value.Int != 0)))
	case model.TypeInt:
		e.tag(3, 0)
		e.b = binary.AppendUvarint(e.b, uint64(kv.Value.Int))
	case model.TypeFloat:
		e.tag(4, 1)
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(kv.Value.Float))
	case model.TypeBytes:
		e.bytes(7, []byte(kv.Value.Str))
	default:
		e.tag(1, 2)
		e.b = binary.AppendUvarint(e.b, uint64(len(kv.Value.Str)))
		e.b = append(e.b, kv.Value.Str...)
	}
	e.close(v)
	e.close(m)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (e *enc) span(s *model.Span) {
	m := e.open(2) // ScopeSpans.spans
	e.traceID(1, s.TraceID)
	e.spanID(2, s.SpanID)
	e.spanID(4, s.ParentSpanID)
	e.str(5, s.Name)
	e.varint(6, uint64(s.Kind))
	e.fixed64(7, uint64(s.Start))
	e.fixed64(8, uint64(s.End()))
	for _, kv := range s.Attributes {
		e.keyValue(9, kv)
	}
	for _, ev := range s.Events {
		em := e.open(11)
		e.fixed64(1, uint64(ev.Time))
		e.str(2, ev.Name)
		for _, kv := range ev.Attributes {
			e.keyValue(3, kv)
		}
		e.close(em)
	}
	for _, l := range s.Links {
		lm := e.open(13)
		e.traceID(1, l.TraceID)
		e.spanID(2, l.SpanID)
		for _, kv := range l.Attributes {
			e.keyValue(4, kv)
		}
		e.close(lm)
	}
	st := e.open(15) // Span.status
	e.str(2, s.StatusMessage)
	e.varint(3, uint64(s.StatusCode))
	e.close(st)
	e.close(m)
}
