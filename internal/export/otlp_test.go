package export

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/model"
)

func otlpSpans() []*model.Span {
	res := func(svc string, pid int64) []model.KeyValue {
		return []model.KeyValue{model.String(model.AttrServiceName, svc), model.Int(model.AttrProcessPID, pid)}
	}
	long := strings.Repeat("x", 20000) // a length that needs a three-byte varint
	return []*model.Span{
		{TraceID: model.TraceID{1, 2, 3}, SpanID: model.SpanID{4}, ParentSpanID: model.SpanID{5}, Service: "a",
			Name: "GET /x", Kind: model.KindServer, Start: 1_700_000_000_000_000_000, Duration: 1234,
			StatusCode: model.StatusError, StatusMessage: "no response",
			Attributes: []model.KeyValue{model.String("s", "v"), model.Int("neg", -7), model.Int("zero", 0),
				model.Float("f", 1.5), model.Float("nan", math.Inf(1)), model.Bool("t", true), model.Bool("f0", false),
				{Key: "raw", Value: model.Value{Type: model.TypeBytes, Str: "\x00\x01"}}, model.String("empty", "")},
			Resource: res("a", 1), Scope: "rootline-run"},
		{TraceID: model.TraceID{1, 2, 3}, SpanID: model.SpanID{6}, Service: "a", Name: "GET", Kind: model.KindClient,
			Start: 5, Duration: 0, Resource: res("a", 1), Scope: "rootline-run",
			Events: []model.Event{{Time: 9, Name: "ev", Attributes: []model.KeyValue{model.String("k", long)}}},
			Links:  []model.Link{{TraceID: model.TraceID{7}, SpanID: model.SpanID{8}, Attributes: []model.KeyValue{model.Int("n", 300)}}}},
		{TraceID: model.TraceID{9}, SpanID: model.SpanID{10}, Service: "b", Name: long, Resource: res("b", 2), Scope: "other"},
		{TraceID: model.TraceID{9}, SpanID: model.SpanID{11}, Service: "a", Name: "again", Resource: res("a", 1), Scope: "rootline-run"},
		{TraceID: model.TraceID{9}, SpanID: model.SpanID{12}, Service: "c", Name: "no service.name in the resource", Scope: "s"},
	}
}

// AppendOTLP writes what pdata would: decoded, the two are equal.
func TestAppendOTLPMatchesPdata(t *testing.T) {
	spans := otlpSpans()
	want, err := ptraceotlp.NewExportRequestFromTraces(ToPdata(spans)).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	got := AppendOTLP([]byte("prefix"), spans)
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatal("the buffer's bytes were not kept")
	}
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(got[len("prefix"):]); err != nil {
		t.Fatalf("pdata cannot read AppendOTLP's bytes: %v", err)
	}
	var m ptrace.JSONMarshaler
	wantReq := ptraceotlp.NewExportRequest()
	if err := wantReq.UnmarshalProto(want); err != nil {
		t.Fatal(err)
	}
	a, _ := m.MarshalTraces(req.Traces())
	b, _ := m.MarshalTraces(wantReq.Traces())
	if !bytes.Equal(a, b) {
		t.Fatalf("AppendOTLP differs from pdata:\n got %.600s\nwant %.600s", a, b)
	}
	if n := req.Traces().ResourceSpans().Len(); n != 3 {
		t.Errorf("resource groups = %d, want 3", n)
	}
	if n := req.Traces().SpanCount(); n != len(spans) {
		t.Errorf("spans = %d, want %d", n, len(spans))
	}
}

// BenchmarkShipEncode: a second of `rootline run`'s spans (100 SERVER spans
// as internal/run makes them) encoded for OTLP/HTTP.
func BenchmarkShipEncode(b *testing.B) {
	res := []model.KeyValue{model.String(model.AttrServiceName, "checkout"), model.Int(model.AttrProcessPID, 4242),
		model.String("telemetry.sdk.name", "rootline-run"), model.String(model.AttrHostName, "node-1"),
		model.String(model.AttrServiceInstanceID, "node-1:4242")}
	var spans []*model.Span
	for i := range 100 {
		spans = append(spans, &model.Span{TraceID: model.TraceID{byte(i), 2, 3}, SpanID: model.SpanID{byte(i), 4},
			ParentSpanID: model.SpanID{5}, Service: "checkout", Name: "GET /cart", Kind: model.KindServer,
			Start: 1_700_000_000_000_000_000 + int64(i), Duration: 1_500_000, Resource: res, Scope: "rootline-run",
			Attributes: []model.KeyValue{model.String("http.request.method", "GET"), model.String("url.path", "/cart"),
				model.String("server.address", "checkout:8080"), model.String("network.peer.address", "10.0.0.7:51234"),
				model.Float(model.AttrWaitLocalMs, 0.012), model.Float(model.AttrWaitNetMs, 0.3),
				model.Float(model.AttrWaitRemoteMs, 0), model.String(model.AttrThreadIDs, "4250"),
				model.Int("http.response.status_code", 200), model.Int(model.AttrThreadID, 4250)}})
	}
	b.Run("pdata", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := ptraceotlp.NewExportRequestFromTraces(ToPdata(spans)).MarshalProto(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for range b.N {
			buf = AppendOTLP(buf[:0], spans)
		}
	})
}
