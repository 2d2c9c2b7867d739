package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
)

// TestRelay: `rootline run` sends its spans through its node's agent, which
// sends what it holds to the server every 2 s here: the server receives all
// the spans of two processes in fewer requests than they sent. With the agent
// gone, the spans go to the server directly and none is lost.
func TestRelay(t *testing.T) {
	bpftest.RequireBPF(t) // the agent's cpu profiler
	dir := t.TempDir()
	bin := cpBuild(t, dir)
	srv := startServer(t, filepath.Join(dir, "data"))
	anchor := startTarget(t, "sleep", "600")
	ag := startAgent(t, srv, "--profilers", "cpu", "--target", fmt.Sprint("pid=", anchor), "--relay.every", "2s")
	socket, agentAddr, logs := ag.socket, ag.addr, ag.logs
	to := waitLogLine(t, logs, "relaying the node's spans", "to")
	if want := "http://" + srv.http + "/v1/traces"; to != want {
		t.Fatalf("the agent relays to %s, the server's OTLP/HTTP receiver is %s", to, want)
	}

	// Two processes, each sending a batch a second.
	var ports []int
	for _, svc := range []string{"relay-a", "relay-b"} {
		_, port := startTraced(t, []string{"LISTEN=127.0.0.1:0"}, true,
			[]string{"--mode", "ptrace", "--service", svc, "--server", "http://" + srv.http, "--agent", "unix:" + socket, "--ship-via-agent"}, bin)
		ports = append(ports, port)
	}
	requests0 := metric(t, "http://"+srv.query+"/metrics", `rootline_receiver_requests_total{outcome="accepted",receiver="otlp_http"}`)
	get := func(n int) {
		for i := range n {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/work?do=fast", ports[i%2]))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			time.Sleep(50 * time.Millisecond)
		}
	}
	get(80)
	waitSpans(t, srv, "relay-a", 40)
	waitSpans(t, srv, "relay-b", 40)
	requests := metric(t, "http://"+srv.query+"/metrics", `rootline_receiver_requests_total{outcome="accepted",receiver="otlp_http"}`) - requests0
	held := metric(t, "http://"+agentAddr+"/metrics", `rootline_agent_relay_requests_total{outcome="held"}`)
	sent := metric(t, "http://"+agentAddr+"/metrics", `rootline_agent_relay_batches_total{outcome="sent"}`)
	t.Logf("80 requests over ~4 s to two processes: they sent %.0f batches to the agent, the agent %.0f to the server; the server received %.0f OTLP/HTTP requests", held, sent, requests)
	if held == 0 || sent == 0 || requests != sent || sent >= held {
		t.Errorf("batches: %.0f to the agent, %.0f from it, %.0f at the server; want fewer from it than to it, and each at the server", held, sent, requests)
	}

	// The agent stops (what it held is sent); the spans go to the server.
	ag.stop()
	get(20)
	waitSpans(t, srv, "relay-a", 50)
	waitSpans(t, srv, "relay-b", 50)
}

// waitLogLine waits for a JSON log line with msg in logs and returns its
// field key.
func waitLogLine(t *testing.T, logs *lockedBuffer, msg, key string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == msg {
				if v, ok := l[key].(string); ok {
					return v
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line with %s:\n%s", msg, key, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSpans waits until the server holds n traces of service.
func waitSpans(t *testing.T, srv *serverProc, service string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var resp struct {
			Data []json.RawMessage `json:"data"`
		}
		srv.getJSON(t, fmt.Sprintf("/api/traces?service=%s&limit=%d&lookback=1h", service, 10*n), &resp)
		if len(resp.Data) >= n {
			if len(resp.Data) > n {
				t.Errorf("%d traces of %s, want %d", len(resp.Data), service, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d traces of %s at the server, want %d", len(resp.Data), service, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
