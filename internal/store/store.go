// Package store defines the storage contracts of Rootline: spans, artifacts
// and their links, artifact content (blobs) and metric points. Backends live
// in sibling packages (sqlite, fsblob, and later cassandra/s3), are chosen by
// configuration in package factory, and run the conformance suites of package
// storetest for the contracts they implement.
package store

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// Sentinel errors returned by backends. Callers test them with errors.Is.
var (
	// ErrNotFound: the trace or artifact does not exist (or was purged).
	ErrNotFound = errors.New("not found")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable: the store cannot write now (a full disk, an I/O
	// error, a lock held too long) but may later, without a restart. Callers
	// that answer clients say "retry later" (HTTP 503, gRPC UNAVAILABLE);
	// nothing of the failed write was stored.
	ErrUnavailable = errors.New("store temporarily unavailable")
)

// SpanWriter persists spans.
//
// WriteSpans MUST NOT return nil before every span of the batch is durable
// (committed): the receivers acknowledge a request only after it returns. A
// batch is written atomically: all of it or none. A failure that may pass by
// itself (no space, an I/O error) MUST wrap ErrUnavailable. Implementations
// MUST be safe for concurrent use, but the pipeline calls it from one
// goroutine and relies on batching for throughput (group commit). The slice
// and spans are owned by the caller and MUST NOT be retained. Retention MUST
// age a span by RetentionTime, never by its own timestamps alone.
type SpanWriter interface {
	WriteSpans(ctx context.Context, spans []*model.Span) error
}

// TraceQuery selects traces. Zero fields do not filter.
type TraceQuery struct {
	Service   string
	Operation string
	// Tags match span attributes or resource attributes by their text value;
	// all must match on one span of the trace's matching spans.
	Tags          map[string]string
	StartMin      int64 // Unix ns, inclusive
	StartMax      int64 // Unix ns, inclusive
	DurationMin   int64 // ns
	DurationMax   int64 // ns
	AnomalousOnly bool  // only traces with a span marked rootline.anomaly
	ErrorOnly     bool  // only traces with an error span
	// Limit bounds the number of traces; 0 means the backend default (20).
	Limit int
}

// Operation is a span name seen for a service.
type Operation struct {
	Name string
	Kind model.SpanKind
}

// AnomalyQuery selects anomalous spans, newest first.
type AnomalyQuery struct {
	Service string
	Since   int64 // Unix ns; span start >= Since
	Limit   int   // 0 means 100
}

// DependencyLink is a caller→callee edge between services, derived from
// parent/child spans of different services.
type DependencyLink struct {
	Parent    string
	Child     string
	CallCount int64
	Anomalies int64
}

// SpanReader queries spans. Returned slices are owned by the caller.
// Implementations MUST be safe for concurrent use.
type SpanReader interface {
	// GetTrace returns all spans of a trace, or ErrNotFound.
	GetTrace(ctx context.Context, id model.TraceID) ([]*model.Span, error)
	// FindTraces returns the traces matching q, newest first, each complete.
	FindTraces(ctx context.Context, q TraceQuery) ([][]*model.Span, error)
	// FindTraceIDs returns the ids of matching traces, newest first.
	FindTraceIDs(ctx context.Context, q TraceQuery) ([]model.TraceID, error)
	GetServices(ctx context.Context) ([]string, error)
	GetOperations(ctx context.Context, service string) ([]Operation, error)
	// Anomalies returns anomalous spans, newest first.
	Anomalies(ctx context.Context, q AnomalyQuery) ([]*model.Span, error)
	// Dependencies returns service call edges among spans that started in [start, end].
	Dependencies(ctx context.Context, start, end int64) ([]DependencyLink, error)
}

// SpanRef names one span.
type SpanRef struct {
	TraceID model.TraceID
	SpanID  model.SpanID
}

// Artifact is the metadata of a captured piece of evidence (a profile, a JFR
// recording, a kernel snapshot). Its bytes live in a content-addressed blob.
type Artifact struct {
	ID        string // opaque, URL-safe
	Kind      string // e.g. "jfr", "cpu", "kernel"
	MediaType string // e.g. "application/octet-stream", "application/vnd.google.protobuf+gzip"
	FileName  string // suggested download name
	SHA256    string // hex digest of the content (the blob's key)
	Size      int64
	Host      string
	Service   string
	PID       int64
	Start     int64 // window start, Unix ns
	End       int64 // window end, Unix ns
	Created   int64 // Unix ns
	Partial   bool  // the capture ended early (e.g. the target exited)
	CaptureID string
	// Attributes carry producer-specific facts (profiler overhead counters, errors).
	Attributes map[string]string
	// Spans are the spans this artifact explains.
	Spans []SpanRef
}

// ArtifactStore keeps artifacts: metadata, links to spans and content.
// Implementations MUST be safe for concurrent use.
type ArtifactStore interface {
	// PutArtifact stores content read from r under a fresh id and records meta
	// (ID, SHA256, Size and Created are filled in and returned). The artifact is
	// durable and linked to meta.Spans when it returns nil.
	PutArtifact(ctx context.Context, meta Artifact, r io.Reader) (Artifact, error)
	// LinkArtifact links an existing artifact to more spans.
	LinkArtifact(ctx context.Context, id string, spans []SpanRef) error
	// GetArtifact returns metadata, or ErrNotFound.
	GetArtifact(ctx context.Context, id string) (Artifact, error)
	// OpenArtifact returns metadata and the content; the caller closes it.
	OpenArtifact(ctx context.Context, id string) (Artifact, io.ReadCloser, error)
	// TraceArtifacts returns the artifacts linked to any span of the trace.
	TraceArtifacts(ctx context.Context, id model.TraceID) ([]Artifact, error)
}

// RetentionPolicy is tail sampling by age: traces with an anomalous or error
// span live longer than normal ones. Zero durations disable that rule. A
// trace's age runs from the latest RetentionTime of its spans.
type RetentionPolicy struct {
	Now       int64 // Unix ns; the reference time
	Normal    int64 // ns a normal trace is kept after its last span
	Anomalous int64 // ns a trace with an anomalous or error span is kept
	// MaxBytes caps the store's size: oldest normal traces go first, then the
	// oldest important ones. 0 disables the cap.
	MaxBytes int64
}

// PurgeStats reports what a purge removed.
type PurgeStats struct {
	Traces    int64
	Spans     int64
	Artifacts int64
	Bytes     int64 // blob bytes freed (orphan blobs included)
	// Services and Operations whose last span went.
	Services, Operations int64
	// OrphanBlobs is how many blobs no artifact named were deleted.
	OrphanBlobs int64
}

// Purger applies a retention policy. Deleting a trace deletes the artifacts
// no remaining span refers to, and services and operations left without
// spans disappear from GetServices and GetOperations. A purge also deletes
// blobs that no artifact names (a crash between a blob's Put and its row)
// once they are older than OrphanBlobGrace, so an upload in flight is never
// taken.
type Purger interface {
	Purge(ctx context.Context, p RetentionPolicy) (PurgeStats, error)
}

// OrphanBlobGrace is how old a blob no artifact names must be before a purge
// deletes it. An artifact's blob is written before its row; the grace covers
// the time between the two (an upload of a large recording, a slow commit).
const OrphanBlobGrace = 15 * time.Minute

// WriteProber is implemented by stores that can test, without storing
// anything a reader would see, whether a write would succeed now. The server
// uses it to find out that a store which answered ErrUnavailable can write
// again while no client is writing.
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// Store is everything the embedded server needs from its storage: what the
// factory package returns, whichever backends it combines.
type Store interface {
	SpanWriter
	SpanReader
	ArtifactStore
	MetricWriter
	MetricReader
	Purger
	io.Closer
}
