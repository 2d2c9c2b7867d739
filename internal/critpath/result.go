package critpath

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The JSON of critical paths, as GET /api/v1/traces/{traceID}/critical-path
// answers it, as the "critical-path" artifact stores it and as `rootline
// analyze critical-path --json` prints it (docs/api.md). Times are Unix
// nanoseconds, durations milliseconds.

// TraceResult is the critical paths of a trace's spans.
type TraceResult struct {
	TraceID string `json:"traceId"`
	// Spans has one entry per span that has a path.
	Spans []SpanPath `json:"spans"`
	// Shared are the pieces of time the paths of several of these spans
	// (and of the other requests computed with them) went through
	// together: where they contended.
	Shared []SharedJSON `json:"shared"`
	// Notes say why a span of the trace has no path, or what limits one
	// (records the kernel dropped, a snapshot that could not be read).
	Notes []string `json:"notes,omitempty"`
}

// SpanPath is one span's critical path.
type SpanPath struct {
	TraceID   string  `json:"traceId"`
	SpanID    string  `json:"spanId"`
	Service   string  `json:"service"`
	Operation string  `json:"operation"`
	Start     int64   `json:"start"`
	End       int64   `json:"end"`
	Ms        float64 `json:"ms"`
	// States is the time on the path per state name (every name of
	// States, zero when absent): the state of the thread the path was on
	// (a lock holder's running, the callee's work…); they add up to Ms.
	States map[string]float64 `json:"states"`
	// Waits is the same time by what the span's own threads waited for:
	// where the path left them, the state they were blocked in (lock,
	// network…); elsewhere as States. They add up to Ms.
	Waits map[string]float64 `json:"waits"`
	// BlockedBy are the other requests the path went through, longest
	// first.
	BlockedBy []BlockedBy `json:"blockedBy"`
	// Threads is the time on the path per thread, longest first.
	Threads  []ThreadJSON  `json:"threads"`
	Segments []SegmentJSON `json:"segments"`
	Arrows   []ArrowJSON   `json:"arrows"`
	// Trimmed, when set, says what the stored path leaves out beyond the
	// bounds (MaxPathSegments, MaxPathBlockedBy): the shortest segments.
	// States and Waits are over the whole path all the same.
	Trimmed *Trimmed `json:"trimmed,omitempty"`
	// Snapshot is the id of the kernel artifact the path was computed from.
	Snapshot string `json:"snapshot,omitempty"`
	// Lost is the kernel records the recorder dropped during the snapshot's
	// window (0: the snapshot is complete).
	Lost uint64 `json:"lost,omitempty"`
	// OwnQueueMs is, of the runqueue time in States, the time the CPU
	// waited for ran other threads of the same process: its own demand
	// held it off, not another program. GCQueueMs is the part of it the CPU
	// ran the process's garbage-collector threads (CollectorThread).
	OwnQueueMs float64 `json:"ownQueueMs,omitempty"`
	GCQueueMs  float64 `json:"gcQueueMs,omitempty"`
	// HeldBy is, of the runqueue time in States, who ran on the CPUs its
	// threads waited for, by process, longest first (at most 3): the
	// snapshot's own processes, the wakers it follows, and the tasks it
	// saw only hold a CPU (another program of the node). Their time may
	// add up to less than the runqueue time: what ran between two
	// untracked tasks is not recorded.
	HeldBy []HolderJSON `json:"heldBy,omitempty"`
}

// HolderJSON is a process that held a CPU a path's thread waited for.
type HolderJSON struct {
	PID    uint32  `json:"pid"`
	Comm   string  `json:"comm"`
	Ms     float64 `json:"ms"`
	Target bool    `json:"target,omitempty"`
	// Observer: one of Rootline's own processes (Holder.Observer).
	Observer bool `json:"observer,omitempty"`
}

// holdersJSON renders hs.
func holdersJSON(hs []Holder) []HolderJSON {
	var out []HolderJSON
	for _, h := range hs {
		out = append(out, HolderJSON{PID: h.PID, Comm: h.Comm, Ms: ms(h.Duration), Target: h.Target, Observer: h.Observer})
	}
	return out
}

// LocalWait is the local wait (in the Mirage wait model's sense,
// internal/mirage) the path measured: the time its own threads were runnable
// and had no CPU, in the run queue or held off by their cgroup's CPU quota.
func (p *SpanPath) LocalWait() time.Duration {
	ms := p.Waits[Runqueue] + p.Waits[Throttled]
	return time.Duration(ms * float64(time.Millisecond))
}

// BlockedBy is a request a span's path went through.
type BlockedBy struct {
	TraceID   string  `json:"traceId"`
	SpanID    string  `json:"spanId"`
	Service   string  `json:"service"`
	Operation string  `json:"operation"`
	Ms        float64 `json:"ms"`
	// Wait is what the span's own thread was blocked on meanwhile (lock,
	// network…); empty when its thread itself worked for the other
	// request.
	Wait string `json:"wait,omitempty"`
}

// ThreadJSON is the time a path spent on a thread.
type ThreadJSON struct {
	TID  uint32  `json:"tid"`
	PID  uint32  `json:"pid"`
	Comm string  `json:"comm"`
	Ms   float64 `json:"ms"`
}

// SegmentJSON is a piece of a path: a thread in one state.
type SegmentJSON struct {
	TID   uint32  `json:"tid"`
	Start int64   `json:"start"`
	End   int64   `json:"end"`
	Ms    float64 `json:"ms"`
	State string  `json:"state"`
	// Wait: the state of the span's own thread that led the path here.
	Wait string `json:"wait,omitempty"`
	// TraceID/SpanID name the span the time belongs to by Algorithm 1:
	// the one active on the thread then or, where the path could not
	// follow a waker's intervals and the time stays on the blocked thread,
	// the one active on the waker. Blocking says it is another request
	// (one of BlockedBy).
	TraceID  string `json:"traceId,omitempty"`
	SpanID   string `json:"spanId,omitempty"`
	Blocking bool   `json:"blocking,omitempty"`
	// Syscall and Device qualify a blocked state of the thread's own: the
	// syscall it waited in, the block device of a disk wait.
	Syscall string `json:"syscall,omitempty"`
	Device  string `json:"device,omitempty"`
	// OwnQueueMs: of a runqueue segment, the time the CPU it waited for
	// ran other threads of its own process; GCQueueMs, of that, its
	// garbage-collector threads.
	OwnQueueMs float64 `json:"ownQueueMs,omitempty"`
	GCQueueMs  float64 `json:"gcQueueMs,omitempty"`
	// HeldBy: of a runqueue segment, who ran on the CPU it waited for
	// (SpanPath.HeldBy).
	HeldBy []HolderJSON `json:"heldBy,omitempty"`
}

// ArrowJSON is a wakeup the path followed: thread From woke thread To at TS.
type ArrowJSON struct {
	From uint32 `json:"from"`
	To   uint32 `json:"to"`
	TS   int64  `json:"ts"`
}

// SharedJSON is a piece of time several paths share (Shared).
type SharedJSON struct {
	TID   uint32       `json:"tid"`
	PID   uint32       `json:"pid"`
	Comm  string       `json:"comm"`
	Start int64        `json:"start"`
	End   int64        `json:"end"`
	Ms    float64      `json:"ms"`
	State string       `json:"state"`
	Spans []RequestRef `json:"spans"`
	// MoreSpans counts the spans beyond MaxSharedSpans not named.
	MoreSpans int `json:"moreSpans,omitempty"`
	// TraceID/SpanID name the span active on the thread then, if any.
	TraceID string `json:"traceId,omitempty"`
	SpanID  string `json:"spanId,omitempty"`
}

// RequestRef names a span.
type RequestRef struct {
	TraceID   string `json:"traceId"`
	SpanID    string `json:"spanId"`
	Service   string `json:"service"`
	Operation string `json:"operation"`
}

// ms turns nanoseconds into milliseconds, to the microsecond.
func ms(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

// JSON renders p.
func (a *Analysis) JSON(p *Path) SpanPath {
	r := &a.assoc.reqs[p.Request]
	out := SpanPath{TraceID: r.TraceID.String(), SpanID: r.SpanID.String(), Service: r.Service, Operation: r.Operation,
		Start: r.Start, End: r.End, Ms: ms(r.End - r.Start), States: make(map[string]float64, numStates),
		Waits:     make(map[string]float64, numStates),
		BlockedBy: []BlockedBy{}, Threads: []ThreadJSON{}, Segments: []SegmentJSON{}, Arrows: []ArrowJSON{},
		Lost: a.tl.Lost, OwnQueueMs: ms(p.OwnQueue), GCQueueMs: ms(p.GCQueue), HeldBy: holdersJSON(p.HeldBy)}
	for i := range p.States {
		out.States[States[i]] = ms(p.States[i])
		out.Waits[States[i]] = ms(p.Waits[i])
	}
	for _, b := range p.BlockedBy {
		q := &a.assoc.reqs[b.Request]
		out.BlockedBy = append(out.BlockedBy, BlockedBy{TraceID: q.TraceID.String(), SpanID: q.SpanID.String(),
			Service: q.Service, Operation: q.Operation, Ms: ms(b.Duration), Wait: b.Wait})
	}
	for _, t := range p.Threads {
		th, _ := a.tl.Thread(t.TID)
		out.Threads = append(out.Threads, ThreadJSON{TID: t.TID, PID: th.PID, Comm: th.Comm, Ms: ms(t.Duration)})
	}
	for _, s := range p.Segments {
		sj := SegmentJSON{TID: s.TID, Start: s.Start, End: s.End, Ms: ms(s.End - s.Start), State: s.State, Wait: s.Wait,
			Blocking: s.Blocking, Syscall: s.Syscall, Device: s.Device, OwnQueueMs: ms(s.OwnQueue), GCQueueMs: ms(s.GCQueue),
			HeldBy: holdersJSON(s.HeldBy)}
		if s.Active >= 0 {
			q := &a.assoc.reqs[s.Active]
			if s.Blocking {
				q = &a.assoc.reqs[a.assoc.lroot[s.Active]]
			}
			sj.TraceID, sj.SpanID = q.TraceID.String(), q.SpanID.String()
		}
		out.Segments = append(out.Segments, sj)
	}
	for _, ar := range p.Arrows {
		out.Arrows = append(out.Arrows, ArrowJSON(ar))
	}
	return out
}

// SharedJSON renders the shared pieces of paths.
func (a *Analysis) SharedJSON(sh []Shared) []SharedJSON {
	out := make([]SharedJSON, 0, len(sh))
	for _, s := range sh {
		th, _ := a.tl.Thread(s.TID)
		sj := SharedJSON{TID: s.TID, PID: th.PID, Comm: th.Comm, Start: s.Start, End: s.End, Ms: ms(s.End - s.Start), State: s.State}
		for _, q := range s.Requests {
			sj.Spans = append(sj.Spans, a.ref(q))
		}
		if q, _ := a.assoc.at(s.TID, s.Start); q >= 0 {
			q = a.assoc.lroot[q]
			sj.TraceID, sj.SpanID = a.assoc.reqs[q].TraceID.String(), a.assoc.reqs[q].SpanID.String()
		}
		out = append(out, sj)
	}
	return out
}

func (a *Analysis) ref(q int) RequestRef {
	r := &a.assoc.reqs[q]
	return RequestRef{TraceID: r.TraceID.String(), SpanID: r.SpanID.String(), Service: r.Service, Operation: r.Operation}
}

// Shares renders a state map as "running 62.0 ms (62%), lock 38.0 ms
// (38%)", largest first, zero states left out, shares of total; "-" when
// every state is zero.
func Shares(m map[string]float64, total float64) string {
	names := slices.Clone(States)
	slices.SortStableFunc(names, func(a, b string) int { return cmp.Compare(m[b], m[a]) })
	var parts []string
	for _, n := range names {
		if m[n] <= 0 {
			continue
		}
		pct := 0.0
		if total > 0 {
			pct = 100 * m[n] / total
		}
		parts = append(parts, fmt.Sprintf("%s %.1f ms (%.0f%%)", n, m[n], pct))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
