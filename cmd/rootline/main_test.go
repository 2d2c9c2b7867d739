package main

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// A write whose reader is gone stops the command (with its cleanup) instead
// of failing silently on: stopOnEPIPE cancels on EPIPE, and only then.
func TestStopOnEPIPE(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stops := 0
	out := stopOnEPIPE(w, func() { stops++ })
	if _, err := out.Write([]byte("line\n")); err != nil || stops != 0 {
		t.Fatalf("write with a reader: %v, %d stops", err, stops)
	}
	r.Close()
	if _, err := out.Write([]byte("line\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write without a reader: %v, want EPIPE", err)
	}
	if stops != 1 {
		t.Errorf("%d stops after EPIPE, want 1", stops)
	}
}
