package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// Errors a Consumer returns; receivers map them to protocol status codes.
var (
	// ErrQueueFull: the bounded intake is full. Receivers answer gRPC
	// RESOURCE_EXHAUSTED / HTTP 429 with Retry-After (see RetryAfter).
	ErrQueueFull = errors.New("intake queue full")
	// ErrShuttingDown: the server is draining and accepts nothing new
	// (gRPC UNAVAILABLE / HTTP 503).
	ErrShuttingDown = errors.New("server shutting down")
)

// RetryAfter is the back-off receivers advertise when the intake is full.
const RetryAfter = time.Second

// Consumer accepts spans from a receiver.
//
// ConsumeSpans returns nil only after every span of the batch is durably stored
// (receivers acknowledge then). It returns ErrQueueFull at once when the intake
// has no room, ErrShuttingDown while draining, or the context's error. Spans
// become owned by the consumer: the caller MUST NOT touch them afterwards.
// Safe for concurrent use.
type Consumer interface {
	ConsumeSpans(ctx context.Context, spans []*model.Span) error
}

// ConsumerFunc adapts a function to Consumer (handy in tests).
type ConsumerFunc func(ctx context.Context, spans []*model.Span) error

// ConsumeSpans calls f.
func (f ConsumerFunc) ConsumeSpans(ctx context.Context, spans []*model.Span) error {
	return f(ctx, spans)
}
