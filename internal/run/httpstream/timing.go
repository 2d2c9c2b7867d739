package httpstream

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Headers of the Mirage wait model. A supervised service's response tells
// the caller how long the service worked on the request and how much of
// that time it spent waiting, and on what, so that the caller's side can
// split its own wait into network and server time. Two forms carry the same
// values; readers accept both, in one response too, and writers write one
// (TimingForm).
//
// The compact form (TimingCompact, the default) is a single field:
//
//	rl: 1234;l=567;n=80;r=300
//
// Its value, with no whitespace inside it (OWS around it is the field's):
//
//	rl-value = micros *( ";" key "=" micros )
//	key      = 1*8( %x61-7A )        ; lower-case letters
//	micros   = 1*15DIGIT
//
// The first number is the server time. The keys l, n and r are the local,
// net and remote waits (the kinds below); each appears at most once, and
// writers leave out the waits that are 0. Other keys are ignored, so that
// later versions can add some. A value longer than MaxCompactTiming bytes,
// an rl field repeated in one response, or a value off this grammar is
// malformed (ErrBadTiming).
//
// The long form (TimingLong) is two fields:
//
//	rootline-server-time: 1234
//	rootline-wait: 567;kind=local, 80;kind=net
//	rootline-wait: 300;kind=remote
//
// rootline-server-time appears at most once (repeats must be equal).
// rootline-wait is a comma-separated list, possibly over several lines, of
// waits, each a value followed by ";"-separated key=value parameters; the
// kind parameter is required and is one of
//
//	local   waiting inside the service's process: run queue, locks, disk
//	net     waiting on the network: the request or response in transit
//	remote  waiting for the service's own downstream calls
//
// Unknown parameters are ignored, so that later versions can add some.
// Whitespace is allowed around ',', ';' and '='.
//
// In both forms values are non-negative integer microseconds (at most 15
// digits). A response carrying both forms must agree on the server time;
// its waits are those of both.
const (
	HeaderServerTime = "rootline-server-time"
	HeaderWait       = "rootline-wait"
	HeaderCompact    = "rl"
)

// MaxCompactTiming bounds an rl value: a server time and the three waits at
// 15 digits each take 69 bytes, the rest is room for keys added later.
const MaxCompactTiming = 128

// TimingForm is the form a writer gives the timing fields.
type TimingForm uint8

// Timing forms; see HeaderCompact.
const (
	TimingCompact TimingForm = iota // one rl field
	TimingLong                      // rootline-server-time and rootline-wait
)

// String returns the form's name as ParseTimingForm takes it.
func (f TimingForm) String() string {
	if f == TimingLong {
		return "long"
	}
	return "compact"
}

// ErrBadTimingForm reports a timing form name that is neither compact nor
// long.
var ErrBadTimingForm = errors.New("httpstream: unknown timing header form (want compact or long)")

// ParseTimingForm reads a form's name: "compact" or "long".
func ParseTimingForm(s string) (TimingForm, error) {
	switch s {
	case "compact":
		return TimingCompact, nil
	case "long":
		return TimingLong, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrBadTimingForm, s)
}

// HasTiming reports whether h carries a timing field of either form (a
// response the application gave its own is left as it is).
func HasTiming(h Headers) bool {
	return h.Has(HeaderCompact) || h.Has(HeaderServerTime) || h.Has(HeaderWait)
}

// ErrBadTiming reports a malformed rootline-server-time or rootline-wait
// value.
var ErrBadTiming = errors.New("httpstream: malformed timing header")

// WaitKind says what a service waited on.
type WaitKind uint8

// Wait kinds; see HeaderWait.
const (
	WaitLocal WaitKind = iota + 1
	WaitNet
	WaitRemote
)

// String returns the kind as written in rootline-wait ("local", "net",
// "remote").
func (k WaitKind) String() string {
	switch k {
	case WaitLocal:
		return "local"
	case WaitNet:
		return "net"
	case WaitRemote:
		return "remote"
	}
	return "unknown"
}

// Wait is one wait a service reported.
type Wait struct {
	Kind     WaitKind
	Duration time.Duration
}

// Timing is what a response's rootline-* headers say.
type Timing struct {
	// ServerTime is valid when HasServerTime.
	ServerTime    time.Duration
	HasServerTime bool
	Waits         []Wait
}

// ParseTiming reads the timing fields of h, in either form (HeaderCompact).
// A response without them gives the zero Timing and no error.
func ParseTiming(h Headers) (Timing, error) {
	var t Timing
	compact := false
	for i := range h {
		var d time.Duration
		switch {
		case equalFold(h[i].Name, HeaderServerTime):
			var err error
			if d, err = ParseServerTime(h[i].Value); err != nil {
				return Timing{}, err
			}
		case equalFold(h[i].Name, HeaderCompact):
			if compact {
				return Timing{}, fmt.Errorf("%w: repeated %s field", ErrBadTiming, HeaderCompact)
			}
			compact = true
			var err error
			if d, t.Waits, err = appendCompact(t.Waits, h[i].Value); err != nil {
				return Timing{}, err
			}
		case equalFold(h[i].Name, HeaderWait):
			var err error
			if t.Waits, err = AppendWaits(t.Waits, h[i].Value); err != nil {
				return Timing{}, err
			}
			continue
		default:
			continue
		}
		if t.HasServerTime && d != t.ServerTime {
			return Timing{}, fmt.Errorf("%w: conflicting server times", ErrBadTiming)
		}
		t.ServerTime, t.HasServerTime = d, true
	}
	return t, nil
}

// appendCompact parses an rl value: its server time, and its waits
// appended to dst.
func appendCompact(dst []Wait, v []byte) (time.Duration, []Wait, error) {
	s, e := trimOWS(v, 0, len(v))
	v = v[s:e]
	if len(v) > MaxCompactTiming {
		return 0, dst, fmt.Errorf("%w: %s value of %d bytes", ErrBadTiming, HeaderCompact, len(v))
	}
	n0 := len(dst)
	k := bytes.IndexByte(v, ';')
	if k < 0 {
		k = len(v)
	}
	st, err := parseMicros(v[:k])
	if err != nil {
		return 0, dst, err
	}
	var seen [WaitRemote + 1]bool
	for v = v[k:]; len(v) > 0; {
		v = v[1:] // the ';'
		k := bytes.IndexByte(v, ';')
		if k < 0 {
			k = len(v)
		}
		kv := v[:k]
		v = v[k:]
		eq := bytes.IndexByte(kv, '=')
		if eq < 1 || eq > 8 {
			return 0, dst[:n0], fmt.Errorf("%w: %s parameter %q", ErrBadTiming, HeaderCompact, kv)
		}
		for _, c := range kv[:eq] {
			if c < 'a' || c > 'z' {
				return 0, dst[:n0], fmt.Errorf("%w: %s parameter %q", ErrBadTiming, HeaderCompact, kv)
			}
		}
		d, err := parseMicros(kv[eq+1:])
		if err != nil {
			return 0, dst[:n0], err
		}
		var kind WaitKind
		if eq == 1 {
			kind = compactKinds[kv[0]]
		}
		if kind == 0 {
			continue // a key of a later version
		}
		if seen[kind] {
			return 0, dst[:n0], fmt.Errorf("%w: repeated %s wait %q", ErrBadTiming, HeaderCompact, kv[:eq])
		}
		seen[kind] = true
		dst = append(dst, Wait{Kind: kind, Duration: d})
	}
	return st, dst, nil
}

// compactKinds maps an rl key to its wait kind (0: not a wait Rootline
// knows).
var compactKinds = [256]WaitKind{'l': WaitLocal, 'n': WaitNet, 'r': WaitRemote}

// ParseServerTime parses a rootline-server-time value.
func ParseServerTime(v []byte) (time.Duration, error) {
	s, e := trimOWS(v, 0, len(v))
	return parseMicros(v[s:e])
}

// AppendWaits parses a rootline-wait value and appends its waits to dst.
func AppendWaits(dst []Wait, v []byte) ([]Wait, error) {
	n0 := len(dst)
	for len(v) > 0 {
		var elem []byte
		if k := bytes.IndexByte(v, ','); k >= 0 {
			elem, v = v[:k], v[k+1:]
		} else {
			elem, v = v, nil
		}
		if s, e := trimOWS(elem, 0, len(elem)); s == e {
			continue // empty list elements are allowed (RFC 9110 §5.6.1)
		}
		w, err := parseWait(elem)
		if err != nil {
			return dst[:n0], err
		}
		dst = append(dst, w)
	}
	return dst, nil
}

func parseWait(elem []byte) (Wait, error) {
	var w Wait
	k := bytes.IndexByte(elem, ';')
	if k < 0 {
		return w, fmt.Errorf("%w: wait %q has no kind", ErrBadTiming, elem)
	}
	val, params := elem[:k], elem[k+1:]
	s, e := trimOWS(val, 0, len(val))
	d, err := parseMicros(val[s:e])
	if err != nil {
		return w, err
	}
	w.Duration = d
	for len(params) > 0 {
		var p []byte
		if k := bytes.IndexByte(params, ';'); k >= 0 {
			p, params = params[:k], params[k+1:]
		} else {
			p, params = params, nil
		}
		eq := bytes.IndexByte(p, '=')
		if eq < 0 {
			return w, fmt.Errorf("%w: parameter %q has no value", ErrBadTiming, p)
		}
		ks, ke := trimOWS(p, 0, eq)
		vs, ve := trimOWS(p, eq+1, len(p))
		if !equalFold(p[ks:ke], "kind") {
			continue
		}
		switch kind := p[vs:ve]; {
		case equalFold(kind, "local"):
			w.Kind = WaitLocal
		case equalFold(kind, "net"):
			w.Kind = WaitNet
		case equalFold(kind, "remote"):
			w.Kind = WaitRemote
		default:
			return w, fmt.Errorf("%w: unknown wait kind %q", ErrBadTiming, kind)
		}
	}
	if w.Kind == 0 {
		return w, fmt.Errorf("%w: wait %q has no kind", ErrBadTiming, elem)
	}
	return w, nil
}

// parseMicros parses at most 15 digits, which keeps the value (31 years)
// well within time.Duration.
func parseMicros(v []byte) (time.Duration, error) {
	if len(v) == 0 || len(v) > 15 {
		return 0, fmt.Errorf("%w: bad microseconds %q", ErrBadTiming, v)
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad microseconds %q", ErrBadTiming, v)
		}
		n = 10*n + int64(c-'0')
	}
	return time.Duration(n) * time.Microsecond, nil
}

// AppendTiming appends the timing fields for t in the form f
// (AppendCompactTiming or AppendTimingHeaders).
func AppendTiming(dst []byte, t Timing, f TimingForm) []byte {
	if f == TimingLong {
		return AppendTimingHeaders(dst, t)
	}
	return AppendCompactTiming(dst, t)
}

// AppendCompactTiming appends the rl line for t to dst: the server time,
// then each kind's wait that is not 0 (the largest when t has several of a
// kind), in the order l, n, r. Durations are truncated to whole
// microseconds; negative ones are written as 0. A Timing without a server
// time has no compact form: nothing is appended.
func AppendCompactTiming(dst []byte, t Timing) []byte {
	if !t.HasServerTime {
		return dst
	}
	var w [WaitRemote + 1]int64
	for _, x := range t.Waits {
		if x.Kind >= WaitLocal && x.Kind <= WaitRemote {
			w[x.Kind] = max(w[x.Kind], micros(x.Duration))
		}
	}
	dst = append(dst, HeaderCompact+": "...)
	dst = strconv.AppendInt(dst, micros(t.ServerTime), 10)
	for k, key := range [...]string{WaitLocal: ";l=", WaitNet: ";n=", WaitRemote: ";r="} {
		if w[k] > 0 {
			dst = append(dst, key...)
			dst = strconv.AppendInt(dst, w[k], 10)
		}
	}
	return append(dst, '\r', '\n')
}

// AppendTimingHeaders appends the header lines for t to dst: a
// rootline-server-time line when t.HasServerTime, and one rootline-wait line
// listing t.Waits when there are any. Durations are truncated to whole
// microseconds; negative ones are written as 0. Waits of an unknown kind are
// left out.
func AppendTimingHeaders(dst []byte, t Timing) []byte {
	if t.HasServerTime {
		dst = append(dst, HeaderServerTime+": "...)
		dst = strconv.AppendInt(dst, micros(t.ServerTime), 10)
		dst = append(dst, '\r', '\n')
	}
	first := true
	for _, w := range t.Waits {
		if w.Kind < WaitLocal || w.Kind > WaitRemote {
			continue
		}
		if first {
			dst = append(dst, HeaderWait+": "...)
			first = false
		} else {
			dst = append(dst, ", "...)
		}
		dst = strconv.AppendInt(dst, micros(w.Duration), 10)
		dst = append(dst, ";kind="...)
		dst = append(dst, w.Kind.String()...)
	}
	if !first {
		dst = append(dst, '\r', '\n')
	}
	return dst
}

func micros(d time.Duration) int64 {
	return max(0, int64(d/time.Microsecond))
}
