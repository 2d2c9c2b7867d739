package httpstream

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/rootline/rootline/internal/run/httpstream/tracecontexttest"
)

// TestTraceContextVectors runs every W3C Trace Context vector through the
// parser and ExtractContext, then AppendInjectHeaders: the context found and
// the tracestate line written must be the vector's.
func TestTraceContextVectors(t *testing.T) {
	for _, v := range tracecontexttest.Load(t) {
		t.Run(v.Name, func(t *testing.T) {
			p := NewParser(Requests)
			var msg *Message
			for _, ev := range p.Feed(v.Head()) {
				if ev.Kind == EventHeaders {
					msg = ev.Msg
				}
				if ev.Kind == EventOpaque {
					t.Fatalf("head refused: %v", ev.Reason)
				}
			}
			if msg == nil {
				t.Fatal("no header block")
			}
			ctx, ok := ExtractContext(msg.Headers)
			if ok != (v.Trace != "") {
				t.Fatalf("context found = %v, want %v (%+v)", ok, v.Trace != "", ctx)
			}
			if ok {
				if got := hex.EncodeToString(ctx.TraceID[:]); got != v.Trace {
					t.Errorf("trace %s, want %s", got, v.Trace)
				}
				if got := hex.EncodeToString(ctx.SpanID[:]); got != v.Parent {
					t.Errorf("parent %s, want %s", got, v.Parent)
				}
				if ctx.Sampled != v.Sampled {
					t.Errorf("sampled %v, want %v", ctx.Sampled, v.Sampled)
				}
			} else {
				ctx = NewRootContext(nil)
			}
			want, has := v.WantTraceState()
			if ctx.TraceState != want {
				t.Errorf("tracestate %q, want %q", ctx.TraceState, want)
			}
			lines := InjectHeaders(ctx, NewSpanID(nil), nil)
			var ts [][]byte
			for l := range bytes.SplitSeq(lines, []byte("\r\n")) {
				if name, val, ok := bytes.Cut(l, []byte(": ")); ok && string(name) == HeaderTracestate {
					ts = append(ts, val)
				}
			}
			switch {
			case !has && len(ts) != 0:
				t.Errorf("injected tracestate %q, want none", ts)
			case has && (len(ts) != 1 || string(ts[0]) != want):
				t.Errorf("injected tracestate %q, want %q", ts, want)
			}
		})
	}
}
