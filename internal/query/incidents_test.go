package query

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store/sqlite"
)

// TestIncidentEndpoints: the incidents a sqlite store keeps, listed,
// filtered, by id and as the diagnosis of a trace of theirs, behind the
// token like every /api/ route.
func TestIncidentEndpoints(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	root := &model.Span{TraceID: model.TraceID{1}, SpanID: model.SpanID{1}, Service: "frontend", Name: "GET /", Kind: model.KindServer,
		Start: 2_000, Duration: 500}
	other := &model.Span{TraceID: model.TraceID{2}, SpanID: model.SpanID{2}, Service: "frontend", Name: "GET /", Kind: model.KindServer,
		Start: 9_000, Duration: 500}
	if err := st.WriteSpans(ctx, []*model.Span{root, other}); err != nil {
		t.Fatal(err)
	}
	inc := diagnosis.Incident{ID: "i1", Entry: "frontend GET /", EntryService: "frontend", State: diagnosis.StateClosed, Start: 1_000, End: 5_000,
		Verdict: &diagnosis.Verdict{Service: "cart", Cause: diagnosis.CauseLock, Confidence: 0.8}}
	if err := st.PutIncident(ctx, diagnosis.ToStored(inc)); err != nil {
		t.Fatal(err)
	}
	a := New(Config{AuthToken: "s3cret"}, st, st, nil, nil)
	a.SetIncidents(st)
	h := a.Handler()
	auth := []string{"Authorization", "Bearer s3cret"}
	for _, tc := range []struct {
		target string
		auth   bool
		code   int
		want   string // incident id(s) answered
	}{
		{"/api/v1/incidents", false, http.StatusUnauthorized, ""},
		{"/api/v1/incidents/i1", false, http.StatusUnauthorized, ""},
		{"/api/v1/traces/" + root.TraceID.String() + "/diagnosis", false, http.StatusUnauthorized, ""},
		{"/api/v1/incidents", true, http.StatusOK, "i1"},
		{"/api/v1/incidents?service=cart", true, http.StatusOK, "i1"},
		{"/api/v1/incidents?service=db", true, http.StatusOK, ""},
		{"/api/v1/incidents?since=6000", true, http.StatusOK, ""},
		{"/api/v1/incidents?since=bogus", true, http.StatusBadRequest, ""},
		{"/api/v1/incidents/i1", true, http.StatusOK, "i1"},
		{"/api/v1/incidents/nope", true, http.StatusNotFound, ""},
		{"/api/v1/traces/" + root.TraceID.String() + "/diagnosis", true, http.StatusOK, "i1"},
		{"/api/v1/traces/" + other.TraceID.String() + "/diagnosis", true, http.StatusNotFound, ""},
		{"/api/v1/traces/zz/diagnosis", true, http.StatusBadRequest, ""},
	} {
		var hdr []string
		if tc.auth {
			hdr = auth
		}
		rec := do(t, h, tc.target, hdr...)
		if rec.Code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.target, rec.Code, tc.code, rec.Body)
			continue
		}
		if tc.code != http.StatusOK {
			continue
		}
		var list struct {
			Incidents []diagnosis.Incident `json:"incidents"`
		}
		var one diagnosis.Incident
		got := ""
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err == nil && list.Incidents != nil {
			for _, i := range list.Incidents {
				got += i.ID
			}
		} else if err := json.Unmarshal(rec.Body.Bytes(), &one); err == nil {
			got = one.ID
			if one.Verdict == nil || one.Verdict.Cause != diagnosis.CauseLock {
				t.Errorf("%s: verdict %+v", tc.target, one.Verdict)
			}
		}
		if got != tc.want {
			t.Errorf("%s: incidents %q, want %q", tc.target, got, tc.want)
		}
	}
	// A server whose store keeps none says so.
	rec := do(t, New(Config{}, st, st, nil, nil).Handler(), "/api/v1/incidents")
	if rec.Code != http.StatusNotImplemented {
		t.Errorf("without an incident store: status %d", rec.Code)
	}
}
