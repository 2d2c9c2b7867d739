package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/profiler"
)

// dumpJob is one accepted dump request. Jobs for the same pid whose windows
// overlap run one after the other; a job whose window and kinds a finished
// earlier job covers reuses its artifacts instead of dumping again.
type dumpJob struct {
	req    agentapi.DumpRequest
	server *agentapi.ServerClient // where artifacts and the completion go (req.UploadURL)
	w      profiler.Window
	kinds  []string
	notes  []string // requested kinds this pid has no recording of
	done   chan struct{}
	result map[string]kindResult // by kind; written before done is closed
	// held are the windows copied when the job was accepted, by kind,
	// until they are encoded.
	held map[string]heldWindow
}

type kindResult struct {
	arts []profiler.Artifact
	err  error
}

// covers reports whether j's finished dump can answer o.
func (j *dumpJob) covers(o *dumpJob) bool {
	if j.w.Start.After(o.w.Start) || j.w.End.Before(o.w.End) {
		return false
	}
	for _, k := range o.kinds {
		r, ok := j.result[k]
		if !ok || r.err != nil {
			return false
		}
	}
	return true
}

func (j *dumpJob) overlaps(o *dumpJob) bool {
	return !j.w.Start.After(o.w.End) && !o.w.Start.After(j.w.End)
}

// handleDump validates a dump request, answers 202 at once and dumps in the
// background.
func (a *Agent) handleDump(w http.ResponseWriter, r *http.Request) {
	var req agentapi.DumpRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		a.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.CaptureID == "" || strings.ContainsAny(req.CaptureID, "/?#") {
		a.reject(w, http.StatusBadRequest, "captureId is required and must not contain '/', '?' or '#'")
		return
	}
	if req.Start <= 0 || req.End <= req.Start {
		a.reject(w, http.StatusBadRequest, fmt.Sprintf("window [%d, %d] is empty: start and end are Unix ns, start before end", req.Start, req.End))
		return
	}
	if d := time.Duration(req.End - req.Start); d > a.cfg.MaxWindow {
		a.reject(w, http.StatusBadRequest, fmt.Sprintf("window of %s is longer than the agent's maximum of %s", d, a.cfg.MaxWindow))
		return
	}
	if req.MaxBytes < 0 {
		a.reject(w, http.StatusBadRequest, "maxBytes must not be negative")
		return
	}
	if c := callerOf(r); !c.trusted {
		if err := a.mayAct(c, int(req.PID)); err != nil {
			a.metrics.refused.WithLabelValues("dump").Inc()
			if errors.Is(err, errNoProcess) {
				a.reject(w, http.StatusNotFound, fmt.Sprintf("pid %d is not a target of this agent", req.PID))
			} else {
				a.reject(w, http.StatusForbidden, err.Error())
			}
			return
		}
	}
	// A scale-out detector asks for the capture's evidence at its own URL;
	// the agent's token and connections go with it.
	srv, err := a.server.At(req.UploadURL)
	if err != nil {
		a.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	job := &dumpJob{req: req, server: srv, w: profiler.Window{Start: time.Unix(0, req.Start), End: time.Unix(0, req.End)}, done: make(chan struct{})}

	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.reject(w, http.StatusServiceUnavailable, "agent is shutting down")
		return
	}
	if req.AgentID != "" && req.AgentID != a.agentID {
		// A registration that names this agent's dump URL but is not this
		// agent's: whoever made it must not choose what the agent dumps.
		id := a.agentID
		a.mu.Unlock()
		a.metrics.refused.WithLabelValues("dump").Inc()
		a.reject(w, http.StatusConflict, fmt.Sprintf("dump request for agent %q, but this agent is registered as %q", req.AgentID, id))
		return
	}
	t, ok := a.targets[int(req.PID)]
	if !ok {
		a.mu.Unlock()
		a.reject(w, http.StatusNotFound, fmt.Sprintf("pid %d is not a target of this agent", req.PID))
		return
	}
	if req.Service != "" && req.Service != t.Service {
		a.mu.Unlock()
		a.metrics.refused.WithLabelValues("dump").Inc()
		a.reject(w, http.StatusNotFound, fmt.Sprintf("pid %d is a target of service %q, not %q", req.PID, t.Service, req.Service))
		return
	}
	if len(req.Kinds) == 0 {
		job.kinds = append([]string(nil), t.kinds...)
	}
	for _, k := range req.Kinds {
		if slices.Contains(t.kinds, k) {
			if !slices.Contains(job.kinds, k) {
				job.kinds = append(job.kinds, k)
			}
		} else {
			job.notes = append(job.notes, fmt.Sprintf("%s: not recorded for pid %d", k, req.PID))
		}
	}
	if len(job.kinds) == 0 {
		a.mu.Unlock()
		a.reject(w, http.StatusNotFound, fmt.Sprintf("pid %d has no recording of kinds %v (recorded: %v)", req.PID, req.Kinds, t.kinds))
		return
	}
	tgt := t.Target
	var cg *container
	if c := a.containers[t.cgroup]; c != nil {
		cp := *c // a copy: the registration may change meanwhile
		cg = &cp
	}
	a.mu.Unlock()

	// The window is copied at once (runDump), its encoding waits for a dump
	// slot. Refused while the copies waiting to be encoded fill their bound.
	if limit := a.heldLimit.Load(); limit > 0 {
		if used := a.heldBytes.Load(); used >= limit {
			msg := fmt.Sprintf("agent busy: %d bytes of accepted windows wait to be encoded (max_held_bytes %d); retry later", used, limit)
			a.logger.Warn("dump request refused", "capture", req.CaptureID, "pid", req.PID, "reason", msg)
			w.Header().Set("Retry-After", "1")
			a.reject(w, http.StatusTooManyRequests, msg)
			return
		}
	}

	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.reject(w, http.StatusServiceUnavailable, "agent is shutting down")
		return
	}
	var prior []*dumpJob
	for _, o := range a.jobs[tgt.PID] {
		if o.overlaps(job) {
			prior = append(prior, o)
		}
	}
	a.jobs[tgt.PID] = append(a.jobs[tgt.PID], job)
	a.dumps.Add(1)
	a.mu.Unlock()

	go a.runDump(job, tgt, cg, prior)
	writeJSON(w, http.StatusAccepted, agentapi.DumpAccepted{CaptureID: req.CaptureID, Kinds: job.kinds})
}

// errBusy: the windows held for accepted dumps fill Config.MaxHeldBytes.
var errBusy = errors.New("agent busy")

// hold copies the job's window from each of its profilers that can copy
// it now and encode it later (profiler.Holder: the kernel flight recorder,
// whose history is short). A copy that would take the copies waiting to be
// encoded beyond Config.MaxHeldBytes is dropped, and hold returns an error
// wrapping errBusy. A profiler whose window is not copied is dumped when
// the job's turn comes, as the others are.
func (a *Agent) hold(ctx context.Context, job *dumpJob, t profiler.Target, cg *container) error {
	limit := a.heldLimit.Load()
	if limit <= 0 {
		return nil
	}
	// One copy at a time: each walks the recorder's whole ring under its
	// lock, and a burst of requests would otherwise hold up its reader.
	a.holdMu.Lock()
	defer a.holdMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	for _, p := range a.profilers {
		if !slices.Contains(job.kinds, p.Name()) {
			continue
		}
		ch, isCg := p.(CgroupHolder)
		isCg = isCg && cg != nil && slices.Contains(cg.kinds, p.Name())
		h, isHolder := p.(profiler.Holder)
		if !isCg && !isHolder {
			continue
		}
		if used := a.heldBytes.Load(); used >= limit {
			job.release(a)
			return fmt.Errorf("%w: %d bytes of accepted windows wait to be encoded (max_held_bytes %d); retry later", errBusy, used, limit)
		}
		t0 := time.Now()
		var held profiler.Held
		var err error
		if isCg {
			held, err = ch.HoldCgroup(ctx, cg.id, cg.dir, t, job.w)
		} else {
			held, err = h.Hold(ctx, t, job.w)
		}
		if err != nil {
			a.logger.Debug("cannot copy the window now: dumped when its turn comes", "capture", job.req.CaptureID, "kind", p.Name(), "err", err)
			continue
		}
		n := held.Bytes()
		if used := a.heldBytes.Add(n); used > limit {
			a.heldBytes.Add(-n)
			job.release(a)
			return fmt.Errorf("%w: the window's copy (%d bytes) would take the accepted windows waiting to be encoded to %d bytes, beyond max_held_bytes %d; retry later",
				errBusy, n, used, limit)
		}
		a.logger.Debug("window copied", "capture", job.req.CaptureID, "kind", p.Name(), "bytes", n, "took", time.Since(t0))
		if job.held == nil {
			job.held = map[string]heldWindow{}
		}
		job.held[p.Name()] = heldWindow{held, n}
	}
	return nil
}

// holdTimeout bounds the copy of a window (the recorder drains its ring
// buffers first, which waits for at most its flush interval).
const holdTimeout = 5 * time.Second

// CgroupHolder is a CgroupProfiler that can copy a container's window
// now and encode it later (see profiler.Holder).
type CgroupHolder interface {
	CgroupProfiler
	HoldCgroup(ctx context.Context, id uint64, dir string, t profiler.Target, w profiler.Window) (profiler.Held, error)
}

// heldWindow is a window copied for a job, and its bytes counted in
// Agent.heldBytes.
type heldWindow struct {
	profiler.Held
	bytes int64
}

// release gives back the memory of the job's copies not yet encoded.
func (j *dumpJob) release(a *Agent) {
	for k, h := range j.held {
		a.heldBytes.Add(-h.bytes)
		delete(j.held, k)
	}
}

// take returns the job's copy for kind, if any; its memory is released by
// the caller once encoded.
func (j *dumpJob) take(kind string) (heldWindow, bool) {
	h, ok := j.held[kind]
	delete(j.held, kind)
	return h, ok
}

func (a *Agent) reject(w http.ResponseWriter, status int, msg string) {
	a.metrics.dumps.WithLabelValues("rejected").Inc()
	writeError(w, status, msg)
}

// runDump dumps (or reuses a covering earlier dump), uploads and completes.
// cg is the registered container the target is in, if any.
func (a *Agent) runDump(job *dumpJob, t profiler.Target, cg *container, prior []*dumpJob) {
	defer a.dumps.Done()
	defer func() {
		a.mu.Lock()
		l := a.jobs[t.PID]
		if i := slices.Index(l, job); i >= 0 {
			l = slices.Delete(l, i, i+1)
		}
		if len(l) == 0 {
			delete(a.jobs, t.PID)
		} else {
			a.jobs[t.PID] = l
		}
		a.mu.Unlock()
		close(job.done)
	}()
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.DumpTimeout)
	defer cancel()
	log := a.logger.With("capture", job.req.CaptureID, "pid", t.PID)

	defer job.release(a) // copies not encoded (a covering earlier dump answered, or cancelled)
	if wait := time.Until(job.w.End); wait > 0 {
		// Asked before the window ended: copied when it ends.
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	if err := a.hold(ctx, job, t, cg); err != nil {
		log.Info("window not copied ahead: dumped when its turn comes", "err", err)
	}
	for _, p := range prior {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
	job.result = map[string]kindResult{}
	for i := len(prior) - 1; i >= 0 && ctx.Err() == nil; i-- {
		if prior[i].covers(job) {
			for _, k := range job.kinds {
				job.result[k] = prior[i].result[k]
			}
			a.metrics.coalesced.Inc()
			log.Debug("dump answered by an earlier covering dump", "from", prior[i].req.CaptureID)
			break
		}
	}
	up := a.newUploader(job, log)
	if len(job.result) == 0 && ctx.Err() == nil {
		a.dump(ctx, job, t, cg, up)
	} else {
		for _, k := range job.kinds {
			if r, ok := job.result[k]; ok {
				up.add(ctx, k, r)
			}
		}
	}
	outcome, msg := up.finish(ctx)
	a.complete(ctx, job.server, job.req.CaptureID, outcome, msg, log)
}

// dump runs the job's profilers in parallel, at most MaxConcurrentDumps jobs
// at once, and hands each one's artifacts to up as soon as it is done: the
// server reads a quick profiler's evidence (the kernel snapshot, in well
// under a second) while a slow one still dumps (a JVM's recording takes
// seconds when its collector saturates the CPUs). A cgroup profiler dumps
// the whole container of a process in one (cg).
func (a *Agent) dump(ctx context.Context, job *dumpJob, t profiler.Target, cg *container, up *uploader) {
	queued := time.Now()
	select {
	case a.dumpSem <- struct{}{}:
		defer func() { <-a.dumpSem }()
	case <-ctx.Done():
		return
	}
	started := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	took := map[string]time.Duration{}
	for _, p := range a.profilers {
		if !slices.Contains(job.kinds, p.Name()) {
			continue
		}
		held, isHeld := job.take(p.Name())
		wg.Go(func() {
			a.lowerPriority()
			t0 := time.Now()
			var arts []profiler.Artifact
			var err error
			switch cp, ok := p.(CgroupProfiler); {
			case isHeld:
				arts, err = held.Dump(ctx)
				a.heldBytes.Add(-held.bytes)
			case ok && cg != nil && slices.Contains(cg.kinds, p.Name()):
				arts, err = cp.DumpCgroup(ctx, cg.id, cg.dir, t, job.w)
			default:
				arts, err = p.Dump(ctx, t, job.w)
			}
			mu.Lock()
			job.result[p.Name()] = kindResult{arts: arts, err: err}
			took[p.Name()] = time.Since(t0)
			mu.Unlock()
			up.add(ctx, p.Name(), kindResult{arts: arts, err: err})
		})
	}
	wg.Wait()
	// Where a capture's time goes on a busy node: waiting for a slot,
	// then each profiler's dump.
	args := []any{"capture", job.req.CaptureID, "pid", t.PID, "waited", started.Sub(queued).Round(time.Millisecond),
		"took", time.Since(started).Round(time.Millisecond), "after_window", time.Since(job.w.End).Round(time.Millisecond)}
	for _, k := range job.kinds {
		if d, ok := took[k]; ok {
			args = append(args, k, d.Round(time.Millisecond))
		}
	}
	a.logger.Info("dumped", args...)
}

// lowerPriority gives the calling goroutine an OS thread of its own at
// Config.DumpNice. The thread is never unlocked: it ends with the goroutine,
// so no other goroutine runs at that priority. Goroutines the dump starts
// run at the agent's priority.
func (a *Agent) lowerPriority() {
	if a.cfg.DumpNice <= 0 {
		return
	}
	runtime.LockOSThread()
	if err := setThreadNice(a.cfg.DumpNice); err != nil {
		a.logger.Debug("cannot lower the dump thread's priority", "nice", a.cfg.DumpNice, "err", err)
	}
}

// uploader sends a job's artifacts to the server as each profiler's dump
// ends, within the request's byte budget, and then the completion's status
// and error text. Its methods may be called from the dump's goroutines; an
// upload runs at a time.
type uploader struct {
	a   *Agent
	job *dumpJob
	log *slog.Logger

	mu sync.Mutex
	// byKind are each kind's problems (its dump's error), reported in the
	// job's order of kinds; problems those of the uploads.
	byKind     map[string][]string
	problems   []string
	overBudget []string
	// exports wait for the end: within the budget, what the server's
	// analyses read goes first (isExport).
	exports  []profiler.Artifact
	used     int64
	uploaded int
	partial  bool
	stop     bool
}

func (a *Agent) newUploader(job *dumpJob, log *slog.Logger) *uploader {
	return &uploader{a: a, job: job, log: log, byKind: map[string][]string{}}
}

// add uploads the evidence of one kind's dump at once and keeps its
// exports for finish.
func (u *uploader) add(ctx context.Context, kind string, res kindResult) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if res.err != nil {
		if errors.Is(res.err, profiler.ErrTargetGone) {
			u.partial = true
			u.byKind[kind] = append(u.byKind[kind], fmt.Sprintf("%s: target exited during the dump (%v)", kind, res.err))
		} else {
			u.byKind[kind] = append(u.byKind[kind], fmt.Sprintf("%s: %v", kind, res.err))
		}
	} else {
		u.byKind[kind] = []string{}
	}
	for _, art := range res.arts {
		if isExport(art) == 1 {
			u.exports = append(u.exports, art)
			continue
		}
		u.send(ctx, art)
	}
}

// send uploads one artifact unless the budget or an earlier refusal says
// not to. u.mu is held.
func (u *uploader) send(ctx context.Context, art profiler.Artifact) {
	if u.stop || ctx.Err() != nil {
		return
	}
	n := int64(len(art.Data))
	if u.job.req.MaxBytes > 0 && u.used+n > u.job.req.MaxBytes {
		// Skipped; a smaller one after it may still fit.
		u.overBudget = append(u.overBudget, fmt.Sprintf("%s (%d bytes)", art.FileName, n))
		return
	}
	status, err := u.a.uploadOne(ctx, u.job, art)
	switch {
	case err == nil:
		u.used += n
		u.uploaded++
		u.a.metrics.uploadBytes.Add(float64(n))
		if art.Partial {
			u.partial = true
		}
	case status == http.StatusRequestEntityTooLarge, status == http.StatusNotFound, status == http.StatusConflict:
		u.problems = append(u.problems, fmt.Sprintf("%s not uploaded: %v", art.FileName, err))
		u.stop = true
	default:
		u.log.Warn("upload artifact", "file", art.FileName, "err", err)
		u.problems = append(u.problems, fmt.Sprintf("%s not uploaded: %v", art.FileName, err))
	}
}

// finish uploads the exports and returns the completion status and error
// text.
func (u *uploader) finish(ctx context.Context) (string, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, art := range u.exports {
		u.send(ctx, art)
	}
	problems := append([]string(nil), u.job.notes...)
	for _, k := range u.job.kinds {
		got, ok := u.byKind[k]
		if !ok && ctx.Err() == nil {
			got = []string{k + ": no result"}
		}
		problems = append(problems, got...)
	}
	if ctx.Err() != nil {
		problems = append(problems, "dump cancelled: "+cause(ctx))
	}
	problems = append(problems, u.problems...)
	if len(u.overBudget) > 0 {
		problems = append(problems, fmt.Sprintf("capture budget of %d bytes exceeded: %s not uploaded", u.job.req.MaxBytes, strings.Join(u.overBudget, ", ")))
	}
	msg := strings.Join(problems, "; ")
	switch {
	case u.uploaded == 0:
		if msg == "" {
			msg = "the profilers returned no artifacts for the window"
		}
		return agentapi.StatusFailed, msg
	case u.partial || len(problems) > 0:
		return agentapi.StatusPartial, msg
	default:
		return agentapi.StatusComplete, ""
	}
}

func cause(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "dump timeout exceeded"
	}
	return "agent shutting down"
}

// uploadOne posts one artifact; it returns the HTTP status when the server answered.
func (a *Agent) uploadOne(ctx context.Context, job *dumpJob, art profiler.Artifact) (int, error) {
	u := agentapi.Upload{Kind: art.Kind, FileName: art.FileName, MediaType: art.MediaType,
		Start: job.req.Start, End: job.req.End, Partial: art.Partial, Attributes: art.Attributes}
	if !art.Start.IsZero() {
		u.Start = art.Start.UnixNano()
	}
	if !art.End.IsZero() {
		u.End = art.End.UnixNano()
	}
	_, err := job.server.Upload(ctx, job.req.CaptureID, u, bytes.NewReader(art.Data))
	if err != nil {
		return agentapi.StatusOf(err), err
	}
	return http.StatusCreated, nil
}

// complete ends the capture on the server; it still runs when the dump was
// cancelled by shutdown, so the server learns why.
func (a *Agent) complete(ctx context.Context, srv *agentapi.ServerClient, id, status, msg string, log *slog.Logger) {
	a.metrics.dumps.WithLabelValues(status).Inc()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Complete(ctx, id, agentapi.Completion{Status: status, Error: msg}); err != nil {
		log.Warn("complete capture", "status", status, "err", err)
	}
}

// isExport says whether art is an export of other evidence (the kernel
// snapshot's CTF for trace viewers), which no analysis of the server reads.
func isExport(art profiler.Artifact) int {
	if strings.HasSuffix(art.Kind, "-ctf") {
		return 1
	}
	return 0
}
