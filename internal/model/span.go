// Package model holds Rootline's span representation: the flat, storage-friendly
// form every receiver produces and every store and API consumes.
//
// All timestamps are Unix nanoseconds; conversion happens at the edges (receivers
// and APIs), never inside the pipeline.
package model

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Attribute keys Rootline sets on spans. They are part of the public contract
// (docs/api.md): stock Jaeger and Grafana filters find anomalous spans through them.
const (
	AttrAnomaly     = "rootline.anomaly"
	AttrBaselineMs  = "rootline.baseline_ms"
	AttrThreshold   = "rootline.threshold"
	AttrArtifactIDs = "rootline.artifact.ids"
	AttrError       = "error"
	// AttrInFlight marks a provisional copy of a span whose request had not
	// ended when it was sent: `rootline run` reports a request open longer
	// than its operation usually takes, with the same trace and span ids and
	// its age so far as its duration (a lower bound). The span's final copy,
	// without the attribute, supersedes it.
	AttrInFlight = "rootline.in_flight"

	// Mirage wait model ("Request Reconstruction in MirageOS Unikernels",
	// §4): what a request waited on, in milliseconds, as `rootline run`
	// measured it at this hop.
	AttrWaitLocalMs  = "rootline.wait.local_ms"  // run-queue wait of the servicing threads
	AttrWaitNetMs    = "rootline.wait.net_ms"    // client time − downstream server time
	AttrWaitRemoteMs = "rootline.wait.remote_ms" // largest wait reported from below this hop
	// AttrWaitSocketMs: how long the request's first byte waited in the
	// service's socket before the service read it (part of local_ms; a
	// SERVER span starts at the byte's arrival).
	AttrWaitSocketMs = "rootline.wait.socket_ms"
	// AttrWaitResponseSocketMs: on a CLIENT span, how long the response's
	// first byte waited in the caller's socket before the caller read it:
	// the caller's wait (held off its CPU, busy elsewhere), not the
	// network's, so not in net_ms.
	AttrWaitResponseSocketMs = "rootline.wait.response_socket_ms"
	// AttrThreadIDs lists every thread that worked on a SERVER span's request
	// (its first is also in thread.id): with process.pid and the span's times
	// these are the thread↔request records the kernel analysis joins on.
	AttrThreadIDs = "rootline.thread.ids"
	AttrThreadID  = "thread.id" // OpenTelemetry semantic convention
	// AttrServerAddress is the host (and port) a CLIENT span called, as
	// OpenTelemetry's semantic conventions name it: the callee when the
	// callee left no span of its own.
	AttrServerAddress = "server.address"
	// AttrThreadIntervals says when a SERVER span's request was active on
	// each of its threads ("tid:from-to,…", microseconds after the span's
	// start; see FormatThreadIntervals): thread pools and event loops
	// hand a request between threads, or serve several on one.
	AttrThreadIntervals = "rootline.thread.intervals"

	AttrServiceName       = "service.name"
	AttrServiceInstanceID = "service.instance.id"
	AttrHostName          = "host.name"
	AttrProcessPID        = "process.pid"
)

// TraceID is a 16-byte W3C trace id.
type TraceID [16]byte

// SpanID is an 8-byte W3C span id.
type SpanID [8]byte

// ErrBadID is returned when a hex id has the wrong length or characters.
var ErrBadID = errors.New("malformed id")

// String returns the lowercase 32-character hex form.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// IsZero reports whether t is the all-zero (invalid) id.
func (t TraceID) IsZero() bool { return t == TraceID{} }

// String returns the lowercase 16-character hex form.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// IsZero reports whether s is the all-zero (invalid) id.
func (s SpanID) IsZero() bool { return s == SpanID{} }

// ParseTraceID parses a hex trace id. Shorter ids (64-bit Zipkin/Jaeger ids)
// are left-padded with zeros, as Jaeger does.
func ParseTraceID(s string) (TraceID, error) {
	var t TraceID
	if len(s) == 0 || len(s) > 32 {
		return t, fmt.Errorf("%w: trace id %q must be 1-32 hex digits", ErrBadID, s)
	}
	if len(s)%2 == 1 {
		s = "0" + s
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return t, fmt.Errorf("%w: trace id %q is not hex", ErrBadID, s)
	}
	copy(t[16-len(b):], b)
	return t, nil
}

// ParseSpanID parses a hex span id of 1-16 digits (left-padded with zeros).
func ParseSpanID(s string) (SpanID, error) {
	var id SpanID
	if len(s) == 0 || len(s) > 16 {
		return id, fmt.Errorf("%w: span id %q must be 1-16 hex digits", ErrBadID, s)
	}
	if len(s)%2 == 1 {
		s = "0" + s
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return id, fmt.Errorf("%w: span id %q is not hex", ErrBadID, s)
	}
	copy(id[8-len(b):], b)
	return id, nil
}

// SpanKind follows OTLP's numbering.
type SpanKind int8

// Span kinds, as in OTLP.
const (
	KindUnspecified SpanKind = 0
	KindInternal    SpanKind = 1
	KindServer      SpanKind = 2
	KindClient      SpanKind = 3
	KindProducer    SpanKind = 4
	KindConsumer    SpanKind = 5
)

// String returns the lowercase name used by Jaeger's span.kind tag.
func (k SpanKind) String() string {
	switch k {
	case KindInternal:
		return "internal"
	case KindServer:
		return "server"
	case KindClient:
		return "client"
	case KindProducer:
		return "producer"
	case KindConsumer:
		return "consumer"
	}
	return ""
}

// StatusCode follows OTLP's numbering.
type StatusCode int8

// Status codes, as in OTLP.
const (
	StatusUnset StatusCode = 0
	StatusOK    StatusCode = 1
	StatusError StatusCode = 2
)

// ValueType tells which field of a Value is set.
type ValueType int8

// Value types. Arrays and maps from OTLP are carried as their JSON text (TypeString).
const (
	TypeString ValueType = iota
	TypeBool
	TypeInt
	TypeFloat
	TypeBytes
)

// Value is a typed attribute value.
type Value struct {
	Type  ValueType `json:"t,omitempty"`
	Str   string    `json:"s,omitempty"` // also holds raw bytes for TypeBytes
	Int   int64     `json:"i,omitempty"` // also holds bools (0/1)
	Float float64   `json:"f,omitempty"`
}

// String returns the value's text form (as Jaeger shows tag values).
func (v Value) String() string {
	switch v.Type {
	case TypeBool:
		return strconv.FormatBool(v.Int != 0)
	case TypeInt:
		return strconv.FormatInt(v.Int, 10)
	case TypeFloat:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case TypeBytes:
		return hex.EncodeToString([]byte(v.Str))
	}
	return v.Str
}

// Number reads a numeric value whatever its producer chose to store it as: an
// int, a float or a decimal string. ok is false for anything else, and for
// NaN and infinities, which no measurement is.
func (v Value) Number() (f float64, ok bool) {
	switch v.Type {
	case TypeInt:
		f = float64(v.Int)
	case TypeFloat:
		f = v.Float
	case TypeString:
		var err error
		if f, err = strconv.ParseFloat(v.Str, 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// KeyValue is one attribute.
type KeyValue struct {
	Key   string `json:"k"`
	Value Value  `json:"v"`
}

// String, Bool, Int and Float build attributes.
func String(k, v string) KeyValue { return KeyValue{Key: k, Value: Value{Type: TypeString, Str: v}} }
func Bool(k string, v bool) KeyValue {
	return KeyValue{Key: k, Value: Value{Type: TypeBool, Int: b2i(v)}}
}
func Int(k string, v int64) KeyValue { return KeyValue{Key: k, Value: Value{Type: TypeInt, Int: v}} }
func Float(k string, v float64) KeyValue {
	return KeyValue{Key: k, Value: Value{Type: TypeFloat, Float: v}}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Event is a timestamped span event (a Jaeger "log").
type Event struct {
	Time       int64      `json:"t"`
	Name       string     `json:"n"`
	Attributes []KeyValue `json:"a,omitempty"`
}

// Link points at another span (a FOLLOWS_FROM reference in Jaeger terms).
type Link struct {
	TraceID    TraceID    `json:"tr"`
	SpanID     SpanID     `json:"sp"`
	Attributes []KeyValue `json:"a,omitempty"`
}

// Span is one finished operation.
type Span struct {
	TraceID       TraceID
	SpanID        SpanID
	ParentSpanID  SpanID
	Service       string // resource attribute service.name, "unknown_service" if absent
	Name          string
	Kind          SpanKind
	Start         int64 // Unix ns
	Duration      int64 // ns
	StatusCode    StatusCode
	StatusMessage string
	Attributes    []KeyValue
	// Resource holds the resource attributes (service.name included). Spans
	// of one resource may share this list: it is read-only, and appending
	// to it must copy it (receivers hand it out clipped).
	Resource []KeyValue
	Scope    string // instrumentation scope name
	Events   []Event
	Links    []Link
}

// End returns the span's end time in Unix ns.
func (s *Span) End() int64 { return s.Start + s.Duration }

// Attr returns the span attribute named key (span attributes first, then resource).
func (s *Span) Attr(key string) (Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return s.ResourceAttr(key)
}

// ResourceAttr returns the resource attribute named key.
func (s *Span) ResourceAttr(key string) (Value, bool) {
	for _, kv := range s.Resource {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return Value{}, false
}

// SetAttr replaces or appends a span attribute.
func (s *Span) SetAttr(kv KeyValue) {
	for i := range s.Attributes {
		if s.Attributes[i].Key == kv.Key {
			s.Attributes[i] = kv
			return
		}
	}
	s.Attributes = append(s.Attributes, kv)
}

// IsAnomalous reports whether the pipeline marked the span anomalous.
func (s *Span) IsAnomalous() bool {
	v, ok := s.Attr(AttrAnomaly)
	return ok && v.Type == TypeBool && v.Int != 0
}

// InFlight reports whether s is a provisional copy of a span whose request
// was still open (AttrInFlight): its duration is a lower bound.
func (s *Span) InFlight() bool {
	v, ok := s.Attr(AttrInFlight)
	return ok && v.Type == TypeBool && v.Int != 0
}

// IsError reports whether the span failed: OTLP status ERROR or an error=true tag.
func (s *Span) IsError() bool {
	if s.StatusCode == StatusError {
		return true
	}
	v, ok := s.Attr(AttrError)
	return ok && ((v.Type == TypeBool && v.Int != 0) || (v.Type == TypeString && v.Str == "true"))
}
