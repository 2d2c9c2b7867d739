package demo

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/diagnosis"
)

// TestCulpritPathReadsStoredPaths: the culprit's path comes from the
// critical-path artifacts linked to its anomalous spans in the fault's
// window — the one whose threads waited longest in the verdict's cause,
// then the verdict's example trace, else the one the kernel saw most of,
// else the longest — and the
// server is asked to compute one only when none is stored.
func TestCulpritPathReadsStoredPaths(t *testing.T) {
	from := time.Unix(1000, 0)
	to := from.Add(30 * time.Second)
	at := func(s int) int64 { return from.Add(time.Duration(s) * time.Second).UnixNano() }
	docs := map[string]critpath.Stored{
		"p1": {Version: critpath.StoredVersion, Paths: []critpath.SpanPath{
			{TraceID: "t1", SpanID: "s1", Service: "e", Start: at(5), Ms: 80, Waits: map[string]float64{"lock": 60, "running": 20},
				BlockedBy: []critpath.BlockedBy{{TraceID: "t9", Service: "e", Operation: "GET /", Ms: 55}}},
			{TraceID: "t1", SpanID: "s0", Service: "d", Start: at(5), Ms: 300},
			{TraceID: "t0", SpanID: "s5", Service: "e", Start: at(-20), Ms: 900}, // before the fault
		}},
		"p6": {Version: critpath.StoredVersion, Paths: []critpath.SpanPath{
			{TraceID: "t6", SpanID: "s6", Service: "e", Start: at(8), Ms: 40, Waits: map[string]float64{"network": 38, "running": 2}}}},
		"p2": {Version: critpath.StoredVersion, Paths: []critpath.SpanPath{{TraceID: "t2", SpanID: "s2", Service: "e", Start: at(10), Ms: 120}}},
		// A longer path the kernel saw none of, and a shorter one it saw.
		"p3": {Version: critpath.StoredVersion, Paths: []critpath.SpanPath{
			{TraceID: "t4", SpanID: "s4", Service: "e", Start: at(6), Ms: 500, States: map[string]float64{critpath.Unknown: 500}},
			{TraceID: "t5", SpanID: "s5", Service: "e", Start: at(7), Ms: 100, States: map[string]float64{critpath.Lock: 90, critpath.Unknown: 10}},
		}},
	}
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		switch id := r.URL.Path[len("/api/v1/"):]; {
		case len(id) > len("artifacts/") && id[:len("artifacts/")] == "artifacts/":
			doc, ok := docs[id[len("artifacts/"):]]
			if !ok {
				http.NotFound(w, r)
				return
			}
			zw := gzip.NewWriter(w)
			_ = json.NewEncoder(zw).Encode(doc)
			_ = zw.Close()
		default:
			asked++
			_ = json.NewEncoder(w).Encode(critpath.TraceResult{TraceID: "t3", Spans: []critpath.SpanPath{{TraceID: "t3", SpanID: "s3", Service: "e", Ms: 42}}})
		}
	}))
	defer srv.Close()
	row := func(svc string, s int, arts ...string) anomalyRow {
		r := anomalyRow{Service: svc, Start: at(s)}
		for _, a := range arts {
			r.Artifacts = append(r.Artifacts, struct {
				ID   string `json:"id"`
				Kind string `json:"kind"`
			}{a, critpath.ArtifactKind})
		}
		return r
	}
	rows := []anomalyRow{row("e", 5, "p1"), row("e", 10, "p2"), row("d", 5, "p1"), row("e", 40, "missing")}
	cases := []struct {
		name    string
		example string
		cause   string
		rows    []anomalyRow
		want    string // span id
		asked   int
	}{
		{"the longest stored path in the window", "", "", rows, "s2", 0},
		{"the example trace's stored path first", "t1", "", rows, "s1", 0},
		{"none stored: the server's for the example", "t3", "", []anomalyRow{row("d", 5, "p1")}, "s3", 1},
		{"none at all", "", "", nil, "", 0},
		{"the path the kernel saw most of", "", "", []anomalyRow{row("e", 6, "p3")}, "s5", 0},
		// The example trace's path of e is a call waiting on its callee;
		// another shows the verdict's lock.
		{"the path showing the verdict's cause before the example's", "t6", diagnosis.CauseLock, []anomalyRow{row("e", 5, "p1"), row("e", 8, "p6")}, "s1", 0},
		{"the example's when no path shows the cause", "t6", diagnosis.CauseDisk, []anomalyRow{row("e", 5, "p1"), row("e", 8, "p6")}, "s6", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked = 0
			p, why := culpritPath(context.Background(), srv.URL, "tok", diagnosis.Verdict{Service: "e", Cause: tc.cause, ExampleTraceID: tc.example}, tc.rows, from, to)
			if (p == nil) != (why != "") {
				t.Errorf("path %v, why %q: want one of them", p, why)
			}
			got := ""
			if p != nil {
				got = p.SpanID
			}
			if got != tc.want || asked != tc.asked {
				t.Fatalf("path of span %q (server asked %d times), want %q (%d)", got, asked, tc.want, tc.asked)
			}
			if p != nil && p.SpanID == "s1" && (p.Waits["lock"] != 60 || len(p.BlockedBy) != 1 || p.BlockedBy[0].TraceID != "t9") {
				t.Errorf("path read back wrong: %+v", p)
			}
		})
	}
}
