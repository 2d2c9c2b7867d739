package query

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// fuzzRoutes are the read endpoints whose parameters come from the client;
// {} is replaced by a fuzzed path segment.
var fuzzRoutes = []string{
	"/api/traces",
	"/api/traces/{}",
	"/api/services",
	"/api/services/{}/operations",
	"/api/operations",
	"/api/dependencies",
	"/api/v1/anomalies",
	"/api/v1/detector",
	"/api/v1/services/latency",
	"/api/v1/metrics",
	"/api/v1/traces/{}/artifacts",
	"/api/v1/artifacts/{}",
	"/api/v1/artifacts/{}/meta",
	"/api/v1/artifacts/{}/flamegraph",
}

// FuzzQueryParams sends every read endpoint fuzzed query strings and path
// segments: a malformed parameter is the client's error (4xx naming it),
// never a panic or a 500.
func FuzzQueryParams(f *testing.F) {
	for _, q := range []string{
		"service=frontend&limit=20&lookback=1h",
		"service=frontend&start=1&end=0",
		"service=frontend&tags=%7B%22http.status_code%22%3A500%7D&tag=a:b&minDuration=1ms&maxDuration=1us",
		"traceID=" + fxTrace + "&traceID=zz",
		"service=frontend&lookback=9223372036854775807w",
		"endTs=-1&lookback=99999999999999999999",
		"since=2024-01-01T00:00:00Z&limit=-5&anomalous=maybe",
		"since=1h&key=frontend%2FGET",
		"name=x&service=y&start=1&end=2&step=0",
		"tid=1,2,x&start=-1&end=1e30",
		"prettyPrint=true&service=%00%ff",
	} {
		for i := range fuzzRoutes {
			f.Add(uint8(i), fxTrace, q)
		}
	}
	f.Add(uint8(3), "a%2Fb", "")
	f.Add(uint8(11), "art-cpu", "")
	f.Add(uint8(13), "art-cpu", "tid=1&start=0&end=99999999999999999999")
	h := newTestAPI(fixture(f), Config{}, nil, nil)
	f.Fuzz(func(t *testing.T, route uint8, segment, rawQuery string) {
		path := strings.Replace(fuzzRoutes[int(route)%len(fuzzRoutes)], "{}", segment, 1)
		req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path, RawQuery: rawQuery}, Header: http.Header{}, Host: "x"}
		req = req.WithContext(t.Context())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("GET %s?%s: %d %s", path, rawQuery, rec.Code, rec.Body)
		}
	})
}
