// Package analysis decides which service caused a slowdown and why, from
// Rootline's stored spans and the evidence captured for them. It works on
// model spans and artifact metadata, reads artifacts' contents through an
// interface, and returns a Verdict; the server's API, `rootline analyze` and
// `rootline demo` are its callers, each reading through its own Source.
//
// A diagnosis has two steps. Collect reads a time window: the anomalous
// spans with their artifacts, and the traces of the window's entry service
// sampled evenly over time. Analyze splits those traces into slow and
// baseline ones at the onset of the anomalies, ranks the services by how
// much their time per trace grew, and names the culprit's cause from which
// of its times grew. When its own (exclusive) time grew, an Explainer
// measures where its slow spans spent that time (Profiles reads the CPU and
// lock samples of the profiles captured for them) and the cause follows
// from the Breakdown it returns.
package analysis

import (
	"context"
	"io"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Causes a Verdict can name.
const (
	// CauseCPU: the culprit's own time grew and its request threads were on
	// CPU for most of it (captured CPU samples).
	CauseCPU = "cpu"
	// CauseRunQueue: the culprit's threads waited for a CPU
	// (rootline.wait.local_ms grew): a CPU quota, a noisy neighbour.
	CauseRunQueue = "run-queue"
	// CauseNetwork: calls into the culprit took longer than the culprit
	// itself did (rootline.wait.net_ms / client-span time beyond the server span).
	CauseNetwork = "network"
	// CauseBlocking: the culprit's own time grew while its threads were mostly
	// off CPU and not runnable: a lock, sleep, disk or GC pause.
	CauseBlocking = "lock/blocking"
	// CauseSelfTime: the culprit's own time grew but no CPU samples were
	// captured to tell CPU from blocking.
	CauseSelfTime = "self-time"
	// CauseNone: nothing to explain (no slow traces in the window).
	CauseNone = "none"
)

// Verdict is the diagnosis of a slowdown.
type Verdict struct {
	// Service is the culprit ("" when there was nothing to explain).
	Service string `json:"service"`
	// Cause is one of the Cause* constants.
	Cause string `json:"cause"`
	// Confidence in [0, 1]: how clearly the culprit stands out, scaled down
	// when few slow or baseline traces were seen.
	Confidence float64 `json:"confidence"`
	// Evidence are human-readable facts behind the verdict.
	Evidence []string `json:"evidence"`
	// Artifacts counts, by kind, the captured artifacts linked to the
	// culprit's anomalous spans.
	Artifacts map[string]int `json:"artifacts,omitempty"`
	// Ranking lists every service, most suspect first.
	Ranking []ServiceScore `json:"ranking"`
	// SlowTraces and BaseTraces are the traces compared; ExampleTraceID is a
	// slow trace through the culprit.
	SlowTraces     int    `json:"slowTraces"`
	BaseTraces     int    `json:"baseTraces"`
	ExampleTraceID string `json:"exampleTraceId,omitempty"`
}

// ServiceScore is one service's share of the slowdown, per trace, in
// milliseconds: how much more time slow traces spent in it than baseline
// traces did.
type ServiceScore struct {
	Service string `json:"service"`
	// Score = SelfDeltaMs + NetDeltaMs.
	Score float64 `json:"score"`
	// SelfDeltaMs is the growth of the service's exclusive time (its spans'
	// durations minus the time covered by their children).
	SelfDeltaMs float64 `json:"selfDeltaMs"`
	SelfSlowMs  float64 `json:"selfSlowMs"`
	SelfBaseMs  float64 `json:"selfBaseMs"`
	// NetDeltaMs is the growth of the time calls into the service spent
	// outside it (network, proxies).
	NetDeltaMs float64 `json:"netDeltaMs"`
	// LocalDeltaMs is the growth of its run-queue wait (rootline.wait.local_ms).
	LocalDeltaMs float64 `json:"localDeltaMs"`
	// Anomalies counts its anomalous spans in the slow traces.
	Anomalies int `json:"anomalies"`
}

// Anomaly is an anomalous span with the metadata of the artifacts captured
// for it, in the order the store links them.
type Anomaly struct {
	Span      *model.Span
	Artifacts []store.Artifact
}

// Capture is an entry of the server's capture log, as far as a diagnosis
// reads it: whether the evidence of a service's anomalies was captured, and
// why not.
type Capture struct {
	Service string    `json:"service"`
	State   string    `json:"state"` // the capture log's states: pending, requested, complete, partial, failed…
	Error   string    `json:"error"`
	Created time.Time `json:"created"`
}

// ArtifactReader reads captured artifacts' contents.
type ArtifactReader interface {
	// ArtifactContent returns the content of artifact id; the caller closes
	// it. An unknown id gives an error wrapping store.ErrNotFound.
	ArtifactContent(ctx context.Context, id string) (io.ReadCloser, error)
}

// Source is what a diagnosis reads: stored spans, the artifacts linked to
// anomalous spans, the capture log and artifacts' contents. StoreSource
// reads a store directly; a client of the query API implements it over
// HTTP.
//
// Diagnose calls a Source from one goroutine, one call at a time. Returned
// slices and spans belong to the caller, which does not modify them.
type Source interface {
	ArtifactReader
	// Anomalies returns up to limit anomalous spans that started at or after
	// since, newest first, each with the metadata of the artifacts linked to
	// it (at least their ID, Kind and MediaType).
	Anomalies(ctx context.Context, since time.Time, limit int) ([]Anomaly, error)
	// Trace returns the spans of a trace, or an error wrapping
	// store.ErrNotFound when there is none.
	Trace(ctx context.Context, id model.TraceID) ([]*model.Span, error)
	// Services returns the names of the services that have spans.
	Services(ctx context.Context) ([]string, error)
	// SearchTraces returns up to limit complete traces with a span of
	// service that started in [from, to], newest first.
	SearchTraces(ctx context.Context, service string, from, to time.Time, limit int) ([][]*model.Span, error)
	// Captures returns up to limit entries of the capture log, newest first;
	// none where there is no capture log (an offline data directory).
	Captures(ctx context.Context, limit int) ([]Capture, error)
}

// Diagnose decides which service caused the slowdown seen between from and
// to, and why, from what src holds: Collect, then Analyze with the profiles
// captured for the culprit's slow spans (Profiles). The error is src's; a
// window with nothing to compare is a Verdict with CauseNone that says why.
func Diagnose(ctx context.Context, src Source, from, to time.Time) (Verdict, error) {
	return DiagnoseSince(ctx, src, from, time.Time{}, to)
}

// DiagnoseSince is Diagnose of a slowdown known to have begun at onset (a
// fault injected then): the window's traces since it are compared with those
// before it (Window.Onset). A zero onset is Diagnose.
func DiagnoseSince(ctx context.Context, src Source, from, onset, to time.Time) (Verdict, error) {
	w, err := Collect(ctx, src, from, to)
	if err != nil {
		return Verdict{Cause: CauseNone}, err
	}
	w.Onset = onset
	return Analyze(ctx, w, &Profiles{Reader: src}), nil
}
