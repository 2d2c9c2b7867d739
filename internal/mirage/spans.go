package mirage

import (
	"errors"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// ErrNotServer is returned by HopOf for a span that is not a SERVER span.
var ErrNotServer = errors.New("not a SERVER span")

// HopOf builds the hop of a SERVER span and its CLIENT spans from the wait
// attributes `rootline run` puts on them (rootline.wait.*). Spans of other
// kinds among calls are ignored. The spans are read, not kept.
func HopOf(server *model.Span, calls []*model.Span) (Hop, error) {
	if server.Kind != model.KindServer {
		return Hop{}, ErrNotServer
	}
	h := Hop{
		Service: server.Service, TraceID: server.TraceID, SpanID: server.SpanID,
		Start: server.Start, Duration: time.Duration(server.Duration),
	}
	h.Local, h.LocalKnown = attrMs(server, model.AttrWaitLocalMs)
	for _, c := range calls {
		if c.Kind == model.KindClient {
			h.Calls = append(h.Calls, callOf(c))
		}
	}
	return h, nil
}

// callOf is a CLIENT span's call, with its waits when it carries them.
func callOf(s *model.Span) Call {
	c := Call{Peer: peerOf(s), Start: s.Start, End: s.End()}
	net, okN := attrMs(s, model.AttrWaitNetMs)
	remote, okR := attrMs(s, model.AttrWaitRemoteMs)
	if okN && okR {
		c.Net, c.Remote, c.Known = net, remote, true
	}
	return c
}

// peerOf names the downstream a CLIENT span called.
func peerOf(s *model.Span) string {
	for _, k := range []string{model.AttrServerAddress, "peer.service", "net.peer.name"} {
		if v, ok := s.Attr(k); ok && v.Str != "" {
			return v.Str
		}
	}
	return "unknown"
}

func attrMs(s *model.Span, key string) (time.Duration, bool) {
	v, ok := s.Attr(key)
	if !ok {
		return 0, false
	}
	f, ok := v.Number()
	if !ok || f < 0 || f > 1e9 {
		return 0, false
	}
	return time.Duration(f * float64(time.Millisecond)), true
}

// LocalSource gives the local wait of a SERVER span that does not carry
// rootline.wait.local_ms (a service not under `rootline run`), from other
// evidence: critpath.SpanPath.LocalWait reads it off the span's kernel
// critical path. ok
// is false when there is none.
type LocalSource func(server *model.Span) (local time.Duration, ok bool)

// Hops is HopsWith without a LocalSource.
func Hops(spans []*model.Span) []Hop { return HopsWith(spans, nil) }

// HopsWith builds every hop of a trace's spans (any order; spans of several
// traces may be mixed). A call whose CLIENT span carries no waits (an
// application instrumented in code, not under `rootline run`) gets them
// from its callee's SERVER span when the trace has it: the network wait is
// the client's time beyond the callee's, the remote wait what the callee
// would have reported (the largest wait of its own hop under Max). A SERVER
// span without a local wait gets it from local when that is not nil. Calls
// made below INTERNAL spans of the hop count as the hop's. nil entries are
// skipped. The spans are read, not kept.
func HopsWith(spans []*model.Span, local LocalSource) []Hop {
	type key struct {
		t model.TraceID
		s model.SpanID
	}
	children := map[key][]int{}
	for i, s := range spans {
		if s != nil && !s.ParentSpanID.IsZero() {
			k := key{s.TraceID, s.ParentSpanID}
			children[k] = append(children[k], i)
		}
	}
	// reported memoises each SERVER span's reported wait; -1 marks one
	// being computed (a malformed trace whose parents loop).
	reported := map[int]time.Duration{}
	var hopOf func(i int) Hop
	var report func(i int) (time.Duration, bool)
	report = func(i int) (time.Duration, bool) {
		if w, ok := reported[i]; ok {
			return w, w >= 0
		}
		reported[i] = -1
		s := spans[i]
		var w time.Duration
		l, okL := attrMs(s, model.AttrWaitLocalMs)
		n, okN := attrMs(s, model.AttrWaitNetMs)
		r, okR := attrMs(s, model.AttrWaitRemoteMs)
		if okL && okN && okR {
			w = max(l, n, r)
		} else {
			h := hopOf(i)
			w = Config{}.Aggregate(&h)
		}
		reported[i] = w
		return w, true
	}
	hopOf = func(i int) Hop {
		s := spans[i]
		h := Hop{Service: s.Service, TraceID: s.TraceID, SpanID: s.SpanID, Start: s.Start, Duration: time.Duration(s.Duration)}
		h.Local, h.LocalKnown = attrMs(s, model.AttrWaitLocalMs)
		if !h.LocalKnown && local != nil {
			h.Local, h.LocalKnown = local(s)
		}
		// Walk down through the hop's INTERNAL spans to its CLIENT spans.
		stack := append([]int(nil), children[key{s.TraceID, s.SpanID}]...)
		for seen := 0; len(stack) > 0 && seen < len(spans); seen++ {
			j := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			c := spans[j]
			switch c.Kind {
			case model.KindClient:
				call := callOf(c)
				if !call.Known {
					for _, k := range children[key{c.TraceID, c.SpanID}] {
						if callee := spans[k]; callee.Kind == model.KindServer {
							if w, ok := report(k); ok {
								call.Net = max(0, time.Duration(c.Duration-callee.Duration))
								call.Remote, call.Known = w, true
								if call.Peer == "unknown" {
									call.Peer = callee.Service
								}
							}
							break
						}
					}
				}
				h.Calls = append(h.Calls, call)
			case model.KindInternal, model.KindUnspecified:
				if c.Service == s.Service {
					stack = append(stack, children[key{c.TraceID, c.SpanID}]...)
				}
			}
		}
		return h
	}
	var out []Hop
	for i, s := range spans {
		if s != nil && s.Kind == model.KindServer {
			out = append(out, hopOf(i))
		}
	}
	return out
}
