// Package tracecontexttest loads the W3C Trace Context test vectors
// (internal/run/httpstream/testdata/tracecontext.json) that every trace-context
// parser of `rootline run` is checked against: httpstream's unit tests, the
// datapath parser's differential tests and the end-to-end tests of each
// mode.
package tracecontexttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Vector is one inbound request's propagation headers and what the
// requests the service makes for it must carry.
type Vector struct {
	Name string `json:"name"`
	// Rule names the part of the specification (or Rootline's limit) the
	// vector checks.
	Rule string `json:"rule"`
	// Lines are the request's header fields, "Name: value", without line
	// breaks.
	Lines []string `json:"lines"`
	// Trace is the trace id (32 hex digits) the outbound requests carry;
	// empty when a new trace must start.
	Trace string `json:"trace"`
	// Parent is the caller's span id found (when Trace is not empty).
	Parent string `json:"parent"`
	// Sampled is the outbound sampled flag.
	Sampled bool `json:"sampled"`
	// TraceState is the one outbound tracestate value; nil: none.
	TraceState *string `json:"tracestate"`
	// UnitOnly, when set, says why the vector cannot cross a real HTTP
	// server (it is checked by the parsers' tests only).
	UnitOnly string `json:"unit_only"`
}

// WantTraceState returns the expected tracestate value and whether there is
// one.
func (v Vector) WantTraceState() (string, bool) {
	if v.TraceState == nil {
		return "", false
	}
	return *v.TraceState, true
}

// Head returns the request head "GET / HTTP/1.1" with Host and v's lines.
func (v Vector) Head() []byte {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: svc\r\n")
	for _, l := range v.Lines {
		b.WriteString(l)
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// Path is the vectors file.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "tracecontext.json")
}

// Load reads the vectors; it fails t when the file cannot be read.
func Load(t testing.TB) []Vector {
	t.Helper()
	b, err := os.ReadFile(Path())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []Vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", Path(), err)
	}
	if len(doc.Vectors) == 0 {
		t.Fatalf("%s: no vectors", Path())
	}
	return doc.Vectors
}
