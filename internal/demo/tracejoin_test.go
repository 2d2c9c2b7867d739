package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/mesh"
)

func TestWantShape(t *testing.T) {
	small, err := mesh.Parse([]byte("entry: a\nservices:\n- {name: a, language: go, calls: [b, d]}\n" +
		"- {name: b, language: java, calls: [c]}\n- {name: c, language: python}\n- {name: d, language: go}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		topo            *mesh.Topology
		run, sidecar    bool
		spans, services int
	}{
		{small, true, false, 7, 4},
		{small, true, true, 14, 4},
		{small, false, true, 7, 4},
		{mesh.Default(), true, false, 25, 10}, // 13 visits: E twice, J three times
		{mesh.Default(), true, true, 50, 10},
	} {
		if spans, services := wantShape(tc.topo, tc.run, tc.sidecar); spans != tc.spans || services != tc.services {
			t.Errorf("%d services, run %v, sidecar %v: %d spans %d services, want %d and %d",
				len(tc.topo.Services), tc.run, tc.sidecar, spans, services, tc.spans, tc.services)
		}
	}
}

// jaegerChain is a Jaeger trace of a → b → c made of SERVER/CLIENT pairs;
// a nonzero orphan makes c's SERVER span the child of a span not in it.
func jaegerChain(id int, orphan bool) map[string]any {
	tid := fmt.Sprintf("%032x", id)
	type sp struct{ id, parent, svc string }
	spans := []sp{{"01", "", "a"}, {"02", "01", "a"}, {"03", "02", "b"}, {"04", "03", "b"}, {"05", "04", "c"}}
	if orphan {
		spans[4].parent = "ff"
	}
	var js []map[string]any
	procs := map[string]any{}
	for _, s := range spans {
		j := map[string]any{"spanID": fmt.Sprintf("%016s", s.id), "operationName": "rootline.demo.Svc/Call", "processID": s.svc,
			"startTime": 1, "duration": 1, "tags": []map[string]any{{"key": "rpc.system", "type": "string", "value": "grpc"}}}
		if s.parent != "" {
			j["references"] = []map[string]any{{"refType": "CHILD_OF", "traceID": tid, "spanID": fmt.Sprintf("%016s", s.parent)}}
		}
		js = append(js, j)
		procs[s.svc] = map[string]any{"serviceName": s.svc}
	}
	return map[string]any{"traceID": tid, "spans": js, "processes": procs}
}

// A trace joined when it has one root, every service and the spans the
// topology makes; the sample is the entry's traces in the window.
func TestMeasureTraceJoin(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		json.NewEncoder(w).Encode(map[string]any{"data": []any{jaegerChain(1, false), jaegerChain(2, true), jaegerChain(3, false)}})
	}))
	defer srv.Close()
	topo, err := mesh.Parse([]byte("entry: a\nservices:\n- {name: a, language: go, calls: [b]}\n" +
		"- {name: b, language: java, calls: [c]}\n- {name: c, language: python}\n"))
	if err != nil {
		t.Fatal(err)
	}
	to := time.Unix(100, 0)
	tj, err := measureTraceJoin(context.Background(), srv.URL, "", topo, true, false, to.Add(-time.Minute), to, 50)
	if err != nil {
		t.Fatal(err)
	}
	if tj.Sampled != 3 || tj.Joined != 2 || tj.WantSpans != 5 || tj.WantServices != 3 || tj.GRPCSpans != 15 ||
		fmt.Sprint(tj.Roots) != "[1 2 1]" || tj.Example != fmt.Sprintf("%032x", 1) {
		t.Errorf("%+v", tj)
	}
	if want := "end=99000000&limit=50&service=a&start=40000000"; query != want {
		t.Errorf("query %q, want %q", query, want)
	}
}
