// Package mirage is the wait model of *Aggregated tracing model for MirageOS
// unikernels* ("Request Reconstruction in MirageOS Unikernels", §4.1): per
// hop (a SERVER span, its "local context", and its CLIENT children, its
// "remote contexts") what the request waited on — the hop's own CPU (local
// wait), the link to each downstream (network wait: the client's time beyond
// the downstream's own), and the resources below each downstream (remote
// wait: what the downstream reported up) — how those waits are aggregated
// (maximum by default, sum, minimum; parallel calls told apart from
// sequential ones by their overlap in time) and the per-hop decision: act on
// "my CPU", on "my link to X", or delegate to X.
//
// It works on model.Spans, so the server can run it on any stored trace
// (Hops derives the waits a hop's spans do not carry from its callees'
// spans; HopsWith takes the local wait of services not under `rootline run`
// from other evidence, such as their kernel critical path: critpath.SpanPath.LocalWait),
// and on what one `rootline run` sees live (Live, a span sink with a
// sliding Window and a Prometheus collector: the decentralised mode of §4.1.2,
// where each service's resource manager decides from its own view). Advise
// turns a decision into autoscaling advice.
package mirage

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// Cause is where a hop's decision points.
type Cause string

// Causes of a decision (the values of the cause label of
// rootline_bottleneck).
const (
	// CauseNone: no wait reaches Config.MinWait (or the latency is below
	// the SLA trigger): nothing to act on.
	CauseNone Cause = "none"
	// CauseLocal: "my CPU" — the hop's own threads waited to run.
	CauseLocal Cause = "local"
	// CauseNetwork: "my link to Peer".
	CauseNetwork Cause = "network"
	// CauseRemote: "delegate to Peer" — the wait is below that downstream.
	CauseRemote Cause = "remote"
)

// Policy is how waits are aggregated (§4.1.3).
type Policy int

// Aggregation policies.
const (
	// Max keeps the largest single-resource wait: one allocation step, on
	// the resource where most time can be saved. It is what `rootline run`
	// propagates in its timing headers, and the default.
	Max Policy = iota
	// Sum adds the waits that lie one after the other on the request's
	// path: the hop's local wait plus, per stage of sequential calls, the
	// largest net+remote wait among the stage's parallel calls. The
	// decision names every resource above MinWait (several allocation
	// steps at once).
	Sum
	// Min keeps the smallest wait above MinWait: the minimal allocation
	// that still addresses a bottleneck.
	Min
)

// String returns the policy's flag name.
func (p Policy) String() string {
	switch p {
	case Sum:
		return "sum"
	case Min:
		return "min"
	}
	return "max"
}

// ErrPolicy is returned by ParsePolicy for an unknown name.
var ErrPolicy = errors.New("unknown aggregation policy")

// ParsePolicy parses "max", "sum" or "min" ("" is max).
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "max":
		return Max, nil
	case "sum":
		return Sum, nil
	case "min":
		return Min, nil
	}
	return Max, fmt.Errorf("%w %q: want max, sum or min", ErrPolicy, s)
}

// Config sets the decision's thresholds. The zero Config is usable: the
// defaults below apply to zero fields.
type Config struct {
	Policy Policy
	// SLA, when set, makes a hop decide only once its latency reaches
	// SLAFraction of it (the dissertation's example trigger: "latency
	// reaching 80% of SLA", §4.1.2); zero decides on every hop.
	SLA         time.Duration
	SLAFraction float64 // default 0.8
	// MinWait is the smallest wait worth acting on (default 1 ms). The
	// dissertation compares waits with no floor; without one, a fault-free
	// hop would name whichever of its microsecond waits is largest.
	MinWait time.Duration
}

func (c Config) withDefaults() Config {
	if c.SLAFraction <= 0 {
		c.SLAFraction = 0.8
	}
	if c.MinWait <= 0 {
		c.MinWait = time.Millisecond
	}
	return c
}

// Call is one remote context: a CLIENT span of the hop.
type Call struct {
	Peer       string // the downstream (server.address, else peer.service, else "unknown")
	Start, End int64  // Unix ns
	// Net and Remote are the network and remote waits (rootline.wait.*);
	// Known is false when neither the span nor the callee's span gave them.
	Net, Remote time.Duration
	Known       bool
}

// Hop is one local context: a SERVER span and its calls.
type Hop struct {
	Service  string
	TraceID  model.TraceID
	SpanID   model.SpanID
	Start    int64 // Unix ns
	Duration time.Duration
	// Local is the run-queue wait of the hop's threads; LocalKnown is false
	// when the span does not carry it (a service not under `rootline run`).
	Local      time.Duration
	LocalKnown bool
	Calls      []Call
}

// Candidate is one resource a hop could act on and its wait.
type Candidate struct {
	Cause Cause
	Peer  string // "" for CauseLocal
	Wait  time.Duration
}

// Decision is a hop's (or a window's) answer.
type Decision struct {
	Cause Cause
	Peer  string
	Wait  time.Duration
	// Targets are the resources to act on: one under Max and Min, every
	// candidate above MinWait under Sum (largest first).
	Targets []Candidate
	// Duration and Self are the hop's latency and the part of it not
	// covered by its calls (its own work and waits), the base of shares.
	Duration, Self time.Duration
	// LocalKnown is false when the local wait was not measured: a "network"
	// or "remote" decision then may hide a local bottleneck.
	LocalKnown bool
	Reason     string
}

// Stages groups calls into stages of parallel calls, in time order: a call
// that starts before every call of the current stage has ended runs in
// parallel with it; one that starts after is sequential (a new stage). It
// returns indices into calls.
func Stages(calls []Call) [][]int {
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return calls[idx[a]].Start < calls[idx[b]].Start })
	var stages [][]int
	var end int64
	for _, i := range idx {
		c := calls[i]
		if len(stages) > 0 && c.Start < end {
			stages[len(stages)-1] = append(stages[len(stages)-1], i)
			end = max(end, c.End)
			continue
		}
		stages = append(stages, []int{i})
		end = c.End
	}
	return stages
}

// Self is the part of the hop's latency not covered by any of its calls.
func (h *Hop) Self() time.Duration {
	var covered int64
	for _, st := range Stages(h.Calls) {
		lo, hi := h.Calls[st[0]].Start, h.Calls[st[0]].End
		for _, i := range st[1:] {
			hi = max(hi, h.Calls[i].End)
		}
		covered += hi - lo
	}
	return max(0, h.Duration-time.Duration(covered))
}

// Candidates lists the hop's resources and their waits under p: the local
// wait, and per peer the network and the remote wait. Several calls to one
// peer are combined by p: under Max the largest; under Sum and Min the sum
// over sequential stages of each stage's largest (the peer's share of the
// request's path).
func (h *Hop) Candidates(p Policy) []Candidate {
	out := []Candidate{{Cause: CauseLocal, Wait: h.Local}}
	type pw struct{ net, remote time.Duration }
	peers := map[string]*pw{}
	var order []string
	for _, st := range Stages(h.Calls) {
		stage := map[string]*pw{}
		for _, i := range st {
			c := h.Calls[i]
			if !c.Known {
				continue
			}
			w := stage[c.Peer]
			if w == nil {
				w = &pw{}
				stage[c.Peer] = w
			}
			w.net, w.remote = max(w.net, c.Net), max(w.remote, c.Remote)
		}
		for _, i := range st {
			peer := h.Calls[i].Peer
			w := stage[peer]
			if w == nil {
				continue
			}
			delete(stage, peer)
			acc := peers[peer]
			if acc == nil {
				acc = &pw{}
				peers[peer] = acc
				order = append(order, peer)
			}
			if p == Max {
				acc.net, acc.remote = max(acc.net, w.net), max(acc.remote, w.remote)
			} else {
				acc.net += w.net
				acc.remote += w.remote
			}
		}
	}
	for _, peer := range order {
		out = append(out,
			Candidate{Cause: CauseNetwork, Peer: peer, Wait: peers[peer].net},
			Candidate{Cause: CauseRemote, Peer: peer, Wait: peers[peer].remote})
	}
	return out
}

// Aggregate is the wait the hop reports upstream under c.Policy (the value
// the caller sees as its remote wait): under Max the largest candidate (what
// `rootline run` sends in its timing headers); under Sum the local wait plus, per
// stage of sequential calls, the largest net+remote among its parallel
// calls; under Min the smallest candidate at or above MinWait (zero if none).
func (c Config) Aggregate(h *Hop) time.Duration {
	c = c.withDefaults()
	switch c.Policy {
	case Sum:
		total := h.Local
		for _, st := range Stages(h.Calls) {
			var most time.Duration
			for _, i := range st {
				if call := h.Calls[i]; call.Known {
					most = max(most, call.Net+call.Remote)
				}
			}
			total += most
		}
		return total
	case Min:
		var least time.Duration
		for _, k := range h.Candidates(Min) {
			if k.Wait >= c.MinWait && (least == 0 || k.Wait < least) {
				least = k.Wait
			}
		}
		return least
	}
	var most time.Duration
	for _, k := range h.Candidates(Max) {
		most = max(most, k.Wait)
	}
	return most
}

// Decide is the hop's decision (§4.1.2): act on the local CPU, on the link
// to a peer, or delegate to a peer, whichever wait the policy picks. Ties go
// to the hop itself first, then to the link: delegating is for a remote
// wait strictly larger than the local and network ones.
func (c Config) Decide(h *Hop) Decision {
	d := c.decide(h.Candidates(c.withDefaults().Policy), h.Duration, h.Self())
	d.LocalKnown = h.LocalKnown
	if !h.LocalKnown && d.Cause != CauseLocal {
		d.Reason += "; the local wait was not measured (the service is not under rootline run)"
	}
	return d
}

func (c Config) decide(cands []Candidate, dur, self time.Duration) Decision {
	c = c.withDefaults()
	d := Decision{Cause: CauseNone, Duration: dur, Self: self}
	if c.SLA > 0 && float64(dur) < c.SLAFraction*float64(c.SLA) {
		d.Reason = fmt.Sprintf("latency %s is below %.0f%% of the SLA %s", round(dur), 100*c.SLAFraction, c.SLA)
		return d
	}
	var above []Candidate
	for _, k := range cands {
		if k.Wait >= c.MinWait {
			above = append(above, k)
		}
	}
	if len(above) == 0 {
		d.Reason = fmt.Sprintf("no wait reaches %s", c.MinWait)
		return d
	}
	// Stable, so that ties keep the candidates' order: local, then each
	// peer's network before its remote wait.
	sort.SliceStable(above, func(a, b int) bool {
		if c.Policy == Min {
			return above[a].Wait < above[b].Wait
		}
		return above[a].Wait > above[b].Wait
	})
	pick := above[0]
	d.Cause, d.Peer, d.Wait = pick.Cause, pick.Peer, pick.Wait
	if c.Policy == Sum {
		d.Targets = above
	} else {
		d.Targets = []Candidate{pick}
	}
	d.Reason = explain(pick, cands, c.Policy)
	return d
}

// explain is the decision's sentence.
func explain(pick Candidate, cands []Candidate, p Policy) string {
	var next time.Duration
	for _, k := range cands {
		if k != pick {
			next = max(next, k.Wait)
		}
	}
	what := map[Cause]string{
		CauseLocal:   "its own threads waited %[1]s to run (local wait)",
		CauseNetwork: "the link to %[2]s cost %[1]s beyond %[2]s's own time (network wait)",
		CauseRemote:  "%[2]s reported %[1]s of waits below it (remote wait): delegate to %[2]s",
	}[pick.Cause]
	s := fmt.Sprintf(what, round(pick.Wait), pick.Peer)
	if p == Max {
		s += fmt.Sprintf(", the largest wait (next: %s)", round(next))
	}
	return s
}

func round(d time.Duration) time.Duration {
	if d > 10*time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
