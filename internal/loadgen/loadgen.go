// Package loadgen is the demo's open-loop HTTP and gRPC load generator.
//
// Requests follow a fixed timetable: the i-th request of a phase is due at
// phaseStart + i/rate, whatever happened to the earlier ones. Latency is
// measured from that intended send time, not from the moment the request
// actually left, so a stall of the target (or of the generator) shows up in
// the percentiles instead of silently slowing the load down — the
// coordinated-omission trap of closed-loop generators. In-flight requests are
// bounded; a request due while the bound is reached is not sent and counts as
// an overflow error.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is one step of the load: Rate requests per second for Duration.
type Phase struct {
	Rate     float64
	Duration time.Duration
}

// Config of a run.
type Config struct {
	// URL receives a GET per request.
	URL string
	// Phases run back to back on one timetable.
	Phases []Phase
	// MaxInFlight bounds concurrent requests (default 256).
	MaxInFlight int
	// Timeout per request (default 5s). A timed-out request is recorded in the
	// histogram at its elapsed time and counted in Timeouts.
	Timeout time.Duration
	// Client sends the requests (default: a keep-alive client sized for MaxInFlight).
	Client *http.Client
	// GRPC sends each request as a unary gRPC call over h2c instead: of
	// GRPCMethod (default DefaultGRPCMethod) with an empty message, to URL's
	// host:port, every call multiplexed on one connection as gRPC clients do.
	// A status other than OK is an error; DEADLINE_EXCEEDED a timeout.
	GRPC       bool
	GRPCMethod string
	// Progress, when set, is called about once per second from a separate
	// goroutine with a snapshot of the current phase; it must return quickly.
	Progress func(Progress)
}

// Progress is a snapshot of the running phase.
type Progress struct {
	Phase   int // index into Config.Phases
	Target  float64
	Elapsed time.Duration // since the phase started
	// Rate is the completions per second over the last interval.
	Rate float64
	// Counts of the phase so far.
	Sent, OK, Errors, Timeouts, Overflow int64
	P50, P99                             time.Duration
}

// PhaseResult is what one phase measured.
type PhaseResult struct {
	Phase
	// Scheduled requests = Sent + Overflow.
	Scheduled, Sent, OK int64
	// Errors counts every failed request: non-2xx answers, transport errors,
	// Timeouts and Overflow.
	Errors, Timeouts, Overflow int64
	// Latency of every sent request that completed or timed out, from its
	// intended send time.
	Latency *Histogram
}

// P50 etc. are shorthands for the latency quantiles.
func (r PhaseResult) P50() time.Duration { return r.Latency.Quantile(0.50) }

// P95 is the 95th percentile latency.
func (r PhaseResult) P95() time.Duration { return r.Latency.Quantile(0.95) }

// P99 is the 99th percentile latency.
func (r PhaseResult) P99() time.Duration { return r.Latency.Quantile(0.99) }

// Max is the largest latency.
func (r PhaseResult) Max() time.Duration { return r.Latency.Max() }

// ErrorRate is Errors / Scheduled.
func (r PhaseResult) ErrorRate() float64 {
	if r.Scheduled == 0 {
		return 0
	}
	return float64(r.Errors) / float64(r.Scheduled)
}

// String is a one-line summary.
func (r PhaseResult) String() string {
	return fmt.Sprintf("%g req/s for %v: %d sent, %d ok, %d errors (%d timeouts, %d overflow); p50 %v p95 %v p99 %v max %v",
		r.Rate, r.Duration, r.Sent, r.OK, r.Errors, r.Timeouts, r.Overflow,
		round(r.P50()), round(r.P95()), round(r.P99()), round(r.Max()))
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// Result of a run: one entry per phase run (fewer than configured if the
// context ended first) and their total.
type Result struct {
	Phases []PhaseResult
	Total  PhaseResult
}

// phaseState is a phase's live counters; the histogram is guarded by mu.
type phaseState struct {
	sent, ok, errors, timeouts, overflow atomic.Int64
	done                                 atomic.Int64 // completions, for Progress.Rate
	mu                                   sync.Mutex
	hist                                 Histogram
}

func (p *phaseState) record(d time.Duration) {
	p.mu.Lock()
	p.hist.Record(d)
	p.mu.Unlock()
}

func (p *phaseState) result(ph Phase) PhaseResult {
	r := PhaseResult{Phase: ph, Sent: p.sent.Load(), OK: p.ok.Load(), Errors: p.errors.Load(),
		Timeouts: p.timeouts.Load(), Overflow: p.overflow.Load(), Latency: &Histogram{}}
	r.Scheduled = r.Sent + r.Overflow
	p.mu.Lock()
	r.Latency.Merge(&p.hist)
	p.mu.Unlock()
	return r
}

// Run sends the load and returns what it measured. It returns early with the
// partial result and ctx's error when ctx ends; requests in flight are then
// cancelled and not counted.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.URL == "" {
		return Result{}, errors.New("loadgen: no URL")
	}
	for i, p := range cfg.Phases {
		if p.Rate <= 0 || p.Duration <= 0 {
			return Result{}, fmt.Errorf("loadgen: phase %d: rate %v and duration %v must be > 0", i, p.Rate, p.Duration)
		}
	}
	do, closeSender, err := newSender(&cfg, 256)
	if err != nil {
		return Result{}, err
	}
	defer closeSender()

	states := make([]*phaseState, len(cfg.Phases))
	for i := range states {
		states[i] = &phaseState{}
	}
	var cur atomic.Int32 // the phase being scheduled
	var phaseStart atomic.Int64
	start := time.Now()
	phaseStart.Store(start.UnixNano())

	var wg sync.WaitGroup
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	stopCancel := context.AfterFunc(ctx, cancelReqs)
	defer stopCancel()

	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	if cfg.Progress != nil {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			last, lastPhase, lastAt := int64(0), int32(-1), time.Now()
			for {
				select {
				case <-progressDone:
					return
				case now := <-t.C:
					i := cur.Load()
					st := states[i]
					done := st.done.Load()
					if i != lastPhase {
						last, lastPhase = 0, i
					}
					r := st.result(cfg.Phases[i])
					cfg.Progress(Progress{
						Phase: int(i), Target: cfg.Phases[i].Rate,
						Elapsed: now.Sub(time.Unix(0, phaseStart.Load())),
						Rate:    float64(done-last) / now.Sub(lastAt).Seconds(),
						Sent:    r.Sent, OK: r.OK, Errors: r.Errors, Timeouts: r.Timeouts, Overflow: r.Overflow,
						P50: r.P50(), P99: r.P99(),
					})
					last, lastAt = done, now
				}
			}
		}()
	}

	sem := make(chan struct{}, cfg.MaxInFlight)
	send := func(st *phaseState, due time.Time) {
		defer wg.Done()
		defer func() { <-sem }()
		rctx, cancel := context.WithTimeout(reqCtx, cfg.Timeout)
		defer cancel()
		err := do(rctx)
		lat := time.Since(due)
		if reqCtx.Err() != nil {
			return // the run was cancelled: not the target's fault
		}
		st.done.Add(1)
		st.record(lat)
		switch {
		case errors.Is(err, errTimeout):
			st.timeouts.Add(1)
			st.errors.Add(1)
		case err != nil:
			st.errors.Add(1)
		default:
			st.ok.Add(1)
		}
	}

	var runErr error
	at := start
	var res Result
	timer := time.NewTimer(time.Hour)
	timer.Stop()
schedule:
	for pi, ph := range cfg.Phases {
		st := states[pi]
		cur.Store(int32(pi))
		phaseStart.Store(at.UnixNano())
		period := float64(time.Second) / ph.Rate
		n := int64(ph.Rate * ph.Duration.Seconds())
		for i := int64(0); i < n; i++ {
			due := at.Add(time.Duration(float64(i) * period))
			if wait := time.Until(due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					runErr = ctx.Err()
					break schedule
				case <-timer.C:
				}
			} else if ctx.Err() != nil {
				runErr = ctx.Err()
				break schedule
			}
			select {
			case sem <- struct{}{}:
				st.sent.Add(1)
				wg.Add(1)
				go send(st, due)
			default:
				st.overflow.Add(1)
				st.errors.Add(1)
			}
		}
		at = at.Add(ph.Duration)
		// Keep the timetable: the next phase starts when this one's time is up.
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				runErr = ctx.Err()
				break schedule
			case <-timer.C:
			}
		}
	}
	wg.Wait()
	close(progressDone)
	progressWG.Wait()

	res.Total = PhaseResult{Latency: &Histogram{}}
	for pi, st := range states {
		if st.sent.Load()+st.overflow.Load() == 0 && runErr != nil {
			break
		}
		r := st.result(cfg.Phases[pi])
		res.Phases = append(res.Phases, r)
		t := &res.Total
		t.Duration += r.Duration
		t.Scheduled += r.Scheduled
		t.Sent += r.Sent
		t.OK += r.OK
		t.Errors += r.Errors
		t.Timeouts += r.Timeouts
		t.Overflow += r.Overflow
		t.Latency.Merge(r.Latency)
	}
	if res.Total.Duration > 0 {
		res.Total.Rate = float64(res.Total.Scheduled) / res.Total.Duration.Seconds()
	}
	return res, runErr
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errTimeout is wrapped by a sender's error when the request timed out.
var errTimeout = errors.New("timeout")

// A sender sends one request and returns nil when it succeeded (a 2xx
// answer, gRPC status OK).
type sender func(ctx context.Context) error

// newSender fills in cfg's defaults (maxInFlight for MaxInFlight) and makes
// its sender and the sender's cleanup.
func newSender(cfg *Config, maxInFlight int) (sender, func(), error) {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = maxInFlight
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.GRPC {
		return newGRPCSender(*cfg)
	}
	client := cfg.Client
	closeIdle := func() {}
	if client == nil {
		tr := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        cfg.MaxInFlight,
			MaxIdleConnsPerHost: cfg.MaxInFlight,
			IdleConnTimeout:     30 * time.Second,
		}
		closeIdle = tr.CloseIdleConnections
		client = &http.Client{Transport: tr}
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		switch {
		case err != nil && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)):
			return fmt.Errorf("%w: %v", errTimeout, err)
		case err != nil:
			return err
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}, closeIdle, nil
}

// Once sends one request as Run would and returns nil when it succeeded, or
// what went wrong (a transport error, the HTTP or gRPC status).
func Once(ctx context.Context, cfg Config) error {
	if cfg.URL == "" {
		return errors.New("loadgen: no URL")
	}
	do, closeSender, err := newSender(&cfg, 1)
	if err != nil {
		return err
	}
	defer closeSender()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	return do(ctx)
}
