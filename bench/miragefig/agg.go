package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/mirage"
	"github.com/rootline/rootline/internal/model"
)

// Waits is one service's mean waits over the hops of a step, in ms. Net and
// Remote are over the service's calls that carried them (its CLIENT spans);
// a leaf has none.
type Waits struct {
	Hops  int     `json:"hops"`
	Total float64 `json:"totalMs"` // the SERVER span's duration (Mirage's "total")
	// Local is over the hops whose span carried rootline.wait.local_ms;
	// LocalHops counts them.
	Local     float64 `json:"localMs"`
	LocalHops int     `json:"localHops"`
	Net       float64 `json:"netMs"`
	Remote    float64 `json:"remoteMs"`
	Calls     int     `json:"calls"`
	// Decisions counts each hop's decision (internal/mirage, policy max):
	// "local", "network→PEER", "remote→PEER" or "none".
	Decisions map[string]int `json:"decisions"`
}

// Aggregate folds the spans of a step's traces into per-service waits and
// decision counts. peerName maps a CLIENT span's peer (its server.address,
// an address in pod mode) to a service name for the decision labels;
// unknown peers keep their address. Traces whose first span started
// before from or at or after to (Unix ns) are left out whole: a search
// returns whole traces, and a request sent just before the step has its
// downstream hops inside it.
func Aggregate(traces [][]*model.Span, from, to int64, peerName func(string) string) map[string]*Waits {
	out := map[string]*Waits{}
	var cfg mirage.Config
	for _, tr := range traces {
		first := int64(math.MaxInt64)
		for _, s := range tr {
			if s != nil {
				first = min(first, s.Start)
			}
		}
		if first < from || first >= to {
			continue
		}
		for _, h := range mirage.Hops(tr) {
			w := out[h.Service]
			if w == nil {
				w = &Waits{Decisions: map[string]int{}}
				out[h.Service] = w
			}
			w.Hops++
			w.Total += ms(h.Duration)
			if h.LocalKnown {
				w.LocalHops++
				w.Local += ms(h.Local)
			}
			for _, c := range h.Calls {
				if c.Known {
					w.Calls++
					w.Net += ms(c.Net)
					w.Remote += ms(c.Remote)
				}
			}
			d := cfg.Decide(&h)
			key := string(d.Cause)
			if d.Cause == mirage.CauseNetwork || d.Cause == mirage.CauseRemote {
				key += "→" + peerName(d.Peer)
			}
			w.Decisions[key]++
		}
	}
	for _, w := range out {
		w.Total /= float64(w.Hops)
		if w.LocalHops > 0 {
			w.Local /= float64(w.LocalHops)
		}
		if w.Calls > 0 {
			w.Net /= float64(w.Calls)
			w.Remote /= float64(w.Calls)
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Latency summarises the client-measured latencies of a step.
type Latency struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	PerSec   float64 `json:"perSec"`
	MeanMs   float64 `json:"meanMs"`
	P50Ms    float64 `json:"p50Ms"`
	P95Ms    float64 `json:"p95Ms"`
}

// Summarize computes a step's latency summary from the successful
// requests' latencies over a step of length d.
func Summarize(lat []time.Duration, errors int, d time.Duration) Latency {
	l := Latency{Requests: len(lat), Errors: errors}
	if d > 0 {
		l.PerSec = float64(len(lat)) / d.Seconds()
	}
	if len(lat) == 0 {
		return l
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	l.MeanMs = ms(sum / time.Duration(len(s)))
	l.P50Ms = ms(quantile(s, 0.50))
	l.P95Ms = ms(quantile(s, 0.95))
	return l
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Step is one client count of one configuration.
type Step struct {
	Clients int `json:"clients"`
	Latency
	Seconds float64 `json:"seconds"`
	// Traces read back from the server for the step, and the services'
	// waits over their hops.
	Traces   int               `json:"traces"`
	Services map[string]*Waits `json:"services"`
	// BackendCPUms is the CPU time of the backend's process tree per
	// request (its app and its `rootline run`); ThrottledMs the time its
	// cgroup was throttled by the CPU quota per request.
	BackendCPUms float64 `json:"backendCpuMsPerRequest"`
	ThrottledMs  float64 `json:"throttledMsPerRequest"`
	// ThrottledPeriods is the share of the quota's periods (100 ms) in
	// which the backend's cgroup ran out of quota and was stopped.
	ThrottledPeriods float64 `json:"throttledPeriods"`
	// BackendBytesIn and BackendBytesOut are the bytes per request on the
	// backend's link into and out of it (frames as its veth counts them,
	// what tbf limits).
	BackendBytesIn  float64 `json:"backendBytesInPerRequest"`
	BackendBytesOut float64 `json:"backendBytesOutPerRequest"`
	LoadAvg         string  `json:"loadAvg"`
}

// Config is one configuration's run: the fault and its steps.
type Config struct {
	Name  string `json:"name"`  // cpu or net
	Fault string `json:"fault"` // as mesh.ParseFault reads it
	// How is how the fault's amount was chosen.
	How   string `json:"how"`
	Steps []Step `json:"steps"`
}

// decisionString lists a step's decisions for one service, most frequent
// first: "local 412, none 3".
func decisionString(d map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var kvs []kv
	for k, n := range d {
		kvs = append(kvs, kv{k, n})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.k, b.k)) })
	var parts []string
	for _, x := range kvs {
		parts = append(parts, fmt.Sprintf("%s %d", x.k, x.n))
	}
	return strings.Join(parts, ", ")
}

// Table writes a configuration's steps as a Markdown table: per step the
// client-measured latency, then per service (in chain order) its mean
// total, local, net and remote waits and its decisions.
func Table(w io.Writer, c Config, services []string) {
	fmt.Fprintf(w, "### %s: %s\n\n%s\n\n", c.Name, c.Fault, c.How)
	fmt.Fprintf(w, "| clients | req/s | mean | p95 | errors | backend CPU/req | throttled/req (periods) | backend bytes/req in / out |")
	for _, s := range services {
		fmt.Fprintf(w, " %s total / local / net / remote (ms) | %s decisions |", s, s)
	}
	fmt.Fprintf(w, "\n|---|---|---|---|---|---|---|---|%s\n", strings.Repeat("---|---|", len(services)))
	for _, st := range c.Steps {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f | %d | %.2f ms | %.1f ms (%.0f %%) | %.0f / %.0f |", st.Clients, st.PerSec, st.MeanMs, st.P95Ms, st.Errors,
			st.BackendCPUms, st.ThrottledMs, 100*st.ThrottledPeriods, st.BackendBytesIn, st.BackendBytesOut)
		for _, s := range services {
			wt := st.Services[s]
			if wt == nil {
				fmt.Fprintf(w, " – | – |")
				continue
			}
			net, remote := "–", "–"
			if wt.Calls > 0 {
				net, remote = fmt.Sprintf("%.1f", wt.Net), fmt.Sprintf("%.1f", wt.Remote)
			}
			fmt.Fprintf(w, " %.1f / %.1f / %s / %s | %s |", wt.Total, wt.Local, net, remote, decisionString(wt.Decisions))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}
