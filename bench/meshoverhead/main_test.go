package main

import (
	"slices"
	"testing"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// The in-band bytes are what the tracer writes: the propagation lines of a
// request (traceparent 70 bytes, b3 and the four x-b3-* lines, x-request-id)
// and the timing line of a response (rl: 29 bytes for the example's four
// numbers); with -propagate w3c, traceparent alone (70 bytes with its line
// break).
func TestInBandBytes(t *testing.T) {
	all, w3c := inBandBytes(httpstream.AllFormats, httpstream.TimingCompact), inBandBytes(httpstream.FormatW3C, httpstream.TimingCompact)
	if all < 300 || all > 500 {
		t.Errorf("inBandBytes(all) = %d, want the ~330 + ~29 the tracer adds per hop", all)
	}
	if w3c != 70+29 {
		t.Errorf("inBandBytes(w3c) = %d, want traceparent 70 + rl 29", w3c)
	}
	// --timing-header long: rootline-server-time and rootline-wait, 91
	// bytes for the same numbers.
	if long := inBandBytes(httpstream.FormatW3C, httpstream.TimingLong); long != 70+91 {
		t.Errorf("inBandBytes(w3c, long) = %d, want traceparent 70 + the two long lines 91", long)
	}
	if all-w3c != 74+133+52 {
		t.Errorf("inBandBytes(all) - inBandBytes(w3c) = %d, want b3 74 + x-b3-* 133 + x-request-id 52", all-w3c)
	}
}

func TestSplitRunFlags(t *testing.T) {
	_, flags := splitMode("envoy+rootline-no-sidecar-tracing:profilers=cpu/jfr:run.propagate=w3c:server.pipeline.commit-delay=500ms")
	agent, run, server := splitRunFlags(flags)
	if !slices.Equal(agent, []string{"--profilers=cpu,jfr"}) || !slices.Equal(run, []string{"--propagate=w3c"}) ||
		!slices.Equal(server, []string{"--pipeline.commit-delay=500ms"}) {
		t.Fatalf("agent %q, run %q, server %q", agent, run, server)
	}
	if f, _ := runFormats(run); f != httpstream.FormatW3C {
		t.Fatalf("runFormats(%q) = %v", run, f)
	}
	if f, form := runFormats(nil); f != httpstream.AllFormats || form != httpstream.TimingCompact {
		t.Fatalf("runFormats(nil) = %v", f)
	}
}
