package diagnosis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// PathReader reads the critical paths of a trace's spans; critpath.Analyzer
// implements it. Trace returns critpath.ErrNoSnapshot when no kernel
// snapshot is linked to the trace.
type PathReader interface {
	Trace(ctx context.Context, id model.TraceID) (*critpath.TraceResult, error)
}

// Diagnoser computes verdicts from what a Source holds. It is safe for
// concurrent use when its Source and Paths are.
type Diagnoser struct {
	Source analysis.Source
	// Paths may be nil: then no critical path is read.
	Paths PathReader
	// Metrics may be nil: then the kernel's per-container counters
	// (retransmissions, drops) are not read, and span timing alone never
	// names the network.
	Metrics store.MetricReader
	Config  Config
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Cache, when set, keeps the stored critical paths read beyond the
	// sampled traces: a verdict computed again reads none it read before.
	Cache *critpath.StoredCache
	// Changes, when set and the Source is an analysis.StoreSource, tells
	// which traces' artifacts changed, so that DiagnoseWith's state keeps
	// the others' (VerdictState).
	Changes *ArtifactChanges
}

// maxAnomalies bounds the anomalous spans read per verdict.
const maxAnomalies = 2000

// maxPathLookups bounds the sampled slow traces with stored paths a verdict
// analyses, as a multiple of MaxPaths: the others' paths may be of other
// services only.
const maxPathLookups = 4

func (d *Diagnoser) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// RootOf returns the root span of a trace (no parent, or a parent not in
// it; the earliest such), nil for an empty trace.
func RootOf(spans []*model.Span) *model.Span {
	ids := make(map[model.SpanID]bool, len(spans))
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var root *model.Span
	for _, s := range spans {
		if (s.ParentSpanID.IsZero() || !ids[s.ParentSpanID]) && (root == nil || s.Start < root.Start) {
			root = s
		}
	}
	return root
}

// EntryKey is the entry point a root span names.
func EntryKey(s *model.Span) string { return s.Service + " " + s.Name }

// Diagnose computes the verdict of inc from the traces of its entry point
// before and since its start. The error is the Source's.
func (d *Diagnoser) Diagnose(ctx context.Context, inc *Incident) (*Verdict, error) {
	return d.DiagnoseWith(ctx, inc, nil)
}

// DiagnoseWith is Diagnose for one of inc's verdicts in a row: st (nil:
// none) keeps what the next verdict of the same incident can reuse, so that
// it reads only what changed (VerdictState). The verdict is the one
// Diagnose gives.
func (d *Diagnoser) DiagnoseWith(ctx context.Context, inc *Incident, st *VerdictState) (*Verdict, error) {
	cfg := d.Config
	now := d.now()
	v := &Verdict{Cause: CauseUnknown, Updated: now.UnixNano()}
	start := time.Unix(0, inc.Start)
	from := start.Add(-cfg.Lookback)
	to := now
	if inc.End > 0 {
		to = time.Unix(0, inc.End)
	}
	pre, err := d.before(ctx, inc, from, start, now, st)
	if err != nil {
		return nil, err
	}
	var mr store.MetricReader
	if d.Metrics != nil {
		mr = incrementalMetrics{mr: d.Metrics, st: st, now: now.UnixNano()}
	}
	since, err := d.Source.SearchTraces(ctx, inc.EntryService, start, to, cfg.MaxTraces)
	if err != nil {
		return nil, err
	}
	// The newest traces since the onset, and those of its first seconds
	// for the shift comparison once they left the newest.
	early, err := d.early(ctx, inc, start, to, now, st)
	if err != nil {
		return nil, err
	}
	var traces [][]*model.Span
	inWindow := map[model.TraceID]bool{}
	for _, ts := range [][][]*model.Span{pre, early, since} {
		for _, t := range ts {
			if r := RootOf(t); r != nil && EntryKey(r) == inc.Entry && !inWindow[t[0].TraceID] {
				traces = append(traces, t)
				inWindow[t[0].TraceID] = true
			}
		}
	}
	anoms, err := d.anomalies(ctx, from, st)
	if err != nil {
		return nil, err
	}
	// The verdict reads the anomalies (and the artifacts linked to them)
	// once: the fallback and the search for stored critical paths beyond
	// the sampled traces reuse them.
	all := anoms
	anoms = slices.DeleteFunc(slices.Clone(anoms), func(a analysis.Anomaly) bool { return a.Span == nil || !inWindow[a.Span.TraceID] })
	caps, capsErr := d.Source.Captures(ctx, 2000)
	slowAbove := time.Duration(inc.SlowAboveMs * float64(time.Millisecond))
	w := &analysis.Window{From: from, To: to, Entry: inc.EntryService, Traces: traces, Anomalies: anoms, Captures: caps, CapturesErr: capsErr, SlowAbove: slowAbove, Onset: start}
	base := analysis.Analyze(ctx, w, nil)
	v.SlowTraces, v.BaseTraces = base.SlowTraces, base.BaseTraces
	v.Ranking = base.Ranking[:min(len(base.Ranking), 5)]
	v.ExampleTraceID = base.ExampleTraceID
	if base.Service == "" {
		v.Evidence = base.Evidence
		v.Missing = append(v.Missing, "a culprit: no service's time per trace grew against the traces before the onset")
		return v, nil
	}
	v.Service = base.Service
	top := base.Ranking[0]
	v.Evidence = append(v.Evidence, rankingEvidence(base.Evidence, v.Service)...)
	// Every service slower and the node's CPUs stolen: the host's, not a
	// service's (nodeVerdict).
	if d.Metrics != nil {
		if steal, err := readSteal(ctx, mr, from, start, to); err != nil {
			v.Missing = append(v.Missing, "the node's steal time: "+err.Error())
		} else if nodeVerdict(v, base.Ranking, steal) {
			return v, nil
		}
	}
	known := map[string]bool{}
	for _, t := range traces {
		for _, s := range t {
			known[s.Service] = true
		}
	}
	// When calls into the top suspect grew outside it, the kernel's
	// retransmissions of it and of the other services whose calls grew so
	// say which end of the link loses packets (lossyEnd).
	var links map[string]*linkEvidence
	var callers map[string][]string
	var node nodeRunq
	var linksErr error
	var thr *throttleEvidence // the top suspect's, read with links
	if known[top.Service] && top.NetDeltaMs > top.SelfDeltaMs && d.Metrics != nil {
		peers := linkPeers(base.Ranking)
		// The link into a service starts at its callers, whose pods'
		// threads (and egress proxies) a starved CPU holds up too.
		callers = callersOf(traces, peers)
		var svcs []string
		for _, p := range peers {
			svcs = append(svcs, p.Service)
			svcs = append(svcs, callers[p.Service]...)
		}
		slices.Sort(svcs)
		links, node, linksErr = readLinks(ctx, mr, slices.Compact(svcs), from, start, to)
		// A peer whose every connection is to the top suspect (its only
		// caller, no other callee) retransmits on them whichever end loses
		// the packets: its count cannot move the verdict off the top.
		if end, ok := lossyEnd(peers, links); linksErr == nil && ok && end.Service != top.Service && known[end.Service] && !onlyWith(traces, end.Service, top.Service) {
			e, et := links[end.Service], links[top.Service]
			v.Evidence = append(v.Evidence, fmt.Sprintf("calls into %s and into %s grew outside them (%.1f and %.1f ms per trace); "+
				"the kernel saw %s's pod retransmit %.0f more than at its rate before, %s's %.0f: a pod whose link loses packets retransmits on all its connections, its peers only on theirs to it, so the loss is at %s's end",
				top.Service, end.Service, top.NetDeltaMs, end.NetDeltaMs, end.Service, e.excess(), top.Service, max(et.excess(), 0), end.Service))
			v.Service, top = end.Service, end
		}
		if linksErr == nil {
			// The culprit's CPU quota, should its pod have waited for a
			// CPU: the link's ends in the pod wait with its threads.
			var e throttleEvidence
			if e, linksErr = readThrottle(ctx, mr, top.Service, from, start, to); linksErr == nil {
				thr = &e
			}
		}
	}

	// The culprit's slow spans: its anomalous spans in slow traces, or, when
	// none of its spans was flagged, all of its spans there.
	slow := slowTraces(traces, start.UnixNano(), slowAbove)
	spans := culpritSpans(slow, v.Service, true)
	if len(spans) == 0 {
		spans = culpritSpans(slow, v.Service, false)
	}
	v.SlowSpans = len(spans)

	var shares []causeShare
	var total float64
	// timingOnly is the network cause span timing points at when the
	// kernel measured nothing on the link: a runner-up, never the verdict.
	var timingOnly *causeShare
	switch {
	case !known[v.Service]:
		// The culprit left no span: the ranking named it from calls into it.
		shares = []causeShare{{cause: CauseDownstream, ms: top.Score, share: 1}}
		v.Evidence = append(v.Evidence, fmt.Sprintf("%s sends no spans: its callers' calls into it grew by %.1f ms per trace", v.Service, top.Score))
	case top.NetDeltaMs > top.SelfDeltaMs:
		untraced := untracedGrowth(traces, start.UnixNano(), v.Service)
		if untraced >= 0.5*top.NetDeltaMs {
			shares = []causeShare{{cause: CauseDownstream, ms: untraced, share: untraced / top.Score}, {cause: CauseNetwork, ms: top.NetDeltaMs - untraced, share: (top.NetDeltaMs - untraced) / top.Score}}
			v.Evidence = append(v.Evidence, fmt.Sprintf("%s's calls to dependencies that send no spans grew by %.1f ms per trace", v.Service, untraced))
		} else {
			var from []*linkEvidence
			for _, c := range callers[v.Service] {
				if e := links[c]; e != nil {
					from = append(from, e)
				}
			}
			shares, timingOnly = d.link(v, top, links[v.Service], from, node, thr, linksErr)
		}
		slices.SortFunc(shares, func(x, y causeShare) int { return cmp.Compare(y.ms, x.ms) })
	default:
		shares, total = d.measure(ctx, v, spans, slow, all, start.UnixNano(), to.UnixNano(), max(untracedGrowth(traces, start.UnixNano(), v.Service), 0), top, st)
		if v.PathSpans == 0 {
			shares = d.fallback(ctx, v, top, spans, all, mr, from, start, to)
		}
	}
	if inc.End == 0 && known[v.Service] && v.PathSpans < cfg.MaxPaths {
		v.capture = toCapture(slow, v.Service, now.Add(-captureRecent).UnixNano())
	}
	best, runner := pickCause(shares)
	v.Cause = best.cause
	v.ServiceConfidence = round2(base.Confidence)
	if best.cause != CauseUnknown {
		v.Confidence = round2(base.Confidence * best.share)
	}
	switch {
	case total > 0 && v.PathSpans > 0 && best.cause == CauseUnknown:
		v.Evidence = append(v.Evidence, fmt.Sprintf("the kernel could not tell what %s's threads did for %.0f%% of the measured time", v.Service, 100*best.share))
		v.Missing = append(v.Missing, fmt.Sprintf("what %s's threads waited for: the kernel saw no state it can name (user-space waits such as a Go mutex, timer sleeps, threads the snapshot missed); a CPU profile or the runtime's own events would tell", v.Service))
	case total > 0 && v.PathSpans > 0 && v.byGrowth != "":
		v.Evidence = append(v.Evidence, fmt.Sprintf("%s: %.0f%% of what grew per %s (%.1f of %.1f ms)", best.cause, 100*best.share, v.byGrowth, best.ms, total))
	case total > 0 && v.PathSpans > 0:
		v.Evidence = append(v.Evidence, fmt.Sprintf("%s: %.0f%% of the measured time (%.1f of %.1f ms)", best.cause, 100*best.share, best.ms, total))
	}
	switch {
	case timingOnly != nil && best.cause == CauseUnknown:
		v.RunnerUp = &Alternative{Service: v.Service, Cause: CauseNetwork, Score: round2(timingOnly.share),
			Why: fmt.Sprintf("span timing only: calls into %s grew by %.1f ms per trace outside it, with no kernel evidence of a slow link", v.Service, timingOnly.ms)}
	case runner != nil && runner.share >= 0.1:
		of := "measured slow time"
		if v.byGrowth != "" {
			of = "growth per " + v.byGrowth
		}
		v.RunnerUp = &Alternative{Service: v.Service, Cause: runner.cause, Score: round2(runner.share), Why: fmt.Sprintf("%.0f%% of %s's %s", 100*runner.share, v.Service, of)}
	default:
		// The first other service of the ranking (the culprit may be a
		// lower one: the lossy end of a link).
		for _, r := range base.Ranking {
			if r.Service != v.Service && r.Score > 0 {
				v.RunnerUp = &Alternative{Service: r.Service, Score: round2(r.Score / top.Score), Why: fmt.Sprintf("its time per trace grew by %.1f ms (the culprit's by %.1f ms)", r.Score, top.Score)}
				break
			}
		}
	}
	if capsErr != nil {
		v.Missing = append(v.Missing, "the capture log: "+capsErr.Error())
	} else if note := analysis.CaptureTrouble(caps, v.Service, from); note != "" {
		v.Missing = append(v.Missing, note)
	}
	v.Advice = advise(v)
	return v, nil
}

// link weighs the culprit's link when calls into it grew more than its own
// time. The time between a caller's CLIENT span and the culprit's SERVER
// span is the link, but also sidecars, proxies and the kernel's network
// stack waiting for a CPU on a starved node: span timing alone cannot tell
// them apart. So the network is named only when the kernel measured the
// link failing (retransmissions on the culprit's sockets, well above their
// rate before the onset); otherwise the cause is unknown and the timing's
// network is returned as timingOnly, for the runner-up.
//
// A link can also be slow without losing packets: a delay on the path, a
// proxy holding requests. Then the kernel excludes the CPU instead: when
// the run-queue latency of the culprit's pod and of the node during the
// incident is too small for any wait for a CPU to account for a quarter of
// the growth (cpuBound, wakeupsPerCall), the time passed on the link
// itself, and the cause is network.
//
// When the pod did wait for a CPU enough, its CPU quota tells whether that
// is the cause: a quota that held the pod's containers off the CPUs
// markedly more than before the onset (throttleEvidence.throttled) delays
// the calls' ends in the pod — its threads and its sidecar reading and
// answering them — and the cause is cpu-throttle. Otherwise the waits may
// be other programs' or the link's, and the cause stays unknown.
//
// ev, callers (the culprit's callers' pods), node and err are what
// readLinks read (nil ev: not read); thr the culprit's throttling (nil:
// not read).
func (d *Diagnoser) link(v *Verdict, top analysis.ServiceScore, ev *linkEvidence, callers []*linkEvidence, node nodeRunq, thr *throttleEvidence, err error) (shares []causeShare, timingOnly *causeShare) {
	self := causeShare{cause: CauseCPU, ms: max(top.SelfDeltaMs, 0), share: max(top.SelfDeltaMs, 0) / top.Score}
	network := causeShare{cause: CauseNetwork, ms: top.NetDeltaMs, share: top.NetDeltaMs / top.Score}
	timing := fmt.Sprintf("calls into %s grew by %.1f ms per trace outside it (client time − its server time), its own time by %.1f ms", v.Service, top.NetDeltaMs, top.SelfDeltaMs)
	var e linkEvidence
	if ev != nil {
		e = *ev
	}
	switch {
	case err == nil && e.lossy():
		v.Evidence = append(v.Evidence, timing+": the link to it",
			fmt.Sprintf("kernel: %s on the sockets of %s's containers%s", e, v.Service, e.where()))
		return []causeShare{network, self}, nil
	case err == nil && e.cpuBound(callers, node) < cpuLinkShare*top.NetDeltaMs:
		v.Evidence = append(v.Evidence, timing+": the link to it",
			fmt.Sprintf("kernel: %s on the sockets of %s's containers%s: no loss, but no wait for a CPU either — its pod's threads waited %.2f ms on average each time they were runnable (%.2f before), its callers' pods' %.2f ms at most, the node's %.2f ms: even %d such waits per call make %.1f ms, under a quarter of the %.1f ms the calls grew, so the time passed on the link itself (a delay on the path or in a proxy)",
				e, v.Service, e.where(), e.runq.meanMs(), e.runqBefore.meanMs(), worstMeanMs(callers), node.during.meanMs(), wakeupsPerCall, e.cpuBound(callers, node), top.NetDeltaMs))
		return []causeShare{network, self}, nil
	case err == nil && thr != nil && thr.throttled():
		v.Evidence = append(v.Evidence, timing,
			fmt.Sprintf("kernel: %s on the sockets of %s's containers%s: no loss; its pod's threads waited %.2f ms on average each time they were runnable (%.2f before)",
				e, v.Service, e.where(), e.runq.meanMs(), e.runqBefore.meanMs()),
			fmt.Sprintf("kernel: %s: the quota delayed the calls' ends in its pod (its threads and proxies reading and answering them)", thr))
		return []causeShare{{cause: CauseCPUThrottle, ms: top.NetDeltaMs, share: network.share}, self}, nil
	case d.Metrics == nil:
		v.Missing = append(v.Missing, fmt.Sprintf("kernel evidence of a slow link to %s: the agent's kernel metrics (TCP retransmissions, drops) are not read here", v.Service))
	case err != nil:
		v.Missing = append(v.Missing, fmt.Sprintf("kernel evidence of a slow link to %s: %v", v.Service, err))
	case !e.seen:
		v.Missing = append(v.Missing, fmt.Sprintf("kernel evidence of a slow link to %s: no kernel metrics of its containers (is an agent with --kmetrics running on its node?)", v.Service))
	default:
		v.Evidence = append(v.Evidence, fmt.Sprintf("kernel: %s on the sockets of %s's containers: no sign of a lossy link%s", e, v.Service, e.where()))
		if thr != nil && thr.seen {
			v.Evidence = append(v.Evidence, fmt.Sprintf("kernel: %s: not the quota", thr))
		}
	}
	v.Evidence = append(v.Evidence, timing+": span timing points at the link, but without kernel evidence that time may as well be proxies or the network stack waiting for a CPU")
	return []causeShare{{cause: CauseUnknown, ms: top.NetDeltaMs, share: network.share}}, &network
}

// callersOf names, for each of peers, the other services whose calls led
// to its spans in traces (through a sidecar's ingress span of its own
// service), sorted.
func callersOf(traces [][]*model.Span, peers []analysis.ServiceScore) map[string][]string {
	want := map[string]bool{}
	for _, p := range peers {
		want[p.Service] = true
	}
	out := map[string][]string{}
	for _, t := range traces {
		byID := make(map[model.SpanID]*model.Span, len(t))
		for _, s := range t {
			byID[s.SpanID] = s
		}
		for _, s := range t {
			if !want[s.Service] || s.Kind != model.KindServer {
				continue
			}
			up := byID[s.ParentSpanID]
			for up != nil && up.Service == s.Service && up != s {
				up = byID[up.ParentSpanID]
			}
			if up != nil && up.Service != s.Service && !slices.Contains(out[s.Service], up.Service) {
				out[s.Service] = append(out[s.Service], up.Service)
			}
		}
	}
	for _, c := range out {
		slices.Sort(c)
	}
	return out
}

// onlyWith reports whether every call svc makes or answers in traces is
// one with other (and there is at least one).
func onlyWith(traces [][]*model.Span, svc, other string) bool {
	seen := false
	for _, t := range traces {
		byID := make(map[model.SpanID]*model.Span, len(t))
		for _, s := range t {
			byID[s.SpanID] = s
		}
		for _, s := range t {
			up := byID[s.ParentSpanID]
			if up == nil || up == s || up.Service == s.Service || (s.Service != svc && up.Service != svc) {
				continue
			}
			if s.Service != other && up.Service != other {
				return false
			}
			seen = true
		}
	}
	return seen
}

// captureRecent is how old a slow span may be for the tracker to ask a
// capture of it: agents keep their kernel window for a minute.
const captureRecent = 40 * time.Second

// maxCapture bounds the spans one verdict asks captures for (the capture
// manager joins those of one process whose windows overlap).
const maxCapture = 8

// toCapture returns svc's unflagged non-CLIENT spans in slow (newest first)
// that started after since, up to maxCapture: the flagged ones went to the
// capture manager when they were stored.
func toCapture(slow [][]*model.Span, svc string, since int64) []*model.Span {
	var out []*model.Span
	for _, s := range culpritSpans(slow, svc, false) {
		if len(out) >= maxCapture {
			break
		}
		if s.Start >= since && !s.IsAnomalous() {
			out = append(out, s)
		}
	}
	return out
}

// slowTraces returns the traces from since on with an anomalous span or,
// when slowAbove > 0, a root span that took longer, newest first.
func slowTraces(traces [][]*model.Span, since int64, slowAbove time.Duration) [][]*model.Span {
	// Each trace's root found once, not in every comparison.
	type slow struct {
		spans []*model.Span
		start int64
	}
	var found []slow
	for _, t := range traces {
		if r := RootOf(t); r != nil && r.Start >= since && ((slowAbove > 0 && r.Duration > int64(slowAbove)) || slices.ContainsFunc(t, (*model.Span).IsAnomalous)) {
			found = append(found, slow{t, r.Start})
		}
	}
	slices.SortFunc(found, func(x, y slow) int { return cmp.Compare(y.start, x.start) })
	var out [][]*model.Span
	for _, f := range found {
		out = append(out, f.spans)
	}
	return out
}

// culpritSpans returns svc's non-CLIENT spans in traces (anomalous ones
// only when anomalous), as trace index and span.
func culpritSpans(traces [][]*model.Span, svc string, anomalous bool) []*model.Span {
	var out []*model.Span
	for _, t := range traces {
		for _, s := range t {
			if s.Service == svc && s.Kind != model.KindClient && (!anomalous || s.IsAnomalous()) {
				out = append(out, s)
			}
		}
	}
	return out
}

func childrenOf(t []*model.Span) map[model.SpanID][]*model.Span {
	ch := map[model.SpanID][]*model.Span{}
	for _, s := range t {
		if !s.ParentSpanID.IsZero() && s.ParentSpanID != s.SpanID {
			ch[s.ParentSpanID] = append(ch[s.ParentSpanID], s)
		}
	}
	return ch
}

// untracedGrowth is how much more time per trace svc's spans spent in calls
// to dependencies that send no spans in the incident's traces than before.
func untracedGrowth(traces [][]*model.Span, onset int64, svc string) float64 {
	var slowNs, baseNs float64
	var nSlow, nBase int
	reached := reachedAddrs(traces, svc)
	for _, t := range traces {
		var ch map[model.SpanID][]*model.Span // built for the traces svc served in only
		var ns int64
		for _, s := range t {
			if s.Service == svc && s.Kind != model.KindClient {
				if ch == nil {
					ch = childrenOf(t)
				}
				for _, iv := range splitSpan(s, ch, reached).untraced {
					ns += iv.b - iv.a
				}
			}
		}
		if r := RootOf(t); r.Start >= onset {
			if slices.ContainsFunc(t, (*model.Span).IsAnomalous) {
				slowNs += float64(ns)
				nSlow++
			}
		} else if !slices.ContainsFunc(t, (*model.Span).IsAnomalous) {
			baseNs += float64(ns)
			nBase++
		}
	}
	if nSlow == 0 || nBase == 0 {
		return 0
	}
	return (slowNs/float64(nSlow) - baseNs/float64(nBase)) / 1e6
}

// measure reads the critical paths of the culprit's slow spans (of the
// newest MaxPaths slow traces with one) and sums what their own threads did
// in their exclusive time. Calls to dependencies that send no spans count as
// downstream by how much they grew per trace (untracedMs) against the
// traces before the onset, since their normal time is no part of the
// slowdown.
//
// The sampled traces hold only some of the incident's requests, and a
// capture stores the paths of the spans that triggered it, which need not
// be among them: when the sampled traces give fewer than MaxPaths paths,
// the stored critical paths linked to any of the culprit's anomalous spans
// in [onset, to] (anoms) are read too (storedPaths). selfBaseMs is the
// culprit's exclusive time per trace before the onset (the ranking's), which
// bounds its CPU time then when no paths of that time were stored
// (splitQueue).
func (d *Diagnoser) measure(ctx context.Context, v *Verdict, spans []*model.Span, slow [][]*model.Span, anoms []analysis.Anomaly, onset, to int64, untracedPerTrace float64,
	top analysis.ServiceScore, st *VerdictState) ([]causeShare, float64) {
	selfBaseMs := top.SelfBaseMs
	if d.Paths == nil {
		v.Missing = append(v.Missing, "kernel critical paths: not read here")
		return nil, 0
	}
	want := map[model.TraceID]map[model.SpanID]*model.Span{}
	for _, s := range spans {
		if want[s.TraceID] == nil {
			want[s.TraceID] = map[model.SpanID]*model.Span{}
		}
		want[s.TraceID][s.SpanID] = s
	}
	tally := newWaitTally()
	var untracedMs float64
	var noSnap, read, looked int
	var gave []model.TraceID // the traces that gave the culprit's paths
	var notes []string
	var example string
	for _, t := range slow {
		// A trace counts towards MaxPaths when it gave the culprit's
		// paths: the traces of other services' captures (their paths
		// only) must not crowd out the culprit's, as they would as
		// soon as a capture of another process covers the newest
		// slow traces. maxPathLookups bounds the traces analysed.
		if read >= d.Config.MaxPaths || looked >= maxPathLookups*d.Config.MaxPaths || ctx.Err() != nil {
			break
		}
		id := t[0].TraceID
		mine := want[id]
		if len(mine) == 0 {
			continue
		}
		res, err := d.Paths.Trace(ctx, id)
		switch {
		case errors.Is(err, critpath.ErrNoSnapshot), errors.Is(err, store.ErrNotFound):
			noSnap++
			continue
		case err != nil:
			notes = append(notes, err.Error())
			continue
		}
		looked++
		ch := childrenOf(t)
		got := 0
		for i := range res.Spans {
			p := &res.Spans[i]
			sid, err := model.ParseSpanID(p.SpanID)
			if err != nil || mine[sid] == nil {
				continue
			}
			tally.addSpan(p, mine[sid], ch)
			got++
			if example == "" {
				example = res.TraceID
			}
		}
		if got == 0 {
			continue
		}
		v.PathSpans += got
		read++
		gave = append(gave, id)
		for _, n := range res.Notes {
			if len(notes) < 3 && !slices.Contains(notes, n) {
				notes = append(notes, n)
			}
		}
	}
	sampled, earlier, stored := v.PathSpans, 0, 0
	done := map[model.TraceID]bool{}
	for _, t := range slow {
		done[t[0].TraceID] = true
	}
	if read < d.Config.MaxPaths && ctx.Err() == nil {
		n, extra, err := d.storedPaths(ctx, tally, v.Service, anoms, onset, to, onset, to, done, d.Config.MaxPaths-read,
			func(id model.TraceID) { gave = append(gave, id) })
		if err != nil && len(notes) < 3 {
			notes = append(notes, err.Error())
		}
		if n > 0 {
			v.PathSpans += n
			read += extra
			stored = n
		}
	}
	// Then the traces whose paths earlier verdicts of the incident read,
	// newest first, once they left the sample and are no anomaly's.
	mem := st.remembered(v.Service)
	for i := len(mem) - 1; i >= 0 && read < d.Config.MaxPaths && ctx.Err() == nil; i-- {
		id := mem[i]
		if done[id] {
			continue
		}
		done[id] = true
		n, err := d.tracePaths(ctx, tally, v.Service, id, onset, to)
		if err != nil && len(notes) < 3 {
			notes = append(notes, err.Error())
		}
		if n > 0 {
			v.PathSpans += n
			earlier += n
			read++
			gave = append(gave, id)
		}
	}
	st.remember(v.Service, gave, maxRemembered*d.Config.MaxPaths)
	if v.PathSpans == 0 {
		v.Missing = append(v.Missing, fmt.Sprintf("kernel critical paths: none for %s's %d slow spans (%d traces had no kernel snapshot linked; is an agent running on its node, with %s registered?)",
			v.Service, len(spans), noSnap, v.Service))
		for _, n := range notes {
			v.Missing = append(v.Missing, "critical path: "+n)
		}
		return nil, 0
	}
	if example != "" {
		v.ExampleTraceID = example
	}
	untracedMs = untracedPerTrace * float64(read)
	d.onCPUSplit(ctx, v, "slow spans", tally, cpuArtifacts(anoms, v.Service), onset, to)
	waits := tally.by
	d.monitorSpin(ctx, v, spans, anoms, waits)
	for k, ms := range waits {
		waits[k] = round2(ms)
	}
	v.Waits = waits
	if untracedMs > 0 {
		v.Waits["downstream"] = round2(untracedMs)
	}
	from := fmt.Sprintf("%d of its %d slow spans in the %d traces compared", sampled, len(spans), len(slow))
	if stored > 0 {
		from += fmt.Sprintf(", %d from the stored paths of captures during the incident, of traces beyond them", stored)
	}
	if earlier > 0 {
		from += fmt.Sprintf(", %d of traces earlier verdicts of the incident read, beyond them", earlier)
	}
	v.Evidence = append(v.Evidence, fmt.Sprintf("kernel critical paths of %d of %s's slow spans (%s; %d traces): in their exclusive time its threads spent %s",
		v.PathSpans, v.Service, from, read, describeWaits(waits, untracedMs)))
	if via := tally.describeVia(); via != "" {
		v.Evidence = append(v.Evidence, "counted by what held them up: "+via+" (the thread waited on was itself held off, so that is the cause of both)")
	}
	if held := tally.describeHeld(); held != "" {
		v.Evidence = append(v.Evidence, "while those threads waited in a run queue, the CPU ran: "+held)
	}
	if len(notes) > 0 {
		v.Evidence = append(v.Evidence, "critical-path notes: "+strings.Join(notes, "; "))
	}
	// The spans' own waits weigh the growth only where the kernel paths
	// of the spans before the onset are missing.
	if shares, total, ok := d.weighBaseline(ctx, v, waits, untracedMs, anoms, onset, to, spanWaitsWeigh(waits, top)); ok {
		return shares, total
	}
	if shares, total, ok := weighSpanWaits(v, waits, tally.via, untracedMs, top); ok {
		return shares, total
	}
	shares, total := causesOf(waits, untracedMs)
	// Without a baseline of paths, the culprit's exclusive time per trace
	// before the onset (the ranking's, from spans) bounds its CPU time per
	// span then, and its run-queue wait then is taken as none: the split
	// gives the running that grew no more than its due.
	by := byCause(shares, total)
	n := float64(v.PathSpans)
	if own := splitQueue(by, selfBaseMs*n, 0); own >= 0.05 {
		for i := range shares {
			shares[i].ms = by[shares[i].cause]
			shares[i].share = shares[i].ms / max(total, 1e-9)
		}
		sortShares(shares)
		v.Evidence = append(v.Evidence, fmt.Sprintf("its run-queue wait grew with its own CPU time (at most %.1f ms per span before the onset, its exclusive time then; %.1f ms per slow span): %.1f ms of the wait per slow span goes with that growth (cpu), the rest with the contention's (a Shapley split of wait = contention × CPU time)",
			selfBaseMs, (by[CauseCPU]-own)/n, own/n))
	}
	return shares, total
}

// queueStates are the path states of a wait for a CPU, by what kept the
// thread off it.
var queueStates = []string{critpath.Runqueue, critpath.Throttled, critpath.Steal, OwnQueue, GCQueue, ObserverQueue}

// weighSpanWaits names the cause by what grew when no kernel paths of the
// culprit's spans before the onset say what its threads did then, but its
// spans do: rootline run measures each request's wait for a CPU
// (rootline.wait.local_ms, the kernel's run delay of its threads), so the
// ranking's comparison of the traces before and after the onset says how
// much of the culprit's exclusive growth per trace was run-queue wait
// (top.LocalDeltaMs) and how much the rest. The run-queue growth goes to
// the causes of the kinds of run-queue wait the slow spans' paths show
// (another program on the CPU, its cgroup's quota, the hypervisor, its own
// threads, its collector), the rest to their other states, each in
// proportion. The wait that grew with the service's own CPU time then goes
// to cpu (splitQueue, with its exclusive time before the onset as the
// bound of its CPU time then). Without the spans' waits (a service not
// under rootline run) or without run-queue time in the paths (the kind of
// wait unknown), ok is false.
//
// The spans measure their own threads' wait for a CPU only. A wait the
// paths name by the state of the thread waited on (via: a lock wait behind
// a holder its quota throttled counts as throttled) is another kind of
// wait of the span's thread, so it is weighed with the rest of the growth,
// under the cause it was named by.
func weighSpanWaits(v *Verdict, waits map[string]float64, via map[string]map[string]float64, untracedMs float64, top analysis.ServiceScore) (shares []causeShare, total float64, ok bool) {
	if !spanWaitsWeigh(waits, top) {
		return nil, 0, false
	}
	// own and other split each state's time into the threads' own waits
	// for a CPU and the rest.
	own, other := map[string]float64{}, map[string]float64{}
	for st, ms := range waits {
		if !slices.Contains(queueStates, st) {
			other[st] = ms
			continue
		}
		var named float64
		for _, by := range via {
			named += by[st]
		}
		named = min(max(named, 0), ms)
		own[st], other[st] = ms-named, named
	}
	var qSum, rSum float64
	for _, ms := range own {
		qSum += ms
	}
	if qSum <= 0 {
		// Only waits named by another thread's run-queue state: the kind
		// of the threads' own wait is taken as that of the threads they
		// waited on (the named waits stay with the rest too).
		for st := range own {
			own[st] = waits[st]
			qSum += waits[st]
		}
	}
	for _, ms := range other {
		rSum += ms
	}
	rSum += untracedMs
	q := min(top.LocalDeltaMs, top.SelfDeltaMs)
	r := top.SelfDeltaMs - q
	grown := map[string]float64{}
	for st, ms := range own {
		grown[StateCause(st)] += q * ms / qSum
	}
	if r > 0 && rSum > 0 {
		for st, ms := range other {
			grown[StateCause(st)] += r * ms / rSum
		}
	}
	if r > 0 && untracedMs > 0 {
		grown[CauseDownstream] += r * untracedMs / rSum
	}
	// splitQueue weighs levels: the running before is at most the
	// exclusive time then, the contention's wait before is taken as none.
	levels := map[string]float64{CauseCPU: top.SelfBaseMs + grown[CauseCPU], CauseCPUContention: grown[CauseCPUContention]}
	if own := splitQueue(levels, top.SelfBaseMs, 0); own >= 0.05 {
		grown[CauseCPU] += own
		grown[CauseCPUContention] -= own
	}
	for c, ms := range grown {
		if ms > 0 {
			shares = append(shares, causeShare{cause: c, ms: ms})
			total += ms
		}
	}
	for i := range shares {
		shares[i].share = shares[i].ms / total
	}
	sortShares(shares)
	v.byGrowth = "trace"
	v.Evidence = append(v.Evidence, fmt.Sprintf("against every trace before the onset, from its spans (no kernel paths of its spans then): %s's wait for a CPU, which rootline run measures on each request (rootline.wait.local_ms), grew by %.1f ms per trace of its %.1f ms of exclusive growth; "+
		"that growth goes by the kinds of run-queue wait its slow spans' paths show, the rest by their other states: per trace, more %s",
		v.Service, top.LocalDeltaMs, top.SelfDeltaMs, describeGrowth(shares)))
	return shares, total, true
}

// spanWaitsWeigh reports whether weighSpanWaits can weigh waits: the spans
// measured the culprit's run-queue wait grow, its exclusive time grew, and
// its slow spans' paths show which kind of run-queue wait it was.
func spanWaitsWeigh(waits map[string]float64, top analysis.ServiceScore) bool {
	if top.LocalDeltaMs <= 0 || top.SelfDeltaMs <= 0 {
		return false
	}
	for _, st := range queueStates {
		if waits[st] > 0 {
			return true
		}
	}
	return false
}

// Baseline bounds: the traces of the culprit's normal spans whose stored
// paths a verdict reads, and the spans it needs to weigh against them.
const (
	maxBaselineTraces = 16
	minBaselineSpans  = 4
)

// weighBaseline names the cause by what grew: the stored paths of the
// culprit's spans that started before the onset (the normal requests that a
// capture's window reached back to, critpath.DefaultBaselinePaths) give what
// its threads did per normal span, cause by cause, and the causes are
// weighed by how much more of each a slow span had. A service's own work
// is in its normal spans too: a fault that adds a wait smaller than that
// work (a few fsyncs in a request that computes) is what grew, not what
// the slow spans mostly did. ok is false, and the shares of the slow spans'
// time stand (or the spans' waits weigh the growth: spansWeigh, which the
// note on a missing baseline says), when there are fewer than
// minBaselineSpans such paths or nothing grew.
func (d *Diagnoser) weighBaseline(ctx context.Context, v *Verdict, waits map[string]float64, untracedMs float64, anoms []analysis.Anomaly,
	onset, to int64, spansWeigh bool) (shares []causeShare, total float64, ok bool) {
	base := newWaitTally()
	n, _, err := d.storedPaths(ctx, base, v.Service, anoms, onset, to, onset-d.Config.Lookback.Nanoseconds(), onset-1,
		map[model.TraceID]bool{}, maxBaselineTraces, nil)
	if n < minBaselineSpans {
		what := fmt.Sprintf("%d", n)
		if err != nil {
			what += " (" + err.Error() + ")"
		}
		so := "so the cause is the largest share of the slow spans' time, not what grew"
		if spansWeigh {
			so = "so what grew was weighed from its spans' waits"
		}
		v.Missing = append(v.Missing, fmt.Sprintf("a baseline: kernel critical paths of %s's spans before the onset: %s of the %d needed, %s",
			v.Service, what, minBaselineSpans, so))
		return nil, 0, false
	}
	d.onCPUSplit(ctx, v, "spans before the onset", base, cpuArtifacts(anoms, v.Service), onset-d.Config.Lookback.Nanoseconds(), onset)
	perSpan := func(m map[string]float64, k int) map[string]float64 {
		out := make(map[string]float64, len(m))
		for st, ms := range m {
			out[st] = ms / float64(k)
		}
		return out
	}
	slowBy := byCause(causesOf(perSpan(waits, v.PathSpans), untracedMs/float64(v.PathSpans)))
	baseWaits := perSpan(base.by, n)
	baseBy := byCause(causesOf(baseWaits, 0))
	slowCPU, slowGC := slowBy[CauseCPU], slowBy[CauseGC]
	switch toCPU, toGC := splitQueueGC(slowBy, baseBy[CauseCPU], baseBy[CauseCPUContention], baseBy[CauseGC]); {
	case toGC >= 0.05:
		v.Evidence = append(v.Evidence, fmt.Sprintf("its run-queue wait grew with its own demand for the CPU, its threads' (%.1f → %.1f ms per span) and its collector's (%.1f → %.1f ms): %.1f ms of the wait per slow span goes with the first's growth (cpu), %.1f ms with the collector's (gc), the rest with the contention's (a Shapley split of wait = contention × demand)",
			baseBy[CauseCPU], slowCPU, baseBy[CauseGC], slowGC, toCPU, toGC))
	case toCPU >= 0.05:
		v.Evidence = append(v.Evidence, fmt.Sprintf("its run-queue wait grew with its own CPU time (%.1f → %.1f ms per span): %.1f ms of the wait per slow span goes with that growth (cpu), the rest with the contention's (a Shapley split of wait = contention × CPU time)",
			baseBy[CauseCPU], slowCPU, toCPU))
	}
	var sumSlow, sumBase float64
	for c, ms := range slowBy {
		sumSlow += ms
		if g := ms - baseBy[c]; g > 0 {
			shares = append(shares, causeShare{cause: c, ms: g})
			total += g
		}
	}
	for _, ms := range baseBy {
		sumBase += ms
	}
	v.BaselineSpans = n
	v.BaselineWaits = map[string]float64{}
	for st, ms := range baseWaits {
		v.BaselineWaits[st] = round2(ms)
	}
	if total <= 0 || sumSlow <= sumBase {
		v.Evidence = append(v.Evidence, fmt.Sprintf("against %d of %s's spans before the onset (%.1f ms per span in their exclusive time, the slow ones %.1f): no cause grew, the cause is the largest share of the slow spans' time",
			n, v.Service, sumBase, sumSlow))
		return nil, 0, false
	}
	for i := range shares {
		shares[i].share = shares[i].ms / total
	}
	sortShares(shares)
	v.Evidence = append(v.Evidence, fmt.Sprintf("against %d of %s's spans before the onset (kernel critical paths from the captures' windows): %.1f ms per span in their exclusive time (%s), the slow ones %.1f; per slow span, more %s",
		n, v.Service, sumBase, describeWaits(baseWaits, 0), sumSlow, describeGrowth(shares)))
	v.byGrowth = "slow span"
	return shares, total, true
}

// fallback names a cause without kernel paths: from the run-queue wait
// rootline run puts on spans (its container's CPU quota, from the kernel
// metrics, telling cpu-throttle from cpu-contention), then from the CPU
// profiles and JFR recordings captured for the slow spans. [from, onset)
// and [onset, to] are the windows before and since the incident's onset.
func (d *Diagnoser) fallback(ctx context.Context, v *Verdict, top analysis.ServiceScore, spans []*model.Span, anoms []analysis.Anomaly, mr store.MetricReader, from, onset, to time.Time) []causeShare {
	if top.LocalDeltaMs > 0 && top.LocalDeltaMs >= 0.5*top.SelfDeltaMs {
		v.Evidence = append(v.Evidence, fmt.Sprintf("%s's threads waited %.1f ms more per trace for a CPU (rootline.wait.local_ms)", v.Service, top.LocalDeltaMs))
		wait := causeShare{cause: CauseCPUContention, ms: top.LocalDeltaMs, share: top.LocalDeltaMs / top.SelfDeltaMs}
		const tell = "to tell a CPU quota (cpu-throttle) from other programs on its CPUs (cpu-contention)"
		if mr == nil {
			v.Missing = append(v.Missing, "a kernel snapshot or the agent's kernel metrics, "+tell)
			return []causeShare{wait}
		}
		e, err := readThrottle(ctx, mr, v.Service, from, onset, to)
		switch {
		case err != nil:
			v.Missing = append(v.Missing, fmt.Sprintf("%s's CPU quota: %v; a kernel snapshot, %s", v.Service, err, tell))
		case !e.seen:
			v.Missing = append(v.Missing, fmt.Sprintf("%s's CPU quota: no cpu_throttled kernel metric of its containers (an agent with --kmetrics on its node, the cgroup's cpu controller); a kernel snapshot, %s", v.Service, tell))
		case e.duringWin <= 0:
			v.Missing = append(v.Missing, fmt.Sprintf("%s's CPU quota since the onset: the agent has not pushed its kernel metrics since; a kernel snapshot, %s", v.Service, tell))
		case e.throttled():
			v.Evidence = append(v.Evidence, fmt.Sprintf("kernel: %s: the quota, not other programs, held its threads", e))
			wait.cause = CauseCPUThrottle
		default:
			v.Evidence = append(v.Evidence, fmt.Sprintf("kernel: %s: not the quota, so other programs on its CPUs", e))
		}
		return []causeShare{wait}
	}
	b, err := (&analysis.Profiles{Reader: d.Source}).Explain(ctx, profiledSpans(spans, anoms))
	if err != nil {
		v.Missing = append(v.Missing, "profiles unreadable: "+err.Error())
	}
	share := func(ns, of int64) float64 { return float64(ns) / float64(max(of, 1)) }
	var lock, cpu causeShare
	if b.LockSpans > 0 {
		lock = causeShare{cause: CauseLock, share: share(b.LockNs, b.LockOfNs), ms: float64(b.LockNs) / 1e6}
		v.Evidence = append(v.Evidence, fmt.Sprintf("JFR: blocked entering Java monitors for %.0f%% of %d slow spans' time", 100*lock.share, b.LockSpans))
	}
	if b.OnCPUSpans > 0 {
		cpu = causeShare{cause: CauseCPU, share: share(b.OnCPUNs, b.OnCPUOfNs), ms: float64(b.OnCPUNs) / 1e6}
		v.Evidence = append(v.Evidence, fmt.Sprintf("CPU profiles: on CPU for %.0f%% of %d slow spans' time", 100*cpu.share, b.OnCPUSpans))
		v.Missing = append(v.Missing, "a kernel snapshot, to say what the off-CPU time waited for")
	} else if b.LockSpans == 0 {
		v.Missing = append(v.Missing, fmt.Sprintf("CPU profiles and JFR recordings: none captured for %s's slow spans", v.Service))
	}
	// The part of the on-CPU time in the kernel's file-system code is the
	// service's file I/O, a JVM's in faults on fresh heap pages its
	// collector's, and reclaim the memory's, not its own work (onCPUSplit).
	var kernel []causeShare
	if b.KernelOnCPUNs >= minFileIOSampleNs {
		for _, part := range []struct {
			ns           int64
			cause, where string
		}{
			{b.FileIONs, CauseDisk, "in file-system code (page cache, fsync, writeback)"},
			{b.JVMAnonFaultNs, CauseGC, "a JVM's page faults on fresh heap pages"},
			{b.ReclaimNs, CauseMemory, "in memory reclaim, compaction or swap"},
		} {
			if f := float64(part.ns) / float64(b.KernelOnCPUNs); f >= minFileIOShare {
				kernel = append(kernel, causeShare{cause: part.cause, share: f * cpu.share, ms: f * cpu.ms})
				v.Evidence = append(v.Evidence, fmt.Sprintf("CPU profiles (kernel stacks): %.0f%% of that on-CPU time was %s: %s", 100*f, part.where, part.cause))
			}
		}
		for _, k := range kernel {
			cpu.share -= k.share
			cpu.ms -= k.ms
		}
	}
	// Profiles see on-CPU time and long monitor waits only: the rest of
	// the time is unaccounted for, so CPU is named only when it is most of
	// the time (JVM monitors spin before they park, so a quarter of the
	// time in monitor waits names the lock).
	switch {
	case lock.share >= 0.25:
		return []causeShare{lock, cpu}
	case len(kernel) > 0 && cpu.share+sumShares(kernel) >= 0.5:
		out := append([]causeShare{cpu}, kernel...)
		if lock.share > 0 {
			out = append(out, lock)
		}
		sortShares(out)
		return out
	case cpu.share >= 0.5:
		return []causeShare{cpu, lock}
	}
	return []causeShare{{cause: CauseUnknown, share: 1 - cpu.share - lock.share}}
}

// profiledSpans are the culprit's slow spans as the profiles are read for:
// with their threads and the artifacts linked to them (anoms).
func profiledSpans(spans []*model.Span, anoms []analysis.Anomaly) []analysis.SlowSpan {
	arts := map[model.SpanID][]store.Artifact{}
	for _, a := range anoms {
		if a.Span != nil {
			arts[a.Span.SpanID] = a.Artifacts
		}
	}
	var slow []analysis.SlowSpan
	for _, s := range spans {
		slow = append(slow, analysis.SlowSpan{TraceID: s.TraceID, SpanID: s.SpanID, Service: s.Service, Start: s.Start, End: s.End(),
			Exclusive: s.Duration, Threads: analysis.SpanThreads(s), Artifacts: arts[s.SpanID]})
	}
	return slow
}

// monitorSpin corrects the measured waits of a Java culprit whose threads
// the kernel saw mostly running: a JVM spins on a contended monitor before
// it parks, so a thread acquiring a lock is on CPU, and only JFR's
// monitor-enter events (the whole acquisition, spin and park) tell that
// time from work. The share of the slow spans' time their threads spent
// entering monitors (analysis.Profiles, from the JFR recordings
// captured for them), beyond the lock waits the kernel saw, is moved from
// running (then the run queue, where a spinning thread is preempted) to
// lock. Nothing changes without JFR recordings of the spans.
func (d *Diagnoser) monitorSpin(ctx context.Context, v *Verdict, spans []*model.Span, anoms []analysis.Anomaly, waits map[string]float64) {
	var total float64
	for _, ms := range waits {
		total += ms
	}
	if total <= 0 || waits[critpath.Running] < waits[critpath.Lock] {
		return
	}
	slow := profiledSpans(spans, anoms)
	slow = slices.DeleteFunc(slow, func(s analysis.SlowSpan) bool {
		return !slices.ContainsFunc(s.Artifacts, func(a store.Artifact) bool { return a.Kind == analysis.KindJFR })
	})
	if len(slow) == 0 {
		return
	}
	b, err := (&analysis.Profiles{Reader: d.Source}).Explain(ctx, slow)
	if err != nil || b.LockSpans == 0 || b.LockOfNs <= 0 {
		return
	}
	share := float64(b.LockNs) / float64(b.LockOfNs)
	spin := share*total - waits[critpath.Lock]
	if spin < 0.05*total {
		return
	}
	moved := 0.0
	for _, st := range []string{critpath.Running, OwnQueue, critpath.Runqueue} {
		if m := min(spin-moved, waits[st]); m > 0 {
			waits[st] -= m
			moved += m
		}
	}
	waits[critpath.Lock] += moved
	v.Evidence = append(v.Evidence, fmt.Sprintf("JFR: the threads of %d of %s's slow spans were entering contended Java monitors for %.0f%% of their time; "+
		"%.1f ms of the time the kernel saw them on CPU or runnable counts as lock (a JVM spins on a contended monitor before it parks)",
		b.LockSpans, v.Service, 100*share, moved))
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// rankingEvidence keeps the lines of the ranking's evidence (the surge, the
// culprit's times, the next suspect) and leaves out the cause it named
// without kernel evidence: this package names the cause.
func rankingEvidence(lines []string, culprit string) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l)
		if strings.HasPrefix(l, "next suspect ") {
			break
		}
		if strings.HasPrefix(l, culprit+": exclusive time") {
			if i := len(out); i < len(lines) && strings.HasPrefix(lines[i], "next suspect ") {
				continue
			}
			break
		}
	}
	return out
}

// StoredPaths reads only the critical paths the server stored when each
// capture completed (a "critical-path" artifact linked to the trace): a
// verdict computed every few seconds must not analyse snapshots on the spot
// (seconds of CPU each), which the server does once per capture anyway. A
// trace whose paths are not stored yet answers critpath.ErrNoSnapshot.
type StoredPaths struct {
	Analyzer  *critpath.Analyzer
	Artifacts store.ArtifactStore
}

// Trace implements PathReader.
func (s StoredPaths) Trace(ctx context.Context, id model.TraceID) (*critpath.TraceResult, error) {
	// Asked for every sampled trace of every verdict: the cheap listing
	// first, and the analyzer (which reads the artifacts' links) only for
	// the traces that have stored paths.
	bySpan, err := store.SpanArtifacts(ctx, s.Artifacts, id)
	if err != nil {
		return nil, err
	}
	// Only the stored paths go to the analyzer: handed a kernel snapshot
	// whose paths for this trace are not stored (its capture's are still
	// being computed, or the span had none), it would analyse the snapshot
	// here — a second of CPU, again at every verdict.
	stored := map[model.SpanID][]store.Artifact{}
	for span, arts := range bySpan {
		for _, a := range arts {
			if a.Kind == critpath.ArtifactKind {
				stored[span] = append(stored[span], a)
			}
		}
	}
	if len(stored) == 0 {
		return nil, critpath.ErrNoSnapshot
	}
	return s.Analyzer.TraceOf(ctx, id, stored)
}
