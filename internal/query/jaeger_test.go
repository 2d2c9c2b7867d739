package query

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

func TestJaegerListEndpoints(t *testing.T) {
	f := newFakeStore()
	f.services = []string{"payments", "frontend", "cart", "frontend"}
	f.ops["frontend"] = []store.Operation{
		{Name: "GET /", Kind: model.KindServer},
		{Name: "GET /", Kind: model.KindClient},
		{Name: "render", Kind: model.KindInternal},
		{Name: "legacy", Kind: model.KindUnspecified},
	}
	f.ops["a/b"] = []store.Operation{{Name: "x", Kind: model.KindServer}}
	f.deps = []store.DependencyLink{
		{Parent: "frontend", Child: "payments", CallCount: 3, Anomalies: 1},
		{Parent: "cart", Child: "db", CallCount: 7},
		{Parent: "frontend", Child: "payments", CallCount: 2, Anomalies: 2},
	}
	h := newTestAPI(f, Config{}, nil, nil)

	for _, tc := range []struct {
		target string
		want   string // the whole envelope
	}{
		{"/api/services", `{"data":["cart","frontend","payments"],"errors":null,"limit":0,"offset":0,"total":3}`},
		{"/api/services/frontend/operations", `{"data":["GET /","legacy","render"],"errors":null,"limit":0,"offset":0,"total":3}`},
		{"/api/services/a%2Fb/operations", `{"data":["x"],"errors":null,"limit":0,"offset":0,"total":1}`},
		{"/api/services/nobody/operations", `{"data":[],"errors":null,"limit":0,"offset":0,"total":0}`},
		{"/api/operations?service=frontend", `{"data":[{"name":"GET /","spanKind":"client"},{"name":"GET /","spanKind":"server"},` +
			`{"name":"legacy","spanKind":""},{"name":"render","spanKind":"internal"}],"errors":null,"limit":0,"offset":0,"total":4}`},
		{"/api/operations?service=frontend&spanKind=server", `{"data":[{"name":"GET /","spanKind":"server"}],"errors":null,"limit":0,"offset":0,"total":1}`},
		{"/api/dependencies", `{"data":[{"anomalies":0,"callCount":7,"child":"db","parent":"cart"},` +
			`{"anomalies":3,"callCount":5,"child":"payments","parent":"frontend"}],"errors":null,"limit":0,"offset":0,"total":2}`},
		{"/api/dependencies?service=db", `{"data":[{"anomalies":0,"callCount":7,"child":"db","parent":"cart"}],"errors":null,"limit":0,"offset":0,"total":1}`},
	} {
		t.Run(tc.target, func(t *testing.T) {
			rec := do(t, h, tc.target)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := str(t, decode(t, rec)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDependenciesWindow(t *testing.T) {
	for _, tc := range []struct {
		query     string
		wantStart int64
		wantEnd   int64
	}{
		{"", fixedNow.Add(-24 * time.Hour).UnixNano(), fixedNow.UnixNano()},
		{"?endTs=1700000000000&lookback=3600000", 1700000000000e6 - 3600e9, 1700000000000e6},
		{"?endTs=1000&lookback=5000", 0, 1000e6},
	} {
		t.Run(tc.query, func(t *testing.T) {
			f := newFakeStore()
			h := newTestAPI(f, Config{}, nil, nil)
			if rec := do(t, h, "/api/dependencies"+tc.query); rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := f.lastDeps; got != [2]int64{tc.wantStart, tc.wantEnd} {
				t.Errorf("window = %v, want [%d %d]", got, tc.wantStart, tc.wantEnd)
			}
		})
	}
}

func TestSearchQuery(t *testing.T) {
	nowNs := fixedNow.UnixNano()
	for _, tc := range []struct {
		name  string
		query string
		want  store.TraceQuery
	}{
		{"defaults", "service=frontend", store.TraceQuery{
			Service: "frontend", StartMin: nowNs - int64(48*time.Hour), Limit: 20}},
		{"all jaeger params", "service=frontend&operation=GET+%2F&start=1700000000000001&end=1700000001000000" +
			"&minDuration=1.2s&maxDuration=2s&limit=5&lookback=custom", store.TraceQuery{
			Service: "frontend", Operation: "GET /", StartMin: 1700000000000001000, StartMax: 1700000001000000999,
			DurationMin: 1200 * 1e6, DurationMax: 2e9, Limit: 5}},
		{"lookback without start", "service=s&lookback=1h", store.TraceQuery{
			Service: "s", StartMin: nowNs - int64(time.Hour), Limit: 20}},
		{"lookback in days", "service=s&lookback=2d", store.TraceQuery{
			Service: "s", StartMin: nowNs - int64(48*time.Hour), Limit: 20}},
		{"end without start", "service=s&end=1700000000000000", store.TraceQuery{
			Service: "s", StartMin: 1700000000000000000 - int64(48*time.Hour), StartMax: 1700000000000000999, Limit: 20}},
		{"end and lookback", "service=s&end=1700000000000000&lookback=1h", store.TraceQuery{
			Service: "s", StartMin: 1700000000000000000 - int64(time.Hour), StartMax: 1700000000000000999, Limit: 20}},
		{"start wins over lookback", "service=s&start=5&lookback=1h", store.TraceQuery{
			Service: "s", StartMin: 5000, Limit: 20}},
		{"micro durations", "service=s&start=0&minDuration=500us&maxDuration=100ms", store.TraceQuery{
			Service: "s", DurationMin: 500e3, DurationMax: 100e6, Limit: 20}},
		{"tags json", "service=s&start=0&tags=" + url.QueryEscape(`{"error":"true","http.status_code":"500"}`), store.TraceQuery{
			Service: "s", Tags: map[string]string{"error": "true", "http.status_code": "500"}, Limit: 20}},
		{"tags json non-string values", "service=s&start=0&tags=" + url.QueryEscape(`{"error":true,"http.status_code":500}`), store.TraceQuery{
			Service: "s", Tags: map[string]string{"error": "true", "http.status_code": "500"}, Limit: 20}},
		{"repeated tag", "service=s&start=0&tag=error:true&tag=http.url:http://x:80/", store.TraceQuery{
			Service: "s", Tags: map[string]string{"error": "true", "http.url": "http://x:80/"}, Limit: 20}},
		{"limit capped", "service=s&start=0&limit=5000", store.TraceQuery{Service: "s", Limit: 1000}},
		{"limit zero means default", "service=s&start=0&limit=0", store.TraceQuery{Service: "s", Limit: 20}},
		{"rootline filters", "service=s&start=0&anomalous=true&error=1", store.TraceQuery{
			Service: "s", Limit: 20, AnomalousOnly: true, ErrorOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeStore()
			h := newTestAPI(f, Config{}, nil, nil)
			rec := do(t, h, "/api/traces?"+tc.query)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if !reflect.DeepEqual(f.lastQuery, tc.want) {
				t.Errorf("query = %+v\nwant    %+v", f.lastQuery, tc.want)
			}
			if got := str(t, decode(t, rec)); got != `{"data":[],"errors":null,"limit":0,"offset":0,"total":0}` {
				t.Errorf("empty search = %s", got)
			}
		})
	}
}

func TestSearchByTraceIDs(t *testing.T) {
	f := fixture(t)
	h := newTestAPI(f, Config{}, nil, nil)
	rec := do(t, h, "/api/traces?traceID="+fxTrace+"&traceID="+fxOther)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body := decode(t, rec)
	if got := str(t, at(t, body, "total")); got != "1" {
		t.Errorf("total = %s, want 1", got)
	}
	if got := str(t, at(t, body, "data", 0, "traceID")); got != `"`+fxTrace+`"` {
		t.Errorf("traceID = %s", got)
	}
	if got, want := str(t, at(t, body, "errors")), `[{"msg":"trace not found","traceID":"`+fxOther+`"}]`; got != want {
		t.Errorf("errors = %s, want %s", got, want)
	}
}

func TestSearchResults(t *testing.T) {
	f := fixture(t)
	f.found = []model.TraceID{mustTraceID(t, fxTrace)}
	h := newTestAPI(f, Config{}, nil, nil)
	body := decode(t, do(t, h, "/api/traces?service=frontend&lookback=1h"))
	if got := str(t, at(t, body, "total")); got != "1" {
		t.Errorf("total = %s, want 1", got)
	}
	if got := len(at(t, body, "data", 0, "spans").([]any)); got != 3 {
		t.Errorf("spans = %d, want 3", got)
	}
}

func TestJaegerErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		target   string
		storeErr error
		wantCode int
		wantMsg  string // substring of errors[0].msg
	}{
		{"service required", "/api/traces", nil, 400, "parameter 'service' is required"},
		{"bad start", "/api/traces?service=s&start=yesterday", nil, 400, "'start'"},
		{"bad end", "/api/traces?service=s&end=1.5", nil, 400, "'end'"},
		{"end out of range", "/api/traces?service=s&end=9223372036854775", nil, 400, "'end'"},
		{"end before start", "/api/traces?service=s&start=10&end=5", nil, 400, "'end'"},
		{"bad minDuration", "/api/traces?service=s&minDuration=fast", nil, 400, "'minDuration'"},
		{"bad maxDuration", "/api/traces?service=s&maxDuration=10", nil, 400, "'maxDuration'"},
		{"negative minDuration", "/api/traces?service=s&minDuration=-1s", nil, 400, "'minDuration'"},
		{"max below min", "/api/traces?service=s&minDuration=2s&maxDuration=1s", nil, 400, "'maxDuration' should be greater than 'minDuration'"},
		{"bad tags json", "/api/traces?service=s&tags=" + url.QueryEscape(`{"error":`), nil, 400, "'tags'"},
		{"tags json not object", "/api/traces?service=s&tags=" + url.QueryEscape(`["a"]`), nil, 400, "'tags'"},
		{"tags json nested", "/api/traces?service=s&tags=" + url.QueryEscape(`{"a":{"b":1}}`), nil, 400, "'tags'"},
		{"bad tag", "/api/traces?service=s&tag=novalue", nil, 400, "'tag'"},
		{"bad limit", "/api/traces?service=s&limit=ten", nil, 400, "'limit'"},
		{"negative limit", "/api/traces?service=s&limit=-1", nil, 400, "'limit'"},
		{"bad lookback", "/api/traces?service=s&lookback=forever", nil, 400, "'lookback'"},
		{"bad anomalous", "/api/traces?service=s&anomalous=maybe", nil, 400, "'anomalous'"},
		{"bad error", "/api/traces?service=s&error=maybe", nil, 400, "'error'"},
		{"bad traceID param", "/api/traces?traceID=xyz", nil, 400, "'traceID'"},
		{"bad trace id", "/api/traces/not-hex", nil, 400, "'traceID'"},
		{"trace id too long", "/api/traces/" + strings.Repeat("a", 33), nil, 400, "'traceID'"},
		{"trace not found", "/api/traces/" + fxOther, nil, 404, "trace not found"},
		{"operations need service", "/api/operations", nil, 400, "parameter 'service' is required"},
		{"bad endTs", "/api/dependencies?endTs=now", nil, 400, "'endTs'"},
		{"bad dependency lookback", "/api/dependencies?lookback=1h", nil, 400, "'lookback'"},
		{"unknown endpoint", "/api/nothing", nil, 404, "no such endpoint"},
		{"store failure", "/api/services", errors.New("disk on fire"), 500, "disk on fire"},
		{"store closed", "/api/traces?service=s", store.ErrClosed, 503, "store closed"},
		{"store timeout", "/api/services", context.DeadlineExceeded, 504, "deadline exceeded"},
		{"store not found", "/api/traces/" + fxTrace, store.ErrNotFound, 404, "trace not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture(t)
			f.err = tc.storeErr
			h := newTestAPI(f, Config{}, nil, nil)
			rec := do(t, h, tc.target)
			if rec.Code != tc.wantCode {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.wantCode, rec.Body)
			}
			body := decode(t, rec)
			for _, k := range []string{"data", "total", "limit", "offset"} {
				if got, want := str(t, at(t, body, k)), map[string]string{"data": "null"}[k]; got != want && !(want == "" && got == "0") {
					t.Errorf("%s = %s in error envelope", k, got)
				}
			}
			if got := str(t, at(t, body, "errors", 0, "code")); got != str(t, tc.wantCode) {
				t.Errorf("errors[0].code = %s, want %d", got, tc.wantCode)
			}
			if msg := at(t, body, "errors", 0, "msg").(string); !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("errors[0].msg = %q, want it to contain %q", msg, tc.wantMsg)
			}
		})
	}
}

func TestArtifactLookupFailureIsAWarning(t *testing.T) {
	f := fixture(t)
	// Fail only the artifact lookup.
	h := New(Config{}, f, failingArtifacts{f}, nil, nil).Handler()
	rec := do(t, h, "/api/traces/"+fxTrace)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body := decode(t, rec)
	if got := str(t, at(t, body, "data", 0, "warnings")); !strings.Contains(got, "artifacts unavailable") {
		t.Errorf("warnings = %s", got)
	}
}

type failingArtifacts struct{ *fakeStore }

func (failingArtifacts) TraceArtifacts(context.Context, model.TraceID) ([]store.Artifact, error) {
	return nil, errors.New("blob store down")
}
