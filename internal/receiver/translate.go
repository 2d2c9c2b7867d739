package receiver

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/rootline/rootline/internal/model"
)

// UnknownService is the service of spans whose resource names none, as the
// OpenTelemetry SDKs default it.
const UnknownService = "unknown_service"

// InvalidError reports a payload the receivers refuse because of its content.
// Path locates the offending element in the payload, in the payload's own field
// names, e.g. "resourceSpans[0].scopeSpans[1].spans[3]" or "spans[2]".
type InvalidError struct {
	Path   string
	Reason string
}

// Error returns "path: reason", or the reason alone when there is no path.
func (e *InvalidError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

func invalidf(path, format string, args ...any) *InvalidError {
	return &InvalidError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// FromPdata translates every span of td into model spans, within lim (see
// Limits: what is over a count limit is dropped and counted, what is over a
// length limit truncated). It refuses the whole batch, with an *InvalidError
// naming the first bad span, when a span has an empty or all-zero trace or
// span id, no start time, or ends before it starts, or when an attribute
// value nests deeper than lim.MaxAttributeDepth: a receiver cannot store half
// a request and tell the client which half.
//
// The returned spans share no memory with td. Spans of one resource share its
// attribute list, clipped so that appending to one span's list copies it: a
// request of many small spans under a large resource must not multiply the
// resource by the spans (nothing changes resource attributes in place).
func FromPdata(td ptrace.Traces, lim Limits) ([]*model.Span, error) {
	lim = lim.withDefaults()
	out := make([]*model.Span, 0, td.SpanCount())
	for i, rs := range td.ResourceSpans().All() {
		res := rs.Resource()
		path := func() string { return fmt.Sprintf("resourceSpans[%d].resource", i) }
		resource, reason := lim.attributes(res.Attributes(), res.DroppedAttributesCount())
		if reason != "" {
			return nil, invalidf(path(), "%s", reason)
		}
		service := UnknownService
		if v, ok := res.Attributes().Get(model.AttrServiceName); ok {
			name := v.Str()
			if v.Type() != pcommon.ValueTypeStr {
				name, _ = lim.AttrString(v)
			}
			if name != "" {
				service = truncate(name, lim.MaxNameBytes)
			}
		}
		for j, ss := range rs.ScopeSpans().All() {
			scope := truncate(ss.Scope().Name(), lim.MaxNameBytes)
			for k, ps := range ss.Spans().All() {
				s, reason := lim.span(ps)
				if reason != "" {
					return nil, invalidf(fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k), "%s", reason)
				}
				s.Service = service
				s.Resource = slices.Clip(resource)
				s.Scope = scope
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// span translates one span, or returns why it is invalid.
func (l Limits) span(ps ptrace.Span) (*model.Span, string) {
	if ps.TraceID().IsEmpty() {
		return nil, "traceId is all zeros or empty"
	}
	if ps.SpanID().IsEmpty() {
		return nil, "spanId is all zeros or empty"
	}
	start, end := uint64(ps.StartTimestamp()), uint64(ps.EndTimestamp())
	switch {
	case start == 0:
		return nil, "startTimeUnixNano is missing"
	case start > math.MaxInt64 || end > math.MaxInt64:
		return nil, "startTimeUnixNano or endTimeUnixNano is past the year 2262"
	case end < start:
		return nil, fmt.Sprintf("endTimeUnixNano %d is before startTimeUnixNano %d", end, start)
	}
	attrs, reason := l.attributes(ps.Attributes(), ps.DroppedAttributesCount())
	if reason != "" {
		return nil, "attributes: " + reason
	}
	s := &model.Span{
		TraceID:       model.TraceID(ps.TraceID()),
		SpanID:        model.SpanID(ps.SpanID()),
		ParentSpanID:  model.SpanID(ps.ParentSpanID()),
		Name:          truncate(ps.Name(), l.MaxNameBytes),
		Kind:          spanKind(ps.Kind()),
		Start:         int64(start),
		Duration:      int64(end - start),
		StatusCode:    statusCode(ps.Status().Code()),
		StatusMessage: truncate(ps.Status().Message(), l.MaxValueBytes),
		Attributes:    attrs,
	}
	events := ps.Events()
	if n := min(events.Len(), l.MaxEvents); n > 0 {
		s.Events = make([]model.Event, 0, n)
		for i := range n {
			e := events.At(i)
			t := uint64(e.Timestamp())
			if t > math.MaxInt64 {
				return nil, fmt.Sprintf("events[%d].timeUnixNano is past the year 2262", i)
			}
			ea, reason := l.attributes(e.Attributes(), e.DroppedAttributesCount())
			if reason != "" {
				return nil, fmt.Sprintf("events[%d].attributes: %s", i, reason)
			}
			s.Events = append(s.Events, model.Event{Time: int64(t), Name: truncate(e.Name(), l.MaxNameBytes), Attributes: ea})
		}
	}
	links := ps.Links()
	if n := min(links.Len(), l.MaxLinks); n > 0 {
		s.Links = make([]model.Link, 0, n)
		for i := range n {
			lk := links.At(i)
			la, reason := l.attributes(lk.Attributes(), lk.DroppedAttributesCount())
			if reason != "" {
				return nil, fmt.Sprintf("links[%d].attributes: %s", i, reason)
			}
			s.Links = append(s.Links, model.Link{TraceID: model.TraceID(lk.TraceID()), SpanID: model.SpanID(lk.SpanID()), Attributes: la})
		}
	}
	s.Attributes = appendDropped(s.Attributes, AttrDroppedEvents, int64(ps.DroppedEventsCount())+int64(events.Len()-len(s.Events)))
	s.Attributes = appendDropped(s.Attributes, AttrDroppedLinks, int64(ps.DroppedLinksCount())+int64(links.Len()-len(s.Links)))
	return s, ""
}

func spanKind(k ptrace.SpanKind) model.SpanKind {
	if k < ptrace.SpanKindUnspecified || k > ptrace.SpanKindConsumer {
		return model.KindUnspecified
	}
	// OTLP's numbering, which model.SpanKind follows.
	return model.SpanKind(k)
}

func statusCode(c ptrace.StatusCode) model.StatusCode {
	if c < ptrace.StatusCodeUnset || c > ptrace.StatusCodeError {
		return model.StatusUnset
	}
	return model.StatusCode(c)
}

// attributes returns m as model attributes within the limits, nil when there
// are none: the first MaxAttributes attributes whose keys fit MaxNameBytes
// are kept, and the others counted, with clientDropped (the element's own
// OTLP dropped count), in AttrDroppedAttributes. A value nested too deep
// makes it return the reason instead.
func (l Limits) attributes(m pcommon.Map, clientDropped uint32) ([]model.KeyValue, string) {
	dropped := int64(clientDropped)
	if m.Len() == 0 && dropped == 0 {
		return nil, ""
	}
	kvs := make([]model.KeyValue, 0, min(m.Len(), l.MaxAttributes)+1)
	for k, v := range m.All() {
		if len(kvs) >= l.MaxAttributes || len(k) > l.MaxNameBytes {
			dropped++
			// A dropped value is still checked: the request is refused
			// for its depth whether or not the value would be kept.
			if tooDeep(v, l.MaxAttributeDepth) {
				return nil, depthError(l.MaxAttributeDepth)
			}
			continue
		}
		mv, ok := l.value(v)
		if !ok {
			return nil, depthError(l.MaxAttributeDepth)
		}
		kvs = append(kvs, model.KeyValue{Key: k, Value: mv})
	}
	kvs = appendDropped(kvs, AttrDroppedAttributes, dropped)
	if len(kvs) == 0 {
		return nil, ""
	}
	return kvs, ""
}

// value converts one attribute value: strings and bytes truncated to
// MaxValueBytes, arrays and maps as their JSON text (model has no nested
// values), truncated too; an empty value becomes the empty string. It
// returns false when the value nests deeper than MaxAttributeDepth.
func (l Limits) value(v pcommon.Value) (model.Value, bool) {
	switch v.Type() {
	case pcommon.ValueTypeBool:
		var i int64
		if v.Bool() {
			i = 1
		}
		return model.Value{Type: model.TypeBool, Int: i}, true
	case pcommon.ValueTypeInt:
		return model.Value{Type: model.TypeInt, Int: v.Int()}, true
	case pcommon.ValueTypeDouble:
		return model.Value{Type: model.TypeFloat, Float: v.Double()}, true
	case pcommon.ValueTypeBytes:
		return model.Value{Type: model.TypeBytes, Str: string(truncateBytes(v.Bytes().AsRaw(), l.MaxValueBytes))}, true
	case pcommon.ValueTypeStr:
		return model.Value{Type: model.TypeString, Str: truncate(v.Str(), l.MaxValueBytes)}, true
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		s, ok := jsonText(v, l.MaxAttributeDepth, l.MaxValueBytes)
		return model.Value{Type: model.TypeString, Str: s}, ok
	}
	return model.Value{Type: model.TypeString}, true
}

// AttrString is v's text, as a metric label or a service name: strings as
// they are, arrays and maps as JSON, within lim. ok is false when v nests
// deeper than lim.MaxAttributeDepth.
func (l Limits) AttrString(v pcommon.Value) (s string, ok bool) {
	switch v.Type() {
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		return jsonText(v, l.MaxAttributeDepth, l.MaxValueBytes)
	case pcommon.ValueTypeBytes:
		return truncate(base64.StdEncoding.EncodeToString(truncateBytes(v.Bytes().AsRaw(), l.MaxValueBytes)), l.MaxValueBytes), true
	}
	return truncate(v.AsString(), l.MaxValueBytes), true
}

// tooDeep reports whether v nests deeper than depth.
func tooDeep(v pcommon.Value, depth int) bool {
	if t := v.Type(); t != pcommon.ValueTypeSlice && t != pcommon.ValueTypeMap {
		return false
	}
	_, ok := jsonText(v, depth, 0)
	return !ok
}

// jsonFrame is one array or map being written by jsonText.
type jsonFrame struct {
	slice pcommon.Slice
	kvs   []mapEntry // a map's entries, sorted by key
	isMap bool
	next  int
}

type mapEntry struct {
	key string
	val pcommon.Value
}

// jsonText writes an array or map value (only) as JSON text — the text
// pcommon.Value.AsString gives, with map keys sorted — keeping at most
// maxBytes of it (cut at a UTF-8 boundary), and reports false when the value
// nests deeper than maxDepth. It walks the value with an explicit stack, never
// recursing: the depth of untrusted input must not decide the depth of the
// goroutine's stack. Past maxBytes it keeps walking, without writing, so that
// the depth check covers the whole value.
func jsonText(v pcommon.Value, maxDepth, maxBytes int) (string, bool) {
	var buf []byte
	full := false
	write := func(b ...byte) {
		if full {
			return
		}
		buf = append(buf, b...)
		if len(buf) > maxBytes {
			full = true
		}
	}
	var stack []jsonFrame
	// open starts writing container value c, or reports false when it is
	// one level too many.
	open := func(c pcommon.Value) bool {
		if len(stack) >= maxDepth {
			return false
		}
		if c.Type() == pcommon.ValueTypeSlice {
			write('[')
			stack = append(stack, jsonFrame{slice: c.Slice()})
			return true
		}
		m := c.Map()
		kvs := make([]mapEntry, 0, m.Len())
		for k, v := range m.All() {
			kvs = append(kvs, mapEntry{k, v})
		}
		// A map decoded from the wire may repeat a key; like AsRaw, the
		// last one wins.
		slices.SortStableFunc(kvs, func(a, b mapEntry) int { return cmp.Compare(a.key, b.key) })
		uniq := kvs[:0]
		for i, e := range kvs {
			if i+1 < len(kvs) && kvs[i+1].key == e.key {
				continue
			}
			uniq = append(uniq, e)
		}
		write('{')
		stack = append(stack, jsonFrame{kvs: uniq, isMap: true})
		return true
	}
	if !open(v) {
		return "", false
	}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		var n int
		if f.isMap {
			n = len(f.kvs)
		} else {
			n = f.slice.Len()
		}
		if f.next == n {
			if f.isMap {
				write('}')
			} else {
				write(']')
			}
			stack = stack[:len(stack)-1]
			continue
		}
		if f.next > 0 {
			write(',')
		}
		var elem pcommon.Value
		if f.isMap {
			if !full {
				buf = appendJSONString(buf, f.kvs[f.next].key)
				write(':')
			}
			elem = f.kvs[f.next].val
		} else {
			elem = f.slice.At(f.next)
		}
		f.next++
		switch elem.Type() {
		case pcommon.ValueTypeSlice, pcommon.ValueTypeMap:
			if !open(elem) {
				return "", false
			}
		default:
			if !full {
				buf = appendJSONScalar(buf, elem)
				full = len(buf) > maxBytes
			}
		}
	}
	if len(buf) > maxBytes {
		return truncate(string(buf[:maxBytes+1]), maxBytes), true
	}
	return string(buf), true
}

// appendJSONScalar appends a scalar value as encoding/json would write its
// AsRaw form; doubles JSON cannot hold (NaN, ±Inf) become strings rather
// than making the whole value fail.
func appendJSONScalar(b []byte, v pcommon.Value) []byte {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return appendJSONString(b, v.Str())
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(b, v.Bool())
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(b, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		f := v.Double()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return appendJSONString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return appendJSONFloat(b, f)
	case pcommon.ValueTypeBytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes().AsRaw())
		return append(b, '"')
	}
	return append(b, "null"...)
}

// appendJSONFloat formats f as encoding/json does.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}

// appendJSONString appends s as a JSON string, escaped as encoding/json does
// without HTML escaping; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
