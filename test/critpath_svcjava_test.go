package test

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

// svcJavaWork is the demo's Java service E's per-request work
// (internal/mesh/default.yaml).
const svcJavaWork = "cpu=0.5ms,sleep=1ms,lock=0.2ms,alloc=16KB"

// TestCritpathMonitorJavaSvc: TestCritpathMonitorJava on the demo's own Java
// service (demo/services/java/Svc.java with the demo's E work: the JDK HTTP
// server, whose dispatcher thread hands connections to a fixed pool of 64
// worker threads) under `rootline run`'s datapath, with the service's fault
// hold (a monitor held 20 ms by each request; the demo's lock fault has
// another thread hold it), and four concurrent clients so that requests
// queue on it. Two rounds of load: while the pool
// still grows (the dispatcher creates a worker for each new request), and
// after every worker sat idle longer than the recorder's preroll (each
// request goes to the worker idle longest, first seen by the recorder when
// the dispatcher wakes it). Over the slow spans of both, the paths say lock,
// "blocked by" names the holder's span, and little is unknown; the unknown
// that stays is broken down by cause in the log.
func TestCritpathMonitorJavaSvc(t *testing.T) {
	needTool(t, "javac", "java")
	e := newCPEnv(t, "kernel")
	src, _ := filepath.Abs("../demo/services/java/Svc.java")
	buildOut(t, e.dir, "javac", "-encoding", "UTF-8", "-d", e.dir, src)
	port, admin := freeTCPPort(t), freeTCPPort(t)
	startTraced(t, []string{"LISTEN=" + hostPortOf(port), "ADMIN=" + hostPortOf(admin), "WORK=" + svcJavaWork, "SERVICE_NAME=cp-svc"}, false,
		[]string{"--mode", "ebpf", "--service", "cp-svc", "--server", "http://" + e.srv.http, "--agent", e.agentURL},
		"java", "-XX:TieredStopAtLevel=1", "-cp", e.dir, "Svc")
	waitTCPPort(t, port)
	e.waitProcess(t, "cp-svc")
	baseline(t, port, "", 30)
	resp, err := http.Post(fmt.Sprintf("http://%s/fault", hostPortOf(admin)), "application/json",
		strings.NewReader(`{"name":"hold","on":true,"amount":"20ms"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /fault: %s", resp.Status)
	}

	// Four clients, eight requests each: each request holds the monitor
	// 20 ms, so up to three wait for it at any time.
	load := func() []model.TraceID {
		const clients, each = 4, 8
		var mu sync.Mutex
		var traces []model.TraceID
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					id, _ := cpGet(t, port, "")
					mu.Lock()
					traces = append(traces, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return traces
	}
	growing := load() // 62 requests so far: each got a new worker
	time.Sleep(7 * time.Second)
	idle := load()

	var all []critpath.SpanPath
	var sum pathSums
	for _, round := range []struct {
		name   string
		traces []model.TraceID
	}{{"pool growing", growing}, {"pool idle", idle}} {
		paths, snaps := e.collectPaths(t, round.traces, "cp-svc", 90*time.Second)
		var s pathSums
		for _, p := range paths {
			logPath(t, p)
			s.add(p, snaps[p.Snapshot])
		}
		s.log(t, round.name)
		sum.merge(s)
		all = append(all, paths...)
	}
	sum.log(t, "both rounds")
	if len(all) < 20 {
		t.Fatalf("critical paths of %d of %d contended requests: the detector flagged too few", len(all), len(growing)+len(idle))
	}
	// Each request holds the monitor 20 ms and up to three wait for it:
	// most of the requests' time is a wait for the monitor (27–62 % in
	// the runs of bench/RESULTS.md).
	if sum.lock < 0.2*sum.total {
		t.Fatalf("lock waits %.1f ms of %.1f ms: the paths do not see the contended monitor", sum.lock, sum.total)
	}
	// Unknown: under 0.1 % in those runs (1.6–2.7 %, once 32 % while
	// the pool grew, before the recorder said what a new or long-idle
	// worker did until the dispatcher handed it the request); the bound
	// leaves room for records a loaded machine drops, which the next
	// check tells apart.
	if sum.unknown > 0.1*sum.total {
		t.Fatalf("unknown %.1f ms of %.1f ms", sum.unknown, sum.total)
	}
	// A worker's time before its first record (it was created for the
	// request, or idle since before the recorder's preroll) is what its
	// creator or waker did: almost none of it is unknown on the span's
	// own thread unless records were lost. Before the recorder said so it
	// was 57–88 ms over 52–53 paths (1.2–1.9 % of their time); since, 0
	// in most runs and 3–5 ms of one idle-round path in two CI runs of
	// 2026-12-01 (0.1 %), which the bound of 0.3 % allows.
	if sum.lost == 0 && sum.ownBefore > 0.003*sum.total {
		t.Fatalf("%.1f ms unknown on the spans' own threads before their first records", sum.ownBefore)
	}
	// The longest blocker of a contended request is another request's
	// SERVER span holding the monitor.
	checked := false
	for _, p := range all {
		if len(p.BlockedBy) == 0 || p.Waits[critpath.Lock] < 10 {
			continue
		}
		b := p.BlockedBy[0]
		if b.TraceID == p.TraceID || b.Service != "cp-svc" || b.Wait != critpath.Lock {
			t.Fatalf("%s blocked by %+v, want another request of cp-svc, on the lock", p.TraceID, b)
		}
		holder := mustTraceID(t, b.TraceID)
		if !slices.Contains(growing, holder) && !slices.Contains(idle, holder) {
			t.Fatalf("%s blocked by %+v: not one of the test's requests", p.TraceID, b)
		}
		if span := e.serverSpanOf(t, holder, "cp-svc"); b.SpanID != span || b.Operation != "GET /work" {
			t.Fatalf("%s blocked by %+v, want the holder's SERVER span %s", p.TraceID, b, span)
		}
		checked = true
		break
	}
	if !checked || sum.blocked == 0 {
		t.Fatalf("no path with a lock wait names another request holding the monitor")
	}
}

// pathSums adds up paths: their time, lock waits, unknown time by cause.
type pathSums struct {
	n                    int
	total, lock, unknown float64
	waitUnknown          float64 // unknown in the own threads' waits
	// ownBefore: unknown on the span's own thread before that thread's
	// first record in the snapshot.
	ownBefore float64
	lost      uint64 // records the recorder dropped, over the snapshots
	blocked   int    // paths blocked by another request on the lock
	causes    map[string]float64
}

func (s *pathSums) add(p critpath.SpanPath, snap *kernel.Snapshot) {
	s.n++
	s.total += p.Ms
	s.lock += p.Waits[critpath.Lock]
	s.unknown += p.States[critpath.Unknown]
	s.waitUnknown += p.Waits[critpath.Unknown]
	if s.causes == nil {
		s.causes = map[string]float64{}
	}
	for c, v := range unknownCauses(p, snap) {
		s.causes[c] += v
		if strings.HasPrefix(c, causeBeforeFirst+" on ") {
			s.ownBefore += v
		}
	}
	s.lost += p.Lost
	if slices.ContainsFunc(p.BlockedBy, func(b critpath.BlockedBy) bool { return b.Wait == critpath.Lock && b.TraceID != p.TraceID }) {
		s.blocked++
	}
}

func (s *pathSums) merge(o pathSums) {
	s.n += o.n
	s.total += o.total
	s.lock += o.lock
	s.unknown += o.unknown
	s.waitUnknown += o.waitUnknown
	s.ownBefore += o.ownBefore
	s.lost += o.lost
	s.blocked += o.blocked
	if s.causes == nil {
		s.causes = map[string]float64{}
	}
	for c, v := range o.causes {
		s.causes[c] += v
	}
}

func (s *pathSums) log(t *testing.T, name string) {
	t.Helper()
	total := max(s.total, 1e-9)
	t.Logf("%s: %d paths, %.1f ms: unknown %.1f ms (%.1f %%; own threads' waits %.1f ms, %.1f %%), lock wait %.1f ms (%.0f %%); %d blocked by another request on the lock; %d records lost",
		name, s.n, s.total, s.unknown, 100*s.unknown/total, s.waitUnknown, 100*s.waitUnknown/total, s.lock, 100*s.lock/total, s.blocked, s.lost)
	keys := slices.Collect(maps.Keys(s.causes))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(s.causes[b], s.causes[a]) })
	for _, c := range keys {
		t.Logf("  unknown: %-70s %8.1f ms %5.1f %%", c, s.causes[c], 100*s.causes[c]/total)
	}
}

// collectPaths waits until the server stored the critical paths of the
// traces' spans of svc that it captured (the slow ones), for at most d
// after the last one appeared, and returns them with the kernel snapshots
// they came from (by artifact id).
func (e *cpEnv) collectPaths(t *testing.T, traces []model.TraceID, svc string, d time.Duration) ([]critpath.SpanPath, map[string]*kernel.Snapshot) {
	t.Helper()
	got := map[model.TraceID]critpath.SpanPath{}
	snaps := map[string]*kernel.Snapshot{}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && len(got) < len(traces) {
		n := len(got)
		for _, id := range traces {
			if _, ok := got[id]; ok {
				continue
			}
			var res critpath.TraceResult
			if e.srv.getJSON(t, "/api/v1/traces/"+id.String()+"/critical-path", &res) != 200 {
				continue
			}
			for _, p := range res.Spans {
				if p.Service == svc {
					got[id] = p
				}
			}
		}
		if len(got) > n {
			deadline = time.Now().Add(min(d, 20*time.Second))
		}
		time.Sleep(time.Second)
	}
	var out []critpath.SpanPath
	for _, id := range traces {
		p, ok := got[id]
		if !ok {
			continue
		}
		out = append(out, p)
		if _, ok := snaps[p.Snapshot]; !ok && p.Snapshot != "" {
			resp, err := http.Get(e.srv.api("/api/v1/artifacts/" + p.Snapshot))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			s, err := kernel.DecodeSnapshot(data)
			if err != nil {
				t.Fatalf("snapshot %s: %v", p.Snapshot, err)
			}
			snaps[p.Snapshot] = s
		}
	}
	return out, snaps
}

var digits = regexp.MustCompile(`[0-9]+`)

// causeBeforeFirst is unknownCauses' cause for time before a thread's first
// record in the snapshot.
const causeBeforeFirst = "before the thread's first record"

// unknownCauses breaks a path's unknown time down by why the analysis could
// not tell, from the snapshot it was computed from: the thread is not in
// the snapshot, or was not recorded (and why); it was blocked in a syscall
// the analysis has no state for; the time is before the thread's first
// record in the window, after its last, or between two. Each cause is
// qualified by the thread's name (digits dropped: a pool's threads are one).
func unknownCauses(p critpath.SpanPath, s *kernel.Snapshot) map[string]float64 {
	out := map[string]float64{}
	if s == nil {
		for _, g := range p.Segments {
			if g.State == critpath.Unknown {
				out["no snapshot"] += g.Ms
			}
		}
		return out
	}
	threads := map[uint32]kernel.Thread{}
	for _, th := range s.Threads {
		threads[th.TID] = th
	}
	ivs := map[uint32][]kernel.Interval{}
	for _, iv := range s.Intervals {
		ivs[iv.TID] = append(ivs[iv.TID], iv)
	}
	for _, g := range p.Segments {
		if g.State != critpath.Unknown {
			continue
		}
		th, ok := threads[g.TID]
		name := digits.ReplaceAllString(th.Comm, "N")
		var cause string
		l := ivs[g.TID]
		switch {
		case !ok:
			cause = "thread not in the snapshot"
		case !th.Recorded:
			cause = "thread not recorded (" + th.Unrecorded + ")"
		case slices.ContainsFunc(l, func(iv kernel.Interval) bool { return iv.Start < g.End && iv.End > g.Start }):
			// An interval the analysis has no state for.
			k := slices.IndexFunc(l, func(iv kernel.Interval) bool { return iv.Start < g.End && iv.End > g.Start })
			cause = "in " + ivName(l[k])
			if l[k].Syscall != "" {
				cause += " (" + l[k].Syscall + ")"
			}
		case len(l) == 0:
			cause = "no interval"
		case g.End <= l[0].Start:
			cause = causeBeforeFirst
		case g.Start >= l[len(l)-1].End:
			cause = "after the thread's last record"
		default:
			// What the thread did either side of the gap says which record
			// is missing (a switch-in after a wakeup, a switch-out…).
			k := slices.IndexFunc(l, func(iv kernel.Interval) bool { return iv.Start >= g.End })
			cause = "between " + ivName(l[max(k, 1)-1]) + " and " + ivName(l[max(k, 0)])
			if s.Lost > 0 {
				cause += fmt.Sprintf(" (%d records lost)", s.Lost)
			}
		}
		if g.Wait != "" {
			cause += " (under a " + g.Wait + " wait)"
		}
		if g.SpanID == "" {
			cause += ", no span active"
		} else if g.SpanID != p.SpanID {
			cause += ", another span active"
		}
		out[cause+" on "+name] += g.Ms
	}
	return out
}

func ivName(iv kernel.Interval) string {
	if iv.Reason != "" {
		return iv.State + "/" + iv.Reason
	}
	return iv.State
}

func mustTraceID(t *testing.T, s string) model.TraceID {
	t.Helper()
	id, err := model.ParseTraceID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func hostPortOf(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

func waitTCPPort(t *testing.T, port int) {
	t.Helper()
	waitFor(t, 60*time.Second, "a listener on "+hostPortOf(port), func() bool {
		c, err := net.DialTimeout("tcp", hostPortOf(port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
