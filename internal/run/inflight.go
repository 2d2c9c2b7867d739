package run

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/run/httpstream"
)

// InFlight reports requests that are still open, long after their
// operation usually ends: a span reaches the server only when it ends, so a
// service whose requests hang (a JVM in a collection storm answering in
// 14 s) would show nothing — no anomaly, no incident, no capture of its
// process — until they end. Every Every, InFlight ships a provisional copy
// of each SERVER span open for at least After and longer than Threshold ×
// its operation's median here (the server's detector, run on this process's
// ended spans), with the CLIENT spans it has open: the same trace and span
// ids, its age so far as its duration, and model.AttrInFlight. The server
// judges it without letting it into its baselines, may open an incident and
// capture the process while the request is still open, and the final span
// supersedes it (same ids). A request is reported at most MaxReports times,
// at ages that grow by Growth (1, 4, 16, 64 s by default).
//
// InFlight is a Sink in front of the shipper: every span that ends passes
// through Emit, which forgets its open copy. StartServer and StartCall are
// called where a request or a call begins (the ptrace tracer's thread, the
// datapath's reader); Run sweeps on its own goroutine, since the tracer's
// thread may wait in the kernel for as long as the traced threads make no
// call.
type InFlight struct {
	cfg  InFlightConfig
	next Sink
	out  provisionalSink
	det  *anomaly.Median

	mu   sync.Mutex
	res  resource // under mu (its cache is for one goroutine at a time)
	open map[httpstream.SpanID]*openSpan

	// Reported counts provisional spans shipped; Ignored the starts not
	// tracked because MaxOpen were open.
	Reported, Ignored atomic.Int64
}

// provisionalSink is where provisional spans go: the shipper, past its
// node-side sampling (Shipper.EmitNow).
type provisionalSink interface {
	EmitNow(*model.Span)
	Flush()
}

// openSpan is a copy of an open request's or call's head.
type openSpan struct {
	req     *request // a SERVER span (nil for a call)
	call    *call    // a CLIENT span
	pid     int
	start   time.Time
	reports int
	next    time.Duration // the age at which it may be reported next
}

// InFlightConfig configures NewInFlight; zero fields take the defaults.
type InFlightConfig struct {
	// After is the least age reported (default 1s); Threshold the factor of
	// the operation's median a request must outlast (default the server
	// detector's, 3); Growth the factor between a request's successive
	// reports (default 4); MaxReports the most reports of one request
	// (default 4).
	After      time.Duration
	Threshold  float64
	Growth     float64
	MaxReports int
	// MaxOpen bounds the requests and calls tracked (default 16384);
	// MaxPerSweep the provisional spans of one sweep (default 128), the
	// oldest requests first; MaxAge forgets an entry whose end never came
	// (default 10m).
	MaxOpen, MaxPerSweep int
	MaxAge               time.Duration
	// Every is the sweep's period (default 1s).
	Every time.Duration
	// Service, Instance and Host are the spans' resource, as the tracer's.
	Service, Instance, Host string
	// Now is time.Now unless a test says otherwise.
	Now func() time.Time
}

// NewInFlight returns an InFlight that passes ended spans to next and
// provisional ones to out.
func NewInFlight(cfg InFlightConfig, next Sink, out provisionalSink) *InFlight {
	if cfg.After <= 0 {
		cfg.After = time.Second
	}
	dc := anomaly.DefaultConfig()
	if cfg.Threshold <= 0 {
		cfg.Threshold = dc.Threshold
	}
	if cfg.Growth <= 1 {
		cfg.Growth = 4
	}
	if cfg.MaxReports <= 0 {
		cfg.MaxReports = 4
	}
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = 16384
	}
	if cfg.MaxPerSweep <= 0 {
		cfg.MaxPerSweep = 128
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 10 * time.Minute
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dc.Threshold = cfg.Threshold
	dc.MaxKeys = 4096
	det, _ := anomaly.NewMedian(dc, nil)
	return &InFlight{cfg: cfg, next: next, out: out, det: det,
		res:  resource{service: cfg.Service, instance: cfg.Instance, host: cfg.Host},
		open: map[httpstream.SpanID]*openSpan{}}
}

// StartServer tracks request r, whose head has been read. It keeps a copy:
// r goes on changing on the caller's goroutine.
func (f *InFlight) StartServer(r *request) {
	c := *r
	c.threads = slices.Clone(r.threads)
	f.track(r.span, &openSpan{req: &c, pid: r.pid, start: r.start})
}

// StartCall tracks call c of process pid, whose context is set.
func (f *InFlight) StartCall(c *call, pid int) {
	cp := *c
	cp.parent = nil
	f.track(c.span, &openSpan{call: &cp, pid: pid, start: c.start})
}

func (f *InFlight) track(id httpstream.SpanID, o *openSpan) {
	o.next = f.cfg.After
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.open) >= f.cfg.MaxOpen {
		f.Ignored.Add(1)
		return
	}
	f.open[id] = o
}

// Emit implements Sink: s ended. Its open copy is forgotten, a SERVER span's
// duration enters its operation's baseline here, and s goes on to next.
func (f *InFlight) Emit(s *model.Span) {
	f.mu.Lock()
	delete(f.open, httpstream.SpanID(s.SpanID))
	f.mu.Unlock()
	if s.Kind == model.KindServer {
		f.det.ObserveAt(s.Service+"/"+s.Name, s.Duration, s.End())
	}
	if f.next != nil {
		f.next.Emit(s)
	}
}

// Open returns the requests and calls tracked.
func (f *InFlight) Open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open)
}

// Run sweeps every Every until ctx is done.
func (f *InFlight) Run(ctx context.Context) {
	t := time.NewTicker(f.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.sweep(f.cfg.Now())
		}
	}
}

// sweep ships the provisional spans due at now and forgets entries older
// than MaxAge.
func (f *InFlight) sweep(now time.Time) {
	spans := f.due(now)
	if len(spans) == 0 || f.out == nil {
		return
	}
	for _, s := range spans {
		f.out.EmitNow(s)
	}
	f.Reported.Add(int64(len(spans)))
	f.out.Flush()
}

// due returns the provisional spans to ship at now: each SERVER span due
// (old enough, slow against its operation's median here, its next report's
// age reached), oldest first, each with the CLIENT spans open under it, at
// most MaxPerSweep in all.
func (f *InFlight) due(now time.Time) []*model.Span {
	f.mu.Lock()
	defer f.mu.Unlock()
	type cand struct {
		o   *openSpan
		s   *model.Span
		age time.Duration
	}
	var cands []cand
	calls := map[httpstream.SpanID][]*openSpan{} // open calls by parent span
	for id, o := range f.open {
		age := now.Sub(o.start)
		if age > f.cfg.MaxAge {
			delete(f.open, id)
			continue
		}
		if o.call != nil {
			if age > 0 && o.call.parentS != (httpstream.SpanID{}) {
				calls[o.call.parentS] = append(calls[o.call.parentS], o)
			}
			continue
		}
		if age < f.cfg.After || age < o.next || o.reports >= f.cfg.MaxReports {
			continue
		}
		s := f.provisionalServer(o, now)
		if v := f.det.Check(s.Service+"/"+s.Name, s.Duration); !v.Anomalous {
			continue
		}
		cands = append(cands, cand{o, s, age})
	}
	slices.SortFunc(cands, func(a, b cand) int { return int(b.age - a.age) })
	var out []*model.Span
	for _, c := range cands {
		kids := calls[c.o.req.span]
		if len(out)+1+len(kids) > f.cfg.MaxPerSweep {
			break
		}
		out = append(out, c.s)
		for _, k := range kids {
			out = append(out, f.provisionalCall(k, now))
		}
		c.o.reports++
		c.o.next = time.Duration(float64(c.age) * f.cfg.Growth)
	}
	return out
}

// provisionalServer is the SERVER span of open request o at now: its
// attributes as at its end, but no status and no waits (they are known
// only then), and model.AttrInFlight.
func (f *InFlight) provisionalServer(o *openSpan, now time.Time) *model.Span {
	r := *o.req
	r.end, r.status, r.grpcStatus = now, 0, 0
	r.local, r.maxNet, r.maxRemote = 0, 0, 0
	return provisional(f.res.serverSpan(&r))
}

// provisionalCall is the CLIENT span of open call o at now.
func (f *InFlight) provisionalCall(o *openSpan, now time.Time) *model.Span {
	c := *o.call
	c.status, c.grpcStatus, c.timed = 0, 0, false
	return provisional(f.res.clientSpan(&c, o.pid, now))
}

// endAttrs are the attributes only a request's end knows (its waits, its
// gRPC status), left out of a provisional span: a zero would read as "no
// wait" or "OK".
var endAttrs = []string{model.AttrWaitLocalMs, model.AttrWaitNetMs, model.AttrWaitRemoteMs, model.AttrWaitSocketMs, "rpc.grpc.status_code"}

func provisional(s *model.Span) *model.Span {
	s.StatusCode, s.StatusMessage = model.StatusUnset, ""
	s.Attributes = slices.DeleteFunc(s.Attributes, func(kv model.KeyValue) bool { return slices.Contains(endAttrs, kv.Key) })
	s.Attributes = append(s.Attributes, model.Bool(model.AttrInFlight, true))
	return s
}
