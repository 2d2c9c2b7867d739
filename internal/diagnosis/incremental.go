package diagnosis

import (
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// ArtifactChanges is an artifact store that remembers which traces' spans
// had artifacts stored or linked through it, so that the verdicts of an
// open incident keep the artifacts of its anomalies between them and read
// again only those of the traces that changed (VerdictState). Every writer
// of artifacts whose verdicts are kept this way MUST write through it (the
// server gives it to the capture manager and the critical-path runner).
// It is safe for concurrent use.
type ArtifactChanges struct {
	store.ArtifactStore

	mu  sync.Mutex
	seq uint64
	// changed holds each changed trace's last change; reset is the change
	// before which nothing is known (changed was cleared at it).
	changed map[model.TraceID]uint64
	reset   uint64
}

// maxChangedTraces bounds ArtifactChanges' memory: past it, it forgets and
// every kept artifact listing is read again once.
const maxChangedTraces = 200_000

// NewArtifactChanges wraps st.
func NewArtifactChanges(st store.ArtifactStore) *ArtifactChanges {
	return &ArtifactChanges{ArtifactStore: st, changed: map[model.TraceID]uint64{}}
}

// PutArtifact implements store.ArtifactStore.
func (c *ArtifactChanges) PutArtifact(ctx context.Context, meta store.Artifact, r io.Reader) (store.Artifact, error) {
	art, err := c.ArtifactStore.PutArtifact(ctx, meta, r)
	// Recorded after the write, failed or not (a failed write may have
	// linked some spans): a listing read before this point is stale.
	c.note(meta.Spans)
	return art, err
}

// LinkArtifact implements store.ArtifactStore.
func (c *ArtifactChanges) LinkArtifact(ctx context.Context, id string, spans []store.SpanRef) error {
	err := c.ArtifactStore.LinkArtifact(ctx, id, spans)
	c.note(spans)
	return err
}

// SpanArtifacts passes the wrapped store's cheaper listing on
// (store.SpanArtifacts).
func (c *ArtifactChanges) SpanArtifacts(ctx context.Context, id model.TraceID) (map[model.SpanID][]store.Artifact, error) {
	return store.SpanArtifacts(ctx, c.ArtifactStore, id)
}

func (c *ArtifactChanges) note(spans []store.SpanRef) {
	if len(spans) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if len(c.changed) >= maxChangedTraces {
		clear(c.changed)
		c.reset = c.seq
	}
	for _, r := range spans {
		c.changed[r.TraceID] = c.seq
	}
}

// mark returns the current change: a listing read after it is current until
// its trace changes (unchanged).
func (c *ArtifactChanges) mark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// unchanged reports whether no artifact of trace id was stored or linked
// after change at.
func (c *ArtifactChanges) unchanged(id model.TraceID, at uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reset <= at && c.changed[id] <= at
}

// VerdictState is what the verdicts of one incident keep between them
// (Diagnoser.DiagnoseWith): the traces before its onset, which do not
// change once their spans have arrived, and the artifacts linked to its
// anomalies' spans, listed per trace, which change only when an artifact
// is stored or linked (ArtifactChanges). Listing them was most of a
// verdict's cost: one store lookup per anomalous trace, up to 2,000. The
// verdict is the same as without them. It also remembers the traces whose
// critical paths gave a verdict its culprit's (paths): when the sample and
// the stored paths found through anomalies give fewer than MaxPaths, the
// next verdicts read those too, which a verdict from scratch cannot find.
// Not safe for concurrent use: one incident's verdicts are computed one at
// a time.
type VerdictState struct {
	// pre and early are the entry's traces before the onset and in the
	// incident's first analysis.ShiftSpan, once settled.
	pre, early settledTraces
	arts       map[model.TraceID]tracedArts
	// paths are the traces whose critical paths gave an earlier verdict
	// its culprit's (pathsOf), newest last: the sample of slow traces is
	// the newest MaxTraces, so a capture's traces leave it within seconds
	// at a high rate, and a span a verdict asked a capture of is no
	// anomaly the stored paths are found through.
	paths   []model.TraceID
	pathsOf string
	// metrics are the kernel's and the node's counters read so far, per
	// metric (incrementalMetrics).
	metrics map[string]*metricRead
}

// maxRemembered bounds VerdictState.paths, as a multiple of MaxPaths.
const maxRemembered = 4

// remembered returns the traces st holds for culprit.
func (st *VerdictState) remembered(culprit string) []model.TraceID {
	if st == nil || st.pathsOf != culprit {
		return nil
	}
	return st.paths
}

// remember records the traces that gave culprit's paths, keeping the newest
// limit.
func (st *VerdictState) remember(culprit string, ids []model.TraceID, limit int) {
	if st == nil || len(ids) == 0 {
		return
	}
	if st.pathsOf != culprit {
		st.paths, st.pathsOf = nil, culprit
	}
	for _, id := range ids {
		if i := slices.Index(st.paths, id); i >= 0 {
			st.paths = slices.Delete(st.paths, i, i+1)
		}
		st.paths = append(st.paths, id)
	}
	if n := len(st.paths) - limit; n > 0 {
		st.paths = slices.Delete(st.paths, 0, n)
	}
}

// settledTraces are an entry point's traces that started in [from, to),
// kept once no span of them can still be arriving.
type settledTraces struct {
	entry    string
	from, to int64
	traces   [][]*model.Span
	ok       bool
}

type tracedArts struct {
	at     uint64
	bySpan map[model.SpanID][]store.Artifact
}

// preSettle is how long after the end of a span of time the traces that
// started in it are kept: until then their last spans may still be
// arriving.
const preSettle = 30 * time.Second

// tracesIn returns the traces of entry that started in [from, to), from c
// when it holds them (nil c: none kept).
func (d *Diagnoser) tracesIn(ctx context.Context, entry string, from, to, now time.Time, c *settledTraces) ([][]*model.Span, error) {
	if c != nil && c.ok && c.entry == entry && c.from == from.UnixNano() && c.to == to.UnixNano() {
		return c.traces, nil
	}
	ts, err := d.Source.SearchTraces(ctx, entry, from, to.Add(-time.Nanosecond), d.Config.MaxTraces)
	if err != nil {
		return nil, err
	}
	if c != nil && now.Sub(to) >= preSettle && !holdsInFlight(ts) {
		*c = settledTraces{entry: entry, from: from.UnixNano(), to: to.UnixNano(), traces: ts, ok: true}
	}
	return ts, nil
}

// holdsInFlight reports whether a span of ts is a provisional copy of a
// request still open (model.AttrInFlight): its final copy is still to come,
// so the traces are not settled.
func holdsInFlight(ts [][]*model.Span) bool {
	for _, t := range ts {
		for _, s := range t {
			if s.InFlight() {
				return true
			}
		}
	}
	return false
}

// before returns the traces of inc's entry service that started in [from,
// start), from st when it holds them.
func (d *Diagnoser) before(ctx context.Context, inc *Incident, from, start, now time.Time, st *VerdictState) ([][]*model.Span, error) {
	var c *settledTraces
	if st != nil {
		c = &st.pre
	}
	return d.tracesIn(ctx, inc.EntryService, from, start, now, c)
}

// early returns the traces of inc's entry service that started in its
// first analysis.ShiftSpan, which the shift comparison reads
// (analysis.Window.Onset), when [start, to] extends past it (else the
// traces since the onset are those); from st when it holds them.
func (d *Diagnoser) early(ctx context.Context, inc *Incident, start, to, now time.Time, st *VerdictState) ([][]*model.Span, error) {
	end := start.Add(analysis.ShiftSpan)
	if !to.After(end) {
		return nil, nil
	}
	var c *settledTraces
	if st != nil {
		c = &st.early
	}
	return d.tracesIn(ctx, inc.EntryService, start, end, now, c)
}

// anomalies returns the anomalous spans that started at or after since,
// newest first, with their artifacts, as Source.Anomalies does, listing
// the artifacts of only the traces st does not hold current.
func (d *Diagnoser) anomalies(ctx context.Context, since time.Time, st *VerdictState) ([]analysis.Anomaly, error) {
	src, ok := d.Source.(*analysis.StoreSource)
	if st == nil || d.Changes == nil || !ok || src.Artifacts == nil {
		return d.Source.Anomalies(ctx, since, maxAnomalies)
	}
	spans, err := src.Spans.Anomalies(ctx, store.AnomalyQuery{Since: since.UnixNano(), Limit: maxAnomalies})
	if err != nil {
		return nil, err
	}
	if st.arts == nil {
		st.arts = map[model.TraceID]tracedArts{}
	}
	keep := make(map[model.TraceID]tracedArts, len(st.arts))
	out := make([]analysis.Anomaly, 0, len(spans))
	for _, sp := range spans {
		if sp == nil {
			continue
		}
		ta, ok := keep[sp.TraceID]
		if !ok {
			ta, ok = st.arts[sp.TraceID]
			if !ok || !d.Changes.unchanged(sp.TraceID, ta.at) {
				at := d.Changes.mark()
				bySpan, err := store.SpanArtifacts(ctx, src.Artifacts, sp.TraceID)
				if err != nil {
					return nil, err
				}
				ta = tracedArts{at: at, bySpan: bySpan}
			}
			keep[sp.TraceID] = ta
		}
		out = append(out, analysis.Anomaly{Span: sp, Artifacts: ta.bySpan[sp.SpanID]})
	}
	// Only the traces of this verdict's anomalies are kept: the state is as
	// large as one verdict's reads.
	st.arts = keep
	return out, nil
}
