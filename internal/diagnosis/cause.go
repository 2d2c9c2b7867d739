package diagnosis

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
)

// stateCause maps a critical-path state (what the span's own threads were
// doing or waiting for) to the cause it points to. A timer sleep is the
// program's own choice (a backoff, a poll interval) and a state the kernel
// cannot tell is not evidence of anything: both are unknown.
var stateCause = map[string]string{
	critpath.Running: CauseCPU,
	// Waiting for a CPU that the process's own threads held is its own
	// demand (a thread pool with more busy threads than CPUs), not another
	// program's: cpu, as its running is.
	OwnQueue: CauseCPU,
	// Waiting for a CPU that its runtime's garbage collector held: the
	// collector's demand, gc.
	GCQueue: CauseGC,
	// Waiting for a CPU that Rootline's own processes held (the agent
	// dumping, rootline run, a server on the node): what observing the
	// slowdown cost, no cause of it.
	ObserverQueue:      CauseUnknown,
	critpath.Runqueue:  CauseCPUContention,
	critpath.Throttled: CauseCPUThrottle,
	// Steal time is a wait for a physical CPU that the host gave to
	// another guest: contention, one level down.
	critpath.Steal: CauseCPUContention,
	critpath.Lock:  CauseLock,
	// A wait for the interpreter lock that the path could not follow to
	// its holder: the process's own threads held the interpreter, its own
	// demand (as OwnQueue).
	critpath.GIL:     CauseCPU,
	critpath.Disk:    CauseDisk,
	critpath.Network: CauseNetwork,
	critpath.Memory:  CauseMemory,
	critpath.GC:      CauseGC,
	critpath.Sleep:   CauseUnknown,
	critpath.Unknown: CauseUnknown,
}

// StateCause is the cause a critical-path state points to (CauseUnknown for
// a state that is evidence of none).
func StateCause(state string) string {
	if c, ok := stateCause[state]; ok {
		return c
	}
	return CauseUnknown
}

// OwnQueue is the key, in a verdict's waits, of the run-queue time during
// which the CPU the span's thread waited for ran other threads of its own
// process (critpath.SegmentJSON.OwnQueueMs); the rest stays runqueue.
const OwnQueue = "runqueue-own"

// GCQueue is the key, in a verdict's waits, of the run-queue time during
// which the CPU the span's thread waited for ran its own process's
// garbage-collector threads (critpath.SegmentJSON.GCQueueMs,
// critpath.CollectorThread): taken out of OwnQueue.
const GCQueue = "runqueue-gc"

// ObserverQueue is the key, in a verdict's waits, of the run-queue time
// during which the CPU the span's thread waited for ran Rootline's own
// processes (critpath.HolderJSON.Observer): taken out of runqueue, and
// counted as no cause (a capture's dump or a verdict's paths computed on
// the node are not what the service meets without Rootline).
const ObserverQueue = "runqueue-rootline"

// minKnownShare is the share of the measured time that known causes must
// cover for the verdict to name one: below it the kernel saw too little of
// the slow time to say, and the cause is unknown.
const minKnownShare = 0.2

type interval struct{ a, b int64 }

// union sorts and merges intervals.
// leadsOut reports whether a span of another service is under c (through
// spans of its own service: a sidecar's egress span).
func leadsOut(c *model.Span, children map[model.SpanID][]*model.Span) bool {
	for _, g := range children[c.SpanID] {
		if g.Service != c.Service || leadsOut(g, children) {
			return true
		}
	}
	return false
}

// reachedAddrs are the server.address values of svc's calls that led to a
// span of another service in any of traces: dependencies that send spans.
func reachedAddrs(traces [][]*model.Span, svc string) map[string]bool {
	out := map[string]bool{}
	for _, t := range traces {
		ch := childrenOf(t)
		for _, s := range t {
			if s.Service != svc || s.Kind != model.KindClient {
				continue
			}
			addr, ok := s.Attr(model.AttrServerAddress)
			if !ok || addr.Type != model.TypeString || out[addr.Str] {
				continue
			}
			if leadsOut(s, ch) {
				out[addr.Str] = true
			}
		}
	}
	return out
}

func union(ivs []interval) []interval {
	slices.SortFunc(ivs, func(x, y interval) int { return cmp.Compare(x.a, y.a) })
	var out []interval
	for _, v := range ivs {
		if v.b <= v.a {
			continue
		}
		if n := len(out); n > 0 && v.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, v.b)
			continue
		}
		out = append(out, v)
	}
	return out
}

// overlap is the length of [a, b) covered by the merged intervals ivs.
func overlap(ivs []interval, a, b int64) int64 {
	var n int64
	for _, v := range ivs {
		if lo, hi := max(a, v.a), min(b, v.b); hi > lo {
			n += hi - lo
		}
	}
	return n
}

// spanTime splits a span's interval into its exclusive time (not covered by
// any child span) and its time in calls to dependencies that left no span
// (CLIENT children, seen through nested CLIENT spans of its own service,
// under which no span of another service is) — unless the call's
// server.address is in reached: a dependency that sends spans for other
// calls and has none under this one was not reached (a link that held or
// dropped the request), which is no unseen dependency's time.
type spanTime struct {
	own        []interval // exclusive, merged
	untraced   []interval // calls with no span from the callee, merged
	untracedTo []string   // their server.address, when said
}

func splitSpan(sp *model.Span, children map[model.SpanID][]*model.Span, reached map[string]bool) spanTime {
	var covered, untraced []interval
	var to []string
	for _, c := range children[sp.SpanID] {
		end := c.End()
		if c.Kind == model.KindClient {
			// The response's wait in the span's own socket is its own
			// (rootline.wait.response_socket_ms; analysis.Analyze).
			if v, ok := c.Attr(model.AttrWaitResponseSocketMs); ok && v.Type == model.TypeFloat && v.Float > 0 {
				end = max(c.Start, end-int64(v.Float*1e6))
			}
		}
		iv := interval{max(c.Start, sp.Start), min(end, sp.End())}
		covered = append(covered, iv)
		if c.Kind == model.KindClient && c.Service == sp.Service && !leadsOut(c, children) {
			addr, _ := c.Attr(model.AttrServerAddress)
			if addr.Type == model.TypeString && reached[addr.Str] {
				continue
			}
			untraced = append(untraced, iv)
			if addr.Type == model.TypeString && !slices.Contains(to, addr.Str) {
				to = append(to, addr.Str)
			}
		}
	}
	covered = union(covered)
	var own []interval
	at := sp.Start
	for _, v := range covered {
		if v.a > at {
			own = append(own, interval{at, v.a})
		}
		at = max(at, v.b)
	}
	if at < sp.End() {
		own = append(own, interval{at, sp.End()})
	}
	return spanTime{own: own, untraced: union(untraced), untracedTo: to}
}

// holderStates are the states of another thread that say why the span's
// own thread, blocked on it, waited: the thread it waited for (a lock's
// holder, the thread that completes its I/O or future) was itself held off
// by a resource — its cgroup's CPU quota, a CPU the host gave away, a disk,
// memory, a GC pause, the network. A holder running or waiting for a CPU in
// the run queue is the contention the wait names (a lock's holder works
// while its waiters wait, and in a convoy it queues for a CPU behind them),
// and a holder sleeping or in a state the kernel cannot tell says nothing
// more than the wait itself. Except a lock's holder waiting for a CPU that
// other programs held (segmentTime): that is contention for the CPU.
var holderStates = map[string]bool{
	critpath.Throttled: true, critpath.Steal: true, critpath.Disk: true,
	critpath.Memory: true, critpath.GC: true, critpath.Network: true,
}

// segmentState is the state a path segment counts as for the span whose
// path it is: its own thread's state, or, where the path left that thread
// for the one it waited on (Wait), the wait — unless the other thread was
// itself held off by a resource (holderStates), which is then the cause of
// both. A lock wait behind a holder throttled by its cgroup's quota is the
// quota's doing; removing the lock would not make the requests faster.
//
// A wait for the interpreter lock (gil) is no lock of the program's: the
// interpreter runs one thread at a time, as a CPU does, and the wait counts
// as what its holder did — running (the process's own work), held off by
// its quota, waiting for a CPU.
func segmentState(s critpath.SegmentJSON) string {
	if s.Wait == "" || s.Wait == critpath.GIL || holderStates[s.State] {
		return s.State
	}
	return s.Wait
}

// PathCauses is the time (ms) of a whole critical path by the cause each
// of its segments points to, counted as a verdict counts them
// (segmentState, then StateCause); from its Waits when it has no segments.
func PathCauses(p *critpath.SpanPath) map[string]float64 {
	out := map[string]float64{}
	if len(p.Segments) == 0 {
		for st, ms := range p.Waits {
			out[StateCause(st)] += ms
		}
		return out
	}
	for _, s := range p.Segments {
		segmentTime(s, float64(s.End-s.Start)/1e6, func(st string, ms float64) { out[StateCause(st)] += ms })
	}
	return out
}

// segmentTime calls add with the pieces of ms, the part of segment s a span
// counts, by the state each counts as: segmentState's, except for a wait
// for a CPU (runqueue) while the CPU ran threads of its own process
// (s.OwnQueueMs of it: OwnQueue, or GCQueue for its collector's) or of
// Rootline's own processes (ObserverQueue), and for a lock's holder
// waiting for a CPU, whose wait while other programs held the CPU is the
// contention's (runqueue), not the lock's: remove those programs and the
// holder, and so its waiters, would have run. The holder's wait behind its
// own process's threads stays the lock's (a convoy: the waiters and the
// holder share the CPU).
func segmentTime(s critpath.SegmentJSON, ms float64, add func(state string, ms float64)) {
	st := segmentState(s)
	lockHolder := st == critpath.Lock && s.State == critpath.Runqueue
	if (st != critpath.Runqueue && !lockHolder) || s.End <= s.Start {
		add(st, ms)
		return
	}
	part := ms * 1e6 / float64(s.End-s.Start) // of the segment's ms
	own := ms * min(1, s.OwnQueueMs*1e6/float64(s.End-s.Start))
	var observed float64
	for _, h := range s.HeldBy {
		if h.Observer {
			observed += h.Ms * part
		}
	}
	observed = min(observed, ms-own)
	if observed > 0 {
		add(ObserverQueue, observed)
	}
	rest := ms - own - observed
	if lockHolder {
		if own > 0 {
			add(st, own)
		}
		if rest > 0 {
			add(critpath.Runqueue, rest)
		}
		return
	}
	if own > 0 {
		gc := own * min(1, s.GCQueueMs/s.OwnQueueMs)
		add(OwnQueue, own-gc)
		if gc > 0 {
			add(GCQueue, gc)
		}
	}
	if rest > 0 {
		add(st, rest)
	}
}

// waitTally is what the paths of a culprit's slow spans add up to: ms by
// the state each segment counts as (segmentState), and, of that, the time
// a wait was named by the state of the thread it waited on ("lock" behind
// a "throttled" holder: via["lock"]["throttled"]).
type waitTally struct {
	by  map[string]float64
	via map[string]map[string]float64
	// held is, of the run-queue time added, who ran on the CPUs waited
	// for, by process (critpath.SegmentJSON.HeldBy).
	held map[critpath.HolderJSON]float64
	// spans are the spans whose paths were added (addSpan).
	spans []*model.Span
}

func newWaitTally() *waitTally {
	return &waitTally{by: map[string]float64{}, via: map[string]map[string]float64{}, held: map[critpath.HolderJSON]float64{}}
}

// addSpan adds the path p of span s, a span of a trace whose spans'
// children are ch, cut to s's exclusive time (splitSpan), and keeps s.
func (w *waitTally) addSpan(p *critpath.SpanPath, s *model.Span, ch map[model.SpanID][]*model.Span) {
	w.add(p, splitSpan(s, ch, nil).own)
	w.spans = append(w.spans, s)
}

// add adds what the path p says the span's own threads did during the
// span's exclusive intervals own, each segment as segmentState says.
func (w *waitTally) add(p *critpath.SpanPath, own []interval) {
	for _, s := range p.Segments {
		ns := overlap(own, s.Start, s.End)
		if ns <= 0 {
			continue
		}
		segmentTime(s, float64(ns)/1e6, func(st string, ms float64) {
			w.by[st] += ms
			if s.Wait != "" && st != s.Wait {
				if w.via[s.Wait] == nil {
					w.via[s.Wait] = map[string]float64{}
				}
				w.via[s.Wait][st] += ms
			}
		})
		if s.End > s.Start {
			for _, h := range s.HeldBy {
				w.held[critpath.HolderJSON{PID: h.PID, Comm: h.Comm, Target: h.Target, Observer: h.Observer}] += h.Ms * float64(ns) / float64(s.End-s.Start)
			}
		}
	}
}

// describeHeld renders who held the CPUs the paths' threads waited for,
// longest first (at most 3), for an evidence line ("" when none of note).
func (w *waitTally) describeHeld() string {
	hs := slices.Collect(maps.Keys(w.held))
	slices.SortFunc(hs, func(x, y critpath.HolderJSON) int {
		return cmp.Or(cmp.Compare(w.held[y], w.held[x]), cmp.Compare(x.PID, y.PID), strings.Compare(x.Comm, y.Comm))
	})
	var parts []string
	for _, h := range hs[:min(len(hs), 3)] {
		ms := w.held[h]
		if ms < 0.05 {
			break
		}
		who := "another process"
		switch {
		case h.Target:
			who = "a captured process"
		case h.Observer:
			who = "Rootline's own, not counted as a cause"
		}
		parts = append(parts, fmt.Sprintf("%s (pid %d, %s) %.1f ms", h.Comm, h.PID, who, ms))
	}
	return strings.Join(parts, ", ")
}

// describeVia renders the waits named by their holder's state for an
// evidence line ("" when there are none of note).
func (w *waitTally) describeVia() string {
	var parts []string
	for _, wait := range slices.Sorted(maps.Keys(w.via)) {
		for _, st := range slices.Sorted(maps.Keys(w.via[wait])) {
			if ms := w.via[wait][st]; ms >= 0.05 {
				parts = append(parts, fmt.Sprintf("%.1f ms of %s waits on threads that were %s", ms, wait, st))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// causeShare is one cause's share of the measured time.
type causeShare struct {
	cause string
	ms    float64
	share float64
}

// causesOf folds waits (ms by state) and the time in untraced calls into
// causes, largest first; unknown is last whatever its size, as it points
// nowhere. The shares are of the total, unknown included.
func causesOf(waits map[string]float64, untracedMs float64) (out []causeShare, total float64) {
	by := map[string]float64{}
	for st, ms := range waits {
		c := StateCause(st) // unknown for a state a newer build knows
		by[c] += ms
		total += ms
	}
	if untracedMs > 0 {
		by[CauseDownstream] += untracedMs
		total += untracedMs
	}
	for c, ms := range by {
		if ms > 0 {
			out = append(out, causeShare{cause: c, ms: ms, share: ms / max(total, 1e-9)})
		}
	}
	sortShares(out)
	return out, total
}

// byCause is shares as ms by cause (it takes causesOf's results; the total
// is not needed).
func byCause(shares []causeShare, _ float64) map[string]float64 {
	out := make(map[string]float64, len(shares))
	for _, s := range shares {
		out[s.cause] += s.ms
	}
	return out
}

// splitQueue moves from cpu-contention to cpu, in by (ms by cause of the
// slow spans), the part of their run-queue wait that grew with their own
// CPU time. A thread waits in the run queue in proportion to the CPU time
// it asks for: wait = k × running, k the contention it meets. When a
// service's own work grows on a node it saturates, its wait grows too,
// though nobody else asks for more: the run queue is then its own
// demand's doing, which a larger share of "runqueue" must not turn into
// cpu-contention. The growth of the wait, k1·c1 − k0·c0 (c running, k the
// wait per ms of it, before and in the slow spans), is split between its
// two factors by their Shapley values: (k0+k1)/2 · (c1−c0) goes with the
// running that grew (cpu), (c0+c1)/2 · (k1−k0) with the contention that
// grew (cpu-contention). c0 and r0 are the running and the run-queue wait
// before, on the scale of by (per span, or the same sums). It returns the
// ms moved (0 when the running did not grow or the wait did not).
func splitQueue(by map[string]float64, c0, r0 float64) float64 {
	c1, r1 := by[CauseCPU], by[CauseCPUContention]
	if c0 < 0 || r0 < 0 || c1 <= c0 || r1 <= r0 {
		return 0
	}
	k0, k1 := 0.0, r1/c1
	if c0 > 0 {
		k0 = r0 / c0
	}
	own := min((k0+k1)/2*(c1-c0), r1-r0)
	if own <= 0 {
		return 0
	}
	by[CauseCPUContention] -= own
	by[CauseCPU] += own
	return own
}

// splitQueueGC is splitQueue when the slow spans' and the baseline's gc
// time is known too (g0: the baseline's, on by's scale). A JVM's own demand
// for the CPU is its threads' work and its collector's — the collector's
// threads, and the page faults on fresh heap pages that onCPUSplit moved
// out of the running — so the wait's growth that goes with the demand
// that grew, (k0+k1)/2 · (d1−d0) with d = cpu + gc and k the wait per ms
// of it, is shared between cpu and gc by how much each grew, the rest
// staying cpu-contention. Without gc time (g0 = g1 = 0) it is splitQueue.
// It returns the ms moved to each.
func splitQueueGC(by map[string]float64, c0, r0, g0 float64) (toCPU, toGC float64) {
	c1, r1, g1 := by[CauseCPU], by[CauseCPUContention], by[CauseGC]
	d0, d1 := c0+g0, c1+g1
	if c0 < 0 || r0 < 0 || g0 < 0 || d1 <= d0 || r1 <= r0 {
		return 0, 0
	}
	k0, k1 := 0.0, r1/d1
	if d0 > 0 {
		k0 = r0 / d0
	}
	own := min((k0+k1)/2*(d1-d0), r1-r0)
	cg, gg := max(c1-c0, 0), max(g1-g0, 0)
	if own <= 0 || cg+gg <= 0 {
		return 0, 0
	}
	toGC = own * gg / (cg + gg)
	toCPU = own - toGC
	by[CauseCPUContention] -= own
	by[CauseCPU] += toCPU
	by[CauseGC] += toGC
	return toCPU, toGC
}

// describeGrowth renders shares (ms grown by cause) for an evidence line,
// largest first.
func describeGrowth(shares []causeShare) string {
	var parts []string
	for _, s := range shares {
		if s.ms >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s +%.1f ms", s.cause, s.ms))
		}
	}
	return strings.Join(parts, ", ")
}

// sortShares orders shares largest first, unknown last whatever its size
// (it points nowhere).
func sortShares(out []causeShare) {
	slices.SortFunc(out, func(x, y causeShare) int {
		if (x.cause == CauseUnknown) != (y.cause == CauseUnknown) {
			if x.cause == CauseUnknown {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(y.ms, x.ms); c != 0 {
			return c
		}
		return strings.Compare(x.cause, y.cause)
	})
}

// pickCause names the cause from the measured shares: the largest known
// one, unless known causes cover less than minKnownShare of the time.
func pickCause(shares []causeShare) (best causeShare, runnerUp *causeShare) {
	known := 0.0
	for _, s := range shares {
		if s.cause != CauseUnknown {
			known += s.share
		}
	}
	if len(shares) == 0 || known < minKnownShare {
		u := causeShare{cause: CauseUnknown, share: 1 - known}
		if len(shares) > 0 && shares[0].cause != CauseUnknown {
			r := shares[0]
			return u, &r
		}
		return u, nil
	}
	best = shares[0]
	if len(shares) > 1 && shares[1].cause != CauseUnknown {
		r := shares[1]
		runnerUp = &r
	}
	return best, runnerUp
}

// describeWaits renders waits for an evidence line, largest first.
func describeWaits(waits map[string]float64, untracedMs float64) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range waits {
		if v >= 0.05 {
			all = append(all, kv{k, v})
		}
	}
	if untracedMs >= 0.05 {
		all = append(all, kv{"calls without spans", untracedMs})
	}
	slices.SortFunc(all, func(x, y kv) int { return cmp.Compare(y.v, x.v) })
	var parts []string
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%s %.1f ms", x.k, x.v))
	}
	return strings.Join(parts, ", ")
}

// sumShares adds up the shares of cs.
func sumShares(cs []causeShare) float64 {
	var s float64
	for _, c := range cs {
		s += c.share
	}
	return s
}
