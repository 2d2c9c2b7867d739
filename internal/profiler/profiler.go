// Package profiler defines the plugin contract of the agent's flight
// recorders: each profiler keeps a bounded recording of its targets running
// and dumps a time window of it on request (Protractor's flexibility goal: a
// new profiler is one package implementing Profiler).
package profiler

import (
	"context"
	"errors"
	"time"
)

// Errors profilers return; the agent reports them in capture completions.
var (
	// ErrNotSupported: the profiler cannot record this target (e.g. JFR for a
	// non-JVM process).
	ErrNotSupported = errors.New("target not supported by this profiler")
	// ErrTargetGone: the target exited; a dump may still return partial artifacts.
	ErrTargetGone = errors.New("target process exited")
	// ErrUnknownTarget: Dump or Stop for a target that was never started.
	ErrUnknownTarget = errors.New("target not recorded by this profiler")
)

// Target is one process the agent records.
type Target struct {
	PID     int
	Service string // service.name, if known
	Command string // argv joined, for display
	// Exe is the resolved /proc/<pid>/exe path at discovery time.
	Exe string
	// JVM is true for HotSpot JVMs (libjvm mapped or java executable).
	JVM bool
}

// Window is the time range of a dump.
type Window struct {
	Start, End time.Time
	// Spans are the requests the dump explains, when the caller knows them
	// (optional). A profiler MAY mark them in its artifacts (the kernel
	// recorder writes their begin and end on the threads that served them
	// into its CTF export); it MUST NOT need them.
	Spans []Span
}

// Span is a request a dump explains.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex
	Service, Operation            string
	Start, End                    time.Time
	// TIDs are the threads that served it (the span's thread.id and
	// rootline.thread.ids attributes), if known.
	TIDs []uint32
}

// Artifact is one piece of evidence a dump produced.
type Artifact struct {
	Kind      string // "jfr", "cpu", "kernel", …
	MediaType string
	FileName  string
	Data      []byte
	Start     time.Time // the window the data really covers
	End       time.Time
	// Partial is true when the dump was cut short (e.g. the target exited).
	Partial bool
	// Attributes carry producer facts (samples, lost samples, overhead counters).
	Attributes map[string]string
}

// Profiler is a flight recorder plugin. Implementations MUST be safe for
// concurrent use: the agent starts targets from its discovery loop and dumps
// from its HTTP handlers. A Dump MUST NOT stall the target longer than the
// profiler's own recording does.
type Profiler interface {
	// Name is the evidence kind this profiler produces (e.g. "cpu", "jfr").
	Name() string
	// Supports reports whether the profiler can record t.
	Supports(t Target) bool
	// Start begins a continuous, bounded recording of t. Starting a target
	// twice is a no-op.
	Start(ctx context.Context, t Target) error
	// Dump returns the artifacts of w for t. When the target exits mid-dump it
	// returns what it has with Partial set and an error wrapping ErrTargetGone.
	Dump(ctx context.Context, t Target, w Window) ([]Artifact, error)
	// Stop ends the recording of t and frees its buffers.
	Stop(t Target) error
	// Stats reports the profiler's own overhead counters (samples taken,
	// bytes buffered, CPU seconds spent, dumps, errors…).
	Stats() map[string]float64
	// Close stops every recording.
	Close() error
}
