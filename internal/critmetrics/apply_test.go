package critmetrics

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rootline/rootline/internal/kmetrics"
)

// TestApplySendsEachRequestToEveryAgent: each agent takes the requests for
// its own containers and refuses the others; a request no agent takes is
// reported with every agent's answer; the token goes along.
func TestApplySendsEachRequestToEveryAgent(t *testing.T) {
	agent := func(containers ...string) (*httptest.Server, *[]kmetrics.ConfigRequest) {
		var got []kmetrics.ConfigRequest
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPut || r.URL.Path != "/api/v1/kmetrics/config" || r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, `{"error":"unexpected request"}`, http.StatusUnauthorized)
				return
			}
			var req kmetrics.ConfigRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				t.Error(err)
			}
			for _, c := range containers {
				if c == req.Container {
					got = append(got, req)
					w.Write([]byte(`{}`))
					return
				}
			}
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"kmetrics: bad request: cgroup ` + req.Container + `: no such file or directory"}`))
		}))
		t.Cleanup(srv.Close)
		return srv, &got
	}
	a, gotA := agent("/a1", "/a2")
	b, gotB := agent("/b1")
	on, off := true, false
	reqs := []kmetrics.ConfigRequest{
		{Container: "/a1", Metrics: []string{"runq"}, Enabled: &on},
		{Container: "/a1", Metrics: []string{"oncpu"}, Enabled: &off},
		{Container: "/b1", Metrics: []string{"runq"}, Enabled: &on},
		{Container: "/gone", Metrics: []string{"runq"}, Enabled: &on},
	}
	res, err := Apply(context.Background(), reqs, ApplyOptions{Agents: []string{a.URL, b.URL}, Token: "tok", Window: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 3 || len(*gotA) != 2 || len(*gotB) != 1 || res.Agents[0].Accepted != 2 || res.Agents[1].Accepted != 1 {
		t.Errorf("applied %d, agents %+v, a got %d, b got %d", res.Applied, res.Agents, len(*gotA), len(*gotB))
	}
	if len(res.Refused) != 1 || res.Refused[0].Container != "/gone" || len(res.Refused[0].Errors) != 2 {
		t.Errorf("refused %+v", res.Refused)
	}
	if res.Before != nil || res.After != nil || res.OverheadNote != "" {
		t.Errorf("measured with a negative window: %+v", res)
	}
	if _, err := Apply(context.Background(), reqs, ApplyOptions{}); err == nil {
		t.Error("no agents: no error")
	}
	if _, err := Apply(context.Background(), reqs, ApplyOptions{Agents: []string{"ftp://x"}}); err == nil {
		t.Error("bad agent address: no error")
	}
}
