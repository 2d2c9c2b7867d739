package mirage

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
)

// Live is the decentralised mode: the wait model on the spans one `rootline
// run` makes, as they are made. It takes spans (Emit, a span sink), pairs
// each SERVER span with the CLIENT spans made under it (which end first),
// adds the hop to a sliding Window and to wait histograms, and exposes the
// window's decision as Prometheus metrics (Register). Emit never blocks
// beyond a short lock.
type Live struct {
	w   *Window
	now func() time.Time

	mu        sync.Mutex
	pending   map[pendingKey]*pendingCalls
	peers     map[string]bool
	observers map[peerKey]prometheus.Observer
	swept     time.Time

	// Orphans counts CLIENT spans dropped unpaired: their SERVER span did
	// not come within pendingTTL, or too many were waiting.
	Orphans atomic.Int64

	local, net, remote *prometheus.HistogramVec
	bottleneck         *prometheus.Desc
	requests           *prometheus.Desc
}

type pendingKey struct {
	t model.TraceID
	s model.SpanID
}

type peerKey struct {
	service string
	cause   Cause
	peer    string
}

type pendingCalls struct {
	at    time.Time
	calls []Call
}

const (
	// pendingTTL is how long a CLIENT span waits for its SERVER span: a
	// request longer than that loses its calls from the model.
	pendingTTL = 2 * time.Minute
	// maxPending bounds the requests with CLIENT spans waiting.
	maxPending = 1 << 16
)

// waitBuckets are the wait histograms' bounds, in seconds: from half a
// millisecond (below Config.MinWait) to ten seconds.
var waitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewLive returns a Live deciding with cfg over a window of span (default
// 30 s).
func NewLive(cfg Config, span time.Duration) *Live {
	l := &Live{
		w: NewWindow(cfg, span), now: time.Now,
		pending: map[pendingKey]*pendingCalls{}, peers: map[string]bool{}, observers: map[peerKey]prometheus.Observer{},
		local: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rootline_local_wait_seconds",
			Help:    "Run-queue wait of the threads that served a request (Mirage local wait), per request.",
			Buckets: waitBuckets,
		}, []string{"service"}),
		net: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rootline_net_wait_seconds",
			Help:    "Network wait on the link to peer (client time beyond the peer's own), per request that called peer.",
			Buckets: waitBuckets,
		}, []string{"service", "peer"}),
		remote: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rootline_remote_wait_seconds",
			Help:    "Remote wait reported by peer (the largest wait below it), per request that called peer.",
			Buckets: waitBuckets,
		}, []string{"service", "peer"}),
		bottleneck: prometheus.NewDesc("rootline_bottleneck",
			"1 for the resource the service's decision over the sliding window points at (cause local: its CPU; network: its link to peer; remote: delegate to peer), else 0.",
			[]string{"service", "cause", "peer"}, nil),
		requests: prometheus.NewDesc("rootline_bottleneck_window_requests",
			"Requests in the sliding window the decision is made on.", []string{"service"}, nil),
	}
	return l
}

// Window is the live window (for tests and callers that decide themselves).
func (l *Live) Window() *Window { return l.w }

// Emit takes a finished span.
func (l *Live) Emit(s *model.Span) {
	switch s.Kind {
	case model.KindClient:
		if s.ParentSpanID.IsZero() {
			return // made outside any request
		}
		now := l.now()
		l.mu.Lock()
		k := pendingKey{s.TraceID, s.ParentSpanID}
		p := l.pending[k]
		if p == nil {
			if len(l.pending) >= maxPending {
				l.sweep(now)
			}
			if len(l.pending) >= maxPending {
				l.mu.Unlock()
				l.Orphans.Add(1)
				return
			}
			p = &pendingCalls{at: now}
			l.pending[k] = p
		}
		p.calls = append(p.calls, callOf(s))
		l.mu.Unlock()
	case model.KindServer:
		now := l.now()
		l.mu.Lock()
		k := pendingKey{s.TraceID, s.SpanID}
		var calls []Call
		if p := l.pending[k]; p != nil {
			calls = p.calls
			delete(l.pending, k)
		}
		if now.Sub(l.swept) > pendingTTL {
			l.sweep(now)
		}
		l.mu.Unlock()
		h, _ := HopOf(s, nil)
		h.Calls = calls
		cands := h.Candidates(l.w.cfg.Policy)
		l.w.add(&h, cands, now)
		l.observe(&h, cands)
	}
}

// sweep drops the CLIENT spans whose SERVER span is overdue. l.mu is held.
func (l *Live) sweep(now time.Time) {
	l.swept = now
	for k, p := range l.pending {
		if now.Sub(p.at) > pendingTTL {
			delete(l.pending, k)
			l.Orphans.Add(int64(len(p.calls)))
		}
	}
}

// observe puts the hop's waits into the histograms.
func (l *Live) observe(h *Hop, cands []Candidate) {
	if h.LocalKnown {
		l.local.WithLabelValues(h.Service).Observe(h.Local.Seconds())
	}
	for _, k := range cands {
		if k.Cause == CauseLocal {
			continue
		}
		l.observer(h.Service, k).Observe(k.Wait.Seconds())
	}
}

// observer returns the histogram of a peer's network or remote wait, kept
// per peer (a label lookup hashes every label value), with the peers
// bounded as the window bounds them.
func (l *Live) observer(service string, k Candidate) prometheus.Observer {
	key := peerKey{service, k.Cause, k.Peer}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.observers[key]; ok {
		return o
	}
	peer := k.Peer
	if !l.peers[peer] {
		if len(l.peers) >= maxPeers {
			peer = OtherPeer
		} else {
			l.peers[peer] = true
		}
	}
	vec := l.net
	if k.Cause == CauseRemote {
		vec = l.remote
	}
	o := vec.WithLabelValues(service, peer)
	if len(l.observers) < 4*maxPeers {
		l.observers[key] = o
	}
	return o
}

// Register registers the histograms and the decision's gauges with reg.
func (l *Live) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{l.local, l.net, l.remote, decisionCollector{l}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// decisionCollector computes the decision at each scrape.
type decisionCollector struct{ l *Live }

func (c decisionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.l.bottleneck
	ch <- c.l.requests
}

func (c decisionCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.l.now()
	for _, svc := range c.l.w.Services(now) {
		sum := c.l.w.Summary(svc, now)
		ch <- prometheus.MustNewConstMetric(c.l.requests, prometheus.GaugeValue, float64(sum.Hops), svc)
		chosen := map[candKey]bool{}
		for _, t := range sum.Decision.Targets {
			chosen[candKey{t.Cause, t.Peer}] = true
		}
		for _, k := range sum.Candidates {
			v := 0.0
			if chosen[candKey{k.Cause, k.Peer}] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.l.bottleneck, prometheus.GaugeValue, v, svc, string(k.Cause), k.Peer)
		}
	}
}
