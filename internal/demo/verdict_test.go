package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/server"
	"github.com/rootline/rootline/internal/store"
)

// verdictTopo is Fig 6.6 cut down: e is called twice per request, j three times.
var verdictTopo = map[string][]string{
	"a": {"b", "c"}, "b": {"e"}, "c": {"e", "f"}, "e": {"j"}, "f": {"j"}, "j": nil,
}

// synthFault describes what the synthetic traffic does wrong: kind "self"
// (the service's own time grows), "net" (calls into it are delayed on the
// way) or "local" (its threads wait for a CPU).
type synthFault struct {
	kind, svc string
}

// addSynthTrace appends a trace shaped like what `rootline run` reports:
// a SERVER span per hop with rootline.wait.local_ms, and a CLIENT span per
// call with rootline.wait.net_ms and server.address. Returns the span count.
func addSynthTrace(td ptrace.Traces, rng *rand.Rand, start time.Time, f synthFault) int {
	var tid pcommon.TraceID
	for i := range tid {
		tid[i] = byte(rng.Uint32())
	}
	newID := func() pcommon.SpanID {
		var sid pcommon.SpanID
		for i := range sid {
			sid[i] = byte(rng.Uint32())
		}
		return sid
	}
	n := 0
	emit := func(svc string, kind ptrace.SpanKind, name string, sid, parent pcommon.SpanID, at time.Time, d time.Duration, attrs func(pcommon.Map)) {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", svc)
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetTraceID(tid)
		s.SetSpanID(sid)
		s.SetParentSpanID(parent)
		s.SetName(name)
		s.SetKind(kind)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(d)))
		attrs(s.Attributes())
		n++
	}
	jitter := func(ms float64) time.Duration {
		return time.Duration(ms * (0.8 + 0.4*rng.Float64()) * float64(time.Millisecond))
	}
	var serve func(svc string, parent pcommon.SpanID, at time.Time) time.Duration
	serve = func(svc string, parent pcommon.SpanID, at time.Time) time.Duration {
		own, local := jitter(2), jitter(0.1)
		if f.svc == svc && f.kind == "self" {
			own += jitter(40)
		}
		if f.svc == svc && f.kind == "local" {
			extra := jitter(30)
			own += extra
			local += extra
		}
		sid := newID()
		t := at.Add(own / 2)
		for _, callee := range verdictTopo[svc] {
			net := jitter(0.3)
			if f.svc == callee && f.kind == "net" {
				net += jitter(40)
			}
			cid := newID()
			inner := serve(callee, cid, t.Add(net/2))
			cd := inner + net
			emit(svc, ptrace.SpanKindClient, "GET", cid, sid, t, cd, func(m pcommon.Map) {
				m.PutStr("server.address", callee+":8080")
				m.PutDouble("rootline.wait.net_ms", float64(net)/1e6)
			})
			t = t.Add(cd)
		}
		d := t.Sub(at) + own/2
		emit(svc, ptrace.SpanKindServer, "GET /", sid, parent, at, d, func(m pcommon.Map) {
			m.PutDouble("rootline.wait.local_ms", float64(local)/1e6)
			m.PutStr("rootline.thread.ids", "101,102")
		})
		return d
	}
	serve("a", pcommon.SpanID{}, start)
	return n
}

// startTestServer runs an in-process `rootline server` on free ports and
// returns its query API base and OTLP/gRPC address.
func startTestServer(t *testing.T) (srv *server.Server, api, otlp string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr, cfg.ZipkinAddr, cfg.QueryAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.SQLite.Synchronous = "NORMAL"
	srv, err := server.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	a := srv.Addrs()
	return srv, "http://" + a.Query, a.OTLPGRPC
}

func TestDiagnose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and sends ~40,000 spans")
	}
	for _, tc := range []struct {
		name        string
		fault       synthFault
		wantService string
		wantCause   string
	}{
		{"lock in e (own time)", synthFault{"self", "e"}, "e", CauseSelfTime},
		{"delay on calls into f", synthFault{"net", "f"}, "f", CauseNetwork},
		{"cpu starvation of j", synthFault{"local", "j"}, "j", CauseRunQueue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, api, from := runScenario(t, tc.fault)
			v, err := Diagnose(context.Background(), api, "", from, time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			logVerdict(t, v)
			if v.Service != tc.wantService || v.Cause != tc.wantCause {
				t.Errorf("verdict %q/%q, want %q/%q", v.Service, v.Cause, tc.wantService, tc.wantCause)
			}
			if v.Confidence < 0.5 || v.ExampleTraceID == "" || v.SlowTraces < 10 || v.BaseTraces < 100 {
				t.Errorf("weak verdict: confidence %.2f, example %q, %d slow, %d base", v.Confidence, v.ExampleTraceID, v.SlowTraces, v.BaseTraces)
			}
		})
	}
}

// runScenario starts a server and sends it 300 normal traces, then 20 with
// the fault; it returns when every span is stored.
func runScenario(t *testing.T, fault synthFault) (srv *server.Server, api string, from time.Time) {
	t.Helper()
	srv, api, otlp := startTestServer(t)
	conn, err := grpc.NewClient(otlp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	rng := rand.New(rand.NewPCG(7, 9))
	sent := 0
	at := time.Now().Add(-time.Minute)
	send := func(n int, f synthFault) {
		for i := 0; i < n; i += 50 {
			td := ptrace.NewTraces()
			for j := i; j < min(i+50, n); j++ {
				sent += addSynthTrace(td, rng, at, f)
				at = at.Add(20 * time.Millisecond)
			}
			if _, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
				t.Fatal(err)
			}
		}
	}
	from = at.Add(-time.Second)
	send(300, synthFault{})
	send(20, fault)
	waitStored(t, api, sent)
	return srv, api, from
}

func logVerdict(t *testing.T, v Verdict) {
	t.Helper()
	t.Logf("verdict %s / %s, confidence %.2f, %d slow vs %d base traces", v.Service, v.Cause, v.Confidence, v.SlowTraces, v.BaseTraces)
	for _, e := range v.Evidence {
		t.Log("  ", e)
	}
	for _, r := range v.Ranking {
		t.Logf("   %-2s score %6.2f self %+6.2f net %+6.2f local %+6.2f anomalies %d", r.Service, r.Score, r.SelfDeltaMs, r.NetDeltaMs, r.LocalDeltaMs, r.Anomalies)
	}
}

// With a CPU profile linked to the culprit's slow spans, the share of its
// exclusive time its threads spent on CPU tells CPU work from blocking; a
// JFR recording's pprof conversion gives the share from Java's execution
// samples when there is no eBPF profile, and its lock events name a lock
// even when the threads were on CPU.
func TestDiagnoseCPUEvidence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and sends ~13,000 spans per case")
	}
	for _, tc := range []struct {
		name     string
		kind     string  // artifact kind: "cpu" (eBPF) or "jfr" (its pprof conversion)
		onCPU    float64 // share of each slow span's exclusive time in CPU samples
		lock     float64 // share in monitor-enter events (0: the profile has no such type)
		want     string
		evidence string // a line of the verdict's evidence must contain it
	}{
		{"busy", "cpu", 0.9, 0, CauseCPU, "on CPU for 90% of its exclusive time (20 eBPF CPU profiles)"},
		{"blocked", "cpu", 0.1, 0, CauseBlocking, "on CPU for 10%"},
		{"busy, JFR only", "jfr", 0.8, 0, CauseCPU, "(20 JFR execution samples)"},
		{"JFR lock waits", "jfr", 0.6, 0.4, CauseBlocking, "blocked entering Java monitors for 40% of its exclusive time"},
		{"JFR, short lock waits", "jfr", 0.7, 0.1, CauseCPU, "blocked entering Java monitors for 10%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, api, from := runScenario(t, synthFault{"self", "e"})
			ctx := context.Background()
			var anoms []anomalyRec
			c := &apiClient{base: api}
			if err := c.get(ctx, "/api/v1/anomalies?service=e&limit=1000", &anoms); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, a := range anoms {
				ids = append(ids, a.TraceID)
			}
			traces, err := c.tracesByID(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			spans := map[string]*span{}
			for _, tr := range traces {
				for _, s := range tr.spans {
					spans[s.id] = s
				}
			}
			// One profile per anomalous span of e, as a capture would upload
			// (with the raw recording beside a JFR's conversion).
			for _, a := range anoms {
				s := spans[a.SpanID]
				if s == nil {
					t.Fatalf("span %s not found", a.SpanID)
				}
				tid, _ := model.ParseTraceID(a.TraceID)
				sid, _ := model.ParseSpanID(a.SpanID)
				art := store.Artifact{Kind: tc.kind, MediaType: "application/vnd.google.protobuf+gzip",
					FileName: "e.pb.gz", Service: "e", Start: s.start - 5e9, End: s.start + s.dur + 2e9,
					Spans: []store.SpanRef{{TraceID: tid, SpanID: sid}}}
				if tc.kind == "jfr" {
					raw := art
					raw.MediaType, raw.FileName = "application/x-jfr", "e.jfr"
					if _, err := srv.Store().PutArtifact(ctx, raw, strings.NewReader("FLR\x00")); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := srv.Store().PutArtifact(ctx, art, spanProfile(t, s, tc.onCPU, tc.lock)); err != nil {
					t.Fatal(err)
				}
			}
			v, err := Diagnose(ctx, api, "", from, time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			logVerdict(t, v)
			if v.Service != "e" || v.Cause != tc.want {
				t.Errorf("verdict %q/%q, want e/%q", v.Service, v.Cause, tc.want)
			}
			if !slices.ContainsFunc(v.Evidence, func(e string) bool { return strings.Contains(e, tc.evidence) }) {
				t.Errorf("no evidence line says %q", tc.evidence)
			}
			linked := fmt.Sprintf("evidence captured for e: %d %s artifacts, linked to %d of its %d anomalous spans", len(anoms)*map[string]int{"cpu": 1, "jfr": 2}[tc.kind], tc.kind, len(anoms), len(anoms))
			if !slices.Contains(v.Evidence, linked) {
				t.Errorf("no evidence line %q", linked)
			}
		})
	}
}

// spanProfile is a profile of span s's thread 101 as the agent's profilers
// make them: CPU samples worth onCPU of its exclusive time and, when lock >
// 0, monitor-enter events worth lock of it; plus samples of another thread
// and of another time, which must not count.
func spanProfile(t *testing.T, s *span, onCPU, lock float64) io.Reader {
	t.Helper()
	fn := &profile.Function{ID: 1, Name: "Svc.spin"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function:   []*profile.Function{fn}, Location: []*profile.Location{loc},
	}
	if lock > 0 {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: "monitor_enter", Unit: "nanoseconds"})
	}
	add := func(tid, at, cpu, mon int64) {
		v := []int64{1, cpu}
		if lock > 0 {
			v = append(v, mon)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: v,
			NumLabel: map[string][]int64{"tid": {tid}, "time_ns": {at}}})
	}
	self := float64(s.exclusive())
	add(101, s.start+1000, int64(onCPU*self), 0)
	add(999, s.start+1000, 1e9, 1e9)
	add(101, s.start-1e9, 1e9, 1e9)
	if lock > 0 {
		add(101, s.start+2000, 0, int64(lock*self))
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestDiagnoseEmpty(t *testing.T) {
	_, api, _ := startTestServer(t)
	v, err := Diagnose(context.Background(), api, "", time.Now().Add(-time.Minute), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v.Service != "" || v.Cause != CauseNone || len(v.Evidence) == 0 {
		t.Errorf("empty store: %+v", v)
	}
	if _, err := Diagnose(context.Background(), "http://127.0.0.1:1", "", time.Now().Add(-time.Minute), time.Now()); err == nil {
		t.Error("no error from an unreachable API")
	}
}

// waitStored waits until the server stored n spans.
func waitStored(t *testing.T, api string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := metricValue(context.Background(), api+"/metrics", "rootline_pipeline_spans_stored_total")
		if err == nil && int(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored %v of %d spans after 30 s (err %v)", got, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

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

// With sidecars a hop is app CLIENT → sidecar egress CLIENT → sidecar ingress
// SERVER → app SERVER: the time between the two services is charged once, to
// the callee, and the sidecar's ingress time to the callee's own time.
func TestTraceTimesSidecars(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(id, parent, svc, kind string, start, dur int64) *span {
		return &span{id: id, parent: parent, service: svc, kind: kind, start: start * ms, dur: dur * ms,
			waitLocal: math.NaN(), waitNet: math.NaN()}
	}
	jt := &trace{id: "t", spans: []*span{
		mk("1", "", "a", "server", 0, 100),
		mk("2", "1", "a", "client", 10, 80), // the app's call
		mk("3", "2", "a", "client", 12, 76), // a's sidecar egress
		mk("4", "3", "e", "server", 15, 70), // e's sidecar ingress
		mk("5", "4", "e", "server", 16, 68), // e's app
		mk("6", "5", "e", "client", 20, 10), // e calls j, no span from j
	}}
	jt.spans[5].serverAddr = "j:8080"
	byID := map[string]*span{}
	for _, s := range jt.spans {
		byID[s.id] = s
	}
	for _, s := range jt.spans {
		if p := byID[s.parent]; p != nil {
			p.children = append(p.children, s)
			s.up = p
		}
	}
	got := jt.times(map[string]bool{"a": true, "e": true, "j": true})
	want := map[string]times{
		"a": {self: float64(20 * ms)},
		"e": {self: float64((2 + 58) * ms), net: float64(10 * ms)},
		"j": {net: float64(10 * ms)},
	}
	for svc, w := range want {
		if g := got[svc]; g.self != w.self || g.net != w.net {
			t.Errorf("%s: self %v net %v, want self %v net %v", svc, time.Duration(g.self), time.Duration(g.net), time.Duration(w.self), time.Duration(w.net))
		}
	}
}

func TestSplit(t *testing.T) {
	// pattern: one character per trace in start order, 'x' anomalous, '.' normal.
	mk := func(pattern string) []*trace {
		var out []*trace
		for i, c := range pattern {
			s := &span{id: "r", start: int64(i) * int64(time.Millisecond), dur: int64(time.Millisecond), anomaly: c == 'x'}
			if c == 'x' {
				s.dur = 10 * int64(time.Millisecond)
			}
			out = append(out, &trace{id: strconv.Itoa(i), spans: []*span{s}})
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

// captureTrouble explains missing evidence from the capture API's states.
func TestCaptureTrouble(t *testing.T) {
	from := time.Now().Add(-time.Minute)
	body := fmt.Sprintf(`[
		{"service":"e","state":"complete","created":%q},
		{"service":"e","state":"partial","error":"jfr: JFR.dump: attach failed","created":%q},
		{"service":"e","state":"failed","error":"older","created":%q},
		{"service":"b","state":"failed","error":"not e","created":%q}]`,
		from.Add(time.Second).Format(time.RFC3339Nano), from.Add(2*time.Second).Format(time.RFC3339Nano),
		from.Add(-time.Hour).Format(time.RFC3339Nano), from.Add(time.Second).Format(time.RFC3339Nano))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/captures" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	c := &apiClient{base: srv.URL}
	got := c.captureTrouble(context.Background(), "e", from)
	if want := "captures of e: 1 complete, 1 partial; first problem: jfr: JFR.dump: attach failed"; got != want {
		t.Errorf("captureTrouble = %q, want %q", got, want)
	}
	if got := c.captureTrouble(context.Background(), "c", from); got != "" {
		t.Errorf("captureTrouble(no captures) = %q", got)
	}
}
