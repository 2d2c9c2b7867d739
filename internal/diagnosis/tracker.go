package diagnosis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// Tracker opens and closes incidents from committed root spans (a pipeline
// sink), keeps their verdicts current and stores both. OnCommitted only
// counts under a mutex; Run does the rest in the background.
type Tracker struct {
	cfg   Config
	st    store.IncidentStore
	diag  *Diagnoser
	log   *slog.Logger
	now   func() time.Time
	nbuck int64 // buckets per entry: Window in seconds

	mu      sync.Mutex
	entries map[string]*entry
	// notes links the spans of a trace to its root's bucket for the
	// MinImpact rule: spans of one trace arrive in any order and batches.
	notes map[model.TraceID]*traceNote
	// inflight are the roots counted from a provisional copy
	// (model.AttrInFlight) while their requests were still open, with the
	// second they were counted: a later report and the final copy are not
	// counted again.
	inflight map[rootKey]int64
	open     map[string]*tracked // by entry point
	settled  []*tracked          // closed, still gathering evidence

	opened, closed, verdicts *prometheus.CounterVec
	verdictSecs              prometheus.Histogram
	// capture, when set, is asked captures of a verdict's unflagged slow
	// spans of the culprit (SetCapture).
	capture func([]*model.Span) int
	// wake starts the verdict loop's turn at once (an incident opened,
	// critical paths stored) instead of at its next tick.
	wake chan struct{}
	// onOpen, when set, is called when an incident opened (SetOnOpen).
	onOpen func(start int64)
}

// SetOnOpen makes the tracker call f (outside its lock) when an incident
// opens, with its start (Unix ns; the earliest when several opened at once):
// the server's critical-path runner then computes the paths of the captures
// it postponed while none was open, those since the start first. Call
// before Run.
func (t *Tracker) SetOnOpen(f func(start int64)) { t.onOpen = f }

// Active reports whether an incident is open, or closed and still
// gathering evidence (diagnosis.evidence_wait): whether a verdict may read
// what arrives now.
func (t *Tracker) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open) > 0 || len(t.settled) > 0
}

// SetCapture makes the tracker hand capture (the capture manager's
// CaptureSpans) the recent slow spans of an open incident's culprit that the
// detector did not flag, while its verdict lacks kernel critical paths: an
// incident a shift opened may have no flagged span of the culprit at all, and
// without a capture of it the cause stays unknown. Call before Run.
func (t *Tracker) SetCapture(capture func([]*model.Span) int) { t.capture = capture }

// entry counts one entry point's root spans per second of arrival.
type entry struct {
	buckets  []bucket // ring, indexed by second modulo its length
	lastSeen int64    // Unix s
	// base is its latency before the window (the shift rule); shiftRun the
	// seconds in a row the rule found the window shifted; slowAbove (ns)
	// the baseline's 90th percentile at the last step, which the buckets'
	// over counts use.
	base      baseline
	shiftRun  int
	slowAbove int64
}

type bucket struct {
	sec           int64
	total, anom   int
	firstStart    int64 // earliest start of its anomalous spans
	lastEnd       int64 // latest end of its anomalous spans
	baselineMs    float64
	baselineSpans int
	// lat counts the root spans' latencies (the shift rule); over those
	// slower than the entry's slowAbove when they came, overFirst the
	// earliest start among them.
	lat       hist
	over      int
	overFirst int64
	overLast  int64 // the latest end among them
	// folded: the second was added to the entry's baseline (or passed
	// over); shifted: a step found the window holding it shifted.
	folded, shifted bool
}

// traceNote is what the tracker remembers of a recent trace: where its
// root span was counted (entry, sec zero until it came) and the largest time
// over its baseline of a flagged span of the trace seen so far.
type traceNote struct {
	entry      string
	sec        int64 // the root's bucket second; 0 while the root has not come
	start, end int64 // the root span's
	counted    bool  // the root's bucket counts the trace as anomalous
	flagged    bool  // a flagged non-root span of the trace came
	excess     int64 // ns, the largest excess of a flagged non-root span
	seen       int64 // Unix s the note was made, for expiry
}

// maxNotes bounds the traces remembered for the MinImpact rule; past it a
// request counts as anomalous only if its root span was flagged.
const maxNotes = 200_000

// maxInFlightAge is how long a root counted while in flight is remembered
// (Tracker.countRoot).
const maxInFlightAge = 10 * time.Minute

// tracked is an incident the tracker updates.
type tracked struct {
	inc         Incident
	quietSince  time.Time // zero while anomalies are above CloseShare
	lastEnd     int64
	lastVerdict time.Time
	closedAt    time.Time
	dirty       bool // counts changed since it was stored
	// fresh: evidence the verdict reads arrived since it was last
	// computed (a flagged span of the incident's requests, stored
	// artifacts), or the incident opened or closed.
	fresh bool
	// urgent: critical paths were stored since the verdict was last
	// computed — what names a cause — so it is computed at the next
	// tick, not VerdictEvery after the last.
	urgent bool
	// state is what its verdicts keep between them (VerdictState); only
	// the verdict loop touches it.
	state VerdictState
	// slowAbove (ns), for an incident a shift opened: a root span slower
	// counts as anomalous.
	slowAbove int64
}

// maxVerdictAge is how long a verdict stands without new evidence before it
// is computed again all the same: it also reads what the tracker is not told
// of (the capture log's failed and skipped captures, late spans of normal
// requests).
const maxVerdictAge = 30 * time.Second

// NewTracker returns a Tracker storing incidents in st and computing
// verdicts with diag. logger and reg may be nil.
func NewTracker(cfg Config, st store.IncidentStore, diag *Diagnoser, logger *slog.Logger, reg prometheus.Registerer) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{cfg: cfg, st: st, diag: diag, log: logger.With("component", "diagnosis"), now: time.Now,
		nbuck: int64(cfg.Window / time.Second), entries: map[string]*entry{}, open: map[string]*tracked{},
		notes: map[model.TraceID]*traceNote{}, inflight: map[rootKey]int64{}, wake: make(chan struct{}, 1),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_incidents_opened_total",
			Help: "Incidents opened: surges of anomalous root spans at an entry point."}, nil),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_incidents_closed_total",
			Help: "Incidents closed."}, nil),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rootline_incident_verdicts_total",
			Help: "Verdicts computed for incidents, by outcome (ok, failed)."}, []string{"outcome"}),
		verdictSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rootline_incident_verdict_seconds",
			Help: "Time to compute one verdict of an incident (reading its traces, anomalies, stored paths and metrics).", Buckets: prometheus.ExponentialBuckets(0.01, 3, 8)}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{t.opened, t.closed, t.verdicts, t.verdictSecs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// Rule describes the open/close rule of cfg in words.
func (c Config) Rule() string {
	if c.MinShift <= 0 {
		return fmt.Sprintf("opens when, over %s, at least %d root spans of the entry point were anomalous and they were at least %.0f%% of its root spans; closes when that share stayed under %.0f%% for %s",
			c.Window, c.MinAnomalies, 100*c.MinShare, 100*c.CloseShare, c.Quiet)
	}
	sure := ""
	if c.ShiftConfidence > 0 {
		sure = fmt.Sprintf(" (with %g%% confidence: more of its requests above that than chance would put there)", 100*c.ShiftConfidence)
	}
	return fmt.Sprintf("opens when, over %s, at least %d root spans of the entry point were anomalous and they were at least %.0f%% of its root spans, "+
		"or when its median or 90th percentile over %s stayed %.0f%% or more above its baseline (its latency before, decayed over %s)%s for %s; "+
		"closes when the anomalous share stayed under %.0f%% and the latency within %.1f%% of the baseline for %s",
		c.Window, c.MinAnomalies, 100*c.MinShare, c.Window, 100*c.MinShift, c.ShiftBaseline, sure, c.ShiftFor, 100*c.CloseShare, 50*c.MinShift, c.Quiet)
}

// OnCommitted implements pipeline.Sink: it counts root spans (a trace's
// entry point) per entry point, and a request as anomalous when its root
// span or, by MinImpact, another of its spans says so. It does not block
// beyond a short mutex.
func (t *Tracker) OnCommitted(spans []*model.Span) {
	sec := t.now().Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range spans {
		if !s.ParentSpanID.IsZero() {
			t.inner(s, sec)
			continue
		}
		key := EntryKey(s)
		if !t.countRoot(s, key, sec) {
			continue
		}
		e := t.entries[key]
		if e == nil {
			if len(t.entries) >= t.cfg.MaxEntries {
				continue
			}
			e = &entry{buckets: make([]bucket, t.nbuck)}
			t.entries[key] = e
		}
		e.lastSeen = sec
		b := &e.buckets[sec%t.nbuck]
		if b.sec != sec {
			t.fold(e, b, t.open[key])
			*b = bucket{sec: sec}
		}
		b.total++
		b.lat.add(s.Duration)
		if e.slowAbove > 0 && s.Duration > e.slowAbove {
			b.over++
			if b.overFirst == 0 || s.Start < b.overFirst {
				b.overFirst = s.Start
			}
			b.overLast = max(b.overLast, s.End())
		}
		note := t.notes[s.TraceID]
		anomalous := s.IsAnomalous() || (note != nil && t.impact(note.excess, s.Duration))
		if t.cfg.MinImpact > 0 && (note != nil || len(t.notes) < maxNotes) {
			if note == nil {
				note = &traceNote{}
				t.notes[s.TraceID] = note
			}
			note.entry, note.sec, note.start, note.end, note.counted, note.seen = key, sec, s.Start, s.End(), anomalous, sec
		}
		if anomalous {
			b.anomalous(s)
		}
		if anomalous || (note != nil && note.flagged) {
			t.evidence(key)
		}
		if tr := t.open[key]; tr != nil {
			tr.inc.Requests++
			if anomalous || (tr.slowAbove > 0 && s.Duration > tr.slowAbove) {
				tr.inc.Anomalous++
				tr.lastEnd = max(tr.lastEnd, s.End())
			}
			tr.dirty = true
		}
	}
}

// rootKey names one root span.
type rootKey struct {
	trace model.TraceID
	span  model.SpanID
}

// countRoot reports whether the root span s of entry point key, committed
// at second sec, counts as a request. A provisional copy of a root still in flight (model.AttrInFlight:
// its age, a lower bound of its duration) counts once, and only when it is
// already slow — flagged by the detector or over the entry's slow line: a
// partial latency must not pull the shift rule's percentiles down, and a
// request open long enough to be slow makes an incident open before it
// ends. Its final copy is then not counted again (it only moves the open
// incident's end), nor is a later report.
func (t *Tracker) countRoot(s *model.Span, key string, sec int64) bool {
	rk := rootKey{s.TraceID, s.SpanID}
	_, counted := t.inflight[rk]
	if !s.InFlight() {
		if !counted {
			return true
		}
		delete(t.inflight, rk)
		if tr := t.open[key]; tr != nil {
			tr.lastEnd = max(tr.lastEnd, s.End())
			tr.dirty = true
		}
		t.evidence(key)
		return false
	}
	if counted || len(t.inflight) >= maxNotes {
		return false
	}
	slow := s.IsAnomalous()
	if e := t.entries[key]; e != nil && e.slowAbove > 0 && s.Duration > e.slowAbove {
		slow = true
	}
	if tr := t.open[key]; tr != nil && tr.slowAbove > 0 && s.Duration > tr.slowAbove {
		slow = true
	}
	if slow {
		t.inflight[rk] = sec
	}
	return slow
}

// impact reports whether a flagged span's excess over its baseline (ns) is
// at least MinImpact of a request that took dur.
func (t *Tracker) impact(excess, dur int64) bool {
	return t.cfg.MinImpact > 0 && excess > 0 && float64(excess) >= t.cfg.MinImpact*float64(dur)
}

// inner applies the MinImpact rule to a non-root span: a flagged span whose
// root was already counted as normal turns the request anomalous in the
// root's bucket (while the bucket is still in the window); one whose root
// has not come yet is remembered for it.
func (t *Tracker) inner(s *model.Span, sec int64) {
	if !s.IsAnomalous() {
		return
	}
	note := t.notes[s.TraceID]
	if note == nil {
		if t.cfg.MinImpact <= 0 || len(t.notes) >= maxNotes {
			// Which entry point's request it is stays unknown: every
			// verdict may read it.
			t.evidenceAll()
			return
		}
		note = &traceNote{seen: sec}
		t.notes[s.TraceID] = note
	}
	note.flagged = true
	if note.sec != 0 {
		t.evidence(note.entry)
	}
	v, ok := s.Attr(model.AttrBaselineMs)
	if !ok {
		return
	}
	base, ok := v.Number()
	if !ok {
		return
	}
	excess := s.Duration - int64(base*1e6)
	if excess <= 0 {
		return
	}
	note.excess = max(note.excess, excess)
	if note.sec == 0 || note.counted || !t.impact(note.excess, note.end-note.start) {
		return
	}
	note.counted = true
	if e := t.entries[note.entry]; e != nil {
		if b := &e.buckets[note.sec%t.nbuck]; b.sec == note.sec {
			b.anom++
			b.note(note.start, note.end)
		}
	}
	if tr := t.open[note.entry]; tr != nil {
		tr.inc.Anomalous++
		tr.lastEnd = max(tr.lastEnd, note.end)
		tr.dirty = true
	}
}

// evidence marks the verdicts of the incidents of entry point key (open, or
// closed and still gathering evidence) as due for a new computation. The
// caller holds t.mu.
func (t *Tracker) evidence(key string) {
	if tr := t.open[key]; tr != nil {
		tr.fresh = true
	}
	for _, tr := range t.settled {
		if tr.inc.Entry == key {
			tr.fresh = true
		}
	}
}

// evidenceAll marks every verdict still computed as due. The caller holds
// t.mu.
func (t *Tracker) evidenceAll() {
	for _, tr := range t.open {
		tr.fresh = true
	}
	for _, tr := range t.settled {
		tr.fresh = true
	}
}

// Evidence tells the tracker that evidence a verdict reads was stored
// outside the spans it sees: a capture's artifacts, critical paths computed
// from a kernel snapshot. The verdicts of the open incidents, and of the
// closed ones still gathering evidence, are computed again at their next
// turn. It does not block beyond a short mutex.
func (t *Tracker) Evidence() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evidenceAll()
}

// PathsStored tells the tracker that critical paths computed from a kernel
// snapshot were stored: as Evidence, and the verdicts are computed at the
// tracker's next tick, however recent the last.
func (t *Tracker) PathsStored() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evidenceAll()
	for _, tr := range t.open {
		tr.urgent = true
	}
	for _, tr := range t.settled {
		tr.urgent = true
	}
	t.wakeVerdicts()
}

// wakeVerdicts starts a turn of the verdict loop now: a verdict waiting for
// the next tick would come up to a second later than its evidence.
func (t *Tracker) wakeVerdicts() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// anomalous counts an anomalous root span in b.
func (b *bucket) anomalous(s *model.Span) {
	b.anom++
	b.note(s.Start, s.End())
	if v, ok := s.Attr(model.AttrBaselineMs); ok {
		if f, ok := v.Number(); ok {
			b.baselineMs += f
			b.baselineSpans++
		}
	}
}

// note widens b's span of anomalous requests to [start, end).
func (b *bucket) note(start, end int64) {
	if b.firstStart == 0 || start < b.firstStart {
		b.firstStart = start
	}
	b.lastEnd = max(b.lastEnd, end)
}

// window sums an entry's buckets of the last Window.
func (t *Tracker) window(e *entry, now int64) (sum bucket) {
	for _, b := range e.buckets {
		if b.sec <= now-t.nbuck || b.sec > now {
			continue
		}
		sum.total += b.total
		sum.anom += b.anom
		if b.anom > 0 && (sum.firstStart == 0 || b.firstStart < sum.firstStart) {
			sum.firstStart = b.firstStart
		}
		sum.lastEnd = max(sum.lastEnd, b.lastEnd)
		sum.baselineMs += b.baselineMs
		sum.baselineSpans += b.baselineSpans
		sum.over += b.over
		sum.lastEnd = max(sum.lastEnd, b.overLast)
		for j, c := range b.lat {
			sum.lat[j] += c
		}
	}
	return sum
}

// fold adds a second that left the window to e's baseline, once, unless
// the shift rule found it shifted or an incident of the entry is open
// (what an incident's requests took is no baseline) — for
// relearnBaselines × ShiftBaseline at most: a lasting change (a release
// that made the entry slower) becomes the baseline then, and the incident
// it opened closes. The caller holds t.mu.
func (t *Tracker) fold(e *entry, b *bucket, open *tracked) {
	if b.sec == 0 || b.folded {
		return
	}
	b.folded = true
	if t.cfg.MinShift <= 0 {
		return
	}
	relearn := int64(relearnBaselines * t.cfg.ShiftBaseline / time.Second)
	if b.shifted && int64(e.shiftRun) < relearn {
		return
	}
	if open != nil && b.sec-open.inc.Opened/1e9 < relearn {
		return
	}
	e.base.fold(&b.lat, b.sec, t.cfg.ShiftBaseline.Seconds())
}

// relearnBaselines is how many ShiftBaselines a shift or an open incident
// keeps the baseline from learning what the entry takes now.
const relearnBaselines = 10

// shifted applies the shift rule to e's window at sec (w, its sum), and to
// the window's newest ShiftWindow: their latencies against the baseline,
// whether either moved up by MinShift, and the counts it keeps (the window's
// seconds marked shifted, the run of shifted steps, the baseline's 90th
// percentile for the next seconds' over counts). The shift returned is the
// one that moved, else the whole window's. The caller holds t.mu.
func (t *Tracker) shifted(e *entry, sec int64, w *bucket) (shift, bool) {
	if t.cfg.MinShift <= 0 {
		return shift{}, false
	}
	sh := compare(&w.lat, w.total, &e.base)
	if e.base.n >= minBaseRequests {
		e.slowAbove = int64(sh.baseP90)
	}
	factor := 1 + t.cfg.MinShift
	moved := func(s shift, win *hist) bool {
		return s.comparable() && s.ratio() >= factor && s.sure(win, factor, t.cfg.ShiftConfidence)
	}
	ok := moved(sh, &w.lat)
	if !ok {
		if n := int64(t.cfg.ShiftWindow / time.Second); n > 0 && n < t.nbuck {
			var lat hist
			total := 0
			for _, b := range e.buckets {
				if b.sec > sec-n && b.sec <= sec {
					total += b.total
					for j, c := range b.lat {
						lat[j] += c
					}
				}
			}
			if short := compare(&lat, total, &e.base); moved(short, &lat) {
				sh, ok = short, true
			}
		}
	}
	if !ok {
		e.shiftRun = 0
		return sh, false
	}
	e.shiftRun++
	for i := range e.buckets {
		if b := &e.buckets[i]; b.sec > sec-t.nbuck && b.sec <= sec {
			b.shifted = true
		}
	}
	return sh, true
}

// shiftStart is the onset of a shift: the start of the first request slower
// than the baseline's 90th percentile in the run of seconds, up to sec, in
// which at least MinShare of the requests were (or the window's start when
// its newest second has too few).
func (t *Tracker) shiftStart(e *entry, sec int64, w bucket) int64 {
	start := int64(0)
	for s := sec; s > sec-t.nbuck; s-- {
		b := &e.buckets[s%t.nbuck]
		if b.sec != s || b.total == 0 || float64(b.over) < t.cfg.MinShare*float64(b.total) {
			break
		}
		start = b.overFirst
	}
	if start == 0 {
		start = (sec - t.nbuck + 1) * 1e9
	}
	if w.firstStart > 0 && w.firstStart < start && w.anom >= t.cfg.MinAnomalies {
		start = w.firstStart
	}
	return start
}

func incidentID(entry string, start int64) string {
	h := sha256.Sum256([]byte(entry + "\x00" + strconv.FormatInt(start, 10)))
	return hex.EncodeToString(h[:8])
}

// step applies the open/close rule at now and returns the incidents to
// store.
func (t *Tracker) step(now time.Time) []Incident {
	sec := now.Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	var changed []Incident
	for key, e := range t.entries {
		tr := t.open[key]
		for i := range e.buckets {
			if b := &e.buckets[i]; b.sec <= sec-t.nbuck {
				t.fold(e, b, tr)
			}
		}
		w := t.window(e, sec)
		sh, shifted := t.shifted(e, sec, &w)
		share := float64(w.anom) / float64(max(w.total, 1))
		var inc *Incident
		switch {
		case tr == nil && w.anom >= t.cfg.MinAnomalies && share >= t.cfg.MinShare:
			inc = &Incident{Trigger: TriggerAnomalies, Start: w.firstStart, Anomalous: w.anom}
			if w.baselineSpans > 0 {
				inc.BaselineMs = round2(w.baselineMs / float64(w.baselineSpans))
			}
		case tr == nil && shifted && e.shiftRun >= int(t.cfg.ShiftFor/time.Second):
			inc = &Incident{Trigger: TriggerShift, Start: t.shiftStart(e, sec, w), Anomalous: max(w.anom, w.over),
				SlowAboveMs: round2(sh.baseP90 / 1e6),
				Shift: &Shift{P50Ms: round2(sh.p50 / 1e6), P90Ms: round2(sh.p90 / 1e6), BaseP50Ms: round2(sh.baseP50 / 1e6),
					BaseP90Ms: round2(sh.baseP90 / 1e6), Requests: sh.n}}
		case tr != nil && share < t.cfg.CloseShare && !(sh.comparable() && sh.ratio() >= 1+t.cfg.MinShift/2):
			if tr.quietSince.IsZero() {
				tr.quietSince = now
			}
			if now.Sub(tr.quietSince) >= t.cfg.Quiet {
				tr.inc.State, tr.inc.End, tr.inc.Closed = StateClosed, max(tr.lastEnd, tr.inc.Start), now.UnixNano()
				tr.closedAt = now
				tr.fresh = true // its traces end at End now, no longer at the clock
				delete(t.open, key)
				t.settled = append(t.settled, tr)
				changed = append(changed, tr.inc)
				t.closed.WithLabelValues().Inc()
				t.log.Info("incident closed", "id", tr.inc.ID, "entry", key, "anomalous", tr.inc.Anomalous, "requests", tr.inc.Requests)
			}
		case tr != nil:
			tr.quietSince = time.Time{}
		}
		if inc != nil {
			svc, op := splitEntry(key)
			inc.ID, inc.Entry, inc.EntryService, inc.EntryOperation = incidentID(key, inc.Start), key, svc, op
			inc.State, inc.Opened, inc.Requests, inc.Rule = StateOpen, now.UnixNano(), w.total, t.cfg.Rule()
			t.open[key] = &tracked{inc: *inc, lastEnd: w.lastEnd, fresh: true, slowAbove: int64(inc.SlowAboveMs * 1e6)}
			changed = append(changed, *inc)
			t.opened.WithLabelValues().Inc()
			attrs := []any{"id", inc.ID, "entry", key, "trigger", inc.Trigger, "anomalous", inc.Anomalous, "of", w.total, "window", t.cfg.Window}
			if inc.Shift != nil {
				attrs = append(attrs, "p50_ms", inc.Shift.P50Ms, "baseline_p50_ms", inc.Shift.BaseP50Ms, "p90_ms", inc.Shift.P90Ms, "baseline_p90_ms", inc.Shift.BaseP90Ms)
			}
			t.log.Info("incident opened", attrs...)
		}
		if tr == nil && t.open[key] == nil && e.lastSeen < sec-int64(t.cfg.Quiet/time.Second)-t.nbuck {
			delete(t.entries, key) // idle: its buckets are all outside the window
		}
	}
	// A trace's spans come within seconds of each other; a note older than
	// the window cannot change a bucket any more.
	for id, n := range t.notes {
		if n.seen <= sec-2*t.nbuck {
			delete(t.notes, id)
		}
	}
	// A request in flight may outlast the window by far (a client waits
	// minutes); one whose final copy never came (its process died) is
	// forgotten after maxInFlightAge.
	for rk, at := range t.inflight {
		if at <= sec-int64(maxInFlightAge/time.Second) {
			delete(t.inflight, rk)
		}
	}
	for _, tr := range t.open {
		if tr.dirty {
			tr.dirty = false
			changed = append(changed, tr.inc)
		}
	}
	return changed
}

func splitEntry(key string) (svc, op string) {
	for i := 0; i < len(key); i++ {
		if key[i] == ' ' {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

// due returns the incidents whose verdict is due at now (open ones, and
// closed ones for EvidenceWait after they closed) and forgets closed ones
// past it. A verdict is due once VerdictEvery has passed since it was
// computed, when new evidence came meanwhile or it is maxVerdictAge old: with
// nothing new to read it would come out the same.
func (t *Tracker) due(now time.Time) []*tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*tracked
	keep := t.settled[:0]
	for _, tr := range t.settled {
		if now.Sub(tr.closedAt) > t.cfg.EvidenceWait {
			continue
		}
		keep = append(keep, tr)
		if t.isDue(tr, now) {
			out = append(out, tr)
		}
	}
	clear(t.settled[len(keep):])
	t.settled = keep
	for _, tr := range t.open {
		if t.isDue(tr, now) {
			out = append(out, tr)
		}
	}
	return out
}

func (t *Tracker) isDue(tr *tracked, now time.Time) bool {
	age := now.Sub(tr.lastVerdict)
	every := t.verdictEvery(tr, now)
	if tr.urgent && (every == t.cfg.VerdictEvery || tr.inc.Verdict == nil || tr.inc.Verdict.PathSpans == 0) {
		return true
	}
	return age >= every && (tr.fresh || tr.urgent || age >= max(maxVerdictAge, every))
}

// verdictAging: an incident's verdict is computed again at most every
// VerdictEvery while the incident is young, then at most every
// 1/verdictAging of its age, up to maxVerdictAge (at 2 s and 10: every
// 2 s for its first 20 s, 6 s at one minute, 30 s from five minutes on).
// Stored critical paths make it due at once only while it is young or
// its verdict has no critical path yet. A verdict costs the server
// 0.6–0.8 s of CPU in the demo mesh; at every 2 s through an incident
// that stayed open 8 min it took 40 % of a CPU of the 2-vCPU machine the
// services ran on, and kept them slow (bench/RESULTS.md).
const verdictAging = 10

// verdictEvery is how often at most tr's verdict is computed again at now.
func (t *Tracker) verdictEvery(tr *tracked, now time.Time) time.Duration {
	every := now.Sub(time.Unix(0, tr.inc.Opened)) / verdictAging
	return min(max(every, t.cfg.VerdictEvery), max(maxVerdictAge, t.cfg.VerdictEvery))
}

// Run applies the rule every second and, in a goroutine of its own so that
// a slow verdict (a snapshot analysed on the spot) never delays the rule,
// computes due verdicts, until ctx ends. Incidents left open in the store
// by a previous run are resumed.
func (t *Tracker) Run(ctx context.Context) error {
	t.resume(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.every(ctx, t.wake, func(now time.Time) {
			for _, tr := range t.due(now) {
				t.verdict(ctx, tr, now)
			}
		})
	}()
	t.every(ctx, nil, func(now time.Time) {
		changed := t.step(now)
		opened, start := false, int64(0)
		for _, inc := range changed {
			t.put(ctx, inc)
			if inc.Opened == now.UnixNano() {
				if !opened || inc.Start < start {
					start = inc.Start
				}
				opened = true
			}
		}
		if opened && t.onOpen != nil {
			t.onOpen(start)
		}
		if len(changed) > 0 {
			// An incident that opened has its first verdict due.
			t.wakeVerdicts()
		}
	})
	wg.Wait()
	return nil
}

// every calls f with the clock's time every second, and whenever wake
// (nil: never) receives, until ctx ends.
func (t *Tracker) every(ctx context.Context, wake <-chan struct{}, f func(time.Time)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		}
		f(t.now())
	}
}

// verdict computes and stores tr's verdict.
func (t *Tracker) verdict(ctx context.Context, tr *tracked, now time.Time) {
	t.mu.Lock()
	inc := tr.inc
	tr.lastVerdict = now
	// Evidence arriving while the verdict reads makes it due again.
	tr.fresh, tr.urgent = false, false
	t.mu.Unlock()
	if t.diag == nil {
		return
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	t0 := time.Now()
	v, err := t.diag.DiagnoseWith(vctx, &inc, &tr.state)
	cancel()
	t.verdictSecs.Observe(time.Since(t0).Seconds())
	if err != nil {
		if ctx.Err() == nil {
			t.verdicts.WithLabelValues("failed").Inc()
			t.log.Warn("verdict not computed", "incident", inc.ID, "err", err)
		}
		return
	}
	t.verdicts.WithLabelValues("ok").Inc()
	if t.capture != nil && len(v.capture) > 0 {
		n := t.capture(v.capture)
		t.log.Debug("captures asked for the culprit's slow spans", "incident", inc.ID, "service", v.Service, "spans", n)
	}
	t.mu.Lock()
	tr.inc.Verdict = v
	inc = tr.inc
	t.mu.Unlock()
	t.put(ctx, inc)
}

func (t *Tracker) put(ctx context.Context, inc Incident) {
	if t.st == nil {
		return
	}
	if err := t.st.PutIncident(ctx, ToStored(inc)); err != nil && ctx.Err() == nil {
		t.log.Warn("incident not stored", "incident", inc.ID, "err", err)
	}
}

// resume takes back the incidents a previous run left open: they close by
// the rule like any other once anomalies stop.
func (t *Tracker) resume(ctx context.Context) {
	if t.st == nil {
		return
	}
	list, err := t.st.FindIncidents(ctx, store.IncidentQuery{From: t.now().Add(-24 * time.Hour).UnixNano(), Limit: 1000})
	if err != nil {
		t.log.Warn("open incidents not resumed", "err", err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range list {
		if s.End != 0 {
			continue
		}
		inc, err := FromStored(s)
		if err != nil {
			t.log.Warn("stored incident unreadable", "incident", s.ID, "err", err)
			continue
		}
		if t.open[inc.Entry] == nil {
			t.open[inc.Entry] = &tracked{inc: inc, lastEnd: inc.Start, fresh: true, slowAbove: int64(inc.SlowAboveMs * 1e6)}
		}
	}
}

// ToStored is the store's record of inc.
func ToStored(inc Incident) store.Incident {
	doc, _ := json.Marshal(inc) // plain fields and maps of strings: cannot fail
	svc := ""
	if inc.Verdict != nil {
		svc = inc.Verdict.Service
	}
	return store.Incident{ID: inc.ID, Entry: inc.Entry, EntryService: inc.EntryService, Service: svc,
		Start: inc.Start, End: inc.End, Updated: time.Now().UnixNano(), Doc: doc}
}

// FromStored reads an incident back from its record.
func FromStored(s store.Incident) (Incident, error) {
	var inc Incident
	if err := json.Unmarshal(s.Doc, &inc); err != nil {
		return inc, fmt.Errorf("incident %s: %w", s.ID, err)
	}
	if inc.ID == "" {
		return inc, errors.New("incident document without id")
	}
	return inc, nil
}
