package kmetrics

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/rootline/rootline/internal/agent"
)

// TestAgentAPI runs the component inside a real agent: the kmetrics routes
// are behind the agent's token, /metrics carries the series, and the push
// loop posts OTLP protobuf.
func TestAgentAPI(t *testing.T) {
	m, keys := withSnapshot(t)
	var mu sync.Mutex
	var pushed []pmetricotlp.ExportRequest
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		zr, err := gzip.NewReader(r.Body)
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		req := pmetricotlp.NewExportRequest()
		if r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Content-Encoding") != "gzip" ||
			err != nil || req.UnmarshalProto(body) != nil || r.Header.Get("Authorization") != "Bearer s3cret" {
			t.Errorf("bad push: %s %s %q %q (%v)", r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Content-Encoding"), r.Header.Get("Authorization"), err)
		}
		mu.Lock()
		pushed = append(pushed, req)
		mu.Unlock()
	}))
	defer otlp.Close()

	cfg := agent.DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.ServerURL = "http://127.0.0.1:1" // never answers: registration retries in the background
	cfg.AuthToken = "s3cret"
	cfg.Socket = "" // the test calls over TCP with the token
	cfg.Discover = false
	a, err := agent.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Component{Manager: m, Interval: 20 * time.Millisecond,
		Pusher: &Pusher{URL: otlp.URL + "/v1/metrics", Token: "s3cret", Host: "node1",
			Node: func() (NodeCPU, error) { return NodeCPU{Steal: 1500 * time.Millisecond, Busy: 9 * time.Second}, nil }}}
	if err := a.AddComponent(c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	base := "http://" + a.Addr().String()

	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("GET", "/api/v1/kmetrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET without token: %d", code)
	}
	if code, _ := do("PUT", "/api/v1/kmetrics/config", "wrong", `{"container":"/app","enabled":true}`); code != http.StatusUnauthorized {
		t.Errorf("PUT with a wrong token: %d", code)
	}
	code, body := do("PUT", "/api/v1/kmetrics/config", "s3cret", `{"container":"/app","metrics":["oncpu","runq"],"enabled":true,"rate":5}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	var st State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Attached) == 0 {
		t.Errorf("nothing attached: %s", body)
	}
	if code, body := do("PUT", "/api/v1/kmetrics/config", "s3cret", `{"container":"/app","metrics":["bogus"],"enabled":true}`); code != http.StatusBadRequest {
		t.Errorf("bad metric: %d %s", code, body)
	}
	code, body = do("GET", "/api/v1/kmetrics", "s3cret", "")
	if code != http.StatusOK || !strings.Contains(body, `"rate":5`) || !strings.Contains(body, `"name":"/app"`) {
		t.Errorf("GET: %d %s", code, body)
	}
	code, body = do("GET", "/metrics", "", "")
	if code != http.StatusOK || !strings.Contains(body, `rootline_kernel_runq_latency_seconds_count{cgroup_id="`+formatID(keys["unified/app"])+`",container="/app",service="checkout"} 3`) {
		t.Errorf("/metrics: %d, no runq series:\n%s", code, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(pushed)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("agent: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pushed) == 0 || pushed[0].Metrics().MetricCount() == 0 {
		t.Fatalf("no OTLP push")
	}
	// The node's CPU time: its own resource, no service.
	rms := pushed[0].Metrics().ResourceMetrics()
	var steal, busy []float64
	for i := range rms.Len() {
		rm := rms.At(i)
		ms := rm.ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			if ms.At(j).Name() == NodeBusyMetric {
				busy = append(busy, ms.At(j).Sum().DataPoints().At(0).DoubleValue())
			}
			if ms.At(j).Name() != NodeStealMetric {
				continue
			}
			attrs := rm.Resource().Attributes()
			host, _ := attrs.Get("host.name")
			_, hasSvc := attrs.Get("service.name")
			if host.Str() != "node1" || hasSvc {
				t.Errorf("node steal resource: host %q, service.name present %v", host.Str(), hasSvc)
			}
			steal = append(steal, ms.At(j).Sum().DataPoints().At(0).DoubleValue())
		}
	}
	if len(steal) != 1 || steal[0] != 1.5 || len(busy) != 1 || busy[0] != 9 {
		t.Errorf("node steal and busy pushed: %v %v, want [1.5] [9]", steal, busy)
	}
}
