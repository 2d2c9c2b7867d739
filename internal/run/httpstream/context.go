package httpstream

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strings"
)

// Names of the propagation headers, lower case as they are injected; they
// are matched ignoring case.
const (
	HeaderTraceparent    = "traceparent"
	HeaderTracestate     = "tracestate"
	HeaderB3             = "b3"
	HeaderB3TraceID      = "x-b3-traceid"
	HeaderB3SpanID       = "x-b3-spanid"
	HeaderB3ParentSpanID = "x-b3-parentspanid"
	HeaderB3Sampled      = "x-b3-sampled"
	HeaderB3Flags        = "x-b3-flags"
	HeaderRequestID      = "x-request-id"
)

const (
	// maxTraceState is what W3C Trace Context asks vendors to propagate at
	// least; longer lists are cut as its §3.3.1.5 says.
	maxTraceState        = 512
	maxTraceStateMembers = 32
	maxTraceStateEntry   = 128
	// maxTraceStateFields bounds the tracestate fields of one head that are
	// combined (the datapath records that many): more than 32 non-empty
	// fields cannot make a list of at most 32 members unless some are only
	// commas and whitespace.
	maxTraceStateFields = 32
	maxRequestID        = 256
)

// TraceID identifies a trace. The zero value is invalid.
type TraceID [16]byte

// IsValid reports whether t is not all zeros.
func (t TraceID) IsValid() bool { return t != TraceID{} }

// String returns t as 32 lower-case hex digits.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// SpanID identifies a span. The zero value is invalid.
type SpanID [8]byte

// IsValid reports whether s is not all zeros.
func (s SpanID) IsValid() bool { return s != SpanID{} }

// String returns s as 16 lower-case hex digits.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// Context is the trace context a request carries.
type Context struct {
	TraceID TraceID
	// SpanID is the sender's span: the parent of the receiver's spans.
	SpanID SpanID
	// Sampled is the sender's sampling decision; a B3 context that defers the
	// decision counts as sampled.
	Sampled bool
	// TraceState is the W3C tracestate list, propagated as is.
	TraceState string
	// RequestID is the x-request-id value, if any.
	RequestID string
}

// ExtractContext reads a trace context from a request's headers. It tries,
// in order, W3C traceparent (with tracestate), the B3 single header and the
// X-B3-* headers, and takes the first valid one; ok reports whether one was
// found. RequestID is filled from x-request-id whether or not ok is true.
// Header names match ignoring case; invalid values are ignored (a zero trace
// or span id, a traceparent of version ff or with upper-case hex, more than
// one traceparent).
func ExtractContext(h Headers) (ctx Context, ok bool) {
	var (
		tp, b3, xTrace, xSpan, xSampled, xFlags []byte
		tpCount, tsCount                        int
		ridSeen                                 bool
	)
	for i := range h {
		name, v := h[i].Name, h[i].Value
		switch {
		case equalFold(name, HeaderTraceparent):
			tp = v
			tpCount++
		case equalFold(name, HeaderTracestate):
			tsCount++
		case equalFold(name, HeaderB3):
			if b3 == nil {
				b3 = v
			}
		case equalFold(name, HeaderB3TraceID):
			if xTrace == nil {
				xTrace = v
			}
		case equalFold(name, HeaderB3SpanID):
			if xSpan == nil {
				xSpan = v
			}
		case equalFold(name, HeaderB3Sampled):
			if xSampled == nil {
				xSampled = v
			}
		case equalFold(name, HeaderB3Flags):
			if xFlags == nil {
				xFlags = v
			}
		case equalFold(name, HeaderRequestID):
			// The first x-request-id only, as the datapath reads it.
			if !ridSeen && validRequestID(v) {
				ctx.RequestID = string(v)
			}
			ridSeen = true
		}
	}
	if tpCount == 1 {
		if ctx.TraceID, ctx.SpanID, ctx.Sampled, ok = parseTraceparent(tp); ok {
			if tsCount > 0 {
				ctx.TraceState = traceState(h)
			}
			return ctx, true
		}
	}
	if b3 != nil {
		if ctx.TraceID, ctx.SpanID, ctx.Sampled, ok = parseB3(b3); ok {
			return ctx, true
		}
	}
	if xTrace != nil && xSpan != nil {
		ctx.TraceID, ok = parseB3TraceID(xTrace)
		if ok {
			ctx.SpanID, ok = parseSpanID(xSpan, false)
		}
		if ok {
			ctx.Sampled = true
			switch {
			case equalFold(xFlags, "1"):
			case equalFold(xSampled, "0"), equalFold(xSampled, "false"):
				ctx.Sampled = false
			}
			return ctx, true
		}
	}
	ctx.TraceID, ctx.SpanID, ctx.Sampled = TraceID{}, SpanID{}, false
	return ctx, false
}

// SamplingDenied reports whether a request without a trace context carries
// a B3 decision not to sample: `b3: 0` (the single header's sampling-only
// form) or `X-B3-Sampled: 0` without trace and span ids. A trace started for
// it is then not sampled, and says so downstream.
func SamplingDenied(h Headers) bool {
	if h.Has(HeaderB3) {
		return string(h.Get(HeaderB3)) == "0"
	}
	if h.Has(HeaderB3TraceID) || h.Has(HeaderB3SpanID) {
		return false
	}
	s := h.Get(HeaderB3Sampled)
	return equalFold(s, "0") || equalFold(s, "false")
}

// parseTraceparent parses "VV-TTTT…-SSSS…-FF" (W3C Trace Context §3.2):
// lower-case hex only; version 00 is exactly 55 bytes long, later versions
// may append "-…"; version ff is invalid.
func parseTraceparent(v []byte) (t TraceID, s SpanID, sampled, ok bool) {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return t, s, false, false
	}
	var ver, flags [1]byte
	if !decodeHex(ver[:], v[0:2], true) || ver[0] == 0xff ||
		!decodeHex(t[:], v[3:35], true) || !decodeHex(s[:], v[36:52], true) ||
		!decodeHex(flags[:], v[53:55], true) {
		return t, s, false, false
	}
	if ver[0] == 0 && len(v) != 55 || len(v) > 55 && v[55] != '-' {
		return t, s, false, false
	}
	if !t.IsValid() || !s.IsValid() {
		return t, s, false, false
	}
	return t, s, flags[0]&1 == 1, true
}

// parseB3 parses the B3 single header "{trace}-{span}[-{sampling}[-{parent}]]"
// (github.com/openzipkin/b3-propagation). A header carrying only a sampling
// decision has no context.
func parseB3(v []byte) (t TraceID, s SpanID, sampled, ok bool) {
	var parts [4][]byte
	n := 0
	for {
		if n == len(parts) {
			return t, s, false, false
		}
		k := bytes.IndexByte(v, '-')
		if k < 0 {
			parts[n] = v
			n++
			break
		}
		parts[n], v = v[:k], v[k+1:]
		n++
	}
	if n < 2 {
		return t, s, false, false
	}
	if t, ok = parseB3TraceID(parts[0]); !ok {
		return t, s, false, false
	}
	if s, ok = parseSpanID(parts[1], false); !ok {
		return t, s, false, false
	}
	sampled = true
	if n >= 3 {
		switch string(parts[2]) {
		case "1", "d":
		case "0":
			sampled = false
		default:
			return t, s, false, false
		}
	}
	if n == 4 {
		if _, ok = parseSpanID(parts[3], false); !ok {
			return t, s, false, false
		}
	}
	return t, s, sampled, true
}

// parseB3TraceID parses a 64- or 128-bit B3 trace id; a 64-bit one fills the
// low half.
func parseB3TraceID(v []byte) (t TraceID, ok bool) {
	switch len(v) {
	case 16:
		ok = decodeHex(t[8:], v, false)
	case 32:
		ok = decodeHex(t[:], v, false)
	}
	return t, ok && t.IsValid()
}

func parseSpanID(v []byte, lowerOnly bool) (s SpanID, ok bool) {
	if len(v) != 16 || !decodeHex(s[:], v, lowerOnly) {
		return s, false
	}
	return s, s.IsValid()
}

// traceState combines the tracestate fields of h into one list (W3C Trace
// Context §3.3.1: fields in order, joined by commas) and returns it as it is
// propagated, or "" when there is nothing valid to propagate. The rules,
// which the in-kernel datapath (bpf/run/context.h, decode_ts) follows byte
// for byte:
//
//   - Empty list members and the optional whitespace (SP, HTAB) around
//     members are dropped; members are joined by "," alone.
//   - A member is key "=" value. A key is a simple key (a lower-case letter,
//     then up to 255 of a-z 0-9 _ - * /) or tenant@system (tenant: a letter
//     or digit, then up to 240 of them; system: a letter, then up to 13). A
//     value is 1 to 256 printable ASCII characters other than "," and "=",
//     not ending in a space (trailing spaces are whitespace).
//   - Any invalid member, a key that appears twice, more than 32 members or
//     more than maxTraceStateFields non-empty tracestate fields make the
//     whole list invalid: it is dropped (the traceparent is still used).
//   - A list longer than maxTraceState characters is cut by whole members:
//     first every member longer than maxTraceStateEntry, then members from
//     the end until it fits.
func traceState(h Headers) string {
	var (
		members [maxTraceStateMembers][]byte
		n       int
		fields  int
	)
	for i := range h {
		if !equalFold(h[i].Name, HeaderTracestate) || len(h[i].Value) == 0 {
			continue
		}
		if fields++; fields > maxTraceStateFields {
			return ""
		}
		for m := range bytes.SplitSeq(h[i].Value, []byte(",")) {
			s, e := 0, len(m)
			for s < e && isOWS(m[s]) {
				s++
			}
			for e > s && isOWS(m[e-1]) {
				e--
			}
			if s == e {
				continue
			}
			if n == maxTraceStateMembers {
				return ""
			}
			m = m[s:e]
			eq := bytes.IndexByte(m, '=')
			if eq < 0 || !validTraceStateKey(m[:eq]) || !validTraceStateValue(m[eq+1:]) {
				return ""
			}
			for _, prev := range members[:n] {
				if bytes.Equal(prev[:bytes.IndexByte(prev, '=')], m[:eq]) {
					return ""
				}
			}
			members[n] = m
			n++
		}
	}
	total := n - 1
	for _, m := range members[:n] {
		total += len(m)
	}
	keep := [maxTraceStateMembers]bool{}
	for i := range n {
		keep[i] = total <= maxTraceState || len(members[i]) <= maxTraceStateEntry
	}
	if total > maxTraceState {
		total = -1
		for i := range n {
			if keep[i] {
				total += len(members[i]) + 1
			}
		}
		for i := n - 1; i >= 0 && total > maxTraceState; i-- {
			if keep[i] {
				keep[i] = false
				total -= len(members[i]) + 1
			}
		}
	}
	var b strings.Builder
	for i := range n {
		if keep[i] {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.Write(members[i])
		}
	}
	return b.String()
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// tsKeyChar: what may follow the first character of a tracestate key's
// simple form, tenant or system.
func tsKeyChar(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/'
}

// validTraceStateKey checks a key: simple-key or tenant-id "@" system-id
// (W3C Trace Context Level 1, §3.3.1.3.1).
func validTraceStateKey(k []byte) bool {
	at := bytes.IndexByte(k, '@')
	if at < 0 {
		return len(k) >= 1 && len(k) <= 256 && 'a' <= k[0] && k[0] <= 'z' && allKeyChars(k[1:])
	}
	tenant, system := k[:at], k[at+1:]
	return len(tenant) >= 1 && len(tenant) <= 241 && ('a' <= tenant[0] && tenant[0] <= 'z' || '0' <= tenant[0] && tenant[0] <= '9') &&
		allKeyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && 'a' <= system[0] && system[0] <= 'z' && allKeyChars(system[1:])
}

func allKeyChars(b []byte) bool {
	for _, c := range b {
		if !tsKeyChar(c) {
			return false
		}
	}
	return true
}

// validTraceStateValue checks a value: 1 to 256 of 0x20-0x7e except "," and
// "=", the last not a space.
func validTraceStateValue(v []byte) bool {
	if len(v) == 0 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for _, c := range v {
		if c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// validRequestID accepts printable ASCII of a sane length, so that an
// extracted id is always safe to write back into a header.
func validRequestID[T string | []byte](v T) bool {
	if len(v) == 0 || len(v) > maxRequestID {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return v[0] != ' ' && v[len(v)-1] != ' '
}

// NewRootContext starts a trace for a request that carries none: random
// trace and span ids, sampled, and a RequestID derived from the trace id.
// src supplies randomness; nil uses math/rand/v2's global generator.
func NewRootContext(src rand.Source) Context {
	var c Context
	for !c.TraceID.IsValid() {
		binary.BigEndian.PutUint64(c.TraceID[:8], uint64From(src))
		binary.BigEndian.PutUint64(c.TraceID[8:], uint64From(src))
	}
	c.SpanID = NewSpanID(src)
	c.Sampled = true
	c.RequestID = RequestIDFor(c.TraceID)
	return c
}

// NewSpanID returns a random valid span id; src nil uses math/rand/v2's
// global generator.
func NewSpanID(src rand.Source) SpanID {
	var s SpanID
	for !s.IsValid() {
		binary.BigEndian.PutUint64(s[:], uint64From(src))
	}
	return s
}

func uint64From(src rand.Source) uint64 {
	if src == nil {
		return rand.Uint64()
	}
	return src.Uint64()
}

// RequestIDFor formats t as a version 4 UUID, so that a generated
// x-request-id names its trace (Envoy and others expect a UUID there).
func RequestIDFor(t TraceID) string {
	t[6] = t[6]&0x0f | 0x40
	t[8] = t[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], t[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], t[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], t[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], t[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], t[10:16])
	return string(b[:])
}

// InjectHeaders returns the header lines that propagate ctx to a request
// sent from within it as the span child: traceparent, tracestate (when ctx
// has one), b3, x-b3-traceid, x-b3-spanid, x-b3-parentspanid, x-b3-sampled
// and x-request-id. existing are the headers the application wrote itself;
// none of them is added again. An application that set traceparent, b3,
// x-b3-traceid or x-b3-spanid propagates its own trace context, so then no
// trace header is added at all (x-request-id still is, when missing). A
// context without a valid trace id or a zero child adds only x-request-id.
// When ctx.RequestID is empty (or unsafe to write) the id is
// RequestIDFor(ctx.TraceID).
func InjectHeaders(ctx Context, child SpanID, existing Headers) []byte {
	return AppendInjectHeaders(make([]byte, 0, 400), ctx, child, existing)
}

// AppendInjectHeaders is InjectHeaders appending to dst; it fits an
// InjectFunc as is.
func AppendInjectHeaders(dst []byte, ctx Context, child SpanID, existing Headers) []byte {
	return AppendInjectFormats(dst, ctx, child, existing, AllFormats)
}

// AppendInjectFormats is AppendInjectHeaders writing only the formats in
// f: traceparent and tracestate for FormatW3C, b3 for FormatB3, the
// x-b3-* lines for FormatB3Multi, x-request-id for FormatRequestID. What
// the application wrote decides as in InjectHeaders, whatever f: an
// application that propagates its own context in any format gets no trace
// header, and none of its headers is written again.
func AppendInjectFormats(dst []byte, ctx Context, child SpanID, existing Headers, f Formats) []byte {
	const (
		hasTraceparent = 1 << iota
		hasTracestate
		hasB3
		hasTraceID
		hasSpanID
		hasParent
		hasSampled
		hasFlags
		hasRequestID
	)
	var has int
	for i := range existing {
		switch n := existing[i].Name; {
		case equalFold(n, HeaderTraceparent):
			has |= hasTraceparent
		case equalFold(n, HeaderTracestate):
			has |= hasTracestate
		case equalFold(n, HeaderB3):
			has |= hasB3
		case equalFold(n, HeaderB3TraceID):
			has |= hasTraceID
		case equalFold(n, HeaderB3SpanID):
			has |= hasSpanID
		case equalFold(n, HeaderB3ParentSpanID):
			has |= hasParent
		case equalFold(n, HeaderB3Sampled):
			has |= hasSampled
		case equalFold(n, HeaderB3Flags):
			has |= hasFlags
		case equalFold(n, HeaderRequestID):
			has |= hasRequestID
		}
	}
	instrumented := has&(hasTraceparent|hasB3|hasTraceID|hasSpanID) != 0
	if !instrumented && ctx.TraceID.IsValid() && child.IsValid() {
		var trace [32]byte
		var span, parent [16]byte
		hex.Encode(trace[:], ctx.TraceID[:])
		hex.Encode(span[:], child[:])
		hex.Encode(parent[:], ctx.SpanID[:])
		sampled := byte('0')
		if ctx.Sampled {
			sampled = '1'
		}
		if f&FormatW3C != 0 {
			dst = append(dst, HeaderTraceparent+": 00-"...)
			dst = append(dst, trace[:]...)
			dst = append(dst, '-')
			dst = append(dst, span[:]...)
			dst = append(dst, '-', '0', sampled, '\r', '\n')
			if ts := ctx.TraceState; ts != "" && has&hasTracestate == 0 && validTraceState(ts) {
				dst = append(dst, HeaderTracestate+": "...)
				dst = append(dst, ts...)
				dst = append(dst, '\r', '\n')
			}
		}
		if f&FormatB3 != 0 {
			dst = append(dst, HeaderB3+": "...)
			dst = append(dst, trace[:]...)
			dst = append(dst, '-')
			dst = append(dst, span[:]...)
			dst = append(dst, '-', sampled)
			if ctx.SpanID.IsValid() {
				dst = append(dst, '-')
				dst = append(dst, parent[:]...)
			}
			dst = append(dst, '\r', '\n')
		}
		if f&FormatB3Multi != 0 {
			dst = append(dst, HeaderB3TraceID+": "...)
			dst = append(dst, trace[:]...)
			dst = append(dst, "\r\n"+HeaderB3SpanID+": "...)
			dst = append(dst, span[:]...)
			dst = append(dst, '\r', '\n')
			if ctx.SpanID.IsValid() && has&hasParent == 0 {
				dst = append(dst, HeaderB3ParentSpanID+": "...)
				dst = append(dst, parent[:]...)
				dst = append(dst, '\r', '\n')
			}
			if has&(hasSampled|hasFlags) == 0 {
				dst = append(dst, HeaderB3Sampled+": "...)
				dst = append(dst, sampled, '\r', '\n')
			}
		}
	}
	if f&FormatRequestID != 0 && has&hasRequestID == 0 {
		id := ctx.RequestID
		if !validRequestID(id) {
			id = ""
			if ctx.TraceID.IsValid() {
				id = RequestIDFor(ctx.TraceID)
			}
		}
		if id != "" {
			dst = append(dst, HeaderRequestID+": "...)
			dst = append(dst, id...)
			dst = append(dst, '\r', '\n')
		}
	}
	return dst
}

// validTraceState guards against writing a line break or control byte from
// a caller-built Context into a header.
func validTraceState(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// decodeHex decodes len(dst)*2 hex digits of src into dst; lowerOnly
// rejects upper-case digits.
func decodeHex(dst, src []byte, lowerOnly bool) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, lo := hexVal[src[2*i]], hexVal[src[2*i+1]]
		if hi < 0 || lo < 0 {
			return false
		}
		if lowerOnly && (isUpper(src[2*i]) || isUpper(src[2*i+1])) {
			return false
		}
		dst[i] = byte(hi)<<4 | byte(lo)
	}
	return true
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
