package analysis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

func TestExclusive(t *testing.T) {
	ms := int64(time.Millisecond)
	p := &span{start: 0, dur: 100 * ms}
	p.children = []*span{
		{start: 10 * ms, dur: 20 * ms},
		{start: 20 * ms, dur: 20 * ms},  // overlaps the first: union 10-40
		{start: 90 * ms, dur: 50 * ms},  // clipped at the parent's end: 90-100
		{start: -5 * ms, dur: 10 * ms},  // clipped at the start: 0-5
		{start: 200 * ms, dur: 10 * ms}, // outside
	}
	if got, want := p.exclusive(), 100*ms-30*ms-10*ms-5*ms; got != want {
		t.Errorf("exclusive = %v, want %v", time.Duration(got), time.Duration(want))
	}
	if !strings.Contains(CauseBlocking, "lock") {
		t.Error("CauseBlocking must say lock")
	}
}

// sid makes a span id from a small number.
func sid(n byte) model.SpanID { return model.SpanID{7: n} }

// With sidecars a hop is app CLIENT → sidecar egress CLIENT → sidecar ingress
// SERVER → app SERVER: the time between the two services is charged once, to
// the callee, and so is the sidecar's ingress time (a proxy on the link, not
// the callee's work) — unless the caller's CLIENT span measured the link
// end to end (rootline.wait.net_ms), which includes it.
func TestTraceTimesSidecars(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(id, parent byte, svc string, kind model.SpanKind, start, dur int64, attrs ...model.KeyValue) *model.Span {
		return &model.Span{SpanID: sid(id), ParentSpanID: sid(parent), Service: svc, Kind: kind, Start: start * ms, Duration: dur * ms, Attributes: attrs}
	}
	jt := newTrace([]*model.Span{
		mk(1, 0, "a", model.KindServer, 0, 100),
		mk(2, 1, "a", model.KindClient, 10, 80),                                                  // the app's call
		mk(3, 2, "a", model.KindClient, 12, 76),                                                  // a's sidecar egress
		mk(4, 3, "e", model.KindServer, 15, 70),                                                  // e's sidecar ingress
		mk(5, 4, "e", model.KindServer, 16, 68),                                                  // e's app
		mk(6, 5, "e", model.KindClient, 20, 10, model.String(model.AttrServerAddress, "j:8080")), // e calls j, no span from j
	})
	got := jt.times(map[string]bool{"a": true, "e": true, "j": true})
	want := map[string]times{
		"a": {self: float64(20 * ms)},
		"e": {self: float64(58 * ms), net: float64((10 + 2) * ms)},
		"j": {net: float64(10 * ms)},
	}
	check := func(got, want map[string]times) {
		t.Helper()
		for svc, w := range want {
			if g := got[svc]; g.self != w.self || g.net != w.net {
				t.Errorf("%s: self %v net %v, want self %v net %v", svc, time.Duration(g.self), time.Duration(g.net), time.Duration(w.self), time.Duration(w.net))
			}
		}
	}
	check(got, want)

	// The caller's CLIENT span measured the link (rootline run's net
	// wait: its time minus e's server time, both sidecars included): the
	// ingress time is in it, not counted again.
	jt = newTrace([]*model.Span{
		mk(1, 0, "a", model.KindServer, 0, 100),
		mk(2, 1, "a", model.KindClient, 10, 80, model.Float(model.AttrWaitNetMs, 12)),
		mk(3, 2, "a", model.KindClient, 12, 76),
		mk(4, 3, "e", model.KindServer, 15, 70),
		mk(5, 4, "e", model.KindServer, 16, 68),
	})
	check(jt.times(map[string]bool{"a": true, "e": true}), map[string]times{
		"a": {self: float64(20 * ms)},
		"e": {self: float64(68 * ms), net: float64(12 * ms)},
	})
}

// newTrace reads the attributes the analysis needs whatever their value
// types, links parents and children, and cuts a server span that outlasted
// its caller's CLIENT span, without touching the model spans.
func TestNewTrace(t *testing.T) {
	ms := int64(time.Millisecond)
	spans := []*model.Span{
		{SpanID: sid(1), Service: "a", Kind: model.KindServer, Start: 0, Duration: 100 * ms,
			Attributes: []model.KeyValue{model.Float(model.AttrWaitLocalMs, 1.5), model.String(model.AttrThreadIDs, "7, 8,7,x"), model.Int(model.AttrThreadID, 9)}},
		{SpanID: sid(2), ParentSpanID: sid(1), Service: "a", Kind: model.KindClient, Start: 10 * ms, Duration: 20 * ms,
			Attributes: []model.KeyValue{model.String(model.AttrWaitNetMs, "0.25"), model.String(model.AttrServerAddress, "b:80")}},
		{SpanID: sid(3), ParentSpanID: sid(2), Service: "b", Kind: model.KindServer, Start: 12 * ms, Duration: 30 * ms,
			Attributes: []model.KeyValue{model.Bool(model.AttrAnomaly, true), model.Bool(model.AttrWaitLocalMs, true)}},
	}
	tr := newTrace(spans)
	a, c, b := tr.spans[0], tr.spans[1], tr.spans[2]
	if a.waitLocal != 1.5 || !slices.Equal(a.threads, []int64{7, 8, 9}) || !math.IsNaN(a.waitNet) {
		t.Errorf("server span a: waitLocal %v waitNet %v threads %v", a.waitLocal, a.waitNet, a.threads)
	}
	if c.waitNet != 0.25 || c.serverAddr != "b:80" || c.up != a || len(a.children) != 1 || b.up != c {
		t.Errorf("client span: waitNet %v serverAddr %q, tree links wrong", c.waitNet, c.serverAddr)
	}
	if !b.anomaly || !math.IsNaN(b.waitLocal) || !tr.anomalous() {
		t.Errorf("server span b: anomaly %v waitLocal %v (a bool is no number)", b.anomaly, b.waitLocal)
	}
	if b.dur != 18*ms || tr.clamped != 1 || spans[2].Duration != 30*ms {
		t.Errorf("b cut to %v (clamped %d), model span's duration %v: want 18ms, 1, 30ms", time.Duration(b.dur), tr.clamped, time.Duration(spans[2].Duration))
	}
	if r := tr.root(); r != a || tr.start() != 0 || tr.duration() != 100*ms {
		t.Errorf("root %v start %d duration %d", r, tr.start(), tr.duration())
	}
}

func TestSplit(t *testing.T) {
	// pattern: one character per trace in start order, 'x' anomalous, '.' normal.
	mk := func(pattern string) []*trace {
		var out []*trace
		for i, c := range pattern {
			s := &span{id: sid(1), start: int64(i) * int64(time.Millisecond), dur: int64(time.Millisecond), anomaly: c == 'x'}
			if c == 'x' {
				s.dur = 10 * int64(time.Millisecond)
			}
			out = append(out, &trace{id: model.TraceID{15: byte(i)}, spans: []*span{s}, top: s})
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		pattern    string
		slow, base int
		onsetAt    int // index of the first trace after the onset; -1: none
		fallback   bool
	}{
		{"surge", strings.Repeat(".", 40) + "x" + strings.Repeat(".", 39) + strings.Repeat("x.xx", 10), 29, 80, 82, false}, // the densest tail starts at 82
		{"evenly spread", strings.Repeat("x...", 30), 30, 90, -1, false},
		{"too few anomalies", strings.Repeat(".", 50) + "xx", 5, 47, -1, true},
		{"surge at the start", strings.Repeat("x", 30) + strings.Repeat(".", 30), 30, 30, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := mk(tc.pattern)
			slow, base, onset, fallback := split(all)
			want := int64(-1)
			if tc.onsetAt >= 0 {
				want = all[tc.onsetAt].start()
			}
			if onset == 0 {
				onset = -1
			}
			if len(slow) != tc.slow || len(base) != tc.base || onset != want || fallback != tc.fallback {
				t.Errorf("slow %d base %d onset %d fallback %v; want %d %d %d %v", len(slow), len(base), onset, fallback, tc.slow, tc.base, want, tc.fallback)
			}
		})
	}
}

// CaptureTrouble explains missing evidence from the capture log's states.
func TestCaptureTrouble(t *testing.T) {
	from := time.Now().Add(-time.Minute)
	caps := []Capture{
		{Service: "e", State: "complete", Created: from.Add(time.Second)},
		{Service: "e", State: "partial", Error: "jfr: JFR.dump: attach failed", Created: from.Add(2 * time.Second)},
		{Service: "e", State: "failed", Error: "older", Created: from.Add(-time.Hour)},
		{Service: "b", State: "failed", Error: "not e", Created: from.Add(time.Second)},
	}
	if got, want := CaptureTrouble(caps, "e", from), "captures of e: 1 complete, 1 partial; first problem: jfr: JFR.dump: attach failed"; got != want {
		t.Errorf("CaptureTrouble = %q, want %q", got, want)
	}
	if got := CaptureTrouble(caps, "c", from); got != "" {
		t.Errorf("CaptureTrouble(no captures) = %q", got)
	}
}

// The cause follows from the growth of the culprit's times first, and only
// then from what was measured of its slow spans.
func TestNameCause(t *testing.T) {
	for _, tc := range []struct {
		name     string
		score    ServiceScore
		b        Breakdown
		err      error
		want     string
		explain  bool   // whether the measurements must be read
		evidence string // a line of the evidence must contain it
	}{
		{"calls into it grew most", ServiceScore{Service: "f", SelfDeltaMs: 1, NetDeltaMs: 40}, Breakdown{}, nil, CauseNetwork, false, "calls into f grew by 40.0 ms"},
		{"run-queue wait", ServiceScore{Service: "j", SelfDeltaMs: 30, LocalDeltaMs: 28}, Breakdown{}, nil, CauseRunQueue, false, "waited 28.0 ms more"},
		{"nothing measured", ServiceScore{SelfDeltaMs: 40}, Breakdown{}, nil, CauseSelfTime, true, "no CPU profile captured"},
		{"on CPU", ServiceScore{SelfDeltaMs: 40}, Breakdown{OnCPUNs: 9, OnCPUOfNs: 10, OnCPUSpans: 2, OnCPUSources: map[string]int{"eBPF CPU profiles": 2}}, nil, CauseCPU, true, "on CPU for 90% of its exclusive time (2 eBPF CPU profiles)"},
		{"off CPU", ServiceScore{SelfDeltaMs: 40}, Breakdown{OnCPUNs: 1, OnCPUOfNs: 10, OnCPUSpans: 2}, nil, CauseBlocking, true, "blocked (lock, sleep, I/O or GC)"},
		{"lock over CPU", ServiceScore{SelfDeltaMs: 40}, Breakdown{OnCPUNs: 7, OnCPUOfNs: 10, OnCPUSpans: 2, LockNs: 3, LockOfNs: 10, LockSpans: 2}, nil, CauseBlocking, true, "blocked entering Java monitors for 30%"},
		{"short lock waits", ServiceScore{SelfDeltaMs: 40}, Breakdown{OnCPUNs: 7, OnCPUOfNs: 10, OnCPUSpans: 2, LockNs: 1, LockOfNs: 10, LockSpans: 2}, nil, CauseCPU, true, "blocked entering Java monitors for 10%"},
		{"unreadable", ServiceScore{SelfDeltaMs: 40}, Breakdown{}, errors.New("gone"), CauseSelfTime, true, "profiles unreadable: gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			explained := false
			got, ev := nameCause(tc.score, nil, func() (Breakdown, error) { explained = true; return tc.b, tc.err })
			if got != tc.want || explained != tc.explain {
				t.Errorf("cause %q (measurements read: %v), want %q (%v)", got, explained, tc.want, tc.explain)
			}
			if !slices.ContainsFunc(ev, func(e string) bool { return strings.Contains(e, tc.evidence) }) {
				t.Errorf("evidence %q says nothing of %q", ev, tc.evidence)
			}
		})
	}
}

// memArtifacts is an in-memory ArtifactReader that counts its reads.
type memArtifacts struct {
	content map[string][]byte
	reads   map[string]int
}

func (m *memArtifacts) ArtifactContent(_ context.Context, id string) (io.ReadCloser, error) {
	m.reads[id]++
	b, ok := m.content[id]
	if !ok {
		return nil, fmt.Errorf("artifact %s: %w", id, store.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// cpuProfile is a pprof profile with a "cpu" sample of tid at each of ats
// worth ns, and, with lock, a "monitor_enter" type with no samples.
func cpuProfile(t *testing.T, tid int64, ns int64, lock bool, ats ...int64) []byte {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "f"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}, Function: []*profile.Function{fn}, Location: []*profile.Location{loc}}
	if lock {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: "monitor_enter", Unit: "nanoseconds"})
	}
	for _, at := range ats {
		v := []int64{ns}
		if lock {
			v = append(v, 0)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: v, NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {at}}})
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Profiles reads each artifact once however many spans it covers, counts
// only the span's threads within the span, prefers an eBPF profile to a
// JFR one for CPU time, takes a profile without lock events as no lock wait,
// and reports unreadable artifacts without losing what it read.
func TestProfilesExplain(t *testing.T) {
	pprof := "application/vnd.google.protobuf+gzip"
	arts := &memArtifacts{content: map[string][]byte{
		"cpu1": cpuProfile(t, 5, 3, false, 100, 200, 300, 5000), // one sample outside each span
		"jfr1": cpuProfile(t, 5, 1, false, 150, 250),            // no monitor_enter type
		"jfr2": cpuProfile(t, 6, 4, true, 1000, 1100),
	}, reads: map[string]int{}}
	cpu := store.Artifact{ID: "cpu1", Kind: "cpu", MediaType: pprof}
	jfr1 := store.Artifact{ID: "jfr1", Kind: "jfr", MediaType: pprof}
	rawJFR := store.Artifact{ID: "raw", Kind: "jfr", MediaType: "application/x-jfr"}
	jfr2 := store.Artifact{ID: "jfr2", Kind: "jfr", MediaType: pprof}
	spans := []SlowSpan{
		{SpanID: sid(1), Start: 90, End: 210, Exclusive: 100, Threads: []int64{5}, Artifacts: []store.Artifact{rawJFR, jfr1, cpu}},
		{SpanID: sid(2), Start: 290, End: 310, Exclusive: 10, Threads: []int64{5}, Artifacts: []store.Artifact{cpu}},
		{SpanID: sid(3), Start: 900, End: 1200, Exclusive: 50, Threads: []int64{6}, Artifacts: []store.Artifact{rawJFR, jfr2}},
		{SpanID: sid(4), Start: 0, End: 1e9, Exclusive: 50, Threads: nil, Artifacts: []store.Artifact{cpu}},                              // no threads: left out
		{SpanID: sid(5), Start: 0, End: 1e9, Exclusive: 70, Threads: []int64{5}, Artifacts: []store.Artifact{{ID: "lost", Kind: "cpu"}}}, // unreadable
	}
	b, err := (&Profiles{Reader: arts}).Explain(context.Background(), spans)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("err = %v, want the lost artifact's ErrNotFound", err)
	}
	want := Breakdown{OnCPUNs: 6 + 3 + 8, OnCPUOfNs: 100 + 10 + 50, OnCPUSpans: 3,
		OnCPUSources: map[string]int{"eBPF CPU profiles": 2, "JFR execution samples": 1},
		LockNs:       0, LockOfNs: 100 + 50, LockSpans: 2, KernelOnCPUNs: 6 + 3}
	if fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("breakdown\n %+v, want\n %+v", b, want)
	}
	for id, n := range arts.reads {
		if n != 1 {
			t.Errorf("artifact %s read %d times", id, n)
		}
	}
	if arts.reads["raw"] != 0 {
		t.Error("the raw JFR recording was read as a profile")
	}
}

// stackProfile is a pprof "cpu" profile of tid with one sample per stack
// (frames leaf first), each worth ns, all at time at.
func stackProfile(t *testing.T, tid, ns, at int64, stacks ...[]string) []byte {
	t.Helper()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}}}
	locs := map[string]*profile.Location{}
	for _, st := range stacks {
		var ls []*profile.Location
		for _, name := range st {
			if locs[name] == nil {
				fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name}
				locs[name] = &profile.Location{ID: fn.ID, Line: []profile.Line{{Function: fn}}}
				p.Function = append(p.Function, fn)
				p.Location = append(p.Location, locs[name])
			}
			ls = append(ls, locs[name])
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: ls, Value: []int64{ns}, NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {at}}})
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The on-CPU samples whose kernel stack is in file-system code are counted
// apart (each once), from eBPF CPU profiles only: a socket write, user code
// and a JFR recording's samples are not.
func TestProfilesFileIO(t *testing.T) {
	pprof := "application/vnd.google.protobuf+gzip"
	fileWrite := []string{"copy_folio_from_iter_atomic", "generic_perform_write", "ext4_buffered_write_iter", "vfs_write", "ksys_write", "do_syscall_64", "write", "Java_java_io_FileOutputStream_writeBytes"}
	fsync := []string{"submit_bio", "ext4_do_writepages", "do_writepages", "file_write_and_wait_range", "ext4_sync_file", "do_fsync", "__x64_sys_fsync", "fsync"}
	sockWrite := []string{"tcp_sendmsg", "sock_write_iter", "vfs_write", "ksys_write", "write"}
	user := []string{"compute", "main"}
	arts := &memArtifacts{content: map[string][]byte{
		"cpu": stackProfile(t, 5, 10, 100, fileWrite, fileWrite, fsync, sockWrite, user),
		"jfr": stackProfile(t, 6, 10, 100, fileWrite),
	}, reads: map[string]int{}}
	spans := []SlowSpan{
		{SpanID: sid(1), Start: 50, End: 150, Exclusive: 100, Threads: []int64{5}, Artifacts: []store.Artifact{{ID: "cpu", Kind: "cpu", MediaType: pprof}}},
		{SpanID: sid(2), Start: 50, End: 150, Exclusive: 100, Threads: []int64{6}, Artifacts: []store.Artifact{{ID: "jfr", Kind: "jfr", MediaType: pprof}}},
	}
	b, err := (&Profiles{Reader: arts}).Explain(context.Background(), spans)
	if err != nil {
		t.Fatal(err)
	}
	if b.OnCPUNs != 60 || b.KernelOnCPUNs != 50 || b.FileIONs != 30 {
		t.Errorf("on CPU %d, of it with kernel stacks %d, in file-system code %d; want 60, 50, 30", b.OnCPUNs, b.KernelOnCPUNs, b.FileIONs)
	}
	for name, want := range map[string]bool{"ext4_sync_file": true, "blk_mq_submit_bio": true, "filemap_fault": true, "vfs_write": false, "tcp_sendmsg": false, "shmem_write_begin": false} {
		if got := FileSystemFrame(name); got != want {
			t.Errorf("FileSystemFrame(%q) = %v, want %v", name, got, want)
		}
	}
}

// At most maxProfiledSpans spans are read, spread over the list.
func TestProfilesSpread(t *testing.T) {
	arts := &memArtifacts{content: map[string][]byte{}, reads: map[string]int{}}
	var spans []SlowSpan
	for i := range 3 * maxProfiledSpans {
		id := "p" + strconv.Itoa(i)
		arts.content[id] = cpuProfile(t, 1, 1, false, 10)
		spans = append(spans, SlowSpan{Start: 0, End: 100, Exclusive: 1, Threads: []int64{1}, Artifacts: []store.Artifact{{ID: id, Kind: "cpu"}}})
	}
	b, err := (&Profiles{Reader: arts}).Explain(context.Background(), spans)
	if err != nil || b.OnCPUSpans != maxProfiledSpans {
		t.Fatalf("%d spans read (err %v), want %d", b.OnCPUSpans, err, maxProfiledSpans)
	}
	if arts.reads["p0"] != 1 || arts.reads["p57"] != 1 || arts.reads["p1"] != 0 {
		t.Errorf("reads %v: want every third span from the first", arts.reads)
	}
}

// TestSocketWaitCharged: a service's socket wait is its own in the share its
// threads' time was its own work. b's requests queue in its socket while
// its threads wait on c (a pool blocked on a throttled dependency): c is the
// culprit, and b keeps only its own work's share of the queue. When b's
// threads are busy with their own work instead, the queue is all b's.
func TestSocketWaitCharged(t *testing.T) {
	ms := int64(time.Millisecond)
	id := byte(0)
	mk := func(parent byte, svc string, kind model.SpanKind, start, dur int64, attrs ...model.KeyValue) *model.Span {
		id++
		return &model.Span{TraceID: model.TraceID{id}, SpanID: sid(id), ParentSpanID: sid(parent), Service: svc, Kind: kind,
			Start: start * ms, Duration: dur * ms, Attributes: attrs}
	}
	// a → b → c; b waits sock ms in its socket, works own ms, calls c for
	// cdur ms (c's own time).
	chain := func(sock, own, cdur int64) *trace {
		id = 0
		a := mk(0, "a", model.KindServer, 0, sock+own+cdur+2)
		ac := mk(a.SpanID[7], "a", model.KindClient, 1, sock+own+cdur)
		b := mk(ac.SpanID[7], "b", model.KindServer, 1, sock+own+cdur,
			model.Float(model.AttrWaitSocketMs, float64(sock)), model.Float(model.AttrWaitLocalMs, float64(sock)))
		bc := mk(b.SpanID[7], "b", model.KindClient, 1+sock+own, cdur)
		c := mk(bc.SpanID[7], "c", model.KindServer, 1+sock+own, cdur)
		return newTrace([]*model.Span{a, ac, b, bc, c})
	}
	base := []*trace{chain(0, 2, 5), chain(0, 2, 5)}
	blocked := rank([]*trace{chain(4000, 2, 900), chain(4000, 2, 900)}, base)
	if blocked[0].Service != "c" {
		t.Errorf("pool blocked on c: ranked %+v, want c first", blocked)
	}
	for _, r := range blocked {
		if r.Service == "b" && (r.SelfDeltaMs > 20 || r.LocalDeltaMs > 20) {
			t.Errorf("b keeps %.1f ms own, %.1f ms local of a queue its calls to c caused", r.SelfDeltaMs, r.LocalDeltaMs)
		}
	}
	busy := rank([]*trace{chain(400, 200, 5), chain(400, 200, 5)}, base)
	if busy[0].Service != "b" || busy[0].SelfDeltaMs < 580 || busy[0].LocalDeltaMs < 380 {
		t.Errorf("b's threads busy with their own work: ranked %+v, want b first with its queue", busy)
	}
}

// A caller held off its CPU reads its callee's answers late: the time a
// response waited in the caller's socket (rootline.wait.response_socket_ms)
// is the caller's, and the link's net wait does not hold it, so the
// caller ranks first, not its callee.
func TestResponseSocketWaitCharged(t *testing.T) {
	ms := int64(time.Millisecond)
	// f → j: f works 2 ms, calls j (j works 5 ms; the call's net wait 1 ms
	// without the answer's wait in f's socket, resp).
	call := func(resp int64) *trace {
		f := &model.Span{SpanID: sid(1), Service: "f", Kind: model.KindServer, Duration: (8 + resp) * ms}
		fc := &model.Span{SpanID: sid(2), ParentSpanID: sid(1), Service: "f", Kind: model.KindClient, Start: 2 * ms, Duration: (6 + resp) * ms,
			Attributes: []model.KeyValue{model.Float(model.AttrWaitNetMs, 1)}}
		if resp > 0 {
			fc.Attributes = append(fc.Attributes, model.Float(model.AttrWaitResponseSocketMs, float64(resp)))
		}
		j := &model.Span{SpanID: sid(3), ParentSpanID: sid(2), Service: "j", Kind: model.KindServer, Start: 2 * ms, Duration: 5 * ms}
		return newTrace([]*model.Span{f, fc, j})
	}
	got := call(20).times(map[string]bool{"f": true, "j": true})
	if got["f"].self != float64(22*ms) || got["j"].net != float64(ms) || got["j"].self != float64(5*ms) {
		t.Errorf("times %+v: want f's own 22 ms (2 + the answer's 20 in its socket), j's net 1 ms", got)
	}
	ranked := rank([]*trace{call(20), call(20)}, []*trace{call(0), call(0)})
	if ranked[0].Service != "f" || ranked[0].SelfDeltaMs != 20 {
		t.Errorf("ranked %+v: want f first, its own time 20 ms longer", ranked)
	}
}

// withMapping is a profile (stackProfile's) whose locations are all in one
// mapping of file.
func withMapping(t *testing.T, b []byte, file string) []byte {
	t.Helper()
	p, err := profile.ParseData(b)
	if err != nil {
		t.Fatal(err)
	}
	m := &profile.Mapping{ID: 1, Start: 0x1000, Limit: 0x2000, File: file}
	p.Mapping = []*profile.Mapping{m}
	for _, l := range p.Location {
		l.Mapping = m
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The on-CPU samples whose kernel stack faults in a fresh anonymous page
// are counted apart, without reclaim under the fault (memory pressure, not
// the fault-in, counted as reclaim), and apart again in a JVM's profiles
// (libjvm.so mapped).
func TestProfilesAnonFaults(t *testing.T) {
	pprof := "application/vnd.google.protobuf+gzip"
	fault := []string{"clear_page_erms", "get_page_from_freelist", "__alloc_frozen_pages_noprof", "alloc_pages_mpol", "vma_alloc_folio_noprof",
		"do_anonymous_page", "__handle_mm_fault", "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault", "Interpreter"}
	reclaim := append([]string{"shrink_folio_list", "shrink_lruvec", "try_to_free_mem_cgroup_pages", "__alloc_pages_slowpath"}, fault[3:]...)
	user := []string{"compute", "main"}
	prof := stackProfile(t, 5, 10, 100, fault, fault, fault, reclaim, user)
	arts := &memArtifacts{content: map[string][]byte{
		"go":  withMapping(t, prof, "/srv/cart"),
		"jvm": withMapping(t, prof, "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"),
	}, reads: map[string]int{}}
	span := func(id byte, art string) SlowSpan {
		return SlowSpan{SpanID: sid(id), Start: 50, End: 150, Exclusive: 100, Threads: []int64{5}, Artifacts: []store.Artifact{{ID: art, Kind: "cpu", MediaType: pprof}}}
	}
	for _, tc := range []struct {
		arts                            []string
		anon, jvm, jvmAnon, on, reclaim int64
	}{
		{[]string{"go"}, 30, 0, 0, 50, 10},
		{[]string{"jvm"}, 30, 50, 30, 50, 10},
		{[]string{"go", "jvm"}, 60, 50, 30, 100, 20},
	} {
		var spans []SlowSpan
		for i, a := range tc.arts {
			spans = append(spans, span(byte(i+1), a))
		}
		b, err := (&Profiles{Reader: arts}).Explain(context.Background(), spans)
		if err != nil {
			t.Fatal(err)
		}
		if b.KernelOnCPUNs != tc.on || b.AnonFaultNs != tc.anon || b.JVMNs != tc.jvm || b.JVMAnonFaultNs != tc.jvmAnon || b.ReclaimNs != tc.reclaim {
			t.Errorf("%v: on CPU %d, anonymous faults %d, in a JVM %d of which faults %d, reclaim %d; want %d, %d, %d, %d, %d",
				tc.arts, b.KernelOnCPUNs, b.AnonFaultNs, b.JVMNs, b.JVMAnonFaultNs, b.ReclaimNs, tc.on, tc.anon, tc.jvm, tc.jvmAnon, tc.reclaim)
		}
	}
}
