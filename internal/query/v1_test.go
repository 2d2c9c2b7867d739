package query

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/anomaly"
	"github.com/rootline/rootline/internal/model"
)

// anomalyFixture adds to the fixture trace an anomalous span of another trace,
// newer, with no artifacts; the store returns the older one first.
func anomalyFixture(t *testing.T) *fakeStore {
	f := fixture(t)
	root := f.traces[mustTraceID(t, fxTrace)][1]
	if root.SpanID != mustSpanID(t, fxRoot) {
		t.Fatal("fixture changed: root is not the second span")
	}
	newer := &model.Span{
		TraceID: mustTraceID(t, fxOther), SpanID: mustSpanID(t, "1111111111111111"),
		Service: "cart", Name: "add", Kind: model.KindServer,
		Start: fxStart + 60e9, Duration: 90e6,
		Attributes: []model.KeyValue{
			model.Bool(model.AttrAnomaly, true),
			model.Int(model.AttrBaselineMs, 12),
			model.String(model.AttrThreshold, "2.5"),
		},
	}
	f.addTrace(newer)
	f.anomalies = []*model.Span{root, newer}
	return f
}

func TestAnomalies(t *testing.T) {
	f := anomalyFixture(t)
	h := newTestAPI(f, Config{}, nil, nil)
	rec := do(t, h, "/api/v1/anomalies?service=frontend")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	want := `[` +
		`{"artifacts":[],"baselineNs":12000000,"durationNs":90000000,"error":false,"evidence":"pending","kind":"server",` +
		`"operation":"add","service":"cart","spanID":"1111111111111111","start":1700000060123456789,` +
		`"startTime":"2023-11-14T22:14:20.123456789Z","threshold":2.5,"traceID":"` + fxOther + `"},` +
		`{"artifacts":[{"id":"art-cpu","kind":"cpu","mediaType":"application/vnd.google.protobuf+gzip","url":"/api/v1/artifacts/art-cpu"},{"id":"art-jfr","kind":"jfr","mediaType":"application/octet-stream","url":"/api/v1/artifacts/art-jfr"}],` +
		`"baselineNs":40000000,"durationNs":250000500,"error":true,"evidence":"captured","kind":"server",` +
		`"operation":"GET /checkout","service":"frontend","spanID":"` + fxRoot + `","start":1700000000123456789,` +
		`"startTime":"2023-11-14T22:13:20.123456789Z","threshold":3,"traceID":"` + fxTrace + `"}]`
	if got := str(t, decode(t, rec)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if f.lastAnomalyQuery.Service != "frontend" {
		t.Errorf("service = %q, want frontend", f.lastAnomalyQuery.Service)
	}
}

func TestAnomaliesParams(t *testing.T) {
	now := fixedNow.UnixNano()
	for _, tc := range []struct {
		query     string
		wantSince int64
		wantLimit int
		wantCode  int
		wantErr   string
	}{
		{"", 0, 100, 200, ""},
		{"since=2024-05-01T11:00:00Z", now - int64(time.Hour), 100, 200, ""},
		{"since=2024-05-01T13:00:00.5%2B02:00", now - int64(time.Hour) + 5e8, 100, 200, ""},
		{"since=1700000000000000000", 1700000000000000000, 100, 200, ""},
		{"since=15m", now - int64(15*time.Minute), 100, 200, ""},
		{"since=1d", now - int64(24*time.Hour), 100, 200, ""},
		{"limit=5", 0, 5, 200, ""},
		{"limit=5000", 0, 1000, 200, ""},
		{"since=yesterday", 0, 0, 400, "'since'"},
		{"since=-5", 0, 0, 400, "'since'"},
		{"since=-5m", 0, 0, 400, "'since'"},
		{"limit=x", 0, 0, 400, "'limit'"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			f := newFakeStore()
			h := newTestAPI(f, Config{}, nil, nil)
			rec := do(t, h, "/api/v1/anomalies?"+tc.query)
			if rec.Code != tc.wantCode {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if tc.wantCode != 200 {
				body := decode(t, rec)
				if msg := at(t, body, "error").(string); !strings.Contains(msg, tc.wantErr) {
					t.Errorf("error = %q, want it to name %s", msg, tc.wantErr)
				}
				return
			}
			if str(t, decode(t, rec)) != "[]" {
				t.Errorf("empty feed = %s, want []", rec.Body)
			}
			if q := f.lastAnomalyQuery; q.Since != tc.wantSince || q.Limit != tc.wantLimit {
				t.Errorf("query = %+v, want since %d limit %d", q, tc.wantSince, tc.wantLimit)
			}
		})
	}
}

func TestTraceArtifacts(t *testing.T) {
	h := newTestAPI(fixture(t), Config{}, nil, nil)
	rec := do(t, h, "/api/v1/traces/"+fxTrace+"/artifacts")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body := decode(t, rec)
	want := `{"attributes":{"overhead_ms":"3"},"captureId":"cap-1","created":1700000002123456789,` +
		`"createdTime":"2023-11-14T22:13:22.123456789Z","end":1700000001123456789,"endTime":"2023-11-14T22:13:21.123456789Z",` +
		`"fileName":"cpu.pb.gz","host":"node-1","id":"art-cpu","kind":"cpu","mediaType":"application/vnd.google.protobuf+gzip",` +
		`"partial":false,"pid":42,"service":"frontend","sha256":"` + strings.Repeat("ab", 32) + `","size":11,` +
		`"spans":[{"spanID":"` + fxRoot + `","traceID":"` + fxTrace + `"},{"spanID":"` + fxPayments + `","traceID":"` + fxTrace + `"}],` +
		`"start":1699999999123456789,"startTime":"2023-11-14T22:13:19.123456789Z","url":"/api/v1/artifacts/art-cpu"}`
	if got := str(t, at(t, body, 0)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := str(t, at(t, body, 1, "partial")); got != "true" {
		t.Errorf("partial = %s", got)
	}
	if got := str(t, at(t, body, 1, "attributes")); got != "{}" {
		t.Errorf("attributes = %s, want {}", got)
	}
	if got := len(body.([]any)); got != 2 {
		t.Errorf("%d artifacts, want 2", got)
	}

	if rec := do(t, h, "/api/v1/traces/"+fxOther+"/artifacts"); rec.Body.String() != "[]\n" {
		t.Errorf("trace without artifacts = %d %q, want []", rec.Code, rec.Body)
	}
	if rec := do(t, h, "/api/v1/traces/zz/artifacts"); rec.Code != 400 || !strings.Contains(rec.Body.String(), "'traceID'") {
		t.Errorf("bad id = %d %s", rec.Code, rec.Body)
	}
}

func TestArtifactMeta(t *testing.T) {
	h := newTestAPI(fixture(t), Config{}, nil, nil)
	rec := do(t, h, "/api/v1/artifacts/art-jfr/meta")
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body := decode(t, rec)
	for k, want := range map[string]string{
		"id": `"art-jfr"`, "kind": `"jfr"`, "size": `9`, "partial": `true`, "pid": `42`,
		"url": `"/api/v1/artifacts/art-jfr"`, "start": `1700000000123456789`,
	} {
		if got := str(t, at(t, body, k)); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if rec := do(t, h, "/api/v1/artifacts/nope/meta"); rec.Code != 404 {
		t.Errorf("unknown artifact = %d %s", rec.Code, rec.Body)
	}
}

func TestArtifactDownload(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seekable  bool
		id        string
		header    []string
		wantCode  int
		wantBody  string
		wantHdr   map[string]string
		wantNoHdr []string
	}{
		{"seekable", true, "art-cpu", nil, 200, "cpu-profile", map[string]string{
			"Content-Type":           "application/vnd.google.protobuf+gzip",
			"Content-Disposition":    `attachment; filename="cpu.pb.gz"`,
			"Content-Length":         "11",
			"ETag":                   `"` + strings.Repeat("ab", 32) + `"`,
			"Accept-Ranges":          "bytes",
			"X-Content-Type-Options": "nosniff",
		}, nil},
		{"plain", false, "art-jfr", nil, 200, "jfr-bytes", map[string]string{
			"Content-Type":        "application/octet-stream",
			"Content-Disposition": `attachment; filename="rec.jfr"`,
			"Content-Length":      "9",
			"ETag":                `"` + strings.Repeat("cd", 32) + `"`,
		}, []string{"Accept-Ranges"}},
		{"range", true, "art-cpu", []string{"Range", "bytes=4-6"}, 206, "pro", map[string]string{
			"Content-Range":  "bytes 4-6/11",
			"Content-Length": "3",
		}, nil},
		{"etag match seekable", true, "art-cpu", []string{"If-None-Match", `"` + strings.Repeat("ab", 32) + `"`}, 304, "", nil, nil},
		{"etag match plain", false, "art-cpu", []string{"If-None-Match", `W/"x", "` + strings.Repeat("ab", 32) + `"`}, 304, "", nil, nil},
		{"etag mismatch", false, "art-cpu", []string{"If-None-Match", `"other"`}, 200, "cpu-profile", nil, nil},
		{"unknown", true, "nope", nil, 404, `"code":404`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture(t)
			f.seekable = tc.seekable
			h := newTestAPI(f, Config{}, nil, nil)
			rec := do(t, h, "/api/v1/artifacts/"+tc.id, tc.header...)
			if rec.Code != tc.wantCode {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if tc.wantCode == 404 {
				if !strings.Contains(rec.Body.String(), tc.wantBody) {
					t.Errorf("body = %s", rec.Body)
				}
				return
			}
			if got := rec.Body.String(); got != tc.wantBody {
				t.Errorf("body = %q, want %q", got, tc.wantBody)
			}
			for k, want := range tc.wantHdr {
				if got := rec.Header().Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			for _, k := range tc.wantNoHdr {
				if got := rec.Header().Get(k); got != "" {
					t.Errorf("%s = %q, want none", k, got)
				}
			}
		})
	}
}

func TestContentDisposition(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"cpu.pb.gz", `attachment; filename="cpu.pb.gz"`},
		{`a"b.jfr`, `attachment; filename="a_b.jfr"; filename*=UTF-8''a%22b.jfr`},
		{"../../etc/passwd", `attachment; filename=".._.._etc_passwd"`},
		{"prof\r\nX: y", `attachment; filename="prof__X: y"; filename*=UTF-8''prof%0D%0AX%3A%20y`},
		{"profil-é.jfr", `attachment; filename="profil-_.jfr"; filename*=UTF-8''profil-%C3%A9.jfr`},
	} {
		if got := contentDisposition(tc.name); got != tc.want {
			t.Errorf("contentDisposition(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestAuth(t *testing.T) {
	const token = "s3cret-token"
	// With a token, every read endpoint needs it, both APIs', unknown ones
	// included; the UI's pages do not.
	protected := []string{
		"/api/v1/artifacts/art-cpu",
		"/api/v1/artifacts/art-cpu/meta",
		"/api/v1/traces/" + fxTrace + "/artifacts",
		"/api/v1/anomalies",
		"/api/v1/artifacts/art-cpu/flamegraph",
		"/api/v1/detector",
		"/api/v1/services/latency",
		"/api/v1/metrics?name=x",
		"/api/traces/" + fxTrace,
		"/api/traces?service=frontend",
		"/api/services",
		"/api/services/frontend/operations",
		"/api/operations?service=frontend",
		"/api/dependencies?endTs=1&lookback=1",
		"/api/v1/nope",
		"/api/nope",
	}
	open := []string{"/"}
	for _, tc := range []struct {
		name      string
		cfgToken  string
		header    string
		targets   []string
		wantCode  int
		wantChall string
	}{
		{"no token configured", "", "", protected[:4], 200, ""},
		{"missing header", token, "", protected, 401, `Bearer realm="rootline"`},
		{"wrong scheme", token, "Basic " + token, protected, 401, `Bearer realm="rootline"`},
		{"empty bearer", token, "Bearer ", protected, 401, `Bearer realm="rootline"`},
		{"wrong token", token, "Bearer nope", protected, 401, `Bearer realm="rootline", error="invalid_token"`},
		{"token prefix", token, "Bearer " + token[:5], protected, 401, `Bearer realm="rootline", error="invalid_token"`},
		{"right token", token, "Bearer " + token, protected[:4], 200, ""},
		{"scheme case-insensitive", token, "bearer " + token, protected[:4], 200, ""},
		{"the UI stays open", token, "", open, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			h := newTestAPI(fixture(t), Config{AuthToken: tc.cfgToken}, nil, logger)
			for _, target := range tc.targets {
				var hdr []string
				if tc.header != "" {
					hdr = []string{"Authorization", tc.header}
				}
				rec := do(t, h, target, hdr...)
				if rec.Code != tc.wantCode {
					t.Errorf("GET %s = %d, want %d: %s", target, rec.Code, tc.wantCode, rec.Body)
				}
				if got := rec.Header().Get("WWW-Authenticate"); got != tc.wantChall {
					t.Errorf("GET %s: WWW-Authenticate = %q, want %q", target, got, tc.wantChall)
				}
				if tc.wantCode == 401 && !strings.Contains(rec.Body.String(), "401") {
					t.Errorf("GET %s: body %s does not say 401", target, rec.Body)
				}
			}
			if strings.Contains(logs.String(), token) || strings.Contains(logs.String(), "Authorization") {
				t.Errorf("the token reached the logs: %s", logs.String())
			}
		})
	}
}

func TestDetector(t *testing.T) {
	states := []anomaly.KeyState{
		{Key: "cart/add", Fill: 3, Window: 500, Baseline: 12e6, Threshold: 3, Observed: 3, LastSeen: 5},
		{Key: "frontend/GET /checkout", Fill: 500, Window: 500, Baseline: 40e6, Threshold: 3, Observed: 9000, Anomalies: 12, LastSeen: 7},
	}
	for _, tc := range []struct {
		name     string
		detector func() []anomaly.KeyState
		query    string
		wantCode int
		want     string
	}{
		{"all", func() []anomaly.KeyState { return states }, "", 200,
			`[{"anomalies":0,"baselineNs":12000000,"fill":3,"key":"cart/add","lastSeen":5,"observed":3,"threshold":3,"window":500},` +
				`{"anomalies":12,"baselineNs":40000000,"fill":500,"key":"frontend/GET /checkout","lastSeen":7,"observed":9000,"threshold":3,"window":500}]`},
		{"one key", func() []anomaly.KeyState { return states }, "?key=frontend%2FGET+%2Fcheckout", 200,
			`{"anomalies":12,"baselineNs":40000000,"fill":500,"key":"frontend/GET /checkout","lastSeen":7,"observed":9000,"threshold":3,"window":500}`},
		{"unknown key", func() []anomaly.KeyState { return states }, "?key=nope", 404,
			`{"code":404,"error":"unknown detector key \"nope\""}`},
		{"no detector", nil, "", 200, `[]`},
		{"empty detector", func() []anomaly.KeyState { return nil }, "", 200, `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestAPI(newFakeStore(), Config{}, tc.detector, nil)
			rec := do(t, h, "/api/v1/detector"+tc.query)
			if rec.Code != tc.wantCode {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			if got := str(t, decode(t, rec)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestV1StoreErrors(t *testing.T) {
	for _, target := range []string{
		"/api/v1/anomalies",
		"/api/v1/traces/" + fxTrace + "/artifacts",
		"/api/v1/artifacts/art-cpu/meta",
		"/api/v1/artifacts/art-cpu",
	} {
		t.Run(target, func(t *testing.T) {
			f := fixture(t)
			f.err = io.ErrUnexpectedEOF
			rec := do(t, newTestAPI(f, Config{}, nil, nil), target)
			if rec.Code != 500 {
				t.Fatalf("status = %d, want 500: %s", rec.Code, rec.Body)
			}
			if got := str(t, decode(t, rec)); got != `{"code":500,"error":"unexpected EOF"}` {
				t.Errorf("body = %s", got)
			}
		})
	}
}

func TestNoArtifactStore(t *testing.T) {
	f := fixture(t)
	a := New(Config{}, f, nil, nil, nil)
	h := a.Handler()
	for _, tc := range []struct {
		target   string
		wantCode int
	}{
		{"/api/traces/" + fxTrace, 200},
		{"/api/v1/traces/" + fxTrace + "/artifacts", 200},
		{"/api/v1/artifacts/art-cpu", 404},
		{"/api/v1/artifacts/art-cpu/meta", 404},
	} {
		if rec := do(t, h, tc.target); rec.Code != tc.wantCode {
			t.Errorf("GET %s = %d, want %d: %s", tc.target, rec.Code, tc.wantCode, rec.Body)
		}
	}
}
