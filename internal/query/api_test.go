package query

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixedNow is the API's clock in tests.
var fixedNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func mustTraceID(t testing.TB, s string) model.TraceID {
	t.Helper()
	id, err := model.ParseTraceID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustSpanID(t testing.TB, s string) model.SpanID {
	t.Helper()
	id, err := model.ParseSpanID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Ids of the fixture trace.
const (
	fxTrace    = "0af7651916cd43dd8448eb211c80319c"
	fxRoot     = "b7ad6b7169203331"
	fxClient   = "00f067aa0ba902b7"
	fxPayments = "5fb397be34d26b51"
	fxOther    = "4bf92f3577b34da6a3ce929d0e0e4736"
	fxStart    = int64(1700000000123456789)
)

// fixture returns a store holding one three-span trace across two services,
// with two artifacts linked to its spans.
func fixture(t testing.TB) *fakeStore {
	t.Helper()
	tid := mustTraceID(t, fxTrace)
	root, client, pay := mustSpanID(t, fxRoot), mustSpanID(t, fxClient), mustSpanID(t, fxPayments)
	frontendRes := []model.KeyValue{
		model.String(model.AttrServiceName, "frontend"),
		model.String(model.AttrHostName, "node-1"),
		model.Int(model.AttrProcessPID, 42),
	}
	f := newFakeStore()
	f.addTrace(
		// Stored out of order: the API orders spans by start time.
		&model.Span{
			TraceID: tid, SpanID: pay, ParentSpanID: client,
			Service: "payments", Name: "charge", Kind: model.KindServer,
			Start: fxStart + 20_000_000, Duration: 200_000_999,
			StatusCode: model.StatusError, StatusMessage: "card declined",
			Scope: "rootline/supervisor",
			Attributes: []model.KeyValue{
				model.String("rpc.method", "Charge"),
				model.Float("rootline.wait.local_ms", 1.5),
			},
			Resource: []model.KeyValue{
				model.String(model.AttrServiceName, "payments"),
				model.String(model.AttrHostName, "node-2"),
			},
			Events: []model.Event{{
				Time: fxStart + 150_000_000, Name: "exception",
				Attributes: []model.KeyValue{model.String("exception.message", "declined")},
			}},
			// A link to the parent only changes the parent reference's type.
			Links: []model.Link{{
				TraceID: tid, SpanID: client,
				Attributes: []model.KeyValue{model.String("opentracing.ref_type", "child_of")},
			}},
		},
		&model.Span{
			TraceID: tid, SpanID: root,
			Service: "frontend", Name: "GET /checkout", Kind: model.KindServer,
			Start: fxStart, Duration: 250_000_500, StatusCode: model.StatusOK,
			Scope: "rootline/supervisor",
			Attributes: []model.KeyValue{
				model.String("http.method", "GET"),
				model.Int("http.status_code", 200),
				model.Bool(model.AttrAnomaly, true),
				model.Float(model.AttrBaselineMs, 40),
				model.Float(model.AttrThreshold, 3),
				model.Bool(model.AttrError, true),
				model.Int("big", 1<<60),
				// Already set by the pipeline; merged with the store's links.
				model.String(model.AttrArtifactIDs, "art-cpu"),
			},
			Resource: frontendRes,
			Events: []model.Event{{
				Time: fxStart + 1_000_999, Name: "retry",
				Attributes: []model.KeyValue{model.Int("attempt", 2)},
			}},
		},
		&model.Span{
			TraceID: tid, SpanID: client, ParentSpanID: root,
			Service: "frontend", Name: "POST payments/charge", Kind: model.KindClient,
			Start: fxStart + 10_000_000, Duration: 230_000_000,
			Attributes: []model.KeyValue{
				{Key: "payload", Value: model.Value{Type: model.TypeBytes, Str: "\x00\x01\xff"}},
			},
			// The same resource as the root's in another order: one process.
			Resource: []model.KeyValue{frontendRes[2], frontendRes[1], frontendRes[0]},
			Links:    []model.Link{{TraceID: mustTraceID(t, fxOther), SpanID: mustSpanID(t, "00000000000000aa")}},
		},
	)
	f.addArtifact(store.Artifact{
		ID: "art-cpu", Kind: "cpu", MediaType: "application/vnd.google.protobuf+gzip",
		FileName: "cpu.pb.gz", SHA256: strings.Repeat("ab", 32), Size: 11,
		Host: "node-1", Service: "frontend", PID: 42,
		Start: fxStart - 1_000_000_000, End: fxStart + 1_000_000_000, Created: fxStart + 2_000_000_000,
		CaptureID: "cap-1", Attributes: map[string]string{"overhead_ms": "3"},
		Spans: []store.SpanRef{{TraceID: tid, SpanID: root}, {TraceID: tid, SpanID: pay}},
	}, []byte("cpu-profile"))
	f.addArtifact(store.Artifact{
		ID: "art-jfr", Kind: "jfr", MediaType: "application/octet-stream",
		FileName: "rec.jfr", SHA256: strings.Repeat("cd", 32), Size: 9,
		Host: "node-1", Service: "frontend", PID: 42, Partial: true,
		Start: fxStart, End: fxStart + 500_000_000, Created: fxStart + 3_000_000_000,
		Spans: []store.SpanRef{{TraceID: tid, SpanID: root}},
	}, []byte("jfr-bytes"))
	return f
}

func newTestAPI(f *fakeStore, cfg Config, detector func() []anomaly.KeyState, logger *slog.Logger) http.Handler {
	a := New(cfg, f, f, detector, logger)
	a.now = func() time.Time { return fixedNow }
	return a.Handler()
}

func do(t testing.TB, h http.Handler, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// decode parses a JSON body keeping numbers exact.
func decode(t testing.TB, rec *httptest.ResponseRecorder) any {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", ct, rec.Body)
	}
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("bad JSON %q: %v", rec.Body, err)
	}
	return v
}

// at walks decoded JSON by object keys and array indices.
func at(t testing.TB, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %v is not an object", path, v)
			}
			if v, ok = m[p]; !ok {
				t.Fatalf("at %v: no key %q in %v", path, p, m)
			}
		case int:
			a, ok := v.([]any)
			if !ok || p >= len(a) {
				t.Fatalf("at %v: %v has no index %d", path, v, p)
			}
			v = a[p]
		}
	}
	return v
}

// str renders decoded JSON compactly for comparisons.
func str(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTraceGolden(t *testing.T) {
	h := newTestAPI(fixture(t), Config{}, nil, nil)
	rec := do(t, h, "/api/traces/"+fxTrace+"?prettyPrint=true")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	golden := filepath.Join("testdata", "trace.golden.json")
	if *update {
		if err := os.WriteFile(golden, rec.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got := rec.Body.String(); got != string(want) {
		t.Errorf("trace JSON differs from %s (go test -update rewrites it)\ngot:\n%s", golden, got)
	}
}

// TestTraceJSON checks the fields the Jaeger UI and Grafana rely on, one by one.
func TestTraceJSON(t *testing.T) {
	h := newTestAPI(fixture(t), Config{}, nil, nil)
	body := decode(t, do(t, h, "/api/traces/"+fxTrace))

	for _, tc := range []struct {
		name string
		path []any
		want string
	}{
		{"total", []any{"total"}, `1`},
		{"limit", []any{"limit"}, `0`},
		{"offset", []any{"offset"}, `0`},
		{"errors null", []any{"errors"}, `null`},
		{"trace id", []any{"data", 0, "traceID"}, `"` + fxTrace + `"`},
		{"trace warnings", []any{"data", 0, "warnings"}, `null`},
		{"spans ordered by start", []any{"data", 0, "spans", 0, "spanID"}, `"` + fxRoot + `"`},
		{"span trace id", []any{"data", 0, "spans", 0, "traceID"}, `"` + fxTrace + `"`},
		{"operation", []any{"data", 0, "spans", 0, "operationName"}, `"GET /checkout"`},
		{"startTime in µs", []any{"data", 0, "spans", 0, "startTime"}, `1700000000123456`},
		{"duration in µs", []any{"data", 0, "spans", 0, "duration"}, `250000`},
		{"flags", []any{"data", 0, "spans", 0, "flags"}, `1`},
		{"root has no references", []any{"data", 0, "spans", 0, "references"}, `[]`},
		{"span warnings", []any{"data", 0, "spans", 0, "warnings"}, `null`},
		{"log timestamp µs", []any{"data", 0, "spans", 0, "logs", 0, "timestamp"}, `1700000000124457`},
		{"log event field", []any{"data", 0, "spans", 0, "logs", 0, "fields"},
			`[{"key":"event","type":"string","value":"retry"},{"key":"attempt","type":"int64","value":2}]`},
		{"parent then link", []any{"data", 0, "spans", 1, "references"},
			`[{"refType":"CHILD_OF","spanID":"` + fxRoot + `","traceID":"` + fxTrace + `"},` +
				`{"refType":"FOLLOWS_FROM","spanID":"00000000000000aa","traceID":"` + fxOther + `"}]`},
		{"link to parent merged", []any{"data", 0, "spans", 2, "references"},
			`[{"refType":"CHILD_OF","spanID":"` + fxClient + `","traceID":"` + fxTrace + `"}]`},
		{"client has no logs", []any{"data", 0, "spans", 1, "logs"}, `[]`},
		{"same resource, same process", []any{"data", 0, "spans", 1, "processID"}, `"p1"`},
		{"other resource, other process", []any{"data", 0, "spans", 2, "processID"}, `"p2"`},
		{"processes", []any{"data", 0, "processes"},
			`{"p1":{"serviceName":"frontend","tags":[{"key":"host.name","type":"string","value":"node-1"},{"key":"process.pid","type":"int64","value":42}]},` +
				`"p2":{"serviceName":"payments","tags":[{"key":"host.name","type":"string","value":"node-2"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := str(t, at(t, body, tc.path...)); got != tc.want {
				t.Errorf("%v = %s, want %s", tc.path, got, tc.want)
			}
		})
	}

	tags := func(i int) map[string]string {
		m := map[string]string{}
		for _, kv := range at(t, body, "data", 0, "spans", i, "tags").([]any) {
			kv := kv.(map[string]any)
			key := kv["key"].(string)
			if _, dup := m[key]; dup {
				t.Errorf("span %d: tag %q appears twice", i, key)
			}
			m[key] = kv["type"].(string) + " " + str(t, kv["value"])
		}
		return m
	}
	for _, tc := range []struct {
		name string
		span int
		key  string
		want string // type and JSON value; "" for absent
	}{
		{"string", 0, "http.method", `string "GET"`},
		{"int", 0, "http.status_code", `int64 200`},
		{"bool", 0, model.AttrAnomaly, `bool true`},
		{"float", 0, model.AttrBaselineMs, `float64 40`},
		{"int beyond 2^53 as string", 0, "big", `int64 "1152921504606846976"`},
		{"binary as base64", 1, "payload", `binary "AAH/"`},
		{"kind server", 0, "span.kind", `string "server"`},
		{"kind client", 1, "span.kind", `string "client"`},
		{"status ok", 0, "otel.status_code", `string "OK"`},
		{"status unset", 1, "otel.status_code", ``},
		{"status error", 2, "otel.status_code", `string "ERROR"`},
		{"error from status", 2, "error", `bool true`},
		{"existing error tag kept once", 0, "error", `bool true`},
		{"no error", 1, "error", ``},
		{"status description", 2, "otel.status_description", `string "card declined"`},
		{"scope", 0, "otel.scope.name", `string "rootline/supervisor"`},
		{"no scope", 1, "otel.scope.name", ``},
		{"artifacts merged", 0, model.AttrArtifactIDs, `string "art-cpu,art-jfr"`},
		{"no artifacts", 1, model.AttrArtifactIDs, ``},
		{"artifact on other span", 2, model.AttrArtifactIDs, `string "art-cpu"`},
	} {
		t.Run("tag/"+tc.name, func(t *testing.T) {
			got, ok := tags(tc.span)[tc.key]
			if tc.want == "" {
				if ok {
					t.Errorf("span %d has tag %s = %s, want none", tc.span, tc.key, got)
				}
				return
			}
			if got != tc.want {
				t.Errorf("span %d tag %s = %q, want %q", tc.span, tc.key, got, tc.want)
			}
		})
	}
}

func TestTraceArtifactsLookedUpOncePerTrace(t *testing.T) {
	f := fixture(t)
	f.found = []model.TraceID{mustTraceID(t, fxTrace)}
	h := newTestAPI(f, Config{}, nil, nil)
	if rec := do(t, h, "/api/traces?service=frontend"); rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if f.traceArtCalls != 1 {
		t.Errorf("TraceArtifacts called %d times, want 1", f.traceArtCalls)
	}
}

func TestUI(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ui:"+r.URL.Path)
	})
	for _, tc := range []struct {
		name     string
		ui       http.Handler
		target   string
		wantCode int
		wantBody string
	}{
		{"no ui, root", nil, "/", http.StatusOK, "not built"},
		{"no ui, other path", nil, "/search", http.StatusNotFound, "not built"},
		{"ui root", ui, "/", http.StatusOK, "ui:/"},
		{"ui route", ui, "/trace/abc", http.StatusOK, "ui:/trace/abc"},
		{"api is not ui", ui, "/api/nope", http.StatusNotFound, `"errors":[{"code":404`},
		{"v1 is not ui", ui, "/api/v1/nope", http.StatusNotFound, `"code":404`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestAPI(newFakeStore(), Config{UI: tc.ui}, nil, nil)
			rec := do(t, h, tc.target)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("GET %s = %d %q, want %d containing %q", tc.target, rec.Code, rec.Body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         Config
		wantDefault int
		wantMax     int
	}{
		{"zero", Config{}, 20, 1000},
		{"set", Config{DefaultLimit: 5, MaxLimit: 50}, 5, 50},
		{"default above max", Config{DefaultLimit: 500, MaxLimit: 50}, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.cfg, newFakeStore(), nil, nil, nil)
			if a.cfg.DefaultLimit != tc.wantDefault || a.cfg.MaxLimit != tc.wantMax {
				t.Errorf("limits = %d/%d, want %d/%d", a.cfg.DefaultLimit, a.cfg.MaxLimit, tc.wantDefault, tc.wantMax)
			}
		})
	}
}
