package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Causes a Verdict can name.
const (
	// CauseCPU: the culprit's own time grew and its request threads were on
	// CPU for most of it (captured CPU samples).
	CauseCPU = "cpu"
	// CauseRunQueue: the culprit's threads waited for a CPU
	// (rootline.wait.local_ms grew): a CPU quota, a noisy neighbour.
	CauseRunQueue = "run-queue"
	// CauseNetwork: calls into the culprit took longer than the culprit
	// itself did (rootline.wait.net_ms / client-span time beyond the server span).
	CauseNetwork = "network"
	// CauseBlocking: the culprit's own time grew while its threads were mostly
	// off CPU and not runnable: a lock, sleep, disk or GC pause.
	CauseBlocking = "lock/blocking"
	// CauseSelfTime: the culprit's own time grew but no CPU samples were
	// captured to tell CPU from blocking.
	CauseSelfTime = "self-time"
	// CauseNone: nothing to explain (no slow traces in the window).
	CauseNone = "none"
)

// Span attributes the verdict reads. They are Rootline's public contract
// (model.AttrAnomaly, model.AttrWait*Ms, model.AttrThreadIDs/AttrThreadID).
const (
	attrAnomaly      = "rootline.anomaly"
	attrWaitLocalMs  = "rootline.wait.local_ms"
	attrWaitNetMs    = "rootline.wait.net_ms"
	attrThreadIDs    = "rootline.thread.ids"
	attrThreadID     = "thread.id"
	attrSpanKind     = "span.kind"
	attrServerAddr   = "server.address"
	tracesPerSearch  = 100
	traceIDsPerFetch = 20
)

// Verdict is the diagnosis of a slowdown, reached from Rootline's query API
// alone.
type Verdict struct {
	// Service is the culprit ("" when there was nothing to explain).
	Service string `json:"service"`
	// Cause is one of the Cause* constants.
	Cause string `json:"cause"`
	// Confidence in [0, 1]: how clearly the culprit stands out, scaled down
	// when few slow or baseline traces were seen.
	Confidence float64 `json:"confidence"`
	// Evidence are human-readable facts behind the verdict.
	Evidence []string `json:"evidence"`
	// Artifacts counts, by kind, the captured artifacts linked to the
	// culprit's anomalous spans.
	Artifacts map[string]int `json:"artifacts,omitempty"`
	// Ranking lists every service, most suspect first.
	Ranking []ServiceScore `json:"ranking"`
	// SlowTraces and BaseTraces are the traces compared; ExampleTraceID is a
	// slow trace through the culprit.
	SlowTraces     int    `json:"slowTraces"`
	BaseTraces     int    `json:"baseTraces"`
	ExampleTraceID string `json:"exampleTraceId,omitempty"`
}

// ServiceScore is one service's share of the slowdown, per trace, in
// milliseconds: how much more time slow traces spent in it than baseline
// traces did.
type ServiceScore struct {
	Service string `json:"service"`
	// Score = SelfDeltaMs + NetDeltaMs.
	Score float64 `json:"score"`
	// SelfDeltaMs is the growth of the service's exclusive time (its spans'
	// durations minus the time covered by their children).
	SelfDeltaMs float64 `json:"selfDeltaMs"`
	SelfSlowMs  float64 `json:"selfSlowMs"`
	SelfBaseMs  float64 `json:"selfBaseMs"`
	// NetDeltaMs is the growth of the time calls into the service spent
	// outside it (network, proxies).
	NetDeltaMs float64 `json:"netDeltaMs"`
	// LocalDeltaMs is the growth of its run-queue wait (rootline.wait.local_ms).
	LocalDeltaMs float64 `json:"localDeltaMs"`
	// Anomalies counts its anomalous spans in the slow traces.
	Anomalies int `json:"anomalies"`
}

// Diagnose decides which service caused the slowdown seen between from and
// to, and why, from Rootline's query API at apiBase (e.g.
// "http://127.0.0.1:16686"). token, when set, is sent as a bearer token.
//
// It samples the window's traces evenly over time (Jaeger search on the
// entry service, slice by slice) and finds the onset of the slowdown: the
// point after which the share of traces with an anomalous span
// (rootline.anomaly) rises most. Slow traces are the anomalous ones after it,
// baseline traces the normal ones before it (all normal ones if too few);
// when the detector flagged fewer than three traces, the slowest tenth stands
// in for the slow ones. Each service's exclusive time per trace (span
// durations minus their children's), the time calls into it spent outside it
// (rootline.wait.net_ms) and its run-queue wait (rootline.wait.local_ms) are
// compared between the two sets; the service whose time grew most is the
// culprit. The cause comes from which of those grew, and for a growth of
// exclusive time from the profiles captured for its slow spans, read for
// the span's threads within the span via the flame-graph API: CPU time
// (eBPF CPU profiles, else JFR execution samples) and time blocked entering
// Java monitors (JFR), see profiledWaits.
func Diagnose(ctx context.Context, apiBase, token string, from, to time.Time) (Verdict, error) {
	c := &apiClient{base: strings.TrimRight(apiBase, "/"), token: token}
	v := Verdict{Cause: CauseNone}

	var anoms []anomalyRec
	q := url.Values{"since": {strconv.FormatInt(from.UnixNano(), 10)}, "limit": {"1000"}}
	if err := c.get(ctx, "/api/v1/anomalies?"+q.Encode(), &anoms); err != nil {
		return v, err
	}
	anoms = slices.DeleteFunc(anoms, func(a anomalyRec) bool { return a.Start > to.UnixNano() || a.Start < from.UnixNano() })

	// The entry service: the root service of an anomalous trace, else the
	// most common root service among the window's traces.
	root := ""
	if len(anoms) > 0 {
		ts, err := c.tracesByID(ctx, []string{anoms[0].TraceID})
		if err != nil {
			return v, err
		}
		if len(ts) > 0 && ts[0].root() != nil {
			root = ts[0].root().service
		}
	}
	if root == "" {
		var services []string
		if err := c.getJaeger(ctx, "/api/services", &services); err != nil {
			return v, err
		}
		var err error
		if root, err = c.findRoot(ctx, services, from, to); err != nil {
			return v, err
		}
		if root == "" {
			v.Evidence = append(v.Evidence, "no traces between "+from.Format(time.RFC3339)+" and "+to.Format(time.RFC3339))
			return v, nil
		}
	}

	// The window's traces, sampled evenly over time, in start order.
	end := to
	if now := time.Now(); now.Before(end) {
		end = now
	}
	all, err := c.sample(ctx, root, from, end)
	if err != nil {
		return v, err
	}
	slow, base, onset, fallback := split(all)
	v.SlowTraces, v.BaseTraces = len(slow), len(base)
	if len(slow) == 0 || len(base) == 0 {
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d slow and %d baseline traces among %d: nothing to compare", len(slow), len(base), len(all)))
		return v, nil
	}

	known := map[string]bool{}
	for _, t := range append(slices.Clone(slow), base...) {
		for _, s := range t.spans {
			known[s.service] = true
		}
	}
	slowM, baseM := meanTimes(slow, known), meanTimes(base, known)
	anomsBy := map[string]int{}
	for _, t := range slow {
		for _, s := range t.spans {
			if s.anomaly {
				anomsBy[s.service]++
			}
		}
	}
	for svc := range known {
		sm, bm := slowM[svc], baseM[svc]
		sc := ServiceScore{
			Service:      svc,
			SelfSlowMs:   ms(sm.self),
			SelfBaseMs:   ms(bm.self),
			SelfDeltaMs:  ms(sm.self - bm.self),
			NetDeltaMs:   ms(sm.net - bm.net),
			LocalDeltaMs: ms(sm.local - bm.local),
			Anomalies:    anomsBy[svc],
		}
		sc.Score = sc.SelfDeltaMs + sc.NetDeltaMs
		v.Ranking = append(v.Ranking, sc)
	}
	slices.SortFunc(v.Ranking, func(x, y ServiceScore) int {
		if d := cmp.Compare(y.Score, x.Score); d != 0 {
			return d
		}
		return strings.Compare(x.Service, y.Service)
	})
	for i := range v.Ranking {
		r := &v.Ranking[i]
		r.Score, r.SelfDeltaMs, r.SelfSlowMs, r.SelfBaseMs = round2(r.Score), round2(r.SelfDeltaMs), round2(r.SelfSlowMs), round2(r.SelfBaseMs)
		r.NetDeltaMs, r.LocalDeltaMs = round2(r.NetDeltaMs), round2(r.LocalDeltaMs)
	}

	top := v.Ranking[0]
	switch {
	case fallback:
		v.Evidence = append(v.Evidence, fmt.Sprintf("the detector flagged %d anomalous spans: comparing the slowest %d of %d traces with the others", len(anoms), len(slow), len(all)))
	case onset > 0:
		v.Evidence = append(v.Evidence, fmt.Sprintf("anomalies surge from %s: %d anomalous traces since then compared with %d normal traces before (of %d sampled; %d anomalous spans in the window)",
			time.Unix(0, onset).UTC().Format("15:04:05.000"), len(slow), len(base), len(all), len(anoms)))
	default:
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d anomalous traces compared with %d normal ones (of %d sampled; %d anomalous spans in the window)", len(slow), len(base), len(all), len(anoms)))
	}
	clamped := 0
	for _, t := range all {
		clamped += t.clamped
	}
	if clamped > 0 {
		v.Evidence = append(v.Evidence, fmt.Sprintf("%d server spans outlasted the call that made them and were cut to it", clamped))
	}

	if top.Score <= 0 {
		v.Evidence = append(v.Evidence, "no service spent more time in slow traces than in baseline ones")
		return v, nil
	}
	v.Service = top.Service
	second := 0.0
	if len(v.Ranking) > 1 {
		second = max(v.Ranking[1].Score, 0)
	}
	margin := (top.Score - second) / top.Score
	v.Confidence = margin * math.Min(1, float64(len(slow))/5) * math.Min(1, float64(len(base))/20)
	if fallback {
		v.Confidence *= 0.7
	}
	v.Confidence = round2(v.Confidence)

	v.Evidence = append(v.Evidence, fmt.Sprintf("%s: exclusive time %+.1f ms per trace (%.1f → %.1f ms), calls into it %+.1f ms outside it, run-queue wait %+.1f ms, %d anomalous spans",
		top.Service, top.SelfDeltaMs, top.SelfBaseMs, top.SelfSlowMs, top.NetDeltaMs, top.LocalDeltaMs, top.Anomalies))
	if len(v.Ranking) > 1 {
		n := v.Ranking[1]
		v.Evidence = append(v.Evidence, fmt.Sprintf("next suspect %s: %+.1f ms per trace (exclusive %+.1f, calls into it %+.1f)", n.Service, n.Score, n.SelfDeltaMs, n.NetDeltaMs))
	}
	for _, t := range slow {
		if t.visits(top.Service) {
			v.ExampleTraceID = t.id
			break
		}
	}

	switch {
	case top.NetDeltaMs > top.SelfDeltaMs:
		v.Cause = CauseNetwork
		v.Evidence = append(v.Evidence, fmt.Sprintf("calls into %s grew by %.1f ms beyond its own time (client time − server time)", top.Service, top.NetDeltaMs))
	case top.LocalDeltaMs > 0 && top.LocalDeltaMs >= 0.5*top.SelfDeltaMs:
		v.Cause = CauseRunQueue
		v.Evidence = append(v.Evidence, fmt.Sprintf("%s's threads waited %.1f ms more per trace for a CPU (rootline.wait.local_ms)", top.Service, top.LocalDeltaMs))
	default:
		pw, err := c.profiledWaits(ctx, slow, top.Service, anoms)
		if err != nil {
			v.Evidence = append(v.Evidence, "profiles unreadable: "+err.Error())
		}
		v.Cause, v.Evidence = pw.cause(v.Evidence)
	}
	var ev string
	if v.Artifacts, ev = linkedEvidence(top.Service, anoms); ev != "" {
		v.Evidence = append(v.Evidence, ev)
	}
	if note := c.captureTrouble(ctx, top.Service, from); note != "" {
		v.Evidence = append(v.Evidence, note)
	}
	return v, nil
}

// captureTrouble says how many of svc's captures since from did not complete
// and why (the first reason), so that missing evidence is explained; "" when
// all completed.
func (c *apiClient) captureTrouble(ctx context.Context, svc string, from time.Time) string {
	var caps []struct {
		Service string    `json:"service"`
		State   string    `json:"state"`
		Error   string    `json:"error"`
		Created time.Time `json:"created"`
	}
	if err := c.get(ctx, "/api/v1/captures?limit=2000", &caps); err != nil {
		return "captures unreadable: " + err.Error()
	}
	states := map[string]int{}
	reason := ""
	for _, cp := range caps {
		if cp.Service != svc || cp.Created.Before(from) {
			continue
		}
		states[cp.State]++
		if reason == "" && cp.Error != "" && cp.State != "pending" && cp.State != "requested" {
			reason = cp.Error
		}
	}
	if reason == "" {
		return ""
	}
	var parts []string
	for st, n := range states {
		parts = append(parts, fmt.Sprintf("%d %s", n, st))
	}
	slices.Sort(parts)
	if len(reason) > 200 {
		reason = reason[:200] + "…"
	}
	return fmt.Sprintf("captures of %s: %s; first problem: %s", svc, strings.Join(parts, ", "), reason)
}

// split divides traces (in start order) into slow and baseline ones. Slow
// traces are the anomalous ones after the onset — the point after which the
// share of anomalous traces rises most (a single change point; 0 when there is
// none, e.g. anomalies spread evenly) — and baseline traces the normal ones
// before it. With fewer than three anomalous traces, the slowest tenth stands
// in for the slow ones (fallback).
func split(all []*trace) (slow, base []*trace, onset int64, fallback bool) {
	n := len(all)
	cum := make([]int, n+1)
	for i, t := range all {
		cum[i+1] = cum[i]
		if t.anomalous() {
			cum[i+1]++
		}
	}
	if cum[n] < 3 {
		sorted := slices.Clone(all)
		slices.SortFunc(sorted, func(x, y *trace) int { return cmp.Compare(y.duration(), x.duration()) })
		k := max(n/10, min(n, 1))
		return sorted[:k], sorted[k:], 0, true
	}
	best, at := 0.0, 0
	minSeg := max(5, n/50)
	for k := minSeg; k <= n-minSeg; k++ {
		before := float64(cum[k]) / float64(k)
		after := float64(cum[n]-cum[k]) / float64(n-k)
		if d := after - before; d > best {
			best, at = d, k
		}
	}
	from := 0
	if best >= 0.2 {
		from = at
		onset = all[at].start()
	}
	for i, t := range all {
		switch {
		case i >= from && t.anomalous():
			slow = append(slow, t)
		case i < from && !t.anomalous():
			base = append(base, t)
		}
	}
	if len(base) < 20 {
		// Too little before the onset: every normal trace is the baseline.
		base = base[:0]
		for _, t := range all {
			if !t.anomalous() {
				base = append(base, t)
			}
		}
	}
	return slow, base, onset, false
}

func ms(d float64) float64 { return d / 1e6 }

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// times is one service's time in one trace (or a mean over traces), in ns.
type times struct{ self, net, local float64 }

// meanTimes averages each service's times over traces (a service absent from
// a trace counts as zero there).
func meanTimes(traces []*trace, known map[string]bool) map[string]times {
	sum := map[string]times{}
	for _, t := range traces {
		for svc, x := range t.times(known) {
			s := sum[svc]
			s.self += x.self
			s.net += x.net
			s.local += x.local
			sum[svc] = s
		}
	}
	n := float64(len(traces))
	for svc, s := range sum {
		sum[svc] = times{s.self / n, s.net / n, s.local / n}
	}
	return sum
}

// span is the part of a Jaeger-JSON span the verdict uses.
type span struct {
	id, parent, service, kind, serverAddr string
	start, dur                            int64 // ns
	anomaly                               bool
	waitLocal, waitNet                    float64 // ms; NaN when absent
	threads                               []int64
	up                                    *span // parent span in this trace
	children                              []*span
}

type trace struct {
	id      string
	spans   []*span
	clamped int // server spans cut to their caller's CLIENT span
}

func (t *trace) root() *span {
	ids := map[string]bool{}
	for _, s := range t.spans {
		ids[s.id] = true
	}
	var root *span
	for _, s := range t.spans {
		if (s.parent == "" || !ids[s.parent]) && (root == nil || s.start < root.start) {
			root = s
		}
	}
	return root
}

func (t *trace) start() int64 {
	if r := t.root(); r != nil {
		return r.start
	}
	return 0
}

func (t *trace) duration() int64 {
	if r := t.root(); r != nil {
		return r.dur
	}
	return 0
}

func (t *trace) anomalous() bool {
	return slices.ContainsFunc(t.spans, func(s *span) bool { return s.anomaly })
}

func (t *trace) visits(svc string) bool {
	return slices.ContainsFunc(t.spans, func(s *span) bool { return s.service == svc })
}

// times splits the trace's time among services. A span's exclusive time is
// its duration minus the union of its children's intervals. A CLIENT span's
// time outside the callee (its rootline.wait.net_ms, or its duration not
// covered by the callee's spans) is time spent between two services —
// network and proxies — and is charged to the callee as network time; every
// other span's exclusive time is the service's own.
func (t *trace) times(known map[string]bool) map[string]times {
	out := map[string]times{}
	for _, s := range t.spans {
		if s.kind == "client" {
			if s.nestedClient() {
				continue // the outer CLIENT span accounts for it
			}
			callee := s.callee(known)
			c := out[callee]
			if !math.IsNaN(s.waitNet) {
				c.net += s.waitNet * 1e6
			} else {
				c.net += float64(s.exclusiveOf(s.across()))
			}
			out[callee] = c
			continue
		}
		x := out[s.service]
		x.self += float64(s.exclusive())
		if !math.IsNaN(s.waitLocal) {
			x.local += s.waitLocal * 1e6
		}
		out[s.service] = x
	}
	return out
}

// nestedClient reports whether s is a CLIENT span inside a CLIENT span of the
// same service: a sidecar's egress span under the application's own call.
func (s *span) nestedClient() bool {
	return s.kind == "client" && s.up != nil && s.up.kind == "client" && s.up.service == s.service
}

// across returns the spans a CLIENT span led to, looking through nested
// CLIENT spans of its own service (a sidecar's egress span).
func (s *span) across() []*span {
	var out []*span
	for _, c := range s.children {
		if c.kind == "client" && c.service == s.service {
			out = append(out, c.across()...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// exclusive is the span's duration not covered by its children.
func (s *span) exclusive() int64 { return s.exclusiveOf(s.children) }

// exclusiveOf is the span's duration not covered by the given spans.
func (s *span) exclusiveOf(children []*span) int64 {
	type iv struct{ a, b int64 }
	var ivs []iv
	end := s.start + s.dur
	for _, c := range children {
		a, b := max(c.start, s.start), min(c.start+c.dur, end)
		if b > a {
			ivs = append(ivs, iv{a, b})
		}
	}
	slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.a, y.a) })
	covered, curA, curB := int64(0), int64(0), int64(-1)
	for _, v := range ivs {
		if v.a > curB {
			if curB > curA {
				covered += curB - curA
			}
			curA, curB = v.a, v.b
		} else {
			curB = max(curB, v.b)
		}
	}
	if curB > curA {
		covered += curB - curA
	}
	return max(s.dur-covered, 0)
}

// callee names the service a CLIENT span called: the first span of another
// service it led to, else the host of its (or a nested CLIENT span's)
// server.address when that is a known service, else the caller itself (the
// callee left no span).
func (s *span) callee(known map[string]bool) string {
	for _, c := range s.across() {
		if c.service != s.service {
			return c.service
		}
	}
	for c := s; c != nil; {
		h := c.serverAddr
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		if h != "" && known[h] {
			return h
		}
		var next *span
		for _, cc := range c.children {
			if cc.kind == "client" && cc.service == s.service {
				next = cc
				break
			}
		}
		c = next
	}
	return s.service
}

// anomalyRec is one entry of GET /api/v1/anomalies.
type anomalyRec struct {
	TraceID    string `json:"traceID"`
	SpanID     string `json:"spanID"`
	Service    string `json:"service"`
	Start      int64  `json:"start"`
	DurationNs int64  `json:"durationNs"`
	Artifacts  []struct {
		ID        string `json:"id"`
		Kind      string `json:"kind"`
		MediaType string `json:"mediaType"`
	} `json:"artifacts"`
}

// Jaeger JSON, as served by /api/traces.
type jaegerTrace struct {
	TraceID string `json:"traceID"`
	Spans   []struct {
		SpanID     string `json:"spanID"`
		References []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		StartTime int64 `json:"startTime"` // µs
		Duration  int64 `json:"duration"`  // µs
		Tags      []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		ProcessID string `json:"processID"`
	} `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

func (jt *jaegerTrace) convert() *trace {
	t := &trace{id: jt.TraceID}
	byID := map[string]*span{}
	for _, js := range jt.Spans {
		s := &span{id: js.SpanID, service: jt.Processes[js.ProcessID].ServiceName,
			start: js.StartTime * 1000, dur: js.Duration * 1000, waitLocal: math.NaN(), waitNet: math.NaN()}
		for _, r := range js.References {
			if r.RefType == "CHILD_OF" || s.parent == "" {
				s.parent = r.SpanID
			}
		}
		for _, tag := range js.Tags {
			switch tag.Key {
			case attrSpanKind:
				s.kind, _ = tag.Value.(string)
			case attrAnomaly:
				s.anomaly = tag.Value == true || tag.Value == "true"
			case attrWaitLocalMs:
				s.waitLocal = number(tag.Value)
			case attrWaitNetMs:
				s.waitNet = number(tag.Value)
			case attrServerAddr:
				s.serverAddr, _ = tag.Value.(string)
			case attrThreadIDs:
				if str, ok := tag.Value.(string); ok {
					for _, f := range strings.Split(str, ",") {
						if n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && !slices.Contains(s.threads, n) {
							s.threads = append(s.threads, n)
						}
					}
				}
			case attrThreadID:
				if n := number(tag.Value); !math.IsNaN(n) && !slices.Contains(s.threads, int64(n)) {
					s.threads = append(s.threads, int64(n))
				}
			}
		}
		t.spans = append(t.spans, s)
		byID[s.id] = s
	}
	for _, s := range t.spans {
		if p := byID[s.parent]; p != nil && p != s {
			p.children = append(p.children, s)
			s.up = p
		}
	}
	// A server span cannot outlast the call that made it: when one does, its
	// end was taken late (seen with supervised Go services), and it is cut to
	// the caller's CLIENT span so the late end is not charged as own time.
	for _, s := range t.spans {
		if s.kind == "server" && s.up != nil && s.up.kind == "client" && s.up.service != s.service {
			if end := s.up.start + s.up.dur; s.start+s.dur > end {
				s.dur = max(end-s.start, 0)
				t.clamped++
			}
		}
	}
	return t
}

func number(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return f
		}
	}
	return math.NaN()
}

type apiClient struct {
	base, token string
}

func (c *apiClient) do(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &apiError{Path: path, Status: resp.StatusCode, Msg: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// apiError is an answer of the API other than 200 OK.
type apiError struct {
	Path   string
	Status int
	Msg    string // the start of the body
}

func (e *apiError) Error() string {
	return fmt.Sprintf("GET %s: %d %s: %s", e.Path, e.Status, http.StatusText(e.Status), e.Msg)
}

// get decodes a plain JSON answer (the /api/v1 routes).
func (c *apiClient) get(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// getJaeger decodes the data of a Jaeger envelope.
func (c *apiClient) getJaeger(ctx context.Context, path string, data any) error {
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Msg string `json:"msg"`
		} `json:"errors"`
	}
	if err := c.get(ctx, path, &env); err != nil {
		return err
	}
	if len(env.Data) == 0 || string(env.Data) == "null" {
		if len(env.Errors) > 0 {
			return fmt.Errorf("GET %s: %s", path, env.Errors[0].Msg)
		}
		return nil
	}
	return json.Unmarshal(env.Data, data)
}

func (c *apiClient) tracesByID(ctx context.Context, ids []string) ([]*trace, error) {
	var out []*trace
	for i := 0; i < len(ids); i += traceIDsPerFetch {
		q := url.Values{"traceID": ids[i:min(i+traceIDsPerFetch, len(ids))]}
		var jts []jaegerTrace
		if err := c.getJaeger(ctx, "/api/traces?"+q.Encode(), &jts); err != nil {
			return nil, err
		}
		for i := range jts {
			out = append(out, jts[i].convert())
		}
	}
	return out, nil
}

func (c *apiClient) search(ctx context.Context, service string, from, to time.Time, limit int) ([]*trace, error) {
	q := url.Values{
		"service": {service},
		"start":   {strconv.FormatInt(from.UnixMicro(), 10)},
		"end":     {strconv.FormatInt(to.UnixMicro(), 10)},
		"limit":   {strconv.Itoa(limit)},
	}
	var jts []jaegerTrace
	if err := c.getJaeger(ctx, "/api/traces?"+q.Encode(), &jts); err != nil {
		return nil, err
	}
	out := make([]*trace, 0, len(jts))
	for i := range jts {
		out = append(out, jts[i].convert())
	}
	return out, nil
}

// sample returns the traces of service between from and to, in start order:
// the window is cut into slices, and a slice with more traces than one search
// returns is cut again (twice at most), so a busy window is sampled evenly
// rather than only at its newest end.
func (c *apiClient) sample(ctx context.Context, service string, from, to time.Time) ([]*trace, error) {
	seen := map[string]bool{}
	var out []*trace
	var walk func(a, b time.Time, depth int) error
	walk = func(a, b time.Time, depth int) error {
		ts, err := c.search(ctx, service, a, b, tracesPerSearch)
		if err != nil {
			return err
		}
		if len(ts) >= tracesPerSearch && depth < 2 && b.Sub(a) > 10*time.Millisecond {
			mid := a.Add(b.Sub(a) / 2)
			if err := walk(a, mid, depth+1); err != nil {
				return err
			}
			return walk(mid.Add(time.Microsecond), b, depth+1)
		}
		for _, t := range ts {
			if !seen[t.id] {
				seen[t.id] = true
				out = append(out, t)
			}
		}
		return nil
	}
	const slices0 = 4
	step := to.Sub(from) / slices0
	if step <= 0 {
		return nil, nil
	}
	for i := range slices0 {
		a := from.Add(time.Duration(i) * step)
		b := a.Add(step - time.Microsecond)
		if i == slices0-1 {
			b = to
		}
		if err := walk(a, b, 0); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(x, y *trace) int { return cmp.Compare(x.start(), y.start()) })
	return out, nil
}

// findRoot returns the service that most often owns root spans among a
// sample of the window's traces.
func (c *apiClient) findRoot(ctx context.Context, services []string, from, to time.Time) (string, error) {
	count := map[string]int{}
	for _, svc := range services {
		ts, err := c.search(ctx, svc, from, to, 20)
		if err != nil {
			return "", err
		}
		for _, t := range ts {
			if r := t.root(); r != nil {
				count[r.service]++
			}
		}
	}
	best := ""
	for svc, n := range count {
		if best == "" || n > count[best] || (n == count[best] && svc < best) {
			best = svc
		}
	}
	return best, nil
}

// profiledWaits is what the profiles linked to the culprit's slow spans say
// about their exclusive time: how much of it the spans' threads spent on CPU
// (an eBPF CPU profile, or else a JFR recording's execution samples, which
// see Java code only) and how much blocked entering a Java monitor (a JFR
// recording's monitor-enter events, which JFR keeps only when longer than
// its threshold, 10 ms with the agent's settings).
type profiledWaits struct {
	cpuNs, cpuSelfNs   int64 // on-CPU time, and the exclusive time of the spans it was read for
	cpuProfiles        int
	cpuSources         map[string]int // "eBPF CPU profiles", "JFR execution samples": spans read from each
	lockNs, lockSelfNs int64
	lockProfiles       int
}

// maxProfiledSpans bounds the slow spans whose profiles are read.
const maxProfiledSpans = 20

// profiledWaits reads, for up to maxProfiledSpans of svc's anomalous spans
// in slow traces (spread over them), the samples of the span's own threads during the span
// from the profiles captured for it.
func (c *apiClient) profiledWaits(ctx context.Context, slow []*trace, svc string, anoms []anomalyRec) (profiledWaits, error) {
	pw := profiledWaits{cpuSources: map[string]int{}}
	spans := map[string]*span{}
	for _, t := range slow {
		for _, s := range t.spans {
			if s.service == svc {
				spans[s.id] = s
			}
		}
	}
	type profiled struct {
		s              *span
		cpuArt, jfrArt string
	}
	var cands []profiled
	for _, a := range anoms {
		s := spans[a.SpanID]
		if a.Service != svc || s == nil || len(s.threads) == 0 {
			continue
		}
		p := profiled{s: s}
		for _, art := range a.Artifacts {
			switch {
			case art.Kind == "cpu" && p.cpuArt == "":
				p.cpuArt = art.ID
			case art.Kind == "jfr" && isPprofMedia(art.MediaType) && p.jfrArt == "":
				p.jfrArt = art.ID
			}
		}
		if p.cpuArt != "" || p.jfrArt != "" {
			cands = append(cands, p)
		}
	}
	var errs []error
	// Spans spread over the slowdown, not only its newest: a moment of it
	// (a capture, a pause) would otherwise stand for all of it.
	n := min(len(cands), maxProfiledSpans)
	for i := range n {
		p := cands[i*len(cands)/n]
		s, cpuArt, source := p.s, p.cpuArt, "eBPF CPU profiles"
		if cpuArt == "" {
			cpuArt, source = p.jfrArt, "JFR execution samples"
		}
		self := s.exclusive()
		if ns, ok, err := c.spanSamples(ctx, cpuArt, "cpu", s); err != nil {
			errs = append(errs, err)
		} else if ok {
			pw.cpuNs += ns
			pw.cpuSelfNs += self
			pw.cpuProfiles++
			pw.cpuSources[source]++
		}
		if p.jfrArt != "" {
			// Monitor enters only: JFR's park events also hold the thread
			// pool's idle waits, which may begin inside the span's window.
			if ns, ok, err := c.spanSamples(ctx, p.jfrArt, "monitor_enter", s); err != nil {
				errs = append(errs, err)
			} else if ok {
				pw.lockNs += min(ns, self)
				pw.lockSelfNs += self
				pw.lockProfiles++
			}
		}
	}
	return pw, errors.Join(errs...)
}

// spanSamples sums the samples of type typ in artifact id that s's threads
// took during s, in nanoseconds. ok is false when the profile does not
// measure typ in nanoseconds; a profile without typ at all (a JFR recording
// in which no thread waited long enough for a lock event) counts as 0.
func (c *apiClient) spanSamples(ctx context.Context, id, typ string, s *span) (ns int64, ok bool, err error) {
	var tids []string
	for _, t := range s.threads {
		tids = append(tids, strconv.FormatInt(t, 10))
	}
	q := url.Values{"tid": {strings.Join(tids, ",")}, "type": {typ},
		"start": {strconv.FormatInt(s.start, 10)}, "end": {strconv.FormatInt(s.start+s.dur, 10)}}
	var fg struct {
		Unit string `json:"unit"`
		Root struct {
			Value int64 `json:"value"`
		} `json:"root"`
	}
	if err := c.get(ctx, "/api/v1/artifacts/"+url.PathEscape(id)+"/flamegraph?"+q.Encode(), &fg); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Msg, "unknown sample type") {
			return 0, true, nil
		}
		return 0, false, err
	}
	if fg.Unit != "nanoseconds" {
		return 0, false, nil
	}
	return fg.Root.Value, true, nil
}

// cause names the cause the profiles point to and adds what they showed to
// evidence.
func (pw profiledWaits) cause(evidence []string) (string, []string) {
	share := func(ns, of int64) float64 { return float64(ns) / float64(max(of, 1)) }
	onCPU, locked := share(pw.cpuNs, pw.cpuSelfNs), share(pw.lockNs, pw.lockSelfNs)
	var sources []string
	for src, n := range pw.cpuSources {
		sources = append(sources, fmt.Sprintf("%d %s", n, src))
	}
	slices.Sort(sources)
	cpuLine := fmt.Sprintf("on CPU for %.0f%% of its exclusive time (%s)", 100*onCPU, strings.Join(sources, ", "))
	var cause string
	switch {
	case pw.lockProfiles > 0 && locked >= lockShareForCause:
		cause = CauseBlocking
		if pw.cpuProfiles > 0 {
			evidence = append(evidence, cpuLine+": what runs inside the lock, or spins waiting for it")
		}
	case pw.cpuProfiles == 0 || pw.cpuSelfNs <= 0:
		cause = CauseSelfTime
		evidence = append(evidence, "no CPU profile captured for its slow spans: cannot tell CPU work from blocking")
	case onCPU >= 0.5:
		cause = CauseCPU
		evidence = append(evidence, cpuLine)
	default:
		cause = CauseBlocking
		evidence = append(evidence, cpuLine+": blocked (lock, sleep, I/O or GC)")
	}
	if pw.lockProfiles > 0 {
		evidence = append(evidence, fmt.Sprintf("blocked entering Java monitors for %.0f%% of its exclusive time (JFR's monitor-enter events, those over its threshold, in %d slow spans)",
			100*locked, pw.lockProfiles))
	}
	return cause, evidence
}

// lockShareForCause is the share of the culprit's exclusive time spent
// waiting for locks from which the verdict names lock/blocking even when
// its threads were mostly on CPU (JVM monitors spin before they park; a
// lock's holder works on CPU while the others wait).
const lockShareForCause = 0.25

// linkedEvidence counts the captured artifacts linked to svc's anomalous
// spans by kind, and says so and to how many of the spans ("" when none).
func linkedEvidence(svc string, anoms []anomalyRec) (map[string]int, string) {
	kinds := map[string]int{}
	seen := map[string]bool{}
	linked, total := 0, 0
	for _, a := range anoms {
		if a.Service != svc {
			continue
		}
		total++
		if len(a.Artifacts) > 0 {
			linked++
		}
		for _, art := range a.Artifacts {
			if !seen[art.ID] {
				seen[art.ID] = true
				kinds[art.Kind]++
			}
		}
	}
	if linked == 0 {
		return kinds, ""
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(parts)
	return kinds, fmt.Sprintf("evidence captured for %s: %s artifacts, linked to %d of its %d anomalous spans", svc, strings.Join(parts, ", "), linked, total)
}

// isPprofMedia recognises a pprof artifact by its media type.
func isPprofMedia(mediaType string) bool {
	return strings.Contains(mediaType, "protobuf")
}
