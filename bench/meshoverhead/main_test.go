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
