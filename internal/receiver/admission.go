package receiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	runtimemetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// Admission: what a request may take before the receivers decode it.
//
// Every receiver shares one memory budget (Config.MaxInflightBytes) for the
// requests in flight: a request reserves the bytes of its body as they arrive
// (never the length it claims), then the pre-scan's estimate of what decoding
// and translating it will allocate (wire.go), and gives all back when it is
// answered. A request that finds the budget spent is answered 429 / gRPC
// RESOURCE_EXHAUSTED with a retry delay, as the pipeline's back-pressure is,
// once it has waited budgetWait for others to give memory back (so that
// under load the requests nearest to done finish and free theirs); one that
// could never fit is answered 413. Each receiver also decodes at
// most Config.MaxConcurrentRequests requests at once. Together with the
// pipeline's queue bound in bytes, this bounds the server's memory whatever
// clients send (docs/security.md has the sum).

// budgetWait is how long a request waits for memory others hold before it
// is answered 429: short, as it holds what it has taken meanwhile.
const budgetWait = 2 * time.Second

// budget is a count of bytes shared by requests.
type budget struct {
	size  int64
	used  atomic.Int64
	gauge *memoryGauge // nil: the process's memory is not watched

	mu    sync.Mutex
	freed chan struct{} // closed when bytes are given back; nil when nobody waits
}

func newBudget(size int64, gauge *memoryGauge) *budget { return &budget{size: size, gauge: gauge} }

// tryTake takes n bytes, or nothing and false when fewer are left.
func (b *budget) tryTake(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.size {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (b *budget) give(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	b.mu.Lock()
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// whenFreed returns a channel closed the next time bytes are given back.
func (b *budget) whenFreed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	return b.freed
}

// reservation is what one request holds of the budget; release gives it all
// back. Not safe for concurrent use.
type reservation struct {
	b    *budget
	ctx  context.Context // the request's: waiting ends with it
	held int64
}

func (b *budget) reserve(ctx context.Context) *reservation { return &reservation{b: b, ctx: ctx} }

// grow takes n more bytes, waiting up to budgetWait for others to give some
// back and, while the process's memory is at its limit, for the collector
// to bring it down. It returns errOverBudget or errMemoryPressure when
// neither happened in time, errExceedsBudget at once when the request alone
// would need more than the whole budget, or the request's context error.
func (r *reservation) grow(n int64) error {
	if r.held+n > r.b.size {
		return errExceedsBudget
	}
	var timeout <-chan time.Time
	for {
		freed := r.b.whenFreed()
		var recheck <-chan time.Time
		pressed := r.b.gauge.pressed()
		if pressed {
			recheck = time.After(gaugeEvery)
		} else if r.b.tryTake(n) {
			r.held += n
			return nil
		}
		if timeout == nil {
			t := time.NewTimer(budgetWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-freed:
		case <-recheck:
		case <-timeout:
			if pressed {
				return errMemoryPressure
			}
			return errOverBudget
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// gaugeEvery is how often a memoryGauge reads the runtime's figures.
const gaugeEvery = 10 * time.Millisecond

// memoryGauge tells when the process's memory has reached Go's soft limit
// (debug.SetMemoryLimit, which the server sets below --memory-limit). The
// bounded parts of the server hold less than that limit; what takes the
// process to it under a flood is garbage the collector has not caught up
// with — past the limit the runtime caps the collector at half the CPU and
// lets the heap grow rather than stall. While the gauge says so, requests
// take no new memory (they wait, then get 429 / RESOURCE_EXHAUSTED): the
// allocation that outruns the collector stops where it comes from, as a
// collector's memory limiter does.
type memoryGauge struct {
	limit   atomic.Int64 // bytes of Go-mapped memory that count as at the limit
	next    atomic.Int64 // monotonic ns of the next reading
	over    atomic.Bool
	mu      sync.Mutex // one reader at a time
	samples []runtimemetrics.Sample
	start   time.Time
}

// newMemoryGauge watches for limit bytes; nil (no watching) when limit is
// math.MaxInt64 or less than one.
func newMemoryGauge(limit int64) *memoryGauge {
	if limit <= 0 || limit == math.MaxInt64 {
		return nil
	}
	g := &memoryGauge{start: time.Now(), samples: []runtimemetrics.Sample{
		{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
	}}
	g.limit.Store(limit)
	return g
}

// pressed reports whether the memory Go has mapped and not released (what
// its soft limit is compared with) is at the limit, as read at most
// gaugeEvery ago.
func (g *memoryGauge) pressed() bool {
	if g == nil {
		return false
	}
	now := int64(time.Since(g.start))
	if now >= g.next.Load() && g.mu.TryLock() {
		runtimemetrics.Read(g.samples)
		used := int64(g.samples[0].Value.Uint64()) - int64(g.samples[1].Value.Uint64())
		g.over.Store(used >= g.limit.Load())
		g.next.Store(now + int64(gaugeEvery))
		g.mu.Unlock()
	}
	return g.over.Load()
}

// shrink gives n bytes back early (memory the request no longer holds).
func (r *reservation) shrink(n int64) {
	n = min(n, r.held)
	r.b.give(n)
	r.held -= n
}

func (r *reservation) release() {
	r.b.give(r.held)
	r.held = 0
}

// slots bounds the requests one receiver works on at once.
type slots chan struct{}

func newSlots(n int) slots { return make(slots, n) }

// tryTake takes a slot without waiting.
func (s slots) tryTake() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) give() { <-s }

// rejection is a request answered before (or instead of) storing its
// content: the same reason in HTTP and gRPC terms.
type rejection struct {
	status  int        // HTTP status
	code    codes.Code // gRPC code
	outcome outcome
	msg     string // for the client
	spans   int    // decoded spans refused with the request
	// retry asks the client to retry later (Retry-After, RetryInfo).
	retry bool
	// challenge is the WWW-Authenticate value of a 401.
	challenge string
	// invalid, when set, is logged: Rootline's own description of the
	// problem. Decoders' messages are not, as they quote the payload.
	invalid *InvalidError
}

// Error returns the message for the client.
func (e *rejection) Error() string { return e.msg }

// refusal is the rejection with an HTTP status and the gRPC code that says
// the same.
func refusal(status int, o outcome, msg string) *rejection {
	code := codes.InvalidArgument
	switch status {
	case http.StatusRequestEntityTooLarge:
		code = codes.ResourceExhausted
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
		code = codes.Unimplemented
	case http.StatusRequestTimeout:
		code = codes.DeadlineExceeded
	}
	return &rejection{status: status, code: code, outcome: o, msg: msg}
}

// overloaded is the answer when the receivers are at one of their bounds: a
// retryable refusal, as OTLP clients back off and retry on it.
func overloaded(msg string) *rejection {
	return &rejection{status: http.StatusTooManyRequests, code: codes.ResourceExhausted, outcome: outcomeOverloaded, msg: msg, retry: true}
}

var (
	errBodyTooLarge = errors.New("body too large")
	errOverBudget   = errors.New("over the memory budget")
	// errMemoryPressure: the process's memory is at its limit.
	errMemoryPressure = fmt.Errorf("%w: the process's memory is at its limit", errOverBudget)
	// errExceedsBudget: the request needs more than the whole budget.
	errExceedsBudget = errors.New("more than the whole memory budget")
)

// Bounds of the chunks a body is read in: small first, so that a request
// that sends a byte costs a few KB whatever length it claims.
const (
	firstChunk = 4 << 10
	maxChunk   = 1 << 20
)

// fill reads into buf until it is full or rd fails, and returns rd's error
// as it is: io.EOF is the body's end, while io.ErrUnexpectedEOF is a body
// cut short (a truncated gzip stream, a request shorter than its
// Content-Length), which io.ReadFull would report for a short last chunk
// too.
func fill(rd io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readAll reads rd to its end into one slice, at most limit bytes, reserving
// each chunk from res before reading into it. It returns errBodyTooLarge past
// limit, res.grow's errors when the budget runs out, or rd's error.
func readAll(rd io.Reader, limit int64, res *reservation) ([]byte, error) {
	var chunks [][]byte
	total, reserved := int64(0), int64(0)
	size := int64(firstChunk)
	for {
		size = min(size, limit+1-total)
		if err := res.grow(size); err != nil {
			return nil, err
		}
		reserved += size
		chunk := make([]byte, size)
		n, err := fill(rd, chunk)
		chunks = append(chunks, chunk[:n])
		total += int64(n)
		if total > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, maxChunk)
	}
	if len(chunks) == 1 {
		res.shrink(int64(cap(chunks[0]) - len(chunks[0])))
		return chunks[0], nil
	}
	// One contiguous copy for the decoder; the chunks' reservation is given
	// back once they are garbage.
	if err := res.grow(total); err != nil {
		return nil, err
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	res.shrink(reserved)
	return out, nil
}

// mib formats n bytes for a message.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
