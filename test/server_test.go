package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rootline/rootline/internal/agentapi"
	"github.com/rootline/rootline/internal/model"
)

// inTestAgent speaks the agent side of the capture protocol (docs/api.md):
// it registers one process, and answers each dump request by uploading a
// small artifact that names the window it was asked for.
type inTestAgent struct {
	server string
	srv    *httptest.Server
	mu     sync.Mutex
	dumps  []agentapi.DumpRequest
}

func newInTestAgent(t *testing.T, server string, pid int64, service string) *inTestAgent {
	a := &inTestAgent{server: server}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.DumpRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		a.mu.Lock()
		a.dumps = append(a.dumps, req)
		a.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		go func() {
			body := fmt.Sprintf("samples of pid %d from %d to %d", req.PID, req.Start, req.End)
			u := fmt.Sprintf("%s/api/v1/captures/%s/artifacts?kind=cpu&fileName=cpu.txt", server, req.CaptureID)
			resp, err := http.Post(u, "text/plain", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
			resp, err = http.Post(server+"/api/v1/captures/"+req.CaptureID+"/complete", "application/json", strings.NewReader(`{"status":"complete"}`))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}))
	t.Cleanup(a.srv.Close)
	reg, _ := json.Marshal(agentapi.Registration{Host: "node-a", DumpURL: a.srv.URL + "/api/v1/dump", Kinds: []string{"cpu"},
		Processes: []agentapi.Process{{PID: pid, Service: service}}})
	resp, err := http.Post(server+"/api/v1/agents", "application/json", bytes.NewReader(reg))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register: %s", resp.Status)
	}
	return a
}

func TestAnomalyTriggersCaptureAndLinksArtifact(t *testing.T) {
	srv := startServer(t, t.TempDir(), "--detector.min-fill", "10", "--capture.pre", "100ms", "--capture.post", "100ms", "--capture.settle", "100ms")
	ag := newInTestAgent(t, "http://"+srv.query, 4242, "checkout")
	base := time.Now().Add(-time.Minute)
	ctx := context.Background()
	for i := range 30 {
		code, _, err := postOTLP(ctx, srv.http, makeTrace(tid(uint64(i+1)), base.Add(time.Duration(i)*time.Second),
			spanSpec{service: "checkout", name: "POST /buy", duration: 10 * time.Millisecond}))
		if err != nil || code != 200 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	slowID := tid(999)
	start := base.Add(40 * time.Second)
	code, _, err := postOTLP(ctx, srv.http, makeTrace(slowID, start,
		spanSpec{service: "checkout", name: "POST /buy", duration: 200 * time.Millisecond, res: map[string]any{"host.name": "node-a", "process.pid": 4242}}))
	if err != nil || code != 200 {
		t.Fatalf("send slow: %d %v", code, err)
	}
	// The span is stored at once, marked anomalous, before any capture ends.
	var tr jaegerResponse
	if c := srv.getJSON(t, "/api/traces/"+model.TraceID(slowID).String(), &tr); c != 200 {
		t.Fatalf("GET trace: %d", c)
	}
	tags := map[string]any{}
	for _, tg := range tr.Data[0].Spans[0].Tags {
		tags[tg.Key] = tg.Value
	}
	if tags["rootline.anomaly"] != true || tags["error"] != true || tags["rootline.baseline_ms"] != 10.0 || tags["rootline.threshold"] != 3.0 {
		t.Fatalf("anomaly tags = %v", tags)
	}
	// The agent is asked for [start − pre, end + post] and its artifact is linked.
	var ids string
	deadline := time.Now().Add(10 * time.Second)
	for ids == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		srv.getJSON(t, "/api/traces/"+model.TraceID(slowID).String(), &tr)
		for _, tg := range tr.Data[0].Spans[0].Tags {
			if tg.Key == "rootline.artifact.ids" {
				ids, _ = tg.Value.(string)
			}
		}
	}
	if ids == "" {
		t.Fatal("no rootline.artifact.ids tag on the anomalous span within 10s")
	}
	ag.mu.Lock()
	dumps := append([]agentapi.DumpRequest(nil), ag.dumps...)
	ag.mu.Unlock()
	if len(dumps) != 1 {
		t.Fatalf("dump requests = %d, want 1", len(dumps))
	}
	d := dumps[0]
	wantStart, wantEnd := start.Add(-100*time.Millisecond).UnixNano(), start.Add(300*time.Millisecond).UnixNano()
	if d.PID != 4242 || d.Start != wantStart || d.End != wantEnd || len(d.Spans) != 1 || d.Spans[0].TraceID != model.TraceID(slowID).String() {
		t.Fatalf("dump request = %+v, want pid 4242 window [%d, %d]", d, wantStart, wantEnd)
	}
	var arts []struct {
		ID, Kind, MediaType, URL string
		PID                      int64
		Size                     int64
	}
	if c := srv.getJSON(t, "/api/v1/traces/"+model.TraceID(slowID).String()+"/artifacts", &arts); c != 200 || len(arts) != 1 || arts[0].ID != ids {
		t.Fatalf("trace artifacts: %d %+v (span tag %q)", c, arts, ids)
	}
	resp, err := http.Get(srv.api("/api/v1/artifacts/" + ids))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("samples of pid 4242 from %d to %d", wantStart, wantEnd)
	if string(body) != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(resp.Header.Get("Content-Disposition"), "cpu.txt") {
		t.Fatalf("download: %q %v", body, resp.Header)
	}
	var feed []struct {
		TraceID  string `json:"traceID"`
		Evidence string `json:"evidence"`
	}
	srv.getJSON(t, "/api/v1/anomalies", &feed)
	if len(feed) != 1 || feed[0].TraceID != model.TraceID(slowID).String() {
		t.Fatalf("anomalies feed = %+v", feed)
	}
}

func TestReceiversEndToEnd(t *testing.T) {
	srv := startServer(t, t.TempDir())
	ctx := context.Background()
	// OTLP/gRPC
	conn, err := grpc.NewClient(srv.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	td := makeTrace(tid(1), time.Now(), spanSpec{service: "grpc-svc", name: "a", duration: time.Millisecond})
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatal(err)
	}
	// OTLP/HTTP JSON
	js, _ := ptraceotlp.NewExportRequestFromTraces(makeTrace(tid(2), time.Now(), spanSpec{service: "json-svc", name: "b", duration: time.Millisecond})).MarshalJSON()
	resp, err := http.Post("http://"+srv.http+"/v1/traces", "application/json", bytes.NewReader(js))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("OTLP JSON: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	// Zipkin v2 JSON as Envoy sends it
	now := time.Now().UnixMicro()
	zipkin := fmt.Sprintf(`[{"traceId":"%s","id":"00000000000000ab","name":"ingress","kind":"SERVER","timestamp":%d,"duration":1500,
		"localEndpoint":{"serviceName":"zipkin-svc","ipv4":"10.0.0.1"},"tags":{"http.status_code":"200"}}]`, strings.Repeat("c", 32), now)
	resp, err = http.Post("http://"+srv.zipkin+"/api/v2/spans", "application/json", strings.NewReader(zipkin))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("Zipkin: %v %v", err, resp.Status)
	}
	resp.Body.Close()
	var services struct{ Data []string }
	srv.getJSON(t, "/api/services", &services)
	if fmt.Sprint(services.Data) != "[grpc-svc json-svc zipkin-svc]" {
		t.Fatalf("services = %v", services.Data)
	}
	var tr jaegerResponse
	srv.getJSON(t, "/api/traces/"+strings.Repeat("c", 32), &tr)
	if len(tr.Data) != 1 || tr.Data[0].Spans[0].Duration != 1500 || tr.Data[0].Processes["p1"].ServiceName != "zipkin-svc" {
		t.Fatalf("zipkin trace = %+v", tr)
	}
	// A malformed request gets a message naming the problem; good ones still pass.
	for _, tc := range []struct {
		name, url, ct, body, want string
		code                      int
	}{
		{"bad OTLP JSON", "http://" + srv.http + "/v1/traces", "application/json", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`, "trace", 400},
		{"zero trace id", "http://" + srv.http + "/v1/traces", "application/json", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"00000000000000000000000000000000","spanId":"0102030405060708","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`, "traceId", 400},
		{"garbage protobuf", "http://" + srv.http + "/v1/traces", "application/x-protobuf", "\xff\xff\xff", "", 400},
		{"bad Zipkin", "http://" + srv.zipkin + "/api/v2/spans", "application/json", `[{"id":"x"}]`, "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(tc.url, tc.ct, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%d %s, want %d containing %q", resp.StatusCode, b, tc.code, tc.want)
			}
		})
	}
}

func TestRetentionKeepsAnomalousTracesLonger(t *testing.T) {
	// The traces are stamped two days back, as if they had just arrived from
	// a client whose clock is that far behind; with the clock-skew rule off
	// they are aged by their own timestamps (retention_test.go covers the rule).
	srv := startServer(t, t.TempDir(), "--retention.normal", "1h", "--retention.anomalous", "72h", "--retention.interval", "200ms",
		"--retention.max-clock-skew", "-1ns")
	old := time.Now().Add(-48 * time.Hour)
	normal, failed, recent := tid(1), tid(2), tid(3)
	for _, tc := range []struct {
		id     [16]byte
		start  time.Time
		status ptrace.StatusCode
	}{{normal, old, ptrace.StatusCodeOk}, {failed, old, ptrace.StatusCodeError}, {recent, time.Now(), ptrace.StatusCodeOk}} {
		code, _, err := postOTLP(context.Background(), srv.http, makeTrace(tc.id, tc.start,
			spanSpec{service: "ret", name: "op", duration: time.Millisecond, status: tc.status}))
		if err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.getJSON(t, "/api/traces/"+model.TraceID(normal).String(), nil) != 404 {
		if time.Now().After(deadline) {
			t.Fatal("old normal trace not purged within 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, id := range map[string][16]byte{"old error trace": failed, "recent trace": recent} {
		if c := srv.getJSON(t, "/api/traces/"+model.TraceID(id).String(), nil); c != 200 {
			t.Fatalf("%s: status %d, want it kept", name, c)
		}
	}
}

func TestServerRefusesUnprotectedPublicAPI(t *testing.T) {
	out, err := exec.Command(rootlineBin(t), "server", "--data-dir", t.TempDir(), "--query.addr", "0.0.0.0:0").CombinedOutput()
	var ee *exec.ExitError
	if !(errors.As(err, &ee) && ee.ExitCode() == 2) || !strings.Contains(string(out), "ROOTLINE_AUTH_TOKEN") {
		t.Fatalf("err %v, output %s", err, out)
	}
}

func TestServerHelpDocumentsEveryFlag(t *testing.T) {
	out, err := exec.Command(rootlineBin(t), "server", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, f := range []string{"--data-dir", "--otlp.grpc.addr", "--otlp.http.addr", "--zipkin.addr", "--query.addr",
		"--receiver.max-request-bytes", "--pipeline.queue-spans", "--detector.window", "--detector.threshold",
		"--detector.min-fill", "--detector.key-by", "--capture.pre", "--capture.post", "--capture.budget-bytes-per-minute",
		"--retention.normal", "--retention.anomalous", "--retention.max-bytes", "--export.otlp.endpoint", "--sqlite.synchronous",
		"--retention.max-clock-skew", "--retention.max-disk-fraction", "--storage.spans.type", "--storage.artifacts.type", "--storage.metrics.type",
		"--auth.token-file", "--shutdown-timeout", "--memory-limit", "--pipeline.queue-bytes",
		"--receiver.tls.cert-file", "--receiver.tls.key-file", "--receiver.tls.client-ca-file", "--receiver.auth.token-file",
		"--receiver.allow-unauthenticated", "--receiver.max-concurrent-requests", "--receiver.max-inflight-bytes",
		"--receiver.max-connections", "--receiver.read-header-timeout", "--receiver.read-timeout", "--receiver.idle-timeout",
		"--receiver.limits.max-attribute-depth", "--receiver.limits.max-attributes", "--receiver.limits.max-events",
		"--receiver.limits.max-links", "--receiver.limits.max-value-bytes", "--receiver.limits.max-name-bytes",
		"--receiver.cardinality.max-services", "--receiver.cardinality.max-new-services-per-minute",
		"--receiver.cardinality.max-operations-per-service", "--receiver.cardinality.max-operations",
		"--receiver.cardinality.forget-after", "--query.tls.cert-file", "--query.tls.key-file", "--query.tls.client-ca-file",
		"ROOTLINE_INGEST_TOKEN", "GOMEMLIMIT", "docs/security.md"} {
		want := "  -" + strings.TrimPrefix(f, "--")
		if !strings.HasPrefix(f, "--") {
			want = f
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("--help does not document %s", f)
		}
	}
}

func TestExportForwardsEnrichedSpans(t *testing.T) {
	// A second Rootline server is the export target: the enriched spans must
	// arrive there with their anomaly attributes.
	target := startServer(t, t.TempDir())
	srv := startServer(t, t.TempDir(), "--export.otlp.endpoint", target.grpc, "--detector.min-fill", "5")
	for i := range 10 {
		d := 5 * time.Millisecond
		if i == 9 {
			d = 100 * time.Millisecond
		}
		if code, _, err := postOTLP(context.Background(), srv.http, makeTrace(tid(uint64(i+1)), time.Now(), spanSpec{service: "exp", name: "op", duration: d})); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	if err := srv.signal(syscall.SIGTERM); err != nil { // flushes the exporter
		t.Fatal(err)
	}
	var tr jaegerResponse
	if c := target.getJSON(t, "/api/traces/"+model.TraceID(tid(10)).String(), &tr); c != 200 {
		t.Fatalf("exported trace not found: %d", c)
	}
	found := false
	for _, tg := range tr.Data[0].Spans[0].Tags {
		found = found || (tg.Key == "rootline.anomaly" && tg.Value == true)
	}
	if !found {
		t.Fatalf("exported span lacks rootline.anomaly: %+v", tr.Data[0].Spans[0].Tags)
	}
}
