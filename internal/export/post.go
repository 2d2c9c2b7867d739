package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Poster sends OTLP/HTTP request bodies (protobuf) to one endpoint. A
// receiver that answers "retry later" (429, 502, 503 or 504, as the
// OTLP/HTTP specification lists them: its queue is full, its disk is full)
// gets the same body again after an exponential backoff with jitter, or
// after its Retry-After when that is longer, for at most MaxTime; with
// RetryNetwork, so does one that could not be reached. Other failures are
// not retried. `rootline run`'s shipper and the agent's span relay send
// with it. It is safe for concurrent use once configured.
type Poster struct {
	// URL is the endpoint, e.g. http://127.0.0.1:4318/v1/traces.
	URL string
	// Token is sent as a bearer token when set.
	Token string
	// Client sends the requests (nil: one with a 10-s timeout).
	Client *http.Client
	// Gzip says the bodies are gzipped (Content-Encoding: gzip).
	Gzip bool
	// Initial is the first backoff (default 500ms); it doubles up to
	// MaxDelay (default 10s), each wait drawn at random between half and
	// all of it. MaxTime bounds the time one body spends being retried
	// (default 30s); negative disables retries.
	Initial, MaxDelay, MaxTime time.Duration
	// RetryNetwork retries a request that reached no answer (the receiver
	// is down or restarting) as a "retry later".
	RetryNetwork bool
	// Sleep waits d or until ctx ends, and Now is the clock of the
	// deadline (nil: the real ones; tests give a fake clock).
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time

	// Retried counts requests sent again.
	Retried atomic.Int64
}

var defaultClient = &http.Client{Timeout: 10 * time.Second}

// StatusError is a receiver's answer other than 2xx.
type StatusError struct {
	Code   int
	Status string
	// After is the receiver's Retry-After, 0 if none.
	After time.Duration
}

func (e *StatusError) Error() string {
	if Retryable(e.Code) {
		return "server answered " + e.Status + " (retryable)"
	}
	return "server answered " + e.Status
}

// StatusOf returns the HTTP status of a Post error (0: no answer).
func StatusOf(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// Retryable reports whether an HTTP status asks to retry later (OTLP/HTTP:
// 429, 502, 503, 504).
func Retryable(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfter parses a Retry-After header: seconds, or an HTTP date.
func RetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if n, err := strconv.Atoi(h); err == nil {
		return time.Duration(max(n, 0)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PostRetrying posts body, and again while the receiver answers "retry
// later", until MaxTime has passed or ctx ends.
func (p *Poster) PostRetrying(ctx context.Context, body []byte) error {
	initial, maxDelay, maxTime := p.Initial, p.MaxDelay, p.MaxTime
	if initial <= 0 {
		initial = 500 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 10 * time.Second
	}
	if maxTime == 0 {
		maxTime = 30 * time.Second
	}
	now, sleep := p.Now, p.Sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	var deadline time.Time
	backoff := initial
	for {
		err := p.Post(ctx, body)
		if err == nil || maxTime < 0 || ctx.Err() != nil {
			return err
		}
		var after time.Duration
		var se *StatusError
		switch {
		case errors.As(err, &se) && Retryable(se.Code):
			after = se.After
		case se == nil && p.RetryNetwork:
		default:
			return err
		}
		if deadline.IsZero() {
			deadline = now().Add(maxTime)
		}
		// Full backoff halved at random ("equal jitter"), so that many
		// senders do not come back in step.
		wait := max(backoff/2+rand.N(backoff/2+1), after)
		if now().Add(wait).After(deadline) {
			return fmt.Errorf("%w (gave up retrying after %v)", err, maxTime)
		}
		p.Retried.Add(1)
		if serr := sleep(ctx, wait); serr != nil {
			return errors.Join(err, serr)
		}
		backoff = min(backoff*2, maxDelay)
	}
}

// Post posts body once: nil on a 2xx answer, a *StatusError on another.
func (p *Poster) Post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if p.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if p.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.Token)
	}
	c := p.Client
	if c == nil {
		c = defaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read the answer to its end, so that the connection is kept for the
	// next body rather than closed (and dialled again a second later).
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Code: resp.StatusCode, Status: resp.Status}
		if Retryable(resp.StatusCode) {
			se.After = RetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return se
	}
	return nil
}
