package receiver

import (
	"fmt"
	"math"
	"slices"

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

// FromPdata translates every span of td into model spans. It refuses the whole
// batch, with an *InvalidError naming the first bad span, when a span has an
// empty or all-zero trace or span id, no start time, or ends before it starts:
// a receiver cannot store half a request and tell the client which half.
//
// The returned spans share no memory with td or with each other.
func FromPdata(td ptrace.Traces) ([]*model.Span, error) {
	out := make([]*model.Span, 0, td.SpanCount())
	for i, rs := range td.ResourceSpans().All() {
		resAttrs := rs.Resource().Attributes()
		resource := attributes(resAttrs)
		service := UnknownService
		if v, ok := resAttrs.Get(model.AttrServiceName); ok && v.AsString() != "" {
			service = v.AsString()
		}
		for j, ss := range rs.ScopeSpans().All() {
			scope := ss.Scope().Name()
			for k, ps := range ss.Spans().All() {
				s, reason := fromPdataSpan(ps)
				if reason != "" {
					return nil, invalidf(fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k), "%s", reason)
				}
				s.Service = service
				// Each span gets its own copy: consumers own their spans and may
				// change them (the pipeline adds attributes).
				s.Resource = slices.Clone(resource)
				s.Scope = scope
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// fromPdataSpan translates one span, or returns why it is invalid.
func fromPdataSpan(ps ptrace.Span) (*model.Span, string) {
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
	s := &model.Span{
		TraceID:       model.TraceID(ps.TraceID()),
		SpanID:        model.SpanID(ps.SpanID()),
		ParentSpanID:  model.SpanID(ps.ParentSpanID()),
		Name:          ps.Name(),
		Kind:          spanKind(ps.Kind()),
		Start:         int64(start),
		Duration:      int64(end - start),
		StatusCode:    statusCode(ps.Status().Code()),
		StatusMessage: ps.Status().Message(),
		Attributes:    attributes(ps.Attributes()),
	}
	if n := ps.Events().Len(); n > 0 {
		s.Events = make([]model.Event, 0, n)
		for i, e := range ps.Events().All() {
			t := uint64(e.Timestamp())
			if t > math.MaxInt64 {
				return nil, fmt.Sprintf("events[%d].timeUnixNano is past the year 2262", i)
			}
			s.Events = append(s.Events, model.Event{Time: int64(t), Name: e.Name(), Attributes: attributes(e.Attributes())})
		}
	}
	if n := ps.Links().Len(); n > 0 {
		s.Links = make([]model.Link, 0, n)
		for _, l := range ps.Links().All() {
			s.Links = append(s.Links, model.Link{
				TraceID:    model.TraceID(l.TraceID()),
				SpanID:     model.SpanID(l.SpanID()),
				Attributes: attributes(l.Attributes()),
			})
		}
	}
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

// attributes returns m as model attributes, nil when m is empty.
func attributes(m pcommon.Map) []model.KeyValue {
	if m.Len() == 0 {
		return nil
	}
	kvs := make([]model.KeyValue, 0, m.Len())
	for k, v := range m.All() {
		kvs = append(kvs, model.KeyValue{Key: k, Value: value(v)})
	}
	return kvs
}

// value converts one attribute value. Arrays and maps become their JSON text
// (model has no nested values); an empty value becomes the empty string.
func value(v pcommon.Value) model.Value {
	switch v.Type() {
	case pcommon.ValueTypeBool:
		var i int64
		if v.Bool() {
			i = 1
		}
		return model.Value{Type: model.TypeBool, Int: i}
	case pcommon.ValueTypeInt:
		return model.Value{Type: model.TypeInt, Int: v.Int()}
	case pcommon.ValueTypeDouble:
		return model.Value{Type: model.TypeFloat, Float: v.Double()}
	case pcommon.ValueTypeBytes:
		return model.Value{Type: model.TypeBytes, Str: string(v.Bytes().AsRaw())}
	case pcommon.ValueTypeStr:
		return model.Value{Type: model.TypeString, Str: v.Str()}
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		return model.Value{Type: model.TypeString, Str: v.AsString()}
	}
	return model.Value{Type: model.TypeString}
}
