package critpath

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/goroutine"
	"github.com/rootline/rootline/internal/profiler/jfr"
	"github.com/rootline/rootline/internal/profiler/kernel"
	"github.com/rootline/rootline/internal/store"
)

// Artifact kinds and media types the store-backed analysis reads and writes.
const (
	// KernelKind is the kind of a kernel snapshot artifact (MediaType, or
	// MediaTypeJSON for one stored before the binary format).
	KernelKind = "kernel"
	// ArtifactKind is the kind of the stored critical paths of a capture:
	// a gzipped Stored document, linked to the spans whose paths it holds.
	ArtifactKind = "critical-path"
	// ArtifactMediaType is its media type.
	ArtifactMediaType = "application/vnd.rootline.critical-path+json+gzip"
	// jfrMediaType is the media type of a JFR recording artifact.
	jfrMediaType = "application/x-jfr"
)

// StoredVersion is the version of the Stored document.
const StoredVersion = 1

// Stored is the document of a "critical-path" artifact: the paths computed
// from one kernel snapshot for the spans its capture explains.
type Stored struct {
	Version int `json:"version"`
	// Snapshot is the id of the kernel artifact the paths come from.
	Snapshot string       `json:"snapshot"`
	Paths    []SpanPath   `json:"paths"`
	Shared   []SharedJSON `json:"shared"`
	Notes    []string     `json:"notes,omitempty"`
}

// Analyzer computes critical paths from what a store holds: kernel
// snapshots, the spans linked to them and the other spans of their
// processes in their windows, and the JFR recordings of the same capture.
// It is safe for concurrent use.
type Analyzer struct {
	Spans     store.SpanReader
	Artifacts store.ArtifactStore
	Config    Config
	// MaxTraces bounds the traces read per process of a snapshot for the
	// thread ↔ request association (default 5,000): the other requests a
	// path may run through. Past it the association misses the oldest.
	MaxTraces int
	// MaxProcesses bounds the processes of a snapshot whose spans are read
	// (default 16; target processes first).
	MaxProcesses int
	// MaxWindowPaths bounds the paths Capture computes beyond the spans the
	// snapshot is linked to (default DefaultMaxWindowPaths; negative: none):
	// the other spans of the snapshot's own processes that ran inside its
	// window, slower than the median of their operation's spans read, the
	// slowest first (windowSpans). A capture is taken for the spans that
	// triggered it, but the slow requests the detector did not flag, or
	// whose own capture the budget skipped, ran on the same threads in the
	// same window: their paths cost an analysis each and no more kernel data.
	MaxWindowPaths int
	// MaxLinkedPaths bounds the paths computed for the spans a snapshot is
	// linked to (default DefaultMaxLinkedPaths; pickLinked: the snapshot's
	// own processes' spans first, then the slowest). Under a fault
	// a capture's window holds hundreds of anomalous spans of one service,
	// whose paths say much the same.
	MaxLinkedPaths int
	// BaselinePaths bounds the paths Capture computes for the normal
	// requests of the snapshot's own processes in its window (default
	// DefaultBaselinePaths; negative: none; baselineSpans): what a
	// diagnosis weighs the slow ones against.
	BaselinePaths int
	// Slots, when set, bounds the snapshots analysed at once (a large
	// snapshot takes seconds of CPU and hundreds of MB): compute takes a
	// slot, waiting for one at most as long as its context allows. Reading
	// stored paths needs none.
	Slots chan struct{}
	// Cache, when set, keeps the stored documents read (StoredCache): a
	// trace's paths read again read no artifact.
	Cache *StoredCache
	// Logger may be nil.
	Logger *slog.Logger
}

// Sentinel errors of the store-backed analysis.
var (
	// ErrNoSnapshot: the trace has no kernel snapshot linked to it.
	ErrNoSnapshot = errors.New("no kernel snapshot is linked to the trace")
)

// maxArtifactBytes bounds an artifact read into memory (a snapshot is
// compressed; Decode bounds what it decompresses to).
const maxArtifactBytes = 1 << 30

// DefaultMaxWindowPaths is Analyzer.MaxWindowPaths' default.
const DefaultMaxWindowPaths = 64

// DefaultBaselinePaths is Analyzer.BaselinePaths' default.
const DefaultBaselinePaths = 16

// spanLookback is how long before a snapshot's window the spans still
// active in it may have started; of those that started more than
// recentLookback before it, only the ones that lasted longer than that can
// reach into it, and the window reads only those (at 15 requests a second
// the whole minute before a window is ~900 traces, most of a snapshot's
// analysis).
const (
	spanLookback   = int64(60e9)
	recentLookback = int64(5e9)
)

func (a *Analyzer) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}

// Trace returns the critical paths of the spans of a trace that are linked
// to a kernel snapshot or to its stored paths: those stored when their
// capture completed (for the spans that triggered it and the slow others of
// its processes in its window), and, for a snapshot without stored paths,
// computed now. It returns an error wrapping store.ErrNotFound for an
// unknown trace and ErrNoSnapshot when neither is linked to it.
func (a *Analyzer) Trace(ctx context.Context, id model.TraceID) (*TraceResult, error) {
	bySpan, err := store.SpanArtifacts(ctx, a.Artifacts, id)
	if err != nil {
		return nil, err
	}
	return a.TraceOf(ctx, id, bySpan)
}

// TraceOf is Trace for a caller that listed the trace's artifacts by span
// already (store.SpanArtifacts). The listing leaves out the artifacts' links
// to other traces: a kernel snapshot whose paths are computed here is read
// again whole.
func (a *Analyzer) TraceOf(ctx context.Context, id model.TraceID, bySpan map[model.SpanID][]store.Artifact) (*TraceResult, error) {
	spans, err := a.Spans.GetTrace(ctx, id)
	if err != nil {
		return nil, err
	}
	arts := listed(bySpan)
	res := &TraceResult{TraceID: id.String(), Spans: []SpanPath{}, Shared: []SharedJSON{}}
	covered := map[string]bool{}
	var kernels []store.Artifact
	for _, art := range arts {
		if IsSnapshot(art.Kind, art.MediaType) {
			kernels = append(kernels, art)
		}
	}
	// A span that ran in a capture's window without triggering it is
	// linked to the capture's stored paths only (Capture's window paths).
	if len(kernels) == 0 && !slices.ContainsFunc(arts, func(a store.Artifact) bool { return a.Kind == ArtifactKind }) {
		return nil, ErrNoSnapshot
	}
	var stored []*Stored
	for _, art := range arts {
		if art.Kind != ArtifactKind {
			continue
		}
		st, err := a.readStored(ctx, art.ID)
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("stored critical paths %s unreadable: %v", art.ID, err))
			continue
		}
		covered[st.Snapshot] = true
		stored = append(stored, st)
	}
	inTrace := map[model.SpanID]bool{}
	for _, s := range spans {
		inTrace[s.SpanID] = true
	}
	for _, k := range kernels {
		if covered[k.ID] {
			continue
		}
		// The snapshot's links, for the spans of this trace and for the
		// JFR recordings of its capture (pauses).
		full, err := a.Artifacts.GetArtifact(ctx, k.ID)
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("kernel snapshot %s: %v", k.ID, err))
			continue
		}
		k = full
		var refs []store.SpanRef
		for _, r := range k.Spans {
			if r.TraceID == id {
				refs = append(refs, r)
			}
		}
		st, err := a.compute(ctx, k, refs, spans, 0)
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("kernel snapshot %s: %v", k.ID, err))
			continue
		}
		stored = append(stored, st)
	}
	best := map[string]SpanPath{}
	for _, st := range stored {
		for _, p := range st.Paths {
			if p.TraceID != res.TraceID {
				continue
			}
			// A span linked to several snapshots (coalesced captures,
			// replicas) keeps the path the kernel saw most of.
			if old, ok := best[p.SpanID]; !ok || p.States[Unknown] < old.States[Unknown] {
				best[p.SpanID] = p
			}
		}
		for _, sh := range st.Shared {
			if slices.ContainsFunc(sh.Spans, func(r RequestRef) bool { return r.TraceID == res.TraceID }) {
				res.Shared = append(res.Shared, sh)
			}
		}
		for _, n := range st.Notes {
			if strings.Contains(n, res.TraceID) || !strings.Contains(n, "span ") {
				res.Notes = append(res.Notes, n)
			}
		}
	}
	for _, p := range best {
		res.Spans = append(res.Spans, p)
	}
	slices.SortFunc(res.Spans, func(x, y SpanPath) int {
		if c := cmp.Compare(x.Start, y.Start); c != 0 {
			return c
		}
		return strings.Compare(x.SpanID, y.SpanID)
	})
	return res, nil
}

// Capture computes the critical paths of the spans a kernel snapshot is
// linked to (the anomalous spans of its capture), and of up to
// MaxWindowPaths other slow spans of its processes inside its window, and
// stores them as a "critical-path" artifact of the same capture, linked to
// the spans that have a path. It returns the stored document.
func (a *Analyzer) Capture(ctx context.Context, kernelID string) (*Stored, error) {
	k, err := a.Artifacts.GetArtifact(ctx, kernelID)
	if err != nil {
		return nil, err
	}
	if !IsSnapshot(k.Kind, k.MediaType) {
		return nil, fmt.Errorf("artifact %s is a %s (%s), not a kernel snapshot", kernelID, k.Kind, k.MediaType)
	}
	st, err := a.compute(ctx, k, k.Spans, nil, a.maxWindowPaths())
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(append(doc, '\n')); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	var linked []store.SpanRef
	for _, p := range st.Paths {
		tr, err1 := model.ParseTraceID(p.TraceID)
		sp, err2 := model.ParseSpanID(p.SpanID)
		if err1 == nil && err2 == nil {
			linked = append(linked, store.SpanRef{TraceID: tr, SpanID: sp})
		}
	}
	if len(linked) == 0 {
		// Linked to the snapshot's spans all the same, so that the notes
		// saying why none has a path are found with them.
		linked = k.Spans
	}
	meta := store.Artifact{
		Kind: ArtifactKind, MediaType: ArtifactMediaType, FileName: strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(k.FileName, kernel.FileExt), ".gz"), ".json") + ".critical-path.json.gz",
		Host: k.Host, Service: k.Service, PID: k.PID, Start: k.Start, End: k.End, Partial: k.Partial, CaptureID: k.CaptureID,
		Attributes: map[string]string{"snapshot": k.ID, "paths": strconv.Itoa(len(st.Paths))},
		Spans:      linked,
	}
	art, err := a.Artifacts.PutArtifact(ctx, meta, &buf)
	if err != nil {
		return nil, fmt.Errorf("store critical paths: %w", err)
	}
	// What reads the paths next (the verdicts) finds them decoded, as
	// from the artifact (nil and empty lists alike).
	if a.Cache != nil {
		var dec Stored
		if json.Unmarshal(doc, &dec) == nil {
			a.Cache.Add(art.ID, &dec, int64(len(doc)+1))
		}
	}
	return st, nil
}

// listed returns the artifacts of a listing by span once each, in the
// order the store lists a trace's artifacts (TraceArtifacts: created, id).
func listed(bySpan map[model.SpanID][]store.Artifact) []store.Artifact {
	var arts []store.Artifact
	seen := map[string]bool{}
	for _, list := range bySpan {
		for _, art := range list {
			if !seen[art.ID] {
				seen[art.ID] = true
				arts = append(arts, art)
			}
		}
	}
	slices.SortFunc(arts, func(x, y store.Artifact) int {
		return cmp.Or(cmp.Compare(x.Created, y.Created), strings.Compare(x.ID, y.ID))
	})
	return arts
}

func (a *Analyzer) readStored(ctx context.Context, id string) (*Stored, error) {
	if st, _, ok := a.Cache.Get(id); ok {
		return st, nil
	}
	data, err := a.read(ctx, id)
	if err != nil {
		return nil, err
	}
	st, size, err := DecodeStored(bytes.NewReader(data), maxArtifactBytes)
	if err != nil {
		return nil, err
	}
	a.Cache.Add(id, st, size)
	return st, nil
}

// ErrStoredTooLarge: a stored document inflates to more than the bound its
// reader set.
var ErrStoredTooLarge = errors.New("stored critical paths inflate beyond the bound")

// ErrStoredVersion: a stored document of a version this build does not
// read.
var ErrStoredVersion = errors.New("a version this build does not read")

// DecodeStored decodes a "critical-path" artifact's content (a gzipped
// Stored document) inflating at most maxBytes, and returns it with the
// size of its JSON.
func DecodeStored(r io.Reader, maxBytes int64) (*Stored, int64, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, 0, err
	}
	lr := &io.LimitedReader{R: zr, N: maxBytes + 1}
	var st Stored
	if err := json.NewDecoder(lr).Decode(&st); err != nil {
		if lr.N <= 0 {
			return nil, 0, fmt.Errorf("%w: larger than %d bytes inflated", ErrStoredTooLarge, maxBytes)
		}
		return nil, 0, err
	}
	if st.Version != StoredVersion {
		return nil, 0, fmt.Errorf("%w: version %d (this build reads %d)", ErrStoredVersion, st.Version, StoredVersion)
	}
	return &st, maxBytes + 1 - lr.N, nil
}

// read returns an artifact's content, bounded.
func (a *Analyzer) read(ctx context.Context, id string) ([]byte, error) {
	_, rc, err := a.Artifacts.OpenArtifact(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxArtifactBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxArtifactBytes {
		return nil, fmt.Errorf("artifact %s is larger than %d bytes", id, maxArtifactBytes)
	}
	return data, nil
}

func (a *Analyzer) maxLinkedPaths() int { return cmp.Or(a.MaxLinkedPaths, DefaultMaxLinkedPaths) }

func (a *Analyzer) baselinePaths() int {
	if a.BaselinePaths < 0 {
		return 0
	}
	return cmp.Or(a.BaselinePaths, DefaultBaselinePaths)
}

func (a *Analyzer) maxWindowPaths() int {
	if a.MaxWindowPaths < 0 {
		return 0
	}
	return cmp.Or(a.MaxWindowPaths, DefaultMaxWindowPaths)
}

// compute computes the paths of the spans refs from kernel snapshot k, and
// of at most more others of the snapshot's processes in its window
// (windowSpans). known are spans already read (the trace's), to save a
// lookup.
func (a *Analyzer) compute(ctx context.Context, k store.Artifact, refs []store.SpanRef, known []*model.Span, more int) (*Stored, error) {
	if a.Slots != nil {
		select {
		case a.Slots <- struct{}{}:
			defer func() { <-a.Slots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	log := a.logger()
	data, err := a.read(ctx, k.ID)
	if err != nil {
		return nil, err
	}
	tl, err := DecodeBytes(data)
	data = nil
	if err != nil {
		return nil, err
	}
	st := &Stored{Version: StoredVersion, Snapshot: k.ID, Paths: []SpanPath{}, Shared: []SharedJSON{}}
	if tl.Lost > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("the kernel recorder dropped %d records during the window of snapshot %s: paths may be wrong where they fell", tl.Lost, k.ID))
	}

	// Every span known to have run on the snapshot's processes in its
	// window: the targets' traces, then each process's spans.
	spans := map[spanKey]*model.Span{}
	add := func(s *model.Span) {
		if k.Host != "" {
			if h, ok := s.ResourceAttr(model.AttrHostName); ok && h.String() != "" && h.String() != k.Host {
				return // the same pid on another host
			}
		}
		spans[spanKey{s.TraceID, s.SpanID}] = s
	}
	// read are the traces whose spans are in spans: a trace is read once,
	// though it runs through several of the snapshot's processes.
	read := map[model.TraceID]bool{}
	for _, s := range known {
		add(s)
		read[s.TraceID] = true
	}
	getTrace := func(id model.TraceID) error {
		ts, err := a.Spans.GetTrace(ctx, id)
		read[id] = true
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, s := range ts {
			add(s)
		}
		return nil
	}
	maxTraces := cmp.Or(a.MaxTraces, 5000)
	pids := tl.PIDs()
	if n := cmp.Or(a.MaxProcesses, 16); len(pids) > n {
		st.Notes = append(st.Notes, fmt.Sprintf("the spans of %d of the snapshot's %d processes were not read", len(pids)-n, len(pids)))
		pids = pids[:n]
	}
	win, err := a.window(ctx, tl.Start-spanLookback, tl.Start-recentLookback, tl.End, pids, maxTraces)
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		if read[r.TraceID] {
			continue
		}
		if tr := win.all[r.TraceID]; tr != nil {
			for _, s := range tr {
				add(s)
			}
			read[r.TraceID] = true
			continue
		}
		if err := getTrace(r.TraceID); err != nil {
			return nil, err
		}
	}
	for _, pid := range pids {
		if win.complete {
			found := win.byPID[pid]
			if len(found) == maxTraces {
				st.Notes = append(st.Notes, fmt.Sprintf("process %d had more than %d traces in the window: the oldest are not in the association", pid, maxTraces))
			}
			for _, tr := range found {
				if !read[tr[0].TraceID] {
					for _, s := range tr {
						add(s)
					}
					read[tr[0].TraceID] = true
				}
			}
			continue
		}
		q := store.TraceQuery{Tags: map[string]string{model.AttrProcessPID: strconv.FormatUint(uint64(pid), 10)},
			StartMin: tl.Start - spanLookback, StartMax: tl.End, Limit: maxTraces}
		ids, err := a.Spans.FindTraceIDs(ctx, q)
		if err != nil {
			return nil, err
		}
		if len(ids) == maxTraces {
			st.Notes = append(st.Notes, fmt.Sprintf("process %d had more than %d traces in the window: the oldest are not in the association", pid, maxTraces))
		}
		// A request runs through most of a mesh's processes: after the
		// first, a process's traces were mostly read already.
		var unread []model.TraceID
		for _, id := range ids {
			if !read[id] {
				unread = append(unread, id)
			}
		}
		if len(unread) > 16 && len(unread)*4 > len(ids) {
			// Many: in one read.
			found, err := a.Spans.FindTraces(ctx, q)
			if err != nil {
				return nil, err
			}
			for _, tr := range found {
				for _, s := range tr {
					add(s)
					read[s.TraceID] = true
				}
			}
			unread = slices.DeleteFunc(unread, func(id model.TraceID) bool { return read[id] })
		}
		for _, id := range unread {
			if err := getTrace(id); err != nil {
				return nil, err
			}
		}
	}
	in := Input{Timeline: tl}
	index := map[spanKey]int{}
	type keyed struct {
		key  spanKey
		span *model.Span
	}
	list := make([]keyed, 0, len(spans))
	for key, s := range spans {
		list = append(list, keyed{key, s})
	}
	// A fixed order: Algorithm 1 breaks ties by it.
	slices.SortFunc(list, func(x, y keyed) int {
		if c := cmp.Compare(x.span.Start, y.span.Start); c != 0 {
			return c
		}
		if c := bytes.Compare(x.key.trace[:], y.key.trace[:]); c != 0 {
			return c
		}
		return bytes.Compare(x.key.span[:], y.key.span[:])
	})
	for _, e := range list {
		if r, ok := RequestFromSpan(e.span); ok {
			index[e.key] = len(in.Requests)
			in.Requests = append(in.Requests, r)
		}
	}
	in.Pauses, in.Goroutines = a.runtimeEvents(ctx, k, st)
	an := New(in, a.Config)
	var paths []Path
	path := func(i int) {
		p := an.Path(i)
		paths = append(paths, p)
		sp := an.JSON(&p)
		sp.Snapshot = k.ID
		sp.bound()
		st.Paths = append(st.Paths, sp)
	}
	var unnamed noteCounter
	var wanted []int // in.Requests of refs that get a path
	for _, ref := range refs {
		key := spanKey{ref.TraceID, ref.SpanID}
		i, ok := index[key]
		s := spans[key]
		switch {
		case s == nil:
			st.Notes = append(st.Notes, fmt.Sprintf("span %s of trace %s is not in the store", ref.SpanID, ref.TraceID))
			continue
		case !ok:
			unnamed.add(fmt.Sprintf("span %s of trace %s (%s %s)", ref.SpanID, ref.TraceID, s.Service, s.Name))
			continue
		}
		r := &in.Requests[i]
		if !an.seen(r) {
			st.Notes = append(st.Notes, fmt.Sprintf("span %s of trace %s (%s %s): snapshot %s has no record of its threads while it ran (not recorded, or evicted before the capture was taken: the snapshot's records start %s after its window does)",
				ref.SpanID, ref.TraceID, s.Service, s.Name, k.ID, time.Duration(max(tl.firstRecord()-tl.Start, 0)).Round(time.Millisecond)))
			continue
		}
		wanted = append(wanted, i)
	}
	if n := unnamed.note("spans say neither their process nor their threads (process.pid, thread.id or rootline.thread.ids)"); n != "" {
		if unnamed.n == 1 {
			n += " says neither its process nor its threads (process.pid, thread.id or rootline.thread.ids)"
		}
		st.Notes = append(st.Notes, n)
	}
	if limit := a.maxLinkedPaths(); len(wanted) > limit {
		st.Notes = append(st.Notes, fmt.Sprintf("%d of the snapshot's %d spans with records got a path (Analyzer.MaxLinkedPaths): its own processes' first, the slowest", limit, len(wanted)))
		wanted = pickLinked(in.Requests, wanted, tl.targetPIDs(), limit)
	}
	for _, i := range wanted {
		path(i)
	}
	linked := len(st.Paths)
	for _, i := range windowSpans(in.Requests, refs, tl, more) {
		if an.seen(&in.Requests[i]) {
			path(i)
		}
	}
	if more > 0 {
		for _, i := range baselineSpans(in.Requests, refs, tl, a.baselinePaths()) {
			if an.seen(&in.Requests[i]) {
				path(i)
			}
		}
	}
	st.Shared = boundShared(an.SharedJSON(Merge(paths)))
	st.Notes = boundNotes(st.Notes)
	log.Debug("critical paths computed", "snapshot", k.ID, "paths", len(st.Paths), "linked", linked, "window", len(st.Paths)-linked,
		"requests", len(in.Requests), "intervals", tl.Intervals())
	return st, nil
}

// pickLinked picks limit of the requests wanted (indexes into reqs): those
// of the snapshot's own processes (targets) first — the capture was taken
// for them, and the kernel recorded their threads whole — then the others
// (a caller's span holds the callee's time, and would crowd its paths out),
// the slowest first within each. It returns them in the association's order.
func pickLinked(reqs []Request, wanted []int, targets map[uint32]bool, limit int) []int {
	if len(wanted) <= limit {
		return wanted
	}
	by := slices.Clone(wanted)
	slices.SortStableFunc(by, func(x, y int) int {
		rx, ry := &reqs[x], &reqs[y]
		if tx, ty := targets[rx.PID], targets[ry.PID]; tx != ty {
			if tx {
				return -1
			}
			return 1
		}
		return cmp.Compare(ry.End-ry.Start, rx.End-rx.Start)
	})
	by = by[:limit]
	slices.Sort(by)
	return by
}

// windowSpans picks, among reqs (in the association's order), the requests
// whose paths a snapshot gives beyond refs: those of the snapshot's own
// processes (its target threads') that ran inside its window, so that the
// kernel saw all of their time, and are not CLIENT spans (a call's time is
// its callee's), slower than the median of their service and operation over
// all of reqs (which reach back spanLookback before the window, before a
// slowdown in it), the slowest first, at most n. It returns their indexes.
func windowSpans(reqs []Request, refs []store.SpanRef, tl *Timeline, n int) []int {
	out := windowCandidates(reqs, refs, tl, func(d, median int64) bool { return d > median })
	// Stable: among equal durations the association's order (start, ids).
	slices.SortStableFunc(out, func(x, y int) int {
		return cmp.Compare(reqs[y].End-reqs[y].Start, reqs[x].End-reqs[x].Start)
	})
	return out[:min(min(len(out), n), max(n, 0))]
}

// baselineSpans picks, as windowSpans does, the requests of the snapshot's
// own processes inside its window no slower than the median of their
// operation, the earliest first (before the slowdown that triggered the
// capture, when its window reaches back before it), at most n: a baseline
// of the same threads' normal requests, against which a diagnosis weighs
// what grew in the slow ones.
func baselineSpans(reqs []Request, refs []store.SpanRef, tl *Timeline, n int) []int {
	out := windowCandidates(reqs, refs, tl, func(d, median int64) bool { return d <= median })
	return out[:min(min(len(out), n), max(n, 0))] // the association's order is by start
}

// windowCandidates are the indexes, in reqs' order, of the requests of the
// snapshot's own processes that ran inside its window, are not CLIENT spans
// nor in refs, and whose duration keep accepts beside the median of their
// service and operation over all of reqs.
func windowCandidates(reqs []Request, refs []store.SpanRef, tl *Timeline, keep func(d, median int64) bool) []int {
	targets := tl.targetPIDs()
	linked := make(map[spanKey]bool, len(refs))
	for _, r := range refs {
		linked[spanKey{r.TraceID, r.SpanID}] = true
	}
	type op struct{ service, name string }
	durs := map[op][]int64{}
	for i := range reqs {
		r := &reqs[i]
		if !r.Client {
			o := op{r.Service, r.Operation}
			durs[o] = append(durs[o], r.End-r.Start)
		}
	}
	median := make(map[op]int64, len(durs))
	for o, ds := range durs {
		slices.Sort(ds)
		median[o] = ds[len(ds)/2]
	}
	var out []int
	for i := range reqs {
		r := &reqs[i]
		if r.Client || !targets[r.PID] || r.Start < tl.Start || r.End > tl.End || linked[spanKey{r.TraceID, r.SpanID}] ||
			!keep(r.End-r.Start, median[op{r.Service, r.Operation}]) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// windowed are the traces of a snapshot's window: all of them by id, and
// those of each process as a search by process.pid would find them.
type windowed struct {
	// complete: every trace with a span starting in the window was read
	// (fewer than the limit); else the searches are left to the caller.
	complete bool
	all      map[model.TraceID][]*model.Span
	byPID    map[uint32][][]*model.Span
}

// window reads once every trace with a span starting in [recent, to] or
// starting in [from, recent) and lasting at least recentLookback (Capture
// passes recent = the snapshot's start − recentLookback: an earlier span
// reaches into the snapshot only if it lasted longer), and finds each
// process's among them as the store's search by tag would (such a span
// whose process.pid, its own attribute or its resource's, names the
// process; newest such span first; at most limit per process). One search
// per process scanned every span of the window and decoded each trace once
// per process it ran through: in a mesh, most of them. Past limit traces in
// the window it reads nothing and says so.
func (a *Analyzer) window(ctx context.Context, from, recent, to int64, pids []uint32, limit int) (windowed, error) {
	all, err := a.Spans.FindTraces(ctx, store.TraceQuery{StartMin: recent, StartMax: to, Limit: limit})
	if err != nil || len(all) >= limit {
		return windowed{}, err
	}
	if from < recent {
		long, err := a.Spans.FindTraces(ctx, store.TraceQuery{StartMin: from, StartMax: recent - 1, DurationMin: recentLookback, Limit: limit})
		if err != nil {
			return windowed{}, err
		}
		seen := make(map[model.TraceID]bool, len(all))
		for _, tr := range all {
			if len(tr) > 0 {
				seen[tr[0].TraceID] = true
			}
		}
		for _, tr := range long {
			if len(tr) > 0 && !seen[tr[0].TraceID] {
				all = append(all, tr)
			}
		}
		if len(all) >= limit {
			return windowed{}, nil
		}
	}
	// in reports whether s is one the window reads.
	in := func(s *model.Span) bool {
		return s.Start >= recent && s.Start <= to || s.Start >= from && s.Start < recent && s.Duration >= recentLookback
	}
	want := make(map[string]uint32, len(pids))
	for _, pid := range pids {
		want[strconv.FormatUint(uint64(pid), 10)] = pid
	}
	type match struct {
		trace []*model.Span
		start int64
	}
	w := windowed{complete: true, all: make(map[model.TraceID][]*model.Span, len(all)), byPID: map[uint32][][]*model.Span{}}
	matches := map[uint32][]match{}
	newest := map[uint32]int64{}
	for _, tr := range all {
		if len(tr) == 0 {
			continue
		}
		w.all[tr[0].TraceID] = tr
		clear(newest)
		for _, s := range tr {
			if !in(s) {
				continue
			}
			for _, kvs := range [][]model.KeyValue{s.Attributes, s.Resource} {
				for i := range kvs {
					if kvs[i].Key != model.AttrProcessPID {
						continue
					}
					if pid, ok := want[kvs[i].Value.String()]; ok {
						if cur, seen := newest[pid]; !seen || s.Start > cur {
							newest[pid] = s.Start
						}
					}
				}
			}
		}
		for pid, start := range newest {
			matches[pid] = append(matches[pid], match{tr, start})
		}
	}
	for pid, ms := range matches {
		slices.SortFunc(ms, func(x, y match) int {
			return cmp.Or(cmp.Compare(y.start, x.start), bytes.Compare(x.trace[0].TraceID[:], y.trace[0].TraceID[:]))
		})
		for _, m := range ms[:min(len(ms), limit)] {
			w.byPID[pid] = append(w.byPID[pid], m.trace)
		}
	}
	return w, nil
}

// seen reports whether any of r's threads has intervals in the timeline
// while r was active on it. A snapshot taken after the recorder evicted the
// span's time holds the thread's later intervals only: its path would be
// all unknown, which says nothing of the span and would count as unknown
// in a verdict.
func (a *Analysis) seen(r *Request) bool {
	for _, act := range r.Threads {
		i, ok := a.tl.byTID[act.TID]
		if !ok {
			continue
		}
		ivs := a.tl.threads[i].ivs
		// The intervals are in time order and do not overlap: the first
		// ending after the activity's start is the only candidate.
		j, _ := slices.BinarySearchFunc(ivs, act.Start, func(x iv, t int64) int {
			if x.end <= t {
				return -1
			}
			return 1
		})
		if j < len(ivs) && ivs[j].start < act.End {
			return true
		}
	}
	return false
}

// runtimeEvents reads what the runtimes of k's capture's processes
// recorded: the GC pauses of its JVM recordings and the goroutine status
// changes of its Go programs.
func (a *Analyzer) runtimeEvents(ctx context.Context, k store.Artifact, st *Stored) ([]Pause, []goroutine.Event) {
	if k.CaptureID == "" || len(k.Spans) == 0 {
		return nil, nil
	}
	arts, err := a.Artifacts.TraceArtifacts(ctx, k.Spans[0].TraceID)
	if err != nil {
		return nil, nil
	}
	var pauses []Pause
	var gev []goroutine.Event
	for _, art := range arts {
		if art.CaptureID != k.CaptureID || art.MediaType != jfrMediaType && art.MediaType != goroutine.MediaType {
			continue
		}
		data, err := a.read(ctx, art.ID)
		if err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("%s artifact %s unreadable: %v", art.Kind, art.ID, err))
			continue
		}
		if art.MediaType == goroutine.MediaType {
			pid, evs, err := goroutine.Decode(data)
			if err != nil {
				st.Notes = append(st.Notes, fmt.Sprintf("goroutine events %s: %v", art.ID, err))
				continue
			}
			if int64(pid) != art.PID {
				st.Notes = append(st.Notes, fmt.Sprintf("goroutine events %s: of process %d, the artifact says %d", art.ID, pid, art.PID))
				continue
			}
			gev = append(gev, evs...)
			continue
		}
		ps, err := jfr.GCPauses(data)
		if err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("JFR recording %s: GC pauses read up to an error: %v", art.ID, err))
		}
		for _, p := range ps {
			pauses = append(pauses, Pause{PID: uint32(art.PID), Start: p.Start, End: p.End})
		}
	}
	return pauses, gev
}

// targetPIDs are the processes a snapshot was taken of: its own pid and
// those of its target threads.
func (tl *Timeline) targetPIDs() map[uint32]bool {
	targets := map[uint32]bool{}
	if tl.PID != 0 {
		targets[tl.PID] = true
	}
	for i := range tl.threads {
		if tl.threads[i].target && tl.threads[i].pid != 0 {
			targets[tl.threads[i].pid] = true
		}
	}
	return targets
}

// firstRecord is the start of the timeline's earliest interval (its End
// when it has none).
func (tl *Timeline) firstRecord() int64 {
	first := tl.End
	for i := range tl.threads {
		if ivs := tl.threads[i].ivs; len(ivs) > 0 {
			first = min(first, ivs[0].start)
		}
	}
	return first
}
