package test

import (
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/run/httpstream/tracecontexttest"
)

// TestRunTraceContext sends every W3C Trace Context vector
// (internal/run/httpstream/testdata/tracecontext.json) to a traced service, in
// every mode, and checks what the service's own downstream request carries:
// the caller's trace or a new one, the sampled flag, and exactly the
// vector's tracestate (or none).
func TestRunTraceContext(t *testing.T) { forEachMode(t, testRunTraceContext) }

func testRunTraceContext(t *testing.T) {
	vectors := tracecontexttest.Load(t)
	forward := tracedForwarder(t)
	ran := 0
	for _, v := range vectors {
		if v.UnitOnly != "" {
			continue
		}
		ran++
		var lines strings.Builder
		for _, l := range v.Lines {
			lines.WriteString(l + "\r\n")
		}
		h := forward(lines.String())
		tps := h.Values("traceparent")
		if len(tps) != 1 || len(tps[0]) != 55 {
			t.Errorf("%s: downstream got traceparent %q, want one", v.Name, tps)
			continue
		}
		trace, flags := tps[0][3:35], tps[0][53:]
		switch {
		case v.Trace != "" && trace != v.Trace:
			t.Errorf("%s: downstream trace %s, want the caller's %s", v.Name, trace, v.Trace)
		case v.Trace == "" && strings.Contains(strings.Join(v.Lines, "\n"), trace):
			t.Errorf("%s: downstream trace %s, want a new trace", v.Name, trace)
		}
		if want := map[bool]string{true: "01", false: "00"}[v.Sampled]; flags != want {
			t.Errorf("%s: downstream flags %s, want %s", v.Name, flags, want)
		}
		got := h.Values("tracestate")
		want, has := v.WantTraceState()
		switch {
		case !has && len(got) != 0:
			t.Errorf("%s: downstream got tracestate %q, want none", v.Name, got)
		case has && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: downstream got tracestate %q, want %q", v.Name, got, want)
		}
	}
	if ran < 100 {
		t.Fatalf("only %d vectors crossed the wire", ran)
	}
}
