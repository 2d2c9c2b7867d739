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
// split its own wait into network and server time:
//
//	rootline-server-time: 1234
//	rootline-wait: 567;kind=local, 80;kind=net
//	rootline-wait: 300;kind=remote
//
// Values are non-negative integer microseconds (at most 15 digits).
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
const (
	HeaderServerTime = "rootline-server-time"
	HeaderWait       = "rootline-wait"
)

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

// ParseTiming reads the rootline-server-time and rootline-wait fields of h.
// A response without them gives the zero Timing and no error.
func ParseTiming(h Headers) (Timing, error) {
	var t Timing
	for i := range h {
		switch {
		case equalFold(h[i].Name, HeaderServerTime):
			d, err := ParseServerTime(h[i].Value)
			if err != nil {
				return Timing{}, err
			}
			if t.HasServerTime && d != t.ServerTime {
				return Timing{}, fmt.Errorf("%w: conflicting %s fields", ErrBadTiming, HeaderServerTime)
			}
			t.ServerTime, t.HasServerTime = d, true
		case equalFold(h[i].Name, HeaderWait):
			var err error
			if t.Waits, err = AppendWaits(t.Waits, h[i].Value); err != nil {
				return Timing{}, err
			}
		}
	}
	return t, nil
}

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
