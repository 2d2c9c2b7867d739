package main

import (
	"testing"
)

// The in-band bytes are what the tracer writes: the propagation lines of a
// request (traceparent 70 bytes, b3 and the four x-b3-* lines, x-request-id)
// and the timing lines of a response.
func TestInBandBytes(t *testing.T) {
	if n := inBandBytes(); n < 300 || n > 500 {
		t.Errorf("inBandBytes() = %d, want the ~330 + ~90 the tracer adds per hop", n)
	}
}

func TestGateway(t *testing.T) {
	for in, want := range map[string]string{"10.79.0.0/24": "10.79.0.1", "10.77.3.0/24": "10.77.3.1", "fd00::/64": "", "x": ""} {
		got, err := gateway(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("gateway(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
