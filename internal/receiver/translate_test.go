package receiver

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/model"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otlpJSON decodes an OTLP/JSON ExportTraceServiceRequest from testdata.
func otlpJSON(t *testing.T, name string) ptrace.Traces {
	t.Helper()
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalJSON(readTestdata(t, name)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req.Traces()
}

func mustTraceID(t *testing.T, s string) model.TraceID {
	t.Helper()
	id, err := model.ParseTraceID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustSpanID(t *testing.T, s string) model.SpanID {
	t.Helper()
	id, err := model.ParseSpanID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// attr returns the span attribute key, failing the test when it is missing.
func attr(t *testing.T, kvs []model.KeyValue, key string) model.Value {
	t.Helper()
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value
		}
	}
	t.Fatalf("attribute %q missing from %v", key, kvs)
	return model.Value{}
}

func TestFromPdataFiles(t *testing.T) {
	for _, tc := range []struct {
		file    string
		wantErr string // substring; "" means the file is good
		check   func(t *testing.T, spans []*model.Span)
	}{
		{
			file: "otlp_spec_example.json",
			check: func(t *testing.T, spans []*model.Span) {
				if len(spans) != 1 {
					t.Fatalf("got %d spans, want 1", len(spans))
				}
				s := spans[0]
				want := model.Span{
					TraceID:      mustTraceID(t, "5b8efff798038103d269b633813fc60c"),
					SpanID:       mustSpanID(t, "eee19b7ec3c1b174"),
					ParentSpanID: mustSpanID(t, "eee19b7ec3c1b173"),
					Service:      "my.service",
					Name:         "I'm a server span",
					Kind:         model.KindServer,
					Start:        1544712660000000000,
					Duration:     1_000_000_000,
					Scope:        "my.library",
				}
				if s.TraceID != want.TraceID || s.SpanID != want.SpanID || s.ParentSpanID != want.ParentSpanID ||
					s.Service != want.Service || s.Name != want.Name || s.Kind != want.Kind ||
					s.Start != want.Start || s.Duration != want.Duration || s.Scope != want.Scope {
					t.Errorf("got %+v\nwant %+v", *s, want)
				}
				if v := attr(t, s.Attributes, "my.span.attr"); v != (model.Value{Type: model.TypeString, Str: "some value"}) {
					t.Errorf("my.span.attr = %+v", v)
				}
				if v := attr(t, s.Resource, model.AttrServiceName); v.Str != "my.service" {
					t.Errorf("resource service.name = %+v", v)
				}
			},
		},
		{
			file: "otlp_all_types.json",
			check: func(t *testing.T, spans []*model.Span) {
				if len(spans) != 3 {
					t.Fatalf("got %d spans, want 3", len(spans))
				}
				s := spans[0]
				for key, want := range map[string]model.Value{
					"str":    {Type: model.TypeString, Str: "text"},
					"bool":   {Type: model.TypeBool, Int: 1},
					"int":    {Type: model.TypeInt, Int: -42},
					"double": {Type: model.TypeFloat, Float: 0.25},
					"bytes":  {Type: model.TypeBytes, Str: "\xde\xad\xbe\xef"},
					"array":  {Type: model.TypeString, Str: `["a",1]`},
					"map":    {Type: model.TypeString, Str: `{"k":false}`},
					"empty":  {Type: model.TypeString},
				} {
					if got := attr(t, s.Attributes, key); got != want {
						t.Errorf("attribute %s = %+v, want %+v", key, got, want)
					}
				}
				if s.Kind != model.KindClient || s.StatusCode != model.StatusError || s.StatusMessage != "upstream reset" {
					t.Errorf("kind/status = %v/%v/%q", s.Kind, s.StatusCode, s.StatusMessage)
				}
				if s.Service != "checkout" || s.Scope != "io.opentelemetry.okhttp-3.0" || s.Duration != 250_000_000 {
					t.Errorf("service/scope/duration = %q/%q/%d", s.Service, s.Scope, s.Duration)
				}
				if v := attr(t, s.Resource, model.AttrProcessPID); v != (model.Value{Type: model.TypeInt, Int: 4242}) {
					t.Errorf("resource process.pid = %+v", v)
				}
				if len(s.Events) != 1 || s.Events[0].Name != "retry" || s.Events[0].Time != 1700000000100000000 ||
					attr(t, s.Events[0].Attributes, "attempt").Int != 2 {
					t.Errorf("events = %+v", s.Events)
				}
				if len(s.Links) != 1 || s.Links[0].TraceID != mustTraceID(t, "0af7651916cd43dd8448eb211c80319c") ||
					s.Links[0].SpanID != mustSpanID(t, "b7ad6b7169203331") || attr(t, s.Links[0].Attributes, "why").Str != "batch" {
					t.Errorf("links = %+v", s.Links)
				}

				child := spans[1]
				if child.ParentSpanID != s.SpanID || child.Kind != model.KindInternal || child.StatusCode != model.StatusOK ||
					child.Duration != 0 || child.Attributes != nil {
					t.Errorf("child = %+v", *child)
				}
				// Spans of one resource share its attribute list, clipped: an
				// append to one span's list leaves the other's alone.
				n := len(s.Resource)
				child.Resource = append(child.Resource, model.String("added", "x"))
				if len(s.Resource) != n || cap(s.Resource) != n {
					t.Errorf("appending to one span's resource changed another's: %v", s.Resource)
				}

				anon := spans[2]
				if anon.Service != UnknownService || anon.Resource != nil || anon.Scope != "" || anon.Kind != model.KindUnspecified {
					t.Errorf("span without resource = %+v", *anon)
				}
			},
		},
		{file: "otlp_bad_zero_trace_id.json", wantErr: "resourceSpans[0].scopeSpans[1].spans[3]: traceId is all zeros"},
		{file: "otlp_bad_no_span_id.json", wantErr: "resourceSpans[0].scopeSpans[1].spans[3]: spanId is all zeros or empty"},
		{file: "otlp_bad_end_before_start.json", wantErr: "resourceSpans[0].scopeSpans[1].spans[3]: endTimeUnixNano 1699999999000000000 is before startTimeUnixNano 1700000000000000000"},
		{file: "otlp_bad_no_start.json", wantErr: "resourceSpans[0].scopeSpans[1].spans[3]: startTimeUnixNano is missing"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			spans, err := FromPdata(otlpJSON(t, tc.file), Limits{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if _, ok := err.(*InvalidError); !ok {
					t.Errorf("error is a %T, want *InvalidError", err)
				}
				if spans != nil {
					t.Errorf("got %d spans with an error", len(spans))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, spans)
		})
	}
}

func TestFromPdataKindsAndCodesOutOfRange(t *testing.T) {
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(pcommon.TraceID{1})
	s.SetSpanID(pcommon.SpanID{1})
	s.SetStartTimestamp(1)
	s.SetEndTimestamp(2)
	s.SetKind(ptrace.SpanKind(42))
	s.Status().SetCode(ptrace.StatusCode(9))
	spans, err := FromPdata(td, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if spans[0].Kind != model.KindUnspecified || spans[0].StatusCode != model.StatusUnset {
		t.Errorf("kind/status = %v/%v, want unspecified/unset", spans[0].Kind, spans[0].StatusCode)
	}
}

func TestFromZipkinFiles(t *testing.T) {
	for _, tc := range []struct {
		file    string
		wantErr string
		check   func(t *testing.T, spans []*model.Span)
	}{
		{
			// Captured from Envoy 1.40's Zipkin tracer (HTTP_JSON) behind a
			// request carrying B3 headers: an egress CLIENT span and the
			// ingress SERVER span sharing its id, twice, then a root span.
			file: "zipkin_envoy.json",
			check: func(t *testing.T, spans []*model.Span) {
				if len(spans) != 5 {
					t.Fatalf("got %d spans, want 5", len(spans))
				}
				server, client := spans[0], spans[1]
				traceID := mustTraceID(t, "4bf92f3577b34da6a3ce929d0e0e4736")
				sharedID := mustSpanID(t, "0f957679b84824d5")
				if client.TraceID != traceID || client.SpanID != sharedID || client.ParentSpanID != mustSpanID(t, "00f067aa0ba902b7") {
					t.Errorf("client ids = %v/%v/%v", client.TraceID, client.SpanID, client.ParentSpanID)
				}
				if client.Kind != model.KindClient || client.Start != 1795308432515537000 || client.Duration != 884_000 {
					t.Errorf("client kind/start/duration = %v/%d/%d", client.Kind, client.Start, client.Duration)
				}
				if server.Kind != model.KindServer || server.ParentSpanID != sharedID || server.SpanID == sharedID || server.SpanID.IsZero() {
					t.Errorf("shared server span ids = %v parent %v, want a new id under %v", server.SpanID, server.ParentSpanID, sharedID)
				}
				if v := attr(t, server.Attributes, AttrZipkinShared); v != (model.Value{Type: model.TypeBool, Int: 1}) {
					t.Errorf("zipkin.shared = %+v", v)
				}
				if client.Service != "frontend-proxy" || attr(t, client.Resource, model.AttrServiceName).Str != "frontend-proxy" ||
					attr(t, client.Resource, AttrHostIP).Str != "192.0.2.2" {
					t.Errorf("client service/resource = %q/%v", client.Service, client.Resource)
				}
				for key, want := range map[string]string{
					"http.status_code": "200",
					"http.method":      "GET",
					"http.url":         "http://localhost:10000/api/checkout",
					"upstream_cluster": "ingress_cluster",
				} {
					if got := attr(t, client.Attributes, key); got != (model.Value{Type: model.TypeString, Str: want}) {
						t.Errorf("client %s = %+v, want %q", key, got, want)
					}
				}
				if len(client.Events) != 1 || !reflect.DeepEqual(client.Events[0], model.Event{Time: 1795308432516567000, Name: "cr"}) {
					t.Errorf("client events = %+v", client.Events)
				}
				// Envoy's port 0 means "unknown": no attribute.
				if _, ok := client.Attr(AttrNetHostPort); ok {
					t.Error("port 0 became net.host.port")
				}
				if client.StatusCode != model.StatusUnset {
					t.Errorf("client status = %v", client.StatusCode)
				}
				failed := spans[3]
				if failed.StatusCode != model.StatusError || failed.StatusMessage != "" || !failed.IsError() {
					t.Errorf("error=true span status = %v %q", failed.StatusCode, failed.StatusMessage)
				}
				root := spans[4]
				if root.TraceID != mustTraceID(t, "6181345ac829d738") || root.ParentSpanID != mustSpanID(t, "6181345ac829d738") {
					t.Errorf("64-bit root: trace %v parent %v", root.TraceID, root.ParentSpanID)
				}
			},
		},
		{
			file: "zipkin_full.json",
			check: func(t *testing.T, spans []*model.Span) {
				if len(spans) != 3 {
					t.Fatalf("got %d spans, want 3", len(spans))
				}
				s := spans[0]
				if s.TraceID != mustTraceID(t, "00000000000000005af7183fb1d4cf5f") || s.Name != "get /api" ||
					s.Start != 1556604172355737000 || s.Duration != 1431000 {
					t.Errorf("span = %+v", *s)
				}
				if s.StatusCode != model.StatusError || s.StatusMessage != "backend answered 500" {
					t.Errorf("status = %v %q", s.StatusCode, s.StatusMessage)
				}
				for key, want := range map[string]model.Value{
					AttrPeerService:    {Type: model.TypeString, Str: "backend"},
					AttrNetPeerIP:      {Type: model.TypeString, Str: "2001:db8::c001"},
					AttrNetPeerPort:    {Type: model.TypeInt, Int: 9000},
					AttrNetHostPort:    {Type: model.TypeInt, Int: 8080},
					"http.status_code": {Type: model.TypeString, Str: "500"},
					"error":            {Type: model.TypeString, Str: "backend answered 500"},
				} {
					if got := attr(t, s.Attributes, key); got != want {
						t.Errorf("%s = %+v, want %+v", key, got, want)
					}
				}
				if attr(t, s.Resource, AttrHostIP).Str != "10.1.2.3" {
					t.Errorf("resource = %v", s.Resource)
				}
				if len(s.Events) != 2 || !reflect.DeepEqual(s.Events[1], model.Event{Time: 1556604172357100000, Name: "wire recv"}) {
					t.Errorf("events = %+v", s.Events)
				}
				if spans[1].StatusCode != model.StatusOK || spans[1].Kind != model.KindUnspecified {
					t.Errorf("local span status/kind = %v/%v", spans[1].StatusCode, spans[1].Kind)
				}
				p := spans[2]
				if p.Kind != model.KindProducer || p.SpanID != mustSpanID(t, "0000000000000001") || p.Service != UnknownService ||
					p.Resource != nil || p.Attributes != nil || p.Duration != 0 {
					t.Errorf("bare producer span = %+v", *p)
				}
			},
		},
		{file: "zipkin_bad_not_list.json", wantErr: "body is not a JSON list of Zipkin v2 spans"},
		{file: "zipkin_bad_trace_id.json", wantErr: `spans[1]: traceId: malformed id: trace id "05af7183fb1d4cf5fxyz" is not hex`},
		{file: "zipkin_bad_zero_id.json", wantErr: "spans[0]: id is all zeros"},
		{file: "zipkin_bad_no_timestamp.json", wantErr: "spans[0]: timestamp is missing"},
		{file: "zipkin_bad_kind.json", wantErr: `spans[0]: kind "LOCAL" is not one of CLIENT, SERVER, PRODUCER, CONSUMER`},
		{file: "zipkin_bad_tag_type.json", wantErr: "spans[0]: json: cannot unmarshal number"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			spans, err := FromZipkin(readTestdata(t, tc.file), Limits{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if spans != nil {
					t.Errorf("got %d spans with an error", len(spans))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, spans)
		})
	}
}

func TestFromZipkinInline(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantSpans  int
		wantSpanID string // of the first span, when set
		wantErr    string
	}{
		{name: "empty list", body: `[]`, wantSpans: 0},
		{name: "not json", body: `hello`, wantErr: "body is not JSON"},
		{name: "empty body", body: ``, wantErr: "body is not JSON"},
		{name: "trailing data", body: `[] []`, wantErr: "unexpected data after the list"},
		{name: "unterminated", body: `[{"traceId":"1","id":"2","timestamp":3}`, wantErr: "body is not a JSON list"},
		{name: "missing trace id", body: `[{"id":"2","timestamp":3}]`, wantErr: "spans[0]: traceId is missing"},
		{name: "trace id too long", body: `[{"traceId":"` + strings.Repeat("a", 33) + `","id":"2","timestamp":3}]`, wantErr: "must be 1-32 hex digits"},
		{name: "bad parent", body: `[{"traceId":"1","id":"2","parentId":"xyz","timestamp":3}]`, wantErr: "spans[0]: parentId:"},
		{name: "negative duration", body: `[{"traceId":"1","id":"2","timestamp":3,"duration":-1}]`, wantErr: "spans[0]: json: cannot unmarshal number -1"},
		{name: "far future", body: `[{"traceId":"1","id":"2","timestamp":9300000000000000}]`, wantErr: "past the year 2262"},
		{name: "shared client keeps its id", body: `[{"traceId":"1","id":"2","kind":"CLIENT","shared":true,"timestamp":3}]`, wantSpans: 1, wantSpanID: "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, err := FromZipkin([]byte(tc.body), Limits{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != tc.wantSpans {
				t.Fatalf("got %d spans, want %d", len(spans), tc.wantSpans)
			}
			if tc.wantSpanID != "" && spans[0].SpanID != mustSpanID(t, tc.wantSpanID) {
				t.Errorf("span id = %v, want %s", spans[0].SpanID, tc.wantSpanID)
			}
		})
	}
}

func TestSharedServerSpanIDIsStable(t *testing.T) {
	tr, sp := mustTraceID(t, "4bf92f3577b34da6a3ce929d0e0e4736"), mustSpanID(t, "0f957679b84824d5")
	a, b := sharedServerSpanID(tr, sp), sharedServerSpanID(tr, sp)
	if a != b || a == sp || a.IsZero() {
		t.Errorf("derived ids %v, %v from %v", a, b, sp)
	}
	if c := sharedServerSpanID(mustTraceID(t, "1"), sp); c == a {
		t.Errorf("different traces gave the same derived id %v", c)
	}
}
