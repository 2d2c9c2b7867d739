package httpstream

import (
	"errors"
	"fmt"
	"strings"
)

// Formats is a set of propagation formats a tracer writes on the requests
// it propagates a trace context to. Extraction reads every format whatever
// the set. The bits are the datapath's RD_PROP_* (bpf/run_datapath.h).
type Formats uint32

const (
	// FormatW3C is W3C Trace Context: traceparent, and tracestate when the
	// context has one.
	FormatW3C Formats = 1 << iota
	// FormatB3 is the B3 single header: b3.
	FormatB3
	// FormatB3Multi is the X-B3-* headers: x-b3-traceid, x-b3-spanid,
	// x-b3-parentspanid and x-b3-sampled.
	FormatB3Multi
	// FormatRequestID is x-request-id (Envoy's request id), a UUID naming
	// the trace when the request did not carry one.
	FormatRequestID

	// AllFormats is every format: what `rootline run` writes by default.
	AllFormats = FormatW3C | FormatB3 | FormatB3Multi | FormatRequestID
)

// ErrFormat is returned by ParseFormats for a list it cannot read.
var ErrFormat = errors.New("propagation formats")

var formatNames = []struct {
	f     Formats
	names []string
}{
	{FormatW3C, []string{"w3c", "tracecontext"}},
	{FormatB3, []string{"b3"}},
	{FormatB3Multi, []string{"b3multi"}},
	{FormatRequestID, []string{"request-id"}},
}

// ParseFormats reads a comma-separated list of formats: w3c (or
// tracecontext, OpenTelemetry's name), b3, b3multi, request-id, all, or
// none (alone). Names match ignoring case and surrounding space.
func ParseFormats(s string) (Formats, error) {
	var f Formats
	var none bool
	for _, raw := range strings.Split(s, ",") {
		name := strings.ToLower(strings.TrimSpace(raw))
		switch name {
		case "":
			return 0, fmt.Errorf("%w %q: empty name (want w3c, b3, b3multi, request-id, all or none)", ErrFormat, s)
		case "none":
			none = true
			continue
		case "all":
			f |= AllFormats
			continue
		}
		found := false
		for _, n := range formatNames {
			for _, alias := range n.names {
				if name == alias {
					f |= n.f
					found = true
				}
			}
		}
		if !found {
			return 0, fmt.Errorf("%w %q: unknown %q (want w3c, b3, b3multi, request-id, all or none)", ErrFormat, s, name)
		}
	}
	if none && f != 0 {
		return 0, fmt.Errorf("%w %q: none with other formats", ErrFormat, s)
	}
	return f, nil
}

// String lists f as ParseFormats reads it.
func (f Formats) String() string {
	if f&AllFormats == 0 {
		return "none"
	}
	var names []string
	for _, n := range formatNames {
		if f&n.f != 0 {
			names = append(names, n.names[0])
		}
	}
	return strings.Join(names, ",")
}
