// Package analysistest holds what the tests of a diagnosis share: an
// in-process `rootline server`, synthetic traffic shaped like what
// `rootline run` reports, with a fault in one service, and the profiles an
// agent would capture for its slow spans.
package analysistest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/server"
	"github.com/rootline/rootline/internal/store"
)

// Topology is Fig 6.6 of the Protractor testbed cut down: e is called twice
// per request, j three times.
var Topology = map[string][]string{
	"a": {"b", "c"}, "b": {"e"}, "c": {"e", "f"}, "e": {"j"}, "f": {"j"}, "j": nil,
}

// Thread is the thread every synthetic SERVER span names first in
// rootline.thread.ids.
const Thread = 101

// Fault describes what the synthetic traffic does wrong: Kind "self" (the
// service's own time grows), "net" (calls into it are delayed on the way) or
// "local" (its threads wait for a CPU); the zero Fault is normal traffic.
type Fault struct {
	Kind, Service string
}

// AddTrace appends a trace shaped like what `rootline run` reports: a SERVER
// span per hop with rootline.wait.local_ms, and a CLIENT span per call with
// rootline.wait.net_ms and server.address. It returns the span count.
func AddTrace(td ptrace.Traces, rng *rand.Rand, start time.Time, f Fault) int {
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
		if f.Service == svc && f.Kind == "self" {
			own += jitter(40)
		}
		if f.Service == svc && f.Kind == "local" {
			extra := jitter(30)
			own += extra
			local += extra
		}
		sid := newID()
		t := at.Add(own / 2)
		for _, callee := range Topology[svc] {
			net := jitter(0.3)
			if f.Service == callee && f.Kind == "net" {
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

// StartServer runs an in-process `rootline server` on free loopback ports,
// its API guarded by token when one is given, until the test ends. It
// returns the server, its query API's base URL and its OTLP/gRPC address.
func StartServer(t testing.TB, token string) (srv *server.Server, api, otlp string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.OTLPGRPCAddr, cfg.OTLPHTTPAddr, cfg.ZipkinAddr, cfg.QueryAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.SQLite.Synchronous = "NORMAL"
	cfg.AuthToken, cfg.Capture.AuthToken = token, token
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

// RunScenario starts a server (see StartServer) and sends it 300 normal
// traces, then 20 with the fault, 20 ms apart, ending about now; it returns
// when every span is stored, with a time just before the first trace.
func RunScenario(t testing.TB, fault Fault, token string) (srv *server.Server, api string, from time.Time) {
	t.Helper()
	srv, api, otlp := StartServer(t, token)
	conn, err := grpc.NewClient(otlp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	rng := rand.New(rand.NewPCG(7, 9))
	sent := 0
	at := time.Now().Add(-time.Minute)
	send := func(n int, f Fault) {
		for i := 0; i < n; i += 50 {
			td := ptrace.NewTraces()
			for j := i; j < min(i+50, n); j++ {
				sent += AddTrace(td, rng, at, f)
				at = at.Add(20 * time.Millisecond)
			}
			if _, err := client.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
				t.Fatal(err)
			}
		}
	}
	from = at.Add(-time.Second)
	send(300, Fault{})
	send(20, fault)
	WaitStored(t, srv, sent)
	return srv, api, from
}

// WaitStored waits until srv stored n spans (its
// rootline_pipeline_spans_stored_total), for up to 30 s.
func WaitStored(t testing.TB, srv *server.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := storedSpans(srv)
		if err == nil && int(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored %v of %d spans after 30 s (err %v)", got, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func storedSpans(srv *server.Server) (float64, error) {
	mfs, err := srv.Registry().Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "rootline_pipeline_spans_stored_total" && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue(), nil
		}
	}
	return 0, nil
}

// Source reads srv's store and capture log directly, as the server's own
// API would.
func Source(srv *server.Server) *analysis.StoreSource {
	return &analysis.StoreSource{Spans: srv.Store(), Artifacts: srv.Store(),
		CaptureLog: func(_ context.Context, limit int) ([]analysis.Capture, error) {
			var out []analysis.Capture
			for _, c := range srv.Captures().Captures(limit) {
				out = append(out, analysis.Capture{Service: c.Service, State: c.State, Error: c.Error, Created: c.Created})
			}
			return out, nil
		}}
}

// AttachProfiles stores, for each anomalous span of svc, an artifact of kind
// ("cpu": an eBPF CPU profile; "jfr": a JFR recording's pprof conversion,
// with the raw recording beside it) holding profileOf(span) and linked to
// the span, as a capture would upload them. It returns the spans.
func AttachProfiles(t testing.TB, srv *server.Server, svc, kind string, profileOf func(*model.Span) io.Reader) []*model.Span {
	t.Helper()
	ctx := context.Background()
	spans, err := srv.Store().Anomalies(ctx, store.AnomalyQuery{Service: svc, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spans {
		art := store.Artifact{Kind: kind, MediaType: "application/vnd.google.protobuf+gzip",
			FileName: svc + ".pb.gz", Service: svc, Start: s.Start - 5e9, End: s.End() + 2e9,
			Spans: []store.SpanRef{{TraceID: s.TraceID, SpanID: s.SpanID}}}
		if kind == "jfr" {
			raw := art
			raw.MediaType, raw.FileName = "application/x-jfr", svc+".jfr"
			if _, err := srv.Store().PutArtifact(ctx, raw, strings.NewReader("FLR\x00")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := srv.Store().PutArtifact(ctx, art, profileOf(s)); err != nil {
			t.Fatal(err)
		}
	}
	return spans
}

// SpanProfile is a profile of a span's thread Thread as the agent's
// profilers make them (pprof, gzipped, with "tid" and "time_ns" labels): CPU
// samples worth onCPU of the span's exclusive time and, when lock > 0,
// monitor-enter events worth lock of it; plus samples of another thread and
// of another time, which must not count. start is when the span started.
func SpanProfile(t testing.TB, start, exclusive int64, onCPU, lock float64) io.Reader {
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
	self := float64(exclusive)
	add(Thread, start+1000, int64(onCPU*self), 0)
	add(999, start+1000, 1e9, 1e9)
	add(Thread, start-1e9, 1e9, 1e9)
	if lock > 0 {
		add(Thread, start+2000, 0, int64(lock*self))
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return &buf
}
