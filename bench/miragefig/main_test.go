package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
)

// chainTrace builds one trace of the chain as `rootline run` reports it:
// a SERVER span per service with its local wait, and a CLIENT span per call
// with its network and remote waits, the callee at server.address. Waits in
// ms, in chain order; start is the api span's start (Unix ns).
func chainTrace(t *testing.T, n int, start int64, local [3]float64, net, remote [2]float64) []*model.Span {
	t.Helper()
	tid, err := model.ParseTraceID(fmt.Sprintf("%032x", n+1))
	if err != nil {
		t.Fatal(err)
	}
	sid := func(i int) model.SpanID {
		id, err := model.ParseSpanID(fmt.Sprintf("%016x", n*16+i+1))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	var spans []*model.Span
	var parent model.SpanID
	dur := int64(60 * time.Millisecond)
	for i, svc := range chain {
		srv := &model.Span{TraceID: tid, SpanID: sid(2 * i), ParentSpanID: parent, Service: svc, Kind: model.KindServer,
			Start: start, Duration: dur, Attributes: []model.KeyValue{model.Float(model.AttrWaitLocalMs, local[i])}}
		spans = append(spans, srv)
		if i == len(chain)-1 {
			break
		}
		start += int64(time.Millisecond)
		dur -= int64(2 * time.Millisecond)
		cl := &model.Span{TraceID: tid, SpanID: sid(2*i + 1), ParentSpanID: srv.SpanID, Service: svc, Kind: model.KindClient,
			Start: start, Duration: dur, Attributes: []model.KeyValue{
				model.String(model.AttrServerAddress, chain[i+1]+":8080"),
				model.Float(model.AttrWaitNetMs, net[i]), model.Float(model.AttrWaitRemoteMs, remote[i])}}
		spans = append(spans, cl)
		parent = cl.SpanID
	}
	return spans
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestAggregateCPUBottleneck(t *testing.T) {
	const from, to = int64(1e18), int64(1e18 + 10e9)
	// The backend waits for its CPU (20 and 40 ms), the callers' remote
	// waits mirror it, their own waits stay under the 1 ms floor.
	traces := [][]*model.Span{
		chainTrace(t, 0, from+1e9, [3]float64{0.2, 0.4, 20}, [2]float64{0.3, 0.5}, [2]float64{20, 20}),
		chainTrace(t, 1, from+2e9, [3]float64{0.4, 0.2, 40}, [2]float64{0.1, 0.7}, [2]float64{40, 40}),
		// Started before the step: left out, although the search returned it.
		chainTrace(t, 2, from-1, [3]float64{0, 0, 500}, [2]float64{0, 0}, [2]float64{500, 500}),
	}
	got := Aggregate(traces, from, to, func(p string) string { return strings.TrimSuffix(p, ":8080") })
	if len(got) != 3 {
		t.Fatalf("services %v, want the three of the chain", got)
	}
	for svc, want := range map[string]struct {
		local, net, remote float64
		calls              int
		decisions          map[string]int
	}{
		"backend":  {30, 0, 0, 0, map[string]int{"local": 2}},
		"frontend": {0.3, 0.6, 30, 2, map[string]int{"remote→backend": 2}},
		"api":      {0.3, 0.2, 30, 2, map[string]int{"remote→frontend": 2}},
	} {
		w := got[svc]
		if w.Hops != 2 || w.LocalHops != 2 || w.Calls != want.calls {
			t.Errorf("%s: %d hops, %d with a local wait, %d calls; want 2, 2, %d", svc, w.Hops, w.LocalHops, w.Calls, want.calls)
		}
		if !near(w.Local, want.local) || !near(w.Net, want.net) || !near(w.Remote, want.remote) {
			t.Errorf("%s: local %.3f net %.3f remote %.3f, want %.3f %.3f %.3f", svc, w.Local, w.Net, w.Remote, want.local, want.net, want.remote)
		}
		if fmt.Sprint(w.Decisions) != fmt.Sprint(want.decisions) {
			t.Errorf("%s: decisions %v, want %v", svc, w.Decisions, want.decisions)
		}
	}
	if w := got["api"]; !near(w.Total, 60) {
		t.Errorf("api total %.3f ms, want 60", w.Total)
	}
}

func TestAggregateNetworkBottleneck(t *testing.T) {
	const from, to = int64(0), int64(10e9)
	// The frontend's link to the backend: its network wait passes the
	// backend's local wait; the api delegates to the frontend.
	traces := [][]*model.Span{
		chainTrace(t, 0, 1e9, [3]float64{0.5, 0.5, 3}, [2]float64{0.2, 50}, [2]float64{50, 3}),
		// A hop below the 1 ms floor everywhere decides nothing.
		chainTrace(t, 1, 2e9, [3]float64{0.1, 0.1, 0.2}, [2]float64{0.1, 0.3}, [2]float64{0.3, 0.2}),
	}
	got := Aggregate(traces, from, to, func(p string) string { return strings.TrimSuffix(p, ":8080") })
	for svc, want := range map[string]map[string]int{
		"backend":  {"local": 1, "none": 1},
		"frontend": {"network→backend": 1, "none": 1},
		"api":      {"remote→frontend": 1, "none": 1},
	} {
		if fmt.Sprint(got[svc].Decisions) != fmt.Sprint(want) {
			t.Errorf("%s: decisions %v, want %v", svc, got[svc].Decisions, want)
		}
	}
	if w := got["frontend"]; !near(w.Net, 25.15) || !near(w.Remote, 1.6) {
		t.Errorf("frontend net %.3f remote %.3f, want 25.15 and 1.6", w.Net, w.Remote)
	}
}

func TestSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	l := Summarize(lat, 3, 10*time.Second)
	if l.Requests != 100 || l.Errors != 3 || !near(l.PerSec, 10) {
		t.Errorf("%+v: want 100 requests, 3 errors, 10/s", l)
	}
	if !near(l.MeanMs, 50.5) || !near(l.P50Ms, 50) || !near(l.P95Ms, 95) {
		t.Errorf("mean %.2f p50 %.2f p95 %.2f, want 50.5, 50, 95", l.MeanMs, l.P50Ms, l.P95Ms)
	}
	if e := Summarize(nil, 5, time.Second); e.Requests != 0 || e.MeanMs != 0 || e.Errors != 5 {
		t.Errorf("no requests: %+v", e)
	}
}

func TestTable(t *testing.T) {
	traces := [][]*model.Span{chainTrace(t, 0, 1e9, [3]float64{0.2, 0.4, 20}, [2]float64{0.3, 0.5}, [2]float64{20, 20})}
	c := Config{Name: "cpu", Fault: "cpu-throttle@backend=20%", How: "given", Steps: []Step{{
		Clients: 4, Latency: Latency{Requests: 1, PerSec: 1, MeanMs: 61, P95Ms: 61}, Traces: 1,
		Services: Aggregate(traces, 0, 2e9, func(p string) string { return strings.TrimSuffix(p, ":8080") }),
	}}}
	var b bytes.Buffer
	Table(&b, c, chain)
	out := b.String()
	for _, want := range []string{
		"### cpu: cpu-throttle@backend=20%",
		"| 4 | 1.0 | 61.0 | 61.0 | 0 |",
		"| 60.0 / 0.2 / 0.3 / 20.0 | remote→frontend 1 |",
		"| 56.0 / 20.0 / – / – | local 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestParseClients(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"1,2, 4", "[1 2 4]", true},
		{"0", "", false},
		{"1,x", "", false},
		{"", "", false},
	} {
		got, err := parseClients(tc.in)
		if (err == nil) != tc.ok || (tc.ok && fmt.Sprint(got) != tc.want) {
			t.Errorf("parseClients(%q) = %v, %v; want %s ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
