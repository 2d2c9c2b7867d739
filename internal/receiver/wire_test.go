package receiver

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/rootline/rootline/internal/receiver/receivertest"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// traceShapes are requests of one kind of element each, many of them: the
// shapes where decoding costs the most per byte.
func traceShapes() map[string]ptrace.Traces {
	shapes := map[string]ptrace.Traces{}
	span := func(ss ptrace.ScopeSpans, i int) ptrace.Span {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(pcommon.TraceID{1, byte(i), byte(i >> 8), byte(i >> 16)})
		s.SetSpanID(pcommon.SpanID{2, byte(i), byte(i >> 8), byte(i >> 16)})
		s.SetStartTimestamp(1_700_000_000_000_000_000)
		s.SetEndTimestamp(1_700_000_000_000_000_001)
		return s
	}
	add := func(name string, build func(td ptrace.Traces)) {
		td := ptrace.NewTraces()
		build(td)
		shapes[name] = td
	}
	add("minimal spans", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range 5_000 {
			span(ss, i)
		}
	})
	add("spans under a large resource", func(td ptrace.Traces) {
		rs := td.ResourceSpans().AppendEmpty()
		for i := range 100 {
			rs.Resource().Attributes().PutStr(fmt.Sprintf("r%d", i), "v")
		}
		ss := rs.ScopeSpans().AppendEmpty()
		for i := range 2_500 {
			span(ss, i)
		}
	})
	add("many resources", func(td ptrace.Traces) {
		for i := range 2_000 {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", "s")
			span(rs.ScopeSpans().AppendEmpty(), i)
		}
	})
	add("attributes over the limit", func(td ptrace.Traces) {
		s := span(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 0)
		raw := map[string]any{}
		for i := range 20_000 {
			raw[fmt.Sprintf("k%d", i)] = int64(i)
		}
		_ = s.Attributes().FromRaw(raw)
	})
	add("attributes within the limit", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range 500 {
			s := span(ss, i)
			raw := map[string]any{}
			for j := range 100 {
				raw[fmt.Sprintf("k%d", j)] = true
			}
			_ = s.Attributes().FromRaw(raw)
		}
	})
	add("empty array elements", func(td ptrace.Traces) {
		s := span(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 0)
		sl := s.Attributes().PutEmptySlice("a")
		for range 50_000 {
			sl.AppendEmpty()
		}
	})
	add("map entries", func(td ptrace.Traces) {
		s := span(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 0)
		raw := map[string]any{}
		for i := range 20_000 {
			raw[fmt.Sprintf("k%d", i)] = int64(1)
		}
		_ = s.Attributes().PutEmptyMap("m").FromRaw(raw)
	})
	add("arrays nested to the limit", func(td ptrace.Traces) {
		s := span(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), 0)
		for i := range 1_000 {
			nestSlices(s.Attributes(), fmt.Sprintf("a%d", i), 16)
		}
	})
	add("events with attributes", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range 200 {
			s := span(ss, i)
			for range 200 {
				e := s.Events().AppendEmpty()
				e.SetName("e")
				e.Attributes().PutInt("k", 1)
			}
		}
	})
	add("links", func(td ptrace.Traces) {
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range 200 {
			s := span(ss, i)
			for range 200 {
				l := s.Links().AppendEmpty()
				l.SetSpanID(pcommon.SpanID{1})
			}
		}
	})
	add("a typical batch", func(td ptrace.Traces) {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "checkout")
		rs.Resource().Attributes().PutStr("telemetry.sdk.language", "go")
		ss := rs.ScopeSpans().AppendEmpty()
		for i := range 2_048 {
			s := span(ss, i)
			s.SetName("GET /api/items")
			s.SetParentSpanID(pcommon.SpanID{3})
			s.Attributes().PutStr("http.request.method", "GET")
			s.Attributes().PutInt("http.response.status_code", 200)
			s.Attributes().PutStr("url.path", "/api/items/12345")
		}
	})
	return shapes
}

func metricShapes() map[string]pmetric.Metrics {
	shapes := map[string]pmetric.Metrics{}
	add := func(name string, build func(m pmetric.Metric)) {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "s")
		rm.Resource().Attributes().PutStr("host.name", "h")
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("m")
		build(m)
		shapes[name] = md
	}
	add("gauge points", func(m pmetric.Metric) {
		dps := m.SetEmptyGauge().DataPoints()
		for i := range 5_000 {
			dp := dps.AppendEmpty()
			dp.SetIntValue(int64(i))
			dp.Attributes().PutStr("k", "v")
		}
	})
	add("histogram points", func(m pmetric.Metric) {
		dps := m.SetEmptyHistogram().DataPoints()
		for range 5_000 {
			dp := dps.AppendEmpty()
			dp.ExplicitBounds().FromRaw([]float64{1, 2, 4, 8})
			dp.BucketCounts().FromRaw([]uint64{1, 2, 3, 4, 5})
		}
	})
	add("exponential buckets", func(m pmetric.Metric) {
		dp := m.SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
		counts := make([]uint64, 100_000)
		dp.Positive().BucketCounts().FromRaw(counts)
	})
	add("exemplars", func(m pmetric.Metric) {
		dps := m.SetEmptySum().DataPoints()
		for range 500 {
			dp := dps.AppendEmpty()
			for range 50 {
				dp.Exemplars().AppendEmpty().FilteredAttributes().PutInt("k", 1)
			}
		}
	})
	return shapes
}

func zipkinShapes() map[string][]byte {
	var spans, tags, anns []string
	for i := range 5_000 {
		spans = append(spans, fmt.Sprintf(`{"traceId":"%x","id":"%x","timestamp":1700000000000000}`, i+1, i+1))
	}
	for i := range 20_000 {
		tags = append(tags, fmt.Sprintf(`"%d":""`, i))
		anns = append(anns, `{"timestamp":1,"value":""}`)
	}
	return map[string][]byte{
		"minimal spans": []byte("[" + strings.Join(spans, ",") + "]"),
		"tags":          []byte(`[{"traceId":"1","id":"2","timestamp":3,"tags":{` + strings.Join(tags, ",") + `}}]`),
		"annotations":   []byte(`[{"traceId":"1","id":"2","timestamp":3,"annotations":[` + strings.Join(anns, ",") + `]}]`),
	}
}

// TestEstimateBoundsAllocations holds the pre-scan's estimate to what
// decoding and translating the request really allocates, for the shapes that
// cost the most per byte, in both encodings.
func TestEstimateBoundsAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	if raceEnabled {
		t.Skip("the race detector's instrumentation changes what is allocated, and takes minutes here")
	}
	type tc struct {
		name   string
		body   []byte
		json   bool
		decode func() error
	}
	var cases []tc
	// both adds a request in both encodings; translate decodes and
	// translates what exp was decoded into.
	both := func(name string, req otlpResponse, newExp func() otlpRequest, translate func(otlpRequest) error) {
		pb, _ := req.MarshalProto()
		js, _ := req.MarshalJSON()
		for _, enc := range []struct {
			body []byte
			json bool
		}{{pb, false}, {js, true}} {
			cases = append(cases, tc{name: name, body: enc.body, json: enc.json, decode: func() error {
				exp := newExp()
				var err error
				if enc.json {
					err = exp.UnmarshalJSON(enc.body)
				} else {
					err = exp.UnmarshalProto(enc.body)
				}
				if err != nil {
					return err
				}
				return translate(exp)
			}})
		}
	}
	for name, td := range traceShapes() {
		both(name, ptraceotlp.NewExportRequestFromTraces(td), func() otlpRequest { return ptraceotlp.NewExportRequest() },
			func(exp otlpRequest) error {
				_, err := FromPdata(exp.(ptraceotlp.ExportRequest).Traces(), Limits{})
				return err
			})
	}
	for name, md := range metricShapes() {
		both("metrics "+name, pmetricotlp.NewExportRequestFromMetrics(md), func() otlpRequest { return pmetricotlp.NewExportRequest() },
			func(exp otlpRequest) error {
				_, err := FromPdataMetrics(exp.(pmetricotlp.ExportRequest).Metrics(), Limits{})
				return err
			})
	}
	for name, body := range zipkinShapes() {
		cases = append(cases, tc{name: "zipkin " + name, body: body, json: true, decode: func() error {
			_, err := FromZipkin(body, Limits{})
			return err
		}})
	}
	for _, c := range cases {
		enc := "proto"
		if c.json {
			enc = "json"
		}
		t.Run(enc+" "+c.name, func(t *testing.T) {
			var res scanResult
			var err error
			switch {
			case strings.HasPrefix(c.name, "zipkin"):
				res, err = scanJSON(c.body, zipkinJSONNesting, zipkinJSONCosts, "")
			case c.json:
				res, err = scanJSON(c.body, otlpJSONNesting(16), otlpJSONCosts, "")
			default:
				root := kindTraceRequest
				if strings.HasPrefix(c.name, "metrics") {
					root = kindMetricsRequest
				}
				res, err = scanProto(c.body, root, 16)
			}
			if err != nil {
				t.Fatal(err)
			}
			var decodeErr error
			got := allocated(func() { decodeErr = c.decode() })
			if decodeErr != nil {
				t.Fatal(decodeErr)
			}
			t.Logf("%s: body %d B, allocated %d B (%.1f×), estimate %d B (%.2f× the allocations)",
				enc+" "+c.name, len(c.body), got, float64(got)/float64(len(c.body)), res.estimate, float64(res.estimate)/float64(got))
			if uint64(res.estimate) < got {
				t.Errorf("estimate %d B is below the %d B allocated", res.estimate, got)
			}
		})
	}
}

func TestScanProtoMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"truncated tag", []byte{0x80}, "cannot decode"},
		{"length past the end", []byte{0x0a, 0x05, 0x01}, "length runs past its message"},
		{"inner length past its message", []byte{0x0a, 0x02, 0x12, 0x05}, "length runs past its message"},
		{"group", []byte{0x0b, 0x0c}, "wire type 3, which OTLP does not use"},
		{"truncated fixed64", []byte{0x09, 0x01}, "cannot decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scanProto(tc.body, kindTraceRequest, 16)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// What decodes must scan, and the other way round for what is refused
	// for its depth only.
	for _, depth := range []int{0, 1, 16, 17} {
		_, err := scanProto(receivertest.NestedProto(depth), kindTraceRequest, 16)
		if (err != nil) != (depth > 16) {
			t.Errorf("depth %d: %v", depth, err)
		}
		_, err = scanJSON(receivertest.NestedJSON(depth), otlpJSONNesting(16), otlpJSONCosts, "")
		if err != nil {
			t.Errorf("JSON depth %d refused by the scan (the translation checks it): %v", depth, err)
		}
	}
}

func TestScanJSONStrings(t *testing.T) {
	// Brackets inside strings, escaped quotes included, do not nest.
	body := []byte(`[{"a":"[[[[\"[[[[","b":"\\"},{"c":"]]]]"}]`)
	if _, err := scanJSON(body, 2, otlpJSONCosts, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := scanJSON([]byte(`[[[`), 2, otlpJSONCosts, ""); err == nil {
		t.Fatal("three levels passed a limit of two")
	}
}
