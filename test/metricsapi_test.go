package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/kmetrics"
)

// metricsAPIWorkload pushes, as the agent does (kmetrics.Pusher: OTLP/HTTP
// protobuf, cumulative), n pushes one second apart of a container "/mapi"
// of service "mapi" and its sidecar "/mapi.sidecar": per push i, runq
// events land in log2 bucket 10+i%3 at a rate following one shape, TCP
// sends and receives (each 1 KiB) follow another, TLB flushes a third. It
// returns the events per push of runq and the time of the first push.
func metricsAPIWorkload(t *testing.T, srv *serverProc, token string, n int) (runq []uint64, t0 time.Time) {
	t.Helper()
	p := &kmetrics.Pusher{URL: "http://" + srv.http + "/v1/metrics", Token: token, Host: "e2e"}
	t0 = time.Now().Add(-time.Duration(n+5) * time.Second).Truncate(time.Second)
	app := map[kmetrics.Metric]*kmetrics.Series{}
	side := map[kmetrics.Metric]*kmetrics.Series{}
	for _, mt := range []kmetrics.Metric{kmetrics.RunqLatency, kmetrics.TCPSendBytes, kmetrics.TCPRecvBytes, kmetrics.TLBFlushes} {
		app[mt] = &kmetrics.Series{Metric: mt, Container: "/mapi", Service: "mapi"}
		side[mt] = &kmetrics.Series{Metric: mt, Container: "/mapi.sidecar", Service: "mapi"}
	}
	hist := func(s *kmetrics.Series, events uint64, bucket int, value uint64) {
		s.Count += events
		s.Sum += events * value
		s.Buckets[bucket] += events
	}
	runq = make([]uint64, n+1)
	for i := 0; i <= n; i++ {
		if i > 0 {
			load := uint64(100 + 90*math.Sin(float64(i)/5))
			req := uint64(20)
			if (i/10)%2 == 1 {
				req = 200
			}
			runq[i] = load
			hist(app[kmetrics.RunqLatency], load, 10+i%3, 1<<(9+i%3))
			hist(app[kmetrics.TCPSendBytes], req, 10, 1024)
			hist(app[kmetrics.TCPRecvBytes], req, 10, 1024)
			app[kmetrics.TLBFlushes].Count += uint64(5 + 40*(i%7/6))
			hist(side[kmetrics.RunqLatency], 3, 6, 40)
			hist(side[kmetrics.TCPSendBytes], req, 6, 64)
			hist(side[kmetrics.TCPRecvBytes], req, 6, 64)
			side[kmetrics.TLBFlushes].Count += 1
		}
		var all []kmetrics.Series
		for _, m := range []map[kmetrics.Metric]*kmetrics.Series{app, side} {
			for _, s := range m {
				all = append(all, *s)
			}
		}
		if err := p.Push(context.Background(), all, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	return runq, t0
}

// TestMetricsAPI feeds a real server (SQLite store, API token) kernel
// metrics over OTLP as the agent pushes them and reads them back through
// GET /api/v1/metrics, /api/v1/metrics/timeline and
// /api/v1/critical-metrics; the analysis must be the one `rootline analyze
// critical-metrics --server` gives.
func TestMetricsAPI(t *testing.T) {
	const token = "mapi-token"
	const n = 60
	srv := startServerEnv(t, t.TempDir(), []string{"ROOTLINE_AUTH_TOKEN=" + token})
	runq, t0 := metricsAPIWorkload(t, srv, token, n)
	from, to := t0.UnixMilli(), t0.Add(n*time.Second).UnixMilli()
	window := fmt.Sprintf("from=%d&to=%d", from, to)

	get := func(path, tok string, v any) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.api(path), nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if v != nil && resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, v); err != nil {
				t.Fatalf("GET %s: %v\n%s", path, err, body)
			}
		}
		if resp.StatusCode != http.StatusOK && v != nil && testing.Verbose() {
			t.Logf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return resp.StatusCode
	}
	for _, path := range []string{"/api/v1/metrics?" + window, "/api/v1/metrics/timeline?" + window, "/api/v1/critical-metrics?" + window} {
		if c := get(path, "", nil); c != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, c)
		}
		if c := get(path, "wrong", nil); c != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, c)
		}
	}

	// The stored series, one container, thinned to 10 points.
	var raw struct {
		Series []struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
			Points []struct {
				Time  int64   `json:"timeUnixNano"`
				Count *uint64 `json:"count"`
			} `json:"points"`
		} `json:"series"`
	}
	if c := get("/api/v1/metrics?container=%2Fmapi&points=10&"+window, token, &raw); c != 200 {
		t.Fatalf("GET /api/v1/metrics: %d", c)
	}
	if len(raw.Series) != 4 {
		t.Fatalf("%d series of /mapi, want 4", len(raw.Series))
	}
	for _, s := range raw.Series {
		if s.Labels["container"] != "/mapi" || len(s.Points) != 10 {
			t.Errorf("%s: container %q, %d points, want /mapi and 10", s.Name, s.Labels["container"], len(s.Points))
		}
		if s.Name == kmetrics.RunqLatency.ExportName() {
			var total uint64
			for _, v := range runq {
				total += v
			}
			if last := s.Points[len(s.Points)-1]; last.Count == nil || *last.Count != total || last.Time != t0.Add(n*time.Second).UnixNano() {
				t.Errorf("runq's last kept point: %+v, want count %d at the last push", last, total)
			}
		}
	}

	// The timeline: one interval per push, the events of each.
	var tl struct {
		Intervals   int     `json:"intervals"`
		StepSeconds float64 `json:"stepSeconds"`
		Containers  []struct {
			Service, Container string
			Sidecar            bool
			Metrics            []struct {
				Metric  string      `json:"metric"`
				Events  []float64   `json:"events"`
				Buckets [][]float64 `json:"buckets"`
			}
		}
	}
	if c := get("/api/v1/metrics/timeline?service=mapi&buckets=1000&"+window, token, &tl); c != 200 {
		t.Fatalf("GET /api/v1/metrics/timeline: %d", c)
	}
	if tl.Intervals != n || tl.StepSeconds != 1 || len(tl.Containers) != 2 || tl.Containers[0].Container != "/mapi" || !tl.Containers[1].Sidecar {
		t.Fatalf("timeline: %d intervals of %gs, containers %+v", tl.Intervals, tl.StepSeconds, tl.Containers)
	}
	for _, m := range tl.Containers[0].Metrics {
		if m.Metric != "runq" {
			continue
		}
		for i, ev := range m.Events {
			if ev != float64(runq[i+1]) {
				t.Errorf("runq interval %d: %g events, want %d", i, ev, runq[i+1])
			}
			// log2 bucket 10+k of the agent holds values up to 2^(10+k) ns.
			var inBuckets float64
			for _, b := range m.Buckets[i] {
				inBuckets += b
			}
			if inBuckets != ev {
				t.Errorf("runq interval %d: %g events in the buckets, want %g", i, inBuckets, ev)
			}
		}
	}
	if c := get("/api/v1/metrics/timeline?service=mapi&buckets=6&"+window, token, &tl); c != 200 || tl.Intervals != 6 || tl.StepSeconds != 10 {
		t.Errorf("6 buckets: %d, %d intervals of %gs", c, tl.Intervals, tl.StepSeconds)
	}

	// The analysis: the same as the command's.
	var api, cli map[string]json.RawMessage
	if c := get("/api/v1/critical-metrics?service=mapi&"+window, token, &api); c != 200 {
		t.Fatalf("GET /api/v1/critical-metrics: %d", c)
	}
	cmd := exec.Command(rootlineBin(t), "analyze", "critical-metrics", "--server", "http://"+srv.query, "--json",
		"--from", t0.UTC().Format(time.RFC3339), "--to", t0.Add(n*time.Second).UTC().Format(time.RFC3339))
	cmd.Env = append(os.Environ(), "ROOTLINE_AUTH_TOKEN="+token)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootline analyze critical-metrics: %v", err)
	}
	if err := json.Unmarshal(out, &cli); err != nil {
		t.Fatal(err)
	}
	var apiSvcs, cliSvcs []map[string]any
	json.Unmarshal(api["services"], &apiSvcs)
	json.Unmarshal(cli["services"], &cliSvcs)
	var cliMapi map[string]any
	for _, s := range cliSvcs {
		if s["service"] == "mapi" {
			cliMapi = s
		}
	}
	if len(apiSvcs) != 1 || cliMapi == nil || !reflect.DeepEqual(apiSvcs[0], cliMapi) {
		t.Errorf("the API's analysis of mapi differs from the command's:\napi %v\ncli %v", apiSvcs, cliMapi)
	}
	var crit map[string][]string
	json.Unmarshal(api["critical"], &crit)
	if len(crit["mapi"]) == 0 || len(crit["mapi"]) >= 4 {
		t.Errorf("critical metrics of mapi: %v, want 1…3 of its 4", crit["mapi"])
	}
	app, _ := apiSvcs[0]["app"].(map[string]any)
	if app == nil || app["k"].(float64) < 2 {
		t.Errorf("mapi's app group: %v", app)
	}

	// Bad requests get clear errors.
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/v1/critical-metrics?service=nobody&" + window, 404},
		{"/api/v1/critical-metrics?k=1&" + window, 400},
		{fmt.Sprintf("/api/v1/critical-metrics?from=%d&to=%d", from, from+2000), 422},
		{fmt.Sprintf("/api/v1/critical-metrics?from=%d&to=%d", to-int64(48*time.Hour/time.Millisecond), to), 400},
		{fmt.Sprintf("/api/v1/metrics/timeline?from=%d&to=%d", to, from), 400},
		{"/api/v1/metrics/timeline?buckets=100000&" + window, 400},
		{"/api/v1/metrics?points=1&" + window, 400},
		{"/api/v1/metrics?from=" + url.QueryEscape("last week"), 400},
	} {
		var body map[string]any
		if c := get(tc.path, token, &body); c != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.path, c, tc.code)
		}
	}
}
