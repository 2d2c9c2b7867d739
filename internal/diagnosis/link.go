package diagnosis

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/store"
)

// The kernel metrics (internal/kmetrics) that say a link lost packets: TCP
// retransmissions, counted on the socket's container, and packets the
// kernel dropped, by reason. Both are cumulative counters pushed by the
// agent as OTLP sums, labelled with the container's service.
const (
	metricRetransmits       = "rootline_kernel_tcp_retransmits_total"
	metricSynAckRetransmits = "rootline_kernel_tcp_synack_retransmits_total"
	metricDrops             = "rootline_kernel_skb_drops_total"
	// metricRunq is the run-queue latency histogram (wakeup or preemption
	// to switch-in) per container: with its sum and count, the mean time a
	// thread of the container waited for a CPU each time it was runnable.
	// A cgroup held off by its quota is runnable too, so it counts the
	// throttled time as well.
	metricRunq = "rootline_kernel_runq_latency_seconds"
)

// wakeupsPerCall bounds how many times a call's path through the link
// (the caller's egress proxy, the callee's ingress proxy, both ways, and the
// threads that read and write for them) waits to be run: a call crosses
// about six such waits, and the bound is generous so that the CPU is
// excluded only when it could not have made the link slow. When
// wakeupsPerCall × the mean run-queue wait of the culprit's pod and of the
// node during the incident is below cpuLinkShare of the growth of the calls'
// time on the link, no wait for a CPU can account for that growth, and with
// no retransmissions either the time passed in the link itself: a delay on
// the path (a proxy holding the request, a queue, a slow route).
const (
	wakeupsPerCall = 10
	cpuLinkShare   = 0.25
)

// linkDropReasons are the drop reasons (skb:kfree_skb, lower case as
// internal/kmetrics reports them) that a lossy or saturated link causes: a
// queueing discipline or a tc program dropping, a device queue full. Drops
// such as no_socket (a packet to a closed port) happen on any healthy node
// and say nothing about a link.
var linkDropReasons = []string{"qdisc_drop", "qdisc_overlimit", "qdisc_congested", "fq_band_limit", "fq_flow_limit",
	"tc_egress", "tc_ingress", "full_ring", "dev_ready", "cpu_backlog", "neigh_queuefull"}

// minRetransmits is the least number of retransmissions in the incident's
// window, and linkGrowth the factor over the rate before the onset, for
// the kernel to say the culprit's link is at fault: a few retransmissions
// happen on any busy node.
const (
	minRetransmits = 3
	linkGrowth     = 2.0
)

// linkEvidence is what the kernel counted on the sockets of a service's
// containers (its pod: the app and its sidecar) before and since an
// incident's onset.
type linkEvidence struct {
	// Retransmits and Drops (link reasons only) in the incident's window
	// and in the same length of time before the onset.
	retrans, retransBefore float64
	drops, dropsBefore     float64
	// onContainer is the retransmissions in the incident's window per
	// container (containerName): in a mesh most are the sidecar's, whose
	// sockets carry the service's traffic between pods.
	onContainer map[string]float64
	// seen says some series of the service was read (the agent records
	// kernel metrics for it).
	seen bool
	// during and before are the lengths of the two windows.
	during, before time.Duration
	// runq is the run-queue latency of the service's containers in the
	// incident's window and before it.
	runq, runqBefore runqTotal
}

// runqTotal adds up run-queue latency histograms: the time waited (s) and
// the number of waits.
type runqTotal struct{ sum, count float64 }

// mean is the mean wait in ms (NaN without waits).
func (r runqTotal) meanMs() float64 {
	if r.count <= 0 {
		return math.NaN()
	}
	return 1e3 * r.sum / r.count
}

// nodeRunq is the run-queue latency of every container with kernel metrics
// (the node's, or the nodes' in a shared store) in the incident's window.
type nodeRunq struct {
	during runqTotal
	seen   bool
}

// cpuBound is the most a wait for a CPU can have added to a call's time on
// the link, in ms: wakeupsPerCall × the largest mean run-queue wait during
// the incident of the service's pod, of its callers' pods (the link starts
// at them: their threads and egress proxies) and of the node; NaN when the
// kernel measured no run-queue latency of the pod.
func (e linkEvidence) cpuBound(callers []*linkEvidence, node nodeRunq) float64 {
	m := e.runq.meanMs()
	if math.IsNaN(m) {
		return m
	}
	if c := worstMeanMs(callers); !math.IsNaN(c) {
		m = max(m, c)
	}
	if n := node.during.meanMs(); node.seen && !math.IsNaN(n) {
		m = max(m, n)
	}
	return wakeupsPerCall * m
}

// worstMeanMs is the largest mean run-queue wait during the incident among
// pods (NaN when none was measured).
func worstMeanMs(pods []*linkEvidence) float64 {
	w := math.NaN()
	for _, p := range pods {
		if m := p.runq.meanMs(); !math.IsNaN(m) && (math.IsNaN(w) || m > w) {
			w = m
		}
	}
	return w
}

// lossy says whether the kernel measured the link of the service losing
// packets: enough retransmissions in the incident, at a rate well above
// the one before.
func (e linkEvidence) lossy() bool {
	if e.retrans < minRetransmits || e.during <= 0 {
		return false
	}
	rate := e.retrans / e.during.Seconds()
	if e.before <= 0 {
		return true
	}
	return rate > linkGrowth*e.retransBefore/e.before.Seconds()
}

func (e linkEvidence) String() string {
	s := fmt.Sprintf("%.0f TCP retransmissions in %s (%.0f in the %s before)", e.retrans, e.during.Round(time.Second), e.retransBefore, e.before.Round(time.Second))
	if e.drops > 0 || e.dropsBefore > 0 {
		s += fmt.Sprintf(", %.0f packets dropped by a queue or tc program (%.0f before)", e.drops, e.dropsBefore)
	}
	return s
}

// where says which containers the incident's retransmissions were on, most
// first ("" when none was), to follow String.
func (e linkEvidence) where() string {
	names := make([]string, 0, len(e.onContainer))
	for c, n := range e.onContainer {
		if n > 0 {
			names = append(names, c)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(e.onContainer[b], e.onContainer[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if len(names) == 0 {
		return ""
	}
	parts := make([]string, len(names))
	for i, c := range names {
		parts[i] = fmt.Sprintf("%s %.0f", c, e.onContainer[c])
	}
	return "; retransmissions in the incident by container: " + strings.Join(parts, ", ")
}

// containerName names the container of a kernel metric series: the name its
// members gave (container.name, e.g. a pod's app or envoy), else its cgroup.
func containerName(s store.MetricSeries) string {
	if n := s.Labels["container.name"]; n != "" {
		return n
	}
	if n := s.Labels["container"]; n != "" {
		return n
	}
	return "?"
}

// readLinks reads the kernel's retransmission and drop counters and the
// run-queue latency of each of svcs's containers (series whose service label
// names it, alone or among the services sharing a container: its app's and
// its sidecar's, which the agent labels with the service of their pod) in
// [from, onset) and [onset, to], and the run-queue latency of every
// container in [onset, to]; one query per metric for all of them.
func readLinks(ctx context.Context, mr store.MetricReader, svcs []string, from, onset, to time.Time) (map[string]*linkEvidence, nodeRunq, error) {
	out := map[string]*linkEvidence{}
	var node nodeRunq
	for _, svc := range svcs {
		out[svc] = &linkEvidence{during: to.Sub(onset), before: onset.Sub(from), onContainer: map[string]float64{}}
	}
	for _, name := range []string{metricRetransmits, metricSynAckRetransmits, metricDrops, metricRunq} {
		series, err := mr.FindMetrics(ctx, store.MetricQuery{Name: name, From: from.UnixNano(), To: to.UnixNano()})
		if err != nil {
			return out, node, fmt.Errorf("kernel metric %s: %w", name, err)
		}
		for _, s := range series {
			if name == metricRunq {
				sb, sd := increaseOf(s.Points, onset.UnixNano(), func(p store.MetricPoint) float64 { return p.Sum })
				cb, cd := increaseOf(s.Points, onset.UnixNano(), func(p store.MetricPoint) float64 { return float64(p.Count) })
				node.during.sum += sd
				node.during.count += cd
				node.seen = true
				for _, svc := range strings.Split(s.Service, ",") {
					if e, ok := out[svc]; ok {
						e.runq.sum += sd
						e.runq.count += cd
						e.runqBefore.sum += sb
						e.runqBefore.count += cb
					}
				}
				continue
			}
			for _, svc := range strings.Split(s.Service, ",") {
				e, ok := out[svc]
				if !ok {
					continue
				}
				e.seen = true
				if name == metricDrops && !slices.Contains(linkDropReasons, strings.ToLower(s.Labels["reason"])) {
					continue
				}
				before, during := increase(s.Points, onset.UnixNano())
				if name == metricDrops {
					e.drops += during
					e.dropsBefore += before
				} else {
					e.retrans += during
					e.retransBefore += before
					e.onContainer[containerName(s)] += during
				}
			}
		}
	}
	return out, node, nil
}

// excess is how many more retransmissions the incident had than the rate
// before the onset would give.
func (e linkEvidence) excess() float64 {
	if e.before <= 0 {
		return e.retrans
	}
	return e.retrans - e.retransBefore*e.during.Seconds()/e.before.Seconds()
}

// Which end of a lossy link: a link that loses packets slows the calls
// across it both ways, so span timing grows on calls into the service at
// either end (calls into a pod whose link drops, and that pod's calls to its
// callees). The kernel tells the ends apart: a pod whose own link loses
// packets retransmits on all of its connections, callers' and callees',
// while each peer retransmits only on its connection to it. So among the
// services whose calls grew outside them (linkPeerShare of the top's growth
// at least), the one whose pod retransmitted most above its rate before is
// where the link loses packets.
const (
	linkPeerShare = 0.5
	maxLinkPeers  = 4
)

// linkPeers are the ranking's services whose growth is mostly time outside
// them, comparable to the top's, the top first.
func linkPeers(ranking []analysis.ServiceScore) []analysis.ServiceScore {
	if len(ranking) == 0 {
		return nil
	}
	top := ranking[0]
	var out []analysis.ServiceScore
	for _, r := range ranking {
		if r.NetDeltaMs > r.SelfDeltaMs && r.Score >= linkPeerShare*top.Score && len(out) < maxLinkPeers {
			out = append(out, r)
		}
	}
	return out
}

// lossyEnd returns, among peers (the top first) whose pods the kernel saw
// retransmitting (lossy), the one with the most retransmissions above its
// rate before; false when none is lossy.
func lossyEnd(peers []analysis.ServiceScore, ev map[string]*linkEvidence) (analysis.ServiceScore, bool) {
	var best analysis.ServiceScore
	found := false
	for _, p := range peers {
		e := ev[p.Service]
		if e == nil || !e.lossy() {
			continue
		}
		if !found || e.excess() > ev[best.Service].excess() {
			best, found = p, true
		}
	}
	return best, found
}

// increase is how much a cumulative counter grew before at and from at on,
// over points oldest first; a value below the previous one is a restart of
// its source, from which the counter counts again from zero.
func increase(points []store.MetricPoint, at int64) (before, during float64) {
	return increaseOf(points, at, func(p store.MetricPoint) float64 { return p.Value })
}

// increaseOf is increase of the cumulative value v reads of each point (a
// histogram's sum or count).
func increaseOf(points []store.MetricPoint, at int64, v func(store.MetricPoint) float64) (before, during float64) {
	for i := 1; i < len(points); i++ {
		d := v(points[i]) - v(points[i-1])
		if d < 0 {
			d = v(points[i])
		}
		if points[i].Time < at {
			before += d
		} else {
			during += d
		}
	}
	return before, during
}
