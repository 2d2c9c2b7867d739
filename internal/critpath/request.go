package critpath

import (
	"slices"
	"strconv"
	"strings"

	"github.com/rootline/rootline/internal/model"
)

// Request is a span as the thread ↔ request association sees it: where and
// when it was active on which thread.
type Request struct {
	TraceID   model.TraceID
	SpanID    model.SpanID
	Parent    model.SpanID
	Service   string
	Operation string
	PID       uint32
	Start     int64 // Unix ns
	End       int64
	// Threads are the intervals the request was active on each thread, in
	// the order they started. The last one to start is the thread that
	// finished the request.
	Threads []Activity
	// UserScheduled: the process schedules work in user space (Go's
	// goroutines), so a thread waiting in the kernel on a futex or on the
	// network poller is the runtime's scheduler idling, not this request's
	// wait (see classify).
	UserScheduled bool
	// Client: a CLIENT span, a call whose time is mostly its callee's.
	Client bool
	// Read is when its first thread read it (Unix ns; 0: not said): a
	// SERVER span of `rootline run` starts when the request's first byte
	// arrived, rootline.wait.socket_ms before the service read it.
	Read int64
	// Answered, on a CLIENT span, is when its response's first byte was in
	// the caller's socket (Unix ns; 0: not said): the caller read it
	// rootline.wait.response_socket_ms later, by the span's end.
	Answered int64
}

// Activity is an interval a request was active on a thread.
type Activity = model.ThreadActivity

// ThreadIntervals formats activities as the rootline.thread.intervals span
// attribute (model.FormatThreadIntervals).
func ThreadIntervals(start int64, acts []Activity) string {
	return model.FormatThreadIntervals(start, acts)
}

// Span attributes the association reads (besides model.AttrThreadID,
// model.AttrThreadIDs and model.AttrProcessPID).
const (
	// AttrThreadIntervals lists where a request was active on each thread
	// (ThreadIntervals).
	AttrThreadIntervals = model.AttrThreadIntervals
	// attrRuntimeName is OpenTelemetry's process.runtime.name resource
	// attribute ("go" for Go programs); `rootline run` sets it on the
	// SERVER spans of Go programs.
	attrRuntimeName = "process.runtime.name"
)

// RequestFromSpan returns the request of a span that says which threads
// served it, in order of precision:
//   - rootline.thread.intervals (`rootline run`): the intervals per thread;
//   - rootline.thread.ids: each thread for the whole span, the last listed
//     finishing it;
//   - thread.id (any OpenTelemetry SDK): that thread for the whole span.
//
// ok is false for a span without thread or process information.
func RequestFromSpan(s *model.Span) (Request, bool) {
	pid := intAttr(s, model.AttrProcessPID)
	if pid <= 0 || pid > 1<<32-1 || s.Duration < 0 {
		return Request{}, false
	}
	r := Request{TraceID: s.TraceID, SpanID: s.SpanID, Parent: s.ParentSpanID, Service: s.Service,
		Operation: s.Name, PID: uint32(pid), Start: s.Start, End: s.End(), Client: s.Kind == model.KindClient}
	for _, get := range []func(string) (model.Value, bool){s.Attr, s.ResourceAttr} {
		if v, ok := get(attrRuntimeName); ok && strings.EqualFold(v.String(), "go") {
			r.UserScheduled = true
		}
	}
	if v, ok := s.Attr(model.AttrWaitSocketMs); ok && v.Type == model.TypeFloat && v.Float > 0 && v.Float*1e6 < float64(r.End-r.Start) {
		r.Read = r.Start + int64(v.Float*1e6)
	}
	if v, ok := s.Attr(model.AttrWaitResponseSocketMs); ok && r.Client && v.Type == model.TypeFloat && v.Float > 0 && v.Float*1e6 < float64(r.End-r.Start) {
		r.Answered = r.End - int64(v.Float*1e6)
	}
	if v, ok := s.Attr(AttrThreadIntervals); ok {
		r.Threads = model.ParseThreadIntervals(v.String(), r.Start, r.End)
	}
	if len(r.Threads) == 0 {
		if v, ok := s.Attr(model.AttrThreadIDs); ok {
			for f := range strings.SplitSeq(v.String(), ",") {
				if tid, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32); err == nil && tid > 0 && len(r.Threads) < model.MaxThreadActivities {
					r.Threads = append(r.Threads, Activity{TID: uint32(tid), Start: r.Start, End: r.End})
				}
			}
		}
	}
	if len(r.Threads) == 0 {
		if tid := intAttr(s, model.AttrThreadID); tid > 0 && tid <= 1<<32-1 {
			r.Threads = []Activity{{TID: uint32(tid), Start: r.Start, End: r.End}}
		}
	}
	return r, len(r.Threads) > 0
}

// intAttr reads an integer attribute of the span or of its resource, given as
// a number or as a decimal string.
func intAttr(s *model.Span, key string) int64 {
	v, ok := s.Attr(key)
	if !ok {
		v, ok = s.ResourceAttr(key)
	}
	if !ok {
		return 0
	}
	switch v.Type {
	case model.TypeInt:
		return v.Int
	case model.TypeString:
		n, _ := strconv.ParseInt(strings.TrimSpace(v.Str), 10, 64)
		return n
	case model.TypeFloat:
		return int64(v.Float)
	}
	return 0
}

// anchor is a piece of a request's window and the thread whose critical path
// explains it.
type anchor struct {
	tid    uint32
	lo, hi int64
}

// anchors splits a request's window among its threads: at each instant the
// thread where it was active that started most recently; in a gap between
// activities, the thread that picks the request up next (its path, followed
// backwards through its wakeups, explains the wait); after the last
// activity, the thread of the activity that ended last.
func anchors(r *Request) []anchor {
	if len(r.Threads) == 0 || r.End <= r.Start {
		return nil
	}
	bounds := []int64{r.Start, r.End}
	for _, a := range r.Threads {
		for _, t := range []int64{a.Start, a.End} {
			if t > r.Start && t < r.End {
				bounds = append(bounds, t)
			}
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var out []anchor
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]
		tid := anchorAt(r, lo)
		if n := len(out); n > 0 && out[n-1].tid == tid && out[n-1].hi == lo {
			out[n-1].hi = hi
			continue
		}
		out = append(out, anchor{tid: tid, lo: lo, hi: hi})
	}
	return out
}

// anchorAt is the anchor's rule at instant t (see anchors).
func anchorAt(r *Request, t int64) uint32 {
	best := -1
	for i, a := range r.Threads {
		if a.Start <= t && t < a.End && (best < 0 || a.Start >= r.Threads[best].Start) {
			best = i
		}
	}
	if best >= 0 {
		return r.Threads[best].TID
	}
	for i, a := range r.Threads {
		if a.Start > t && (best < 0 || a.Start < r.Threads[best].Start) {
			best = i
		}
	}
	if best >= 0 {
		return r.Threads[best].TID
	}
	for i, a := range r.Threads {
		if best < 0 || a.End >= r.Threads[best].End {
			best = i
		}
	}
	return r.Threads[best].TID
}
