package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testAgent is a small agent: it answers dump requests and uploads one
// artifact of the requested size per kind, then completes the capture.
type testAgent struct {
	t        *testing.T
	srv      *httptest.Server
	server   string // Rootline server base URL
	token    string
	size     int
	status   int // HTTP status for dump requests; 0 → 202
	mu       sync.Mutex
	requests []agentapi.DumpRequest
	uploads  []int // HTTP status of each upload
	// hold, when set, keeps the dumps from completing until it is closed.
	hold chan struct{}
}

func newTestAgent(t *testing.T, server, token string, size int) *testAgent {
	a := &testAgent{t: t, server: server, token: token, size: size}
	a.srv = httptest.NewServer(http.HandlerFunc(a.dump))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testAgent) dump(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	size := a.size
	a.mu.Unlock()
	if a.token != "" && r.Header.Get("Authorization") != "Bearer "+a.token {
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	var req agentapi.DumpRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.requests = append(a.requests, req)
	status, hold := a.status, a.hold
	a.mu.Unlock()
	if status != 0 {
		http.Error(w, "profiler not running", status)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	server := a.server
	if req.UploadURL != "" {
		server = req.UploadURL
	}
	go func() {
		if hold != nil {
			<-hold
		}
		for _, k := range req.Kinds {
			u := fmt.Sprintf("%s/api/v1/captures/%s/artifacts?kind=%s&fileName=%s.bin", server, req.CaptureID, k, k)
			code := a.post(u, "application/octet-stream", bytes.Repeat([]byte{'x'}, size))
			a.mu.Lock()
			a.uploads = append(a.uploads, code)
			a.mu.Unlock()
		}
		a.post(server+"/api/v1/captures/"+req.CaptureID+"/complete", "application/json", []byte(`{"status":"complete"}`))
	}()
}

func (a *testAgent) post(u, ct string, body []byte) int {
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (a *testAgent) register(t *testing.T, procs ...agentapi.Process) string {
	t.Helper()
	b, _ := json.Marshal(agentapi.Registration{Host: "node-1", DumpURL: a.srv.URL + "/api/v1/dump", Kinds: []string{"cpu"}, Processes: procs})
	req, _ := http.NewRequest(http.MethodPost, a.server+"/api/v1/agents", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep agentapi.RegistrationReply
	if resp.StatusCode != 200 {
		t.Fatalf("register: %s", resp.Status)
	}
	_ = json.NewDecoder(resp.Body).Decode(&rep)
	return rep.AgentID
}

func (a *testAgent) dumps() []agentapi.DumpRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]agentapi.DumpRequest(nil), a.requests...)
}

type fixture struct {
	m    *Manager
	arts *storetest.MemArtifacts
	url  string
	reg  *prometheus.Registry
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, mod, nil)
}

// newFixtureWith calls setup with the Manager and its URL before it runs.
func newFixtureWith(t *testing.T, mod func(*Config), setup func(m *Manager, url string)) *fixture {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Pre, cfg.Post, cfg.Settle = 0, 0, 50*time.Millisecond
	cfg.MinInterval, cfg.MaxPerMinute = 0, 0 // TestRateLimits sets them
	cfg.MaxPerAgent = 0                      // TestMaxPerAgent sets it
	if mod != nil {
		mod(&cfg)
	}
	arts := &storetest.MemArtifacts{}
	reg := prometheus.NewRegistry()
	m, err := New(cfg, arts, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	if setup != nil {
		setup(m, srv.URL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return &fixture{m: m, arts: arts, url: srv.URL, reg: reg}
}

// waitComplete waits until every capture is complete.
func (f *fixture) waitComplete(t *testing.T) {
	t.Helper()
	waitUntil(t, "captures complete", func() bool {
		for _, c := range f.m.Captures(0) {
			if c.State != StateComplete {
				return false
			}
		}
		return true
	})
}

func anomalous(svc string, traceByte byte, start time.Time, d time.Duration, res ...model.KeyValue) *model.Span {
	s := &model.Span{TraceID: model.TraceID{traceByte}, SpanID: model.SpanID{traceByte, 1}, Service: svc, Name: "op",
		Start: start.UnixNano(), Duration: int64(d), Resource: append([]model.KeyValue{model.String("service.name", svc)}, res...)}
	s.SetAttr(model.Bool(model.AttrAnomaly, true))
	return s
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRateLimits: a process is captured at most once per MinInterval, the
// anomalies meanwhile joining the capture that waits (windows need not
// overlap); beyond MaxPerMinute captures wait for a slot, and are skipped
// once that is too late for their window.
func TestRateLimits(t *testing.T) {
	t.Run("min interval", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.MinInterval = 400 * time.Millisecond })
		ag := newTestAgent(t, f.url, "", 100)
		ag.register(t, agentapi.Process{PID: 42, Service: "checkout"})
		t0 := time.Now().Add(-time.Minute)
		f.m.OnCommitted([]*model.Span{anomalous("checkout", 1, t0, 100*time.Millisecond)})
		waitUntil(t, "the first dump", func() bool { return len(ag.dumps()) == 1 })
		first := time.Now()
		// Three more, in windows apart from each other and from the first.
		f.m.OnCommitted([]*model.Span{
			anomalous("checkout", 2, t0.Add(10*time.Second), 100*time.Millisecond),
			anomalous("checkout", 3, t0.Add(20*time.Second), 100*time.Millisecond),
		})
		time.Sleep(100 * time.Millisecond)
		f.m.OnCommitted([]*model.Span{anomalous("checkout", 4, t0.Add(30*time.Second), 100*time.Millisecond)})
		waitUntil(t, "the second dump", func() bool { return len(ag.dumps()) == 2 })
		if waited := time.Since(first); waited < 300*time.Millisecond {
			t.Errorf("second dump %v after the first, want ≥ the 400 ms interval", waited)
		}
		time.Sleep(600 * time.Millisecond)
		f.waitComplete(t)
		reqs := ag.dumps()
		if len(reqs) != 2 {
			t.Fatalf("%d dump requests, want 2 (the later anomalies in one)", len(reqs))
		}
		if r := reqs[1]; len(r.Spans) != 3 || r.Start != t0.Add(10*time.Second).UnixNano() || r.End != t0.Add(30*time.Second+100*time.Millisecond).UnixNano() {
			t.Errorf("held capture: %d spans, [%d, %d]", len(r.Spans), r.Start, r.End)
		}
	})
	t.Run("max per minute", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.MaxPerMinute, c.MaxWindow = 1, 2*time.Second })
		ag := newTestAgent(t, f.url, "", 100)
		ag.register(t, agentapi.Process{PID: 42, Service: "checkout"}, agentapi.Process{PID: 43, Service: "cart"})
		t0 := time.Now().Add(-time.Second)
		f.m.OnCommitted([]*model.Span{anomalous("checkout", 1, t0, 100*time.Millisecond), anomalous("cart", 2, t0, 100*time.Millisecond)})
		waitUntil(t, "one complete and one skipped capture", func() bool {
			skipped, complete := 0, 0
			for _, c := range f.m.Captures(0) {
				switch {
				case c.State == StateSkipped && strings.Contains(c.Error, "rate limit"):
					skipped++
				case c.State == StateComplete:
					complete++
				}
			}
			return len(ag.dumps()) == 1 && skipped == 1 && complete == 1
		})
	})
	t.Run("bursts spread", func(t *testing.T) {
		// 60 a minute: at most 3 within any 3 s.
		f := newFixture(t, func(c *Config) { c.MaxPerMinute = 60 })
		ag := newTestAgent(t, f.url, "", 100)
		var procs []agentapi.Process
		var spans []*model.Span
		t0 := time.Now().Add(-time.Second)
		for i := range 5 {
			procs = append(procs, agentapi.Process{PID: int64(40 + i), Service: fmt.Sprint("svc", i)})
			spans = append(spans, anomalous(fmt.Sprint("svc", i), byte(i+1), t0, 100*time.Millisecond))
		}
		ag.register(t, procs...)
		f.m.OnCommitted(spans)
		waitUntil(t, "three dumps", func() bool { return len(ag.dumps()) >= 3 })
		first := time.Now()
		time.Sleep(2 * time.Second)
		if n := len(ag.dumps()); n != 3 {
			t.Fatalf("%d dumps within 2 s of the first three, want 3 (the others wait for their slot)", n)
		}
		waitUntil(t, "five dumps", func() bool { return len(ag.dumps()) == 5 })
		if waited := time.Since(first); waited > 6*time.Second {
			t.Errorf("the last two dumps came %v after the first three, want ~3 s", waited)
		}
		waitUntil(t, "five complete captures", func() bool { // the agent's uploads end
			n := 0
			for _, c := range f.m.Captures(0) {
				if c.State == StateComplete {
					n++
				}
			}
			return n == 5
		})
	})
}

func TestCoalescesOverlappingWindowsAndLinksArtifacts(t *testing.T) {
	f := newFixture(t, nil)
	ag := newTestAgent(t, f.url, "", 100)
	ag.register(t, agentapi.Process{PID: 42, Service: "checkout"})
	now := time.Now().Add(-time.Minute)
	f.m.OnCommitted([]*model.Span{
		anomalous("checkout", 1, now, 100*time.Millisecond),
		anomalous("checkout", 2, now.Add(50*time.Millisecond), 100*time.Millisecond), // overlaps the first
		anomalous("checkout", 3, now.Add(10*time.Second), 100*time.Millisecond),      // separate window
		{TraceID: model.TraceID{9}, SpanID: model.SpanID{9}, Service: "checkout"},    // not anomalous
	})
	waitUntil(t, "two dump requests", func() bool { return len(ag.dumps()) == 2 })
	f.waitComplete(t)
	reqs := ag.dumps()
	byLen := map[int]agentapi.DumpRequest{}
	for _, r := range reqs {
		byLen[len(r.Spans)] = r
	}
	merged, ok := byLen[2]
	if !ok {
		t.Fatalf("no coalesced dump request: %+v", reqs)
	}
	if merged.PID != 42 || merged.Start != now.UnixNano() || merged.End != now.Add(150*time.Millisecond).UnixNano() {
		t.Fatalf("merged window = pid %d [%d, %d]", merged.PID, merged.Start, merged.End)
	}
	if len(f.arts.All()) != 2 {
		t.Fatalf("artifacts = %d, want 2", len(f.arts.All()))
	}
	linked := 0
	for _, a := range f.arts.All() {
		linked += len(a.Spans)
		if a.PID != 42 || a.Host != "node-1" || a.Kind != "cpu" || a.Size != 100 {
			t.Fatalf("artifact metadata %+v", a)
		}
	}
	if linked != 3 {
		t.Fatalf("artifact links = %d, want 3 (two spans share one capture)", linked)
	}
}

// TestRouting: a span's resource attributes choose among the processes
// registered for its service, most precise first, and never beyond them: a
// span that names a pid not registered for its service (another service's
// process, or a process no agent registered) resolves to nothing.
func TestRouting(t *testing.T) {
	f := newFixture(t, nil)
	ag := newTestAgent(t, f.url, "", 10)
	ag.register(t, agentapi.Process{PID: 7, Service: "a", InstanceID: "a-1"}, agentapi.Process{PID: 8, Service: "a", InstanceID: "a-2"}, agentapi.Process{PID: 9, Service: "b"})
	base := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name         string
		span         *model.Span
		want         []int64
		unregistered bool
	}{
		{name: "instance id", span: anomalous("a", 1, base, time.Millisecond, model.String("service.instance.id", "a-2")), want: []int64{8}},
		{name: "host and pid", span: anomalous("b", 2, base.Add(10*time.Second), time.Millisecond, model.String("host.name", "node-1"), model.Int("process.pid", 9)), want: []int64{9}},
		{name: "pid alone", span: anomalous("a", 2, base.Add(10*time.Second), time.Millisecond, model.Int("process.pid", 7)), want: []int64{7}},
		{name: "pid as a string", span: anomalous("a", 2, base.Add(10*time.Second), time.Millisecond, model.String("process.pid", "8")), want: []int64{8}},
		{name: "service only: every replica", span: anomalous("a", 3, base.Add(20*time.Second), time.Millisecond), want: []int64{7, 8}},
		{name: "unknown instance id falls back to the service", span: anomalous("a", 3, base, time.Millisecond, model.String("service.instance.id", "zzz")), want: []int64{7, 8}},
		{name: "other host", span: anomalous("a", 4, base.Add(30*time.Second), time.Millisecond, model.String("host.name", "node-2")), want: nil},
		{name: "unknown service", span: anomalous("zzz", 5, base.Add(40*time.Second), time.Millisecond), want: nil},
		{name: "registered service, unregistered pid", span: anomalous("a", 6, base, time.Millisecond, model.Int("process.pid", 4242)), unregistered: true},
		{name: "registered service, another service's pid", span: anomalous("a", 6, base, time.Millisecond, model.Int("process.pid", 9)), unregistered: true},
		{name: "registered service, another service's pid on its host", span: anomalous("a", 6, base, time.Millisecond, model.String("host.name", "node-1"), model.Int("process.pid", 9)), unregistered: true},
		{name: "unregistered service, registered pid", span: anomalous("victim", 7, base, time.Millisecond, model.Int("process.pid", 7)), unregistered: true},
		{name: "another service's instance id", span: anomalous("b", 8, base, time.Millisecond, model.String("service.instance.id", "a-1"), model.Int("process.pid", 7)), unregistered: true},
		{name: "empty service does not match processes without one", span: anomalous("", 9, base, time.Millisecond), want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.m.mu.Lock()
			got, unregistered := f.m.resolve(tc.span)
			f.m.mu.Unlock()
			var pids []int64
			for _, g := range got {
				pids = append(pids, g.proc.PID)
			}
			if fmt.Sprint(pids) != fmt.Sprint(tc.want) || unregistered != tc.unregistered {
				t.Fatalf("targets = %v (unregistered %v), want %v (%v)", pids, unregistered, tc.want, tc.unregistered)
			}
		})
	}
}

// TestForgedSpansTriggerNoDump: anomalous spans that name a process not
// registered for their service reach no agent and are counted; the
// legitimate anomaly after them is captured, and its dump request names the
// registration and service it was resolved to.
func TestForgedSpansTriggerNoDump(t *testing.T) {
	f := newFixture(t, nil)
	m := f.m
	ag := newTestAgent(t, f.url, "", 10)
	id := ag.register(t, agentapi.Process{PID: 4242, Service: "victim"}, agentapi.Process{PID: 77, Service: "bystander"})
	base := time.Now().Add(-time.Minute)
	m.OnCommitted([]*model.Span{
		anomalous("victim", 1, base, time.Millisecond, model.Int("process.pid", 1)),
		anomalous("victim", 2, base, time.Millisecond, model.Int("process.pid", 77)),
		anomalous("intruder", 3, base, time.Millisecond, model.Int("process.pid", 4242)),
		anomalous("bystander", 4, base, time.Millisecond, model.String("host.name", "node-1"), model.Int("process.pid", 4242)),
	})
	m.OnCommitted([]*model.Span{anomalous("victim", 5, base, time.Millisecond, model.Int("process.pid", 4242))})
	waitUntil(t, "the legitimate capture", func() bool { c := m.Captures(0); return len(c) == 1 && c[0].State == StateComplete })
	if c := m.Captures(0)[0]; c.PID != 4242 || c.SpanCount != 1 || c.Service != "victim" {
		t.Fatalf("capture = %+v, want pid 4242 for the one legitimate span", c)
	}
	d := ag.dumps()
	if len(d) != 1 || d[0].PID != 4242 || d[0].AgentID != id || d[0].Service != "victim" || len(d[0].Spans) != 1 || d[0].Spans[0].TraceID[:2] != "05" {
		t.Fatalf("dump requests = %+v, want one for pid 4242 of agent %s (service victim, trace 05…)", d, id)
	}
	if got := counter(t, f.reg, "rootline_capture_unregistered_pid_total"); got != 4 {
		t.Errorf("rootline_capture_unregistered_pid_total = %v, want 4", got)
	}
}

// counter returns the value of an unlabelled counter of reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

func TestBudgetBoundsBytesPerProcess(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BudgetBytesPerMinute = 1000 })
	ag := newTestAgent(t, f.url, "", 600)
	ag.register(t, agentapi.Process{PID: 5, Service: "s"})
	base := time.Now().Add(-time.Minute)
	f.m.OnCommitted([]*model.Span{anomalous("s", 1, base, time.Millisecond)})
	waitUntil(t, "first capture", func() bool { c := f.m.Captures(0); return len(c) == 1 && c[0].State == StateComplete })
	f.m.OnCommitted([]*model.Span{anomalous("s", 2, base.Add(10*time.Second), time.Millisecond)})
	waitUntil(t, "second dump", func() bool { return len(ag.dumps()) == 2 })
	waitUntil(t, "second upload", func() bool { ag.mu.Lock(); defer ag.mu.Unlock(); return len(ag.uploads) == 2 })
	if got := ag.dumps()[1].MaxBytes; got != 400 {
		t.Fatalf("second request maxBytes = %d, want 400", got)
	}
	if ag.uploads[0] != http.StatusCreated || ag.uploads[1] != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload statuses = %v, want [201 413]", ag.uploads)
	}
	// A capture that fits uses the rest of the budget ...
	ag.mu.Lock()
	ag.size = 400
	ag.mu.Unlock()
	f.m.OnCommitted([]*model.Span{anomalous("s", 3, base.Add(20*time.Second), time.Millisecond)})
	waitUntil(t, "third upload", func() bool { ag.mu.Lock(); defer ag.mu.Unlock(); return len(ag.uploads) == 3 })
	if ag.uploads[2] != http.StatusCreated {
		t.Fatalf("third upload = %d, want 201", ag.uploads[2])
	}
	// ... and with it used up, the next capture is skipped without asking the agent.
	f.m.OnCommitted([]*model.Span{anomalous("s", 4, base.Add(30*time.Second), time.Millisecond)})
	waitUntil(t, "skipped capture", func() bool {
		for _, c := range f.m.Captures(0) {
			if c.State == StateSkipped {
				return true
			}
		}
		return false
	})
	if len(ag.dumps()) != 3 {
		t.Fatalf("the agent got %d dump requests, want 3 (none once the budget is spent)", len(ag.dumps()))
	}
}

func TestAgentErrorFailsCapture(t *testing.T) {
	f := newFixture(t, nil)
	ag := newTestAgent(t, f.url, "", 10)
	ag.status = http.StatusServiceUnavailable
	ag.register(t, agentapi.Process{PID: 5, Service: "s"})
	f.m.OnCommitted([]*model.Span{anomalous("s", 1, time.Now().Add(-time.Second), time.Millisecond)})
	waitUntil(t, "failed capture", func() bool { c := f.m.Captures(0); return len(c) == 1 && c[0].State == StateFailed })
	if c := f.m.Captures(0)[0]; !strings.Contains(c.Error, "503") || !strings.Contains(c.Error, "profiler not running") {
		t.Fatalf("error = %q, want the agent's answer", c.Error)
	}
}

func TestAPIErrorsAndAuth(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AuthToken = "s3cret" })
	do := func(method, path, token, body string) int {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	good := `{"host":"h","dumpUrl":"http://127.0.0.1:1/dump","processes":[{"pid":1}]}`
	for _, tc := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", "POST", "/api/v1/agents", "", good, 401},
		{"wrong token", "POST", "/api/v1/agents", "nope", good, 401},
		{"register", "POST", "/api/v1/agents", "s3cret", good, 200},
		{"no host", "POST", "/api/v1/agents", "s3cret", `{"dumpUrl":"http://x/d","processes":[]}`, 400},
		{"relative dump url", "POST", "/api/v1/agents", "s3cret", `{"host":"h","dumpUrl":"/d","processes":[]}`, 400},
		{"bad pid", "POST", "/api/v1/agents", "s3cret", `{"host":"h","dumpUrl":"http://x/d","processes":[{"pid":0}]}`, 400},
		{"unknown field", "POST", "/api/v1/agents", "s3cret", `{"host":"h","dumpUrl":"http://x/d","bogus":1}`, 400},
		{"malformed", "POST", "/api/v1/agents", "s3cret", `{`, 400},
		{"heartbeat unknown agent", "PUT", "/api/v1/agents/nope", "s3cret", good, 404},
		{"upload to unknown capture", "POST", "/api/v1/captures/nope/artifacts?kind=cpu", "s3cret", "x", 404},
		{"upload without kind", "POST", "/api/v1/captures/nope/artifacts", "s3cret", "x", 400},
		{"complete unknown", "POST", "/api/v1/captures/nope/complete", "s3cret", `{"status":"complete"}`, 404},
		{"complete bad status", "POST", "/api/v1/captures/nope/complete", "s3cret", `{"status":"done"}`, 400},
		{"list captures", "GET", "/api/v1/captures", "s3cret", "", 200},
		{"list captures bad limit", "GET", "/api/v1/captures?limit=x", "s3cret", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := do(tc.method, tc.path, tc.token, tc.body); got != tc.want {
				t.Fatalf("%s %s = %d, want %d", tc.method, tc.path, got, tc.want)
			}
		})
	}
}

func TestAgentExpiresWithoutHeartbeat(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Heartbeat = 10 * time.Millisecond })
	ag := newTestAgent(t, f.url, "", 10)
	ag.register(t, agentapi.Process{PID: 5, Service: "s"})
	if len(f.m.Agents()) != 1 {
		t.Fatal("agent not registered")
	}
	waitUntil(t, "agent expiry", func() bool { return len(f.m.Agents()) == 0 })
}

// TestOnFinished: a completed capture is handed to the hooks with its
// artifacts and spans, once.
func TestOnFinished(t *testing.T) {
	f := newFixture(t, nil)
	got := make(chan Capture, 4)
	f.m.OnFinished(func(c Capture) { got <- c })
	ag := newTestAgent(t, f.url, "", 100)
	ag.register(t, agentapi.Process{PID: 42, Service: "checkout"})
	f.m.OnCommitted([]*model.Span{anomalous("checkout", 1, time.Now().Add(-time.Minute), 100*time.Millisecond)})
	var c Capture
	select {
	case c = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no finished capture")
	}
	if c.State != StateComplete || len(c.Artifacts) != 1 || len(c.Spans) != 1 || c.Spans[0].TraceID != (model.TraceID{1}) || c.PID != 42 {
		t.Fatalf("finished capture %+v", c)
	}
	select {
	case c2 := <-got:
		t.Fatalf("a second call: %+v", c2)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestMirroredAgentsAndUploadURL: in a scale-out deployment the process an
// agent registers with (an ingester) mirrors its registration, heartbeats
// and deregistration to the others (Mirror → ApplyAgent, RemoveAgent), and
// a detector's dump requests name the detector as the upload URL.
func TestMirroredAgentsAndUploadURL(t *testing.T) {
	det := newFixtureWith(t, nil, func(m *Manager, url string) { m.SetUploadURL(url) })
	var mu sync.Mutex
	var events []string
	ing := newFixtureWith(t, nil, func(m *Manager, _ string) {
		m.Mirror(func(reg agentapi.Registration, gone bool) {
			mu.Lock()
			events = append(events, fmt.Sprintf("%s gone=%v", reg.AgentID, gone))
			mu.Unlock()
			if gone {
				det.m.RemoveAgent(reg.AgentID)
			} else {
				det.m.ApplyAgent(reg, time.Now())
			}
		})
	})
	// The agent registered with the ingester; like the real agent it
	// uploads where the dump request tells it (DumpRequest.UploadURL).
	ag := newTestAgent(t, ing.url, "", 100)
	id := ag.register(t, agentapi.Process{PID: 42, Service: "checkout"})
	if got := det.m.Agents(); len(got) != 1 || got[0].AgentID != id {
		t.Fatalf("detector's agents = %+v, want the mirrored %s", got, id)
	}
	det.m.OnCommitted([]*model.Span{anomalous("checkout", 1, time.Now().Add(-time.Minute), 100*time.Millisecond)})
	waitUntil(t, "the detector's capture to complete", func() bool {
		cs := det.m.Captures(0)
		return len(cs) == 1 && cs[0].State == StateComplete
	})
	if d := ag.dumps(); len(d) != 1 || d[0].UploadURL != det.url || d[0].AgentID != id {
		t.Fatalf("dump requests = %+v, want one for agent %s uploading to %s", d, id, det.url)
	}
	if cs := det.m.Captures(0); len(cs) != 1 || len(cs[0].Artifacts) != 1 {
		t.Fatalf("detector's captures = %+v", cs)
	}
	if len(ing.m.Captures(0)) != 0 {
		t.Errorf("the ingester holds captures: %+v", ing.m.Captures(0))
	}

	req, _ := http.NewRequest(http.MethodDelete, ing.url+"/api/v1/agents/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || len(det.m.Agents()) != 0 || len(ing.m.Agents()) != 0 {
		t.Fatalf("deregister = %d; agents left: detector %+v, ingester %+v", resp.StatusCode, det.m.Agents(), ing.m.Agents())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{id + " gone=false", id + " gone=true"}; !slices.Equal(events, want) {
		t.Errorf("mirrored %q, want %q", events, want)
	}
}

// TestCaptureSpans: a span the detector did not flag is captured when the
// diagnosis asks (CaptureSpans), while the same span committed by the
// pipeline is not; the capture links it.
func TestCaptureSpans(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Pre, c.Post = time.Second, 2*time.Second })
	got := make(chan Capture, 4)
	f.m.OnFinished(func(c Capture) { got <- c })
	ag := newTestAgent(t, f.url, "", 100)
	ag.register(t, agentapi.Process{PID: 42, Service: "checkout"})
	slow := &model.Span{TraceID: model.TraceID{9}, SpanID: model.SpanID{9, 1}, Service: "checkout", Name: "op",
		Start: time.Now().Add(-time.Minute).UnixNano(), Duration: int64(80 * time.Millisecond), Resource: []model.KeyValue{model.String("service.name", "checkout")}}
	f.m.OnCommitted([]*model.Span{slow})
	select {
	case c := <-got:
		t.Fatalf("a capture of an unflagged committed span: %+v", c)
	case <-time.After(500 * time.Millisecond):
	}
	if n := f.m.CaptureSpans([]*model.Span{slow}); n != 1 {
		t.Fatalf("CaptureSpans queued %d, want 1", n)
	}
	var c Capture
	select {
	case c = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no capture of the span asked for")
	}
	if c.State != StateComplete || len(c.Spans) != 1 || c.Spans[0].TraceID != slow.TraceID || c.PID != 42 {
		t.Fatalf("capture %+v", c)
	}
	// The span ended before it was asked for: its window ends with it,
	// without Post.
	if want := slow.Start - int64(f.m.cfg.Pre); c.Start != want || c.End != slow.End() {
		t.Errorf("window [%d, %d], want [%d, %d]", c.Start, c.End, want, slow.End())
	}
}
