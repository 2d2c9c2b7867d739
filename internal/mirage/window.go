package mirage

import (
	"sort"
	"sync"
	"time"
)

// maxPeers bounds the peers a service's window follows; calls to more
// distinct peers are counted under the peer "other", so that a service
// calling ever new addresses cannot grow the window (or the metrics' label
// sets) without bound.
const maxPeers = 64

// OtherPeer names the peers beyond the first maxPeers of a service.
const OtherPeer = "other"

// Window holds the hops of the last Span per service, in one-second buckets,
// and decides on their mean waits: the sliding window of a resource
// manager's decision. Its methods are safe for concurrent use.
type Window struct {
	cfg  Config
	span time.Duration

	mu       sync.Mutex
	services map[string]*serviceWindow
}

type candKey struct {
	cause Cause
	peer  string
}

type bucket struct {
	sec       int64
	hops      int
	dur, self time.Duration
	localN    int // hops whose local wait was measured
	waits     map[candKey]time.Duration
}

type serviceWindow struct {
	buckets []bucket // ring, indexed by second % len
	peers   map[string]bool
}

// NewWindow returns a window of span (default 30 s) deciding with cfg.
func NewWindow(cfg Config, span time.Duration) *Window {
	if span < time.Second {
		span = 30 * time.Second
	}
	return &Window{cfg: cfg.withDefaults(), span: span, services: map[string]*serviceWindow{}}
}

// Add counts a hop finished at now.
func (w *Window) Add(h *Hop, now time.Time) {
	w.add(h, h.Candidates(w.cfg.Policy), now)
}

// add is Add with the hop's candidates under the window's policy.
func (w *Window) add(h *Hop, cands []Candidate, now time.Time) {
	self := h.Self()
	w.mu.Lock()
	defer w.mu.Unlock()
	sw := w.services[h.Service]
	if sw == nil {
		sw = &serviceWindow{buckets: make([]bucket, int(w.span/time.Second)), peers: map[string]bool{}}
		w.services[h.Service] = sw
	}
	sec := now.Unix()
	b := &sw.buckets[int(sec%int64(len(sw.buckets)))]
	if b.sec != sec {
		*b = bucket{sec: sec, waits: map[candKey]time.Duration{}}
	}
	b.hops++
	b.dur += h.Duration
	b.self += self
	if h.LocalKnown {
		b.localN++
	}
	for _, k := range cands {
		peer := k.Peer
		if peer != "" && !sw.peers[peer] {
			if len(sw.peers) >= maxPeers {
				peer = OtherPeer
			} else {
				sw.peers[peer] = true
			}
		}
		b.waits[candKey{k.Cause, peer}] += k.Wait
	}
}

// Services lists the services with hops in the window at now, sorted.
func (w *Window) Services(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, sw := range w.services {
		if sw.live(now.Unix()) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (sw *serviceWindow) live(now int64) bool {
	for i := range sw.buckets {
		if b := &sw.buckets[i]; b.hops > 0 && now-b.sec < int64(len(sw.buckets)) && b.sec <= now {
			return true
		}
	}
	return false
}

// Summary is a service's window: its mean waits per request and the
// decision on them.
type Summary struct {
	Service string
	Hops    int
	// Candidates are the mean waits per request, local first, then each
	// peer's network and remote wait in peer order.
	Candidates []Candidate
	Decision   Decision
}

// Summary returns the service's window at now (zero Hops: no hop in it).
func (w *Window) Summary(service string, now time.Time) Summary {
	w.mu.Lock()
	sum := Summary{Service: service}
	sw := w.services[service]
	var dur, self time.Duration
	var localN int
	waits := map[candKey]time.Duration{}
	if sw != nil {
		n := int64(len(sw.buckets))
		for i := range sw.buckets {
			b := &sw.buckets[i]
			if b.hops == 0 || now.Unix()-b.sec >= n || b.sec > now.Unix() {
				continue
			}
			sum.Hops += b.hops
			dur += b.dur
			self += b.self
			localN += b.localN
			for k, v := range b.waits {
				waits[k] += v
			}
		}
	}
	w.mu.Unlock()
	if sum.Hops == 0 {
		sum.Decision = Decision{Cause: CauseNone, Reason: "no requests in the window"}
		return sum
	}
	mean := func(d time.Duration) time.Duration { return d / time.Duration(sum.Hops) }
	sum.Candidates = append(sum.Candidates, Candidate{Cause: CauseLocal, Wait: mean(waits[candKey{CauseLocal, ""}])})
	var peers []string
	for k := range waits {
		if k.cause == CauseNetwork {
			peers = append(peers, k.peer)
		}
	}
	sort.Strings(peers)
	for _, p := range peers {
		sum.Candidates = append(sum.Candidates,
			Candidate{Cause: CauseNetwork, Peer: p, Wait: mean(waits[candKey{CauseNetwork, p}])},
			Candidate{Cause: CauseRemote, Peer: p, Wait: mean(waits[candKey{CauseRemote, p}])})
	}
	sum.Decision = w.cfg.decide(sum.Candidates, mean(dur), mean(self))
	// The window's local wait counts as measured when most hops measured it.
	sum.Decision.LocalKnown = 2*localN >= sum.Hops
	return sum
}
