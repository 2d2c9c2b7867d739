package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/analysis/analysistest"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// A diagnosis through the query API (Jaeger JSON and /api/v1, decoded by
// APISource) reaches the verdict a diagnosis of the same store reaches
// directly: same culprit, cause, traces compared, ranking and evidence, and
// the same scores but for Jaeger's microsecond resolution.
func TestAPISourceEquivalence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and sends ~13,000 spans per case")
	}
	const token = "s3cret"
	for _, tc := range []struct {
		name        string
		fault       analysistest.Fault
		kind        string  // artifact kind linked to the slow spans of e; "" none
		onCPU, lock float64 // profiles' shares of each span's duration
	}{
		{"delay on calls into f", analysistest.Fault{Kind: "net", Service: "f"}, "", 0, 0},
		{"lock in e, JFR", analysistest.Fault{Kind: "self", Service: "e"}, "jfr", 0.5, 0.4},
		{"cpu in e, eBPF", analysistest.Fault{Kind: "self", Service: "e"}, "cpu", 0.95, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, api, from := analysistest.RunScenario(t, tc.fault, token)
			if tc.kind != "" {
				analysistest.AttachProfiles(t, srv, "e", tc.kind, func(s *model.Span) io.Reader {
					return analysistest.SpanProfile(t, s.Start, s.Duration, tc.onCPU, tc.lock)
				})
			}
			ctx := context.Background()
			to := time.Now() // in the past for both: the same traces sampled
			direct, err := analysis.Diagnose(ctx, analysistest.Source(srv), from, to)
			if err != nil {
				t.Fatal(err)
			}
			viaAPI, err := analysis.Diagnose(ctx, NewAPISource(api, token), from, to)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("direct: %s/%s %v", direct.Service, direct.Cause, direct.Evidence)
			t.Logf("API:    %s/%s %v", viaAPI.Service, viaAPI.Cause, viaAPI.Evidence)
			if direct.Service != tc.fault.Service || viaAPI.Service != direct.Service || viaAPI.Cause != direct.Cause ||
				viaAPI.SlowTraces != direct.SlowTraces || viaAPI.BaseTraces != direct.BaseTraces ||
				len(viaAPI.Evidence) != len(direct.Evidence) || fmt.Sprint(viaAPI.Artifacts) != fmt.Sprint(direct.Artifacts) {
				t.Fatalf("verdicts differ:\n direct %+v\n API    %+v", direct, viaAPI)
			}
			if len(viaAPI.Ranking) != len(direct.Ranking) {
				t.Fatalf("%d services ranked through the API, %d directly", len(viaAPI.Ranking), len(direct.Ranking))
			}
			for i, d := range direct.Ranking {
				a := viaAPI.Ranking[i]
				// Jaeger's JSON has µs: each of a trace's ~20 spans may lose
				// up to 1 µs of its start and its duration.
				if a.Service != d.Service || math.Abs(a.Score-d.Score) > 0.06 || math.Abs(a.SelfDeltaMs-d.SelfDeltaMs) > 0.06 || a.Anomalies != d.Anomalies {
					t.Errorf("rank %d: API %+v, direct %+v", i, a, d)
				}
			}
		})
	}
}

// A server that cannot be reached is an error, not an empty verdict.
func TestAPISourceUnreachable(t *testing.T) {
	if _, err := analysis.Diagnose(context.Background(), NewAPISource("http://127.0.0.1:1", ""), time.Now().Add(-time.Minute), time.Now()); err == nil {
		t.Error("no error from an unreachable API")
	}
}

// The capture log, the trace lookup and artifacts come back typed: a
// missing trace or artifact is store.ErrNotFound, a refused token the API's
// own error.
func TestAPISourceAnswers(t *testing.T) {
	from := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"code":401,"error":"missing bearer token"}`, http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/api/v1/captures":
			fmt.Fprintf(w, `[{"id":"c1","service":"e","state":"partial","error":"jfr: attach failed","created":%q,"spanCount":3}]`, from.Format(time.RFC3339Nano))
		case "/api/traces":
			_, _ = io.WriteString(w, `{"data":[],"total":0,"limit":0,"offset":0,"errors":[{"msg":"trace not found","traceID":"01"}]}`)
		default:
			http.Error(w, `{"code":404,"error":"not found"}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	src := NewAPISource(srv.URL+"/", "tok")
	caps, err := src.Captures(ctx, 10)
	if err != nil || !slices.Equal(caps, []analysis.Capture{{Service: "e", State: "partial", Error: "jfr: attach failed", Created: from}}) {
		t.Errorf("Captures = %+v, %v", caps, err)
	}
	if _, err := src.Trace(ctx, model.TraceID{15: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Trace(missing) err = %v, want ErrNotFound", err)
	}
	if _, err := src.ArtifactContent(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ArtifactContent(missing) err = %v, want ErrNotFound", err)
	}
	var ae *apiError
	if _, err := NewAPISource(srv.URL, "wrong").Captures(ctx, 10); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || errors.Is(err, store.ErrNotFound) {
		t.Errorf("refused token: err = %v", err)
	}
}

// Jaeger's JSON goes back into the model span the query API made it from.
func TestJaegerSpans(t *testing.T) {
	body := `{"traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spans":[{"spanID":"00f067aa0ba902b7","operationName":"GET /",
		"references":[{"refType":"FOLLOWS_FROM","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331"},
		              {"refType":"CHILD_OF","traceID":"4bf92f3577b34da6a3ce929d0e0e4736","spanID":"53995c3f42cd8ad8"}],
		"startTime":1700000000000001,"duration":2500,
		"tags":[{"key":"rootline.anomaly","type":"bool","value":true},{"key":"rootline.wait.local_ms","type":"float64","value":1.25},
		        {"key":"thread.id","type":"int64","value":4242},{"key":"big","type":"int64","value":"9007199254740993"},
		        {"key":"span.kind","type":"string","value":"server"},{"key":"otel.status_code","type":"string","value":"ERROR"},
		        {"key":"otel.scope.name","type":"string","value":"rootline"},{"key":"blob","type":"binary","value":"AAE="}],
		"logs":[{"timestamp":1700000000000002,"fields":[{"key":"event","type":"string","value":"retry"},{"key":"n","type":"int64","value":2}]}],
		"processID":"p1"}],
		"processes":{"p1":{"serviceName":"e","tags":[{"key":"host.name","type":"string","value":"h"}]}}}`
	var jt jaegerTrace
	if err := json.Unmarshal([]byte(body), &jt); err != nil {
		t.Fatal(err)
	}
	spans, err := jt.spans()
	if err != nil || len(spans) != 1 {
		t.Fatalf("spans: %v, %v", spans, err)
	}
	s := spans[0]
	if s.SpanID.String() != "00f067aa0ba902b7" || s.ParentSpanID.String() != "53995c3f42cd8ad8" || len(s.Links) != 1 ||
		s.Links[0].SpanID.String() != "b7ad6b7169203331" || s.TraceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("ids: span %s parent %s links %v", s.SpanID, s.ParentSpanID, s.Links)
	}
	if s.Service != "e" || s.Kind != model.KindServer || s.StatusCode != model.StatusError || s.Scope != "rootline" ||
		s.Start != 1700000000000001000 || s.Duration != 2500000 {
		t.Errorf("fields: %+v", s)
	}
	if !s.IsAnomalous() {
		t.Error("not anomalous")
	}
	for key, want := range map[string]model.Value{
		"rootline.wait.local_ms": {Type: model.TypeFloat, Float: 1.25},
		"thread.id":              {Type: model.TypeInt, Int: 4242},
		"big":                    {Type: model.TypeInt, Int: 9007199254740993},
		"blob":                   {Type: model.TypeBytes, Str: "\x00\x01"},
		"host.name":              {Type: model.TypeString, Str: "h"},
		"service.name":           {Type: model.TypeString, Str: "e"},
	} {
		if got, ok := s.Attr(key); !ok || got != want {
			t.Errorf("%s = %+v (%v), want %+v", key, got, ok, want)
		}
	}
	if _, ok := s.Attr("span.kind"); ok {
		t.Error("span.kind kept as an attribute")
	}
	if len(s.Events) != 1 || s.Events[0].Name != "retry" || s.Events[0].Time != 1700000000000002000 || len(s.Events[0].Attributes) != 1 {
		t.Errorf("events: %+v", s.Events)
	}
}
