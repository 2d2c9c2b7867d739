package receiver

import (
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/receiver/receivertest"
)

// Native fuzz targets of the receivers' decoding: every input goes the way a
// request body goes (pre-scan, decoder, translation within the limits) and
// must come out as spans within the limits or a refusal, never a panic. The
// seed corpora are in testdata/fuzz/<target>/ and in the f.Add calls;
// `make test-fuzz` runs each target for a bounded time.

// fuzzLimits are small, so that short inputs cross them.
var fuzzLimits = Limits{MaxAttributeDepth: 4, MaxAttributes: 3, MaxEvents: 2, MaxLinks: 2, MaxValueBytes: 16, MaxNameBytes: 8}

// checkSpans holds translated spans to lim.
func checkSpans(t *testing.T, spans []*model.Span, lim Limits) {
	t.Helper()
	attrs := func(where string, kvs []model.KeyValue, added int) {
		if len(kvs) > lim.MaxAttributes+added {
			t.Fatalf("%s: %d attributes past the limit of %d", where, len(kvs), lim.MaxAttributes)
		}
		for _, kv := range kvs {
			if strings.HasPrefix(kv.Key, "rootline.") || zipkinKeys[kv.Key] || (kv.Key == model.AttrServiceName && where == "resource") {
				continue // set by the receivers
			}
			if len(kv.Key) > lim.MaxNameBytes {
				t.Fatalf("%s: a key of %d bytes kept", where, len(kv.Key))
			}
			if len(kv.Value.Str) > lim.MaxValueBytes && kv.Key != model.AttrServiceName {
				t.Fatalf("%s: a value of %d bytes kept", where, len(kv.Value.Str))
			}
		}
	}
	for _, s := range spans {
		if s.TraceID.IsZero() || s.SpanID.IsZero() || s.Start <= 0 || s.Duration < 0 {
			t.Fatalf("an invalid span was translated: %+v", s)
		}
		if len(s.Name) > lim.MaxNameBytes || (len(s.Service) > lim.MaxNameBytes && s.Service != UnknownService) || len(s.StatusMessage) > lim.MaxValueBytes {
			t.Fatalf("name %d, service %d, status %d bytes, past the limits", len(s.Name), len(s.Service), len(s.StatusMessage))
		}
		if len(s.Events) > lim.MaxEvents || len(s.Links) > lim.MaxLinks {
			t.Fatalf("%d events, %d links, past the limits", len(s.Events), len(s.Links))
		}
		// Dropped counts, and what Zipkin endpoints add.
		attrs("span", s.Attributes, 3+len(zipkinKeys))
		attrs("resource", s.Resource, 3)
		for _, e := range s.Events {
			if len(e.Name) > lim.MaxNameBytes {
				t.Fatalf("an event name of %d bytes", len(e.Name))
			}
			attrs("event", e.Attributes, 1)
		}
		for _, l := range s.Links {
			attrs("link", l.Attributes, 1)
		}
	}
}

// zipkinKeys are the attributes the Zipkin translation sets from endpoints.
var zipkinKeys = map[string]bool{AttrHostIP: true, AttrNetHostPort: true, AttrPeerService: true,
	AttrNetPeerIP: true, AttrNetPeerPort: true, AttrZipkinShared: true}

// fuzzTraces are valid and invalid trace requests to seed the OTLP targets.
func fuzzTraces() []ptrace.Traces {
	full := makeTraces(2, "checkout")
	s := full.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	e := s.Events().AppendEmpty()
	e.SetName("exception")
	e.SetTimestamp(1_700_000_000_001_000_000)
	e.Attributes().PutStr("exception.message", "a long message over the limit")
	l := s.Links().AppendEmpty()
	l.SetTraceID([16]byte{9})
	l.SetSpanID([8]byte{9})
	nestMaps(s.Attributes(), "map", 3)
	nestSlices(s.Attributes(), "list", 5)
	return []ptrace.Traces{makeTraces(3, "checkout"), zeroTraceID(makeTraces(2, "a"), 1), full}
}

// FuzzOTLPProto: OTLP/HTTP protobuf and OTLP/gRPC bodies.
func FuzzOTLPProto(f *testing.F) {
	for _, td := range fuzzTraces() {
		b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		f.Add(b)
	}
	f.Add(receivertest.NestedProto(4))
	f.Add(receivertest.NestedProto(5))
	f.Add(receivertest.EmptyElements(10))
	f.Fuzz(func(t *testing.T, body []byte) {
		scan, err := scanProto(body, kindTraceRequest, fuzzLimits.MaxAttributeDepth)
		if err != nil {
			return
		}
		if scan.estimate < int64(len(body)) {
			t.Fatalf("estimate %d below the body's %d bytes", scan.estimate, len(body))
		}
		exp := ptraceotlp.NewExportRequest()
		if exp.UnmarshalProto(body) != nil {
			return
		}
		td := exp.Traces()
		if scan.elements != td.SpanCount() {
			t.Fatalf("the scan counted %d spans, the decoder %d", scan.elements, td.SpanCount())
		}
		spans, err := FromPdata(td, fuzzLimits)
		if isDepthRefusal(err) {
			t.Fatalf("the scan let through what the translation refused for its depth: %v", err)
		}
		checkSpans(t, spans, fuzzLimits.withDefaults())
	})
}

// FuzzOTLPJSON: OTLP/HTTP JSON bodies.
func FuzzOTLPJSON(f *testing.F) {
	for _, td := range fuzzTraces() {
		b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalJSON()
		f.Add(b)
	}
	f.Add(receivertest.NestedJSON(4))
	f.Add(receivertest.NestedJSON(5))
	f.Add([]byte(`{"resourceSpans":[{`))
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01","spanId":"02","startTimeUnixNano":"1","attributes":[{"key":"k","value":{"kvlistValue":{"values":[{"key":"a","value":{"doubleValue":"NaN"}}]}}}]}]}]}]}`))
	depth := fuzzLimits.MaxAttributeDepth
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := scanJSON(body, otlpJSONNesting(depth), otlpJSONCosts, ""); err != nil {
			return
		}
		exp := ptraceotlp.NewExportRequest()
		if exp.UnmarshalJSON(body) != nil {
			return
		}
		spans, err := FromPdata(exp.Traces(), fuzzLimits)
		if err != nil {
			return
		}
		checkSpans(t, spans, fuzzLimits.withDefaults())
	})
}

// FuzzZipkin: Zipkin v2 JSON bodies.
func FuzzZipkin(f *testing.F) {
	for _, name := range []string{"zipkin_envoy.json", "zipkin_full.json", "zipkin_bad_kind.json", "zipkin_bad_not_list.json"} {
		f.Add(readTestdata(f, name))
	}
	f.Add(receivertest.NestedZipkin(20))
	f.Add([]byte(`[{"traceId":"1","id":"2","timestamp":3,"tags":{"a-long-key":"a long value","k":"v","l":"w","m":"x"},` +
		`"annotations":[{"timestamp":1,"value":"a"},{"timestamp":2,"value":"b"},{"timestamp":3,"value":"c"}],` +
		`"localEndpoint":{"serviceName":"a-long-service","ipv4":"10.0.0.1","port":80},"remoteEndpoint":{"serviceName":"db","port":5432},"kind":"SERVER","shared":true}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := scanJSON(body, zipkinJSONNesting, zipkinJSONCosts, ""); err != nil {
			return
		}
		spans, err := FromZipkin(body, fuzzLimits)
		if err != nil {
			if _, ok := err.(*InvalidError); !ok {
				t.Fatalf("error %T, want *InvalidError", err)
			}
			return
		}
		checkSpans(t, spans, fuzzLimits.withDefaults())
	})
}

// isDepthRefusal reports whether err refuses a value nested too deep.
func isDepthRefusal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "nested deeper than")
}
