package sqlite

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/rootline/rootline/internal/model"
)

func codecSpans() []*model.Span {
	trace := model.TraceID{9, 9}
	return []*model.Span{
		{TraceID: trace, SpanID: model.SpanID{1}, Start: 5},
		{
			TraceID:       trace,
			SpanID:        model.SpanID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			ParentSpanID:  model.SpanID{1},
			Start:         1e18,
			Duration:      -7, // clock skew happens; must survive
			StatusCode:    model.StatusError,
			StatusMessage: "boom",
			Scope:         "scope",
			Attributes: []model.KeyValue{
				model.String("s", "x"), model.Bool("b", true), model.Int("i", math.MinInt64),
				model.Float("f", math.Inf(-1)), model.Float("negzero", math.Copysign(0, -1)),
				{Key: "bytes", Value: model.Value{Type: model.TypeBytes, Str: "\x00\x01"}},
				// Not produced by receivers, but must still read back exactly.
				{Key: "odd", Value: model.Value{Type: model.TypeInt, Str: "s", Int: 3, Float: 2}},
				{Key: "badtype", Value: model.Value{Type: -3, Int: 1}},
				{Key: "bigtype", Value: model.Value{Type: 100}},
				model.String("s", "x"), // repeated key and value: dictionary hits
			},
			Events: []model.Event{{Time: 1e18 - 50, Name: "before"}, {Time: 2e18, Name: "s", Attributes: []model.KeyValue{model.Int("i", 1)}}},
			Links:  []model.Link{{TraceID: model.TraceID{1, 2}, SpanID: model.SpanID{3}, Attributes: []model.KeyValue{model.String("k", "x")}}},
		},
		{TraceID: trace, SpanID: model.SpanID{2}, Start: -1e18, Scope: "scope", Attributes: []model.KeyValue{model.String("s", "x")}},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	spans := codecSpans()
	keys := []spanKeys{{1, 2, 0, 0}, {1 << 40, 7, 3, flagAnomalous | flagError}, {5, 5, 5, flagError}}
	var e encoder
	data := e.segment(spans, keys)
	got, hdrs, err := decodeSegment(spans[0].TraceID, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(spans) {
		t.Fatalf("%d spans, want %d", len(got), len(spans))
	}
	for i := range spans {
		if !reflect.DeepEqual(got[i], spans[i]) {
			t.Errorf("span %d:\n got  %+v\n want %+v", i, *got[i], *spans[i])
		}
		for j, kv := range spans[i].Attributes {
			// DeepEqual treats -0 and 0 as equal; the bits must match.
			if math.Float64bits(kv.Value.Float) != math.Float64bits(got[i].Attributes[j].Value.Float) {
				t.Errorf("%s: float %v read back as %v", kv.Key, kv.Value.Float, got[i].Attributes[j].Value.Float)
			}
		}
		h := hdrs[i]
		if h.service != keys[i].service || h.op != keys[i].op || h.resource != keys[i].resource ||
			h.start != spans[i].Start || h.duration != spans[i].Duration || h.spanID != spans[i].SpanID || h.flags != keys[i].flags {
			t.Errorf("header %d = %+v", i, h)
		}
	}
	only, err := decodeHeaders(data)
	if err != nil || !reflect.DeepEqual(only, hdrs) {
		t.Errorf("decodeHeaders = %+v, %v", only, err)
	}
	// The encoder is reused: a second segment must not see the first's
	// dictionary.
	data2 := e.segment(spans[2:], keys[2:])
	got2, _, err := decodeSegment(spans[0].TraceID, data2)
	if err != nil || !reflect.DeepEqual(got2[0], spans[2]) {
		t.Errorf("second segment: %+v, %v", got2, err)
	}

	kvs := spans[1].Attributes
	back, err := decodeKVs(appendKVs(nil, kvs))
	if err != nil || !reflect.DeepEqual(back, kvs) {
		t.Errorf("attribute list round trip: %v, %v", back, err)
	}
}

func TestCodecCorrupt(t *testing.T) {
	var e encoder
	data := append([]byte(nil), e.segment(codecSpans(), make([]spanKeys, 3))...)
	for i := range len(data) {
		if _, _, err := decodeSegment(model.TraceID{}, data[:i]); err == nil {
			t.Errorf("truncated to %d bytes: no error", i)
		}
	}
	if _, _, err := decodeSegment(model.TraceID{}, append(data, 0)); err == nil {
		t.Error("trailing byte: no error")
	}
	if _, _, err := decodeSegment(model.TraceID{}, []byte{9}); err == nil {
		t.Error("unknown version: no error")
	}
	// A huge count must not allocate a huge slice.
	if _, _, err := decodeSegment(model.TraceID{}, []byte{segmentV1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}); err == nil {
		t.Error("oversized count: no error")
	}
	// A dictionary reference past the literals seen.
	if _, err := decodeKVs([]byte{1, 5, 0}); err == nil {
		t.Error("dangling dictionary reference: no error")
	}
}

func benchSpans() []*model.Span {
	g := newGen(7, 5, 5)
	return g.trace(1e18, 10)
}

// BenchmarkCodec compares the segment codec with encoding/json, the obvious
// alternative, on a 10-span trace.
func BenchmarkCodec(b *testing.B) {
	spans := benchSpans()
	keys := make([]spanKeys, len(spans))
	b.Run("binary/encode", func(b *testing.B) {
		var e encoder
		var n int
		for b.Loop() {
			n = len(e.segment(spans, keys))
		}
		b.ReportMetric(float64(n)/float64(len(spans)), "bytes/span")
	})
	b.Run("json/encode", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = json.Marshal(spans)
		}
		b.ReportMetric(float64(len(buf))/float64(len(spans)), "bytes/span")
	})
	b.Run("binary/decode", func(b *testing.B) {
		var e encoder
		data := e.segment(spans, keys)
		for b.Loop() {
			if _, _, err := decodeSegment(spans[0].TraceID, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json/decode", func(b *testing.B) {
		buf, _ := json.Marshal(spans)
		for b.Loop() {
			var out []*model.Span
			if err := json.Unmarshal(buf, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestTagMatcher(t *testing.T) {
	spans := codecSpans()
	var e encoder
	data := e.segment(spans, []spanKeys{{1, 1, 11, 0}, {1, 1, 12, 0}, {1, 1, 13, 0}})
	for _, tc := range []struct {
		idx  int
		tags map[string]string
		want []bool // per sorted key order of tags; nil = all false
	}{
		{1, map[string]string{"s": "x"}, []bool{true}},
		{1, map[string]string{"i": "-9223372036854775808"}, []bool{true}},
		{1, map[string]string{"b": "true"}, []bool{true}},
		{1, map[string]string{"bytes": "0001"}, []bool{true}},
		{1, map[string]string{"f": "-Inf"}, []bool{true}},
		{1, map[string]string{"s": "y"}, []bool{false}},
		{1, map[string]string{"k": "x"}, []bool{false}}, // a link attribute, not a span attribute
		{2, map[string]string{"s": "x"}, []bool{true}},  // a dictionary reference to span 1's literals
		{0, map[string]string{"s": "x"}, []bool{false}},
	} {
		m := newTagMatcher(tc.tags)
		res, err := m.spanAttrs(data, tc.idx)
		if err != nil {
			t.Fatal(err)
		}
		if res != int64(11+tc.idx) {
			t.Errorf("span %d: resource %d, want %d", tc.idx, res, 11+tc.idx)
		}
		if !reflect.DeepEqual(m.hit, tc.want) {
			t.Errorf("span %d, tags %v: hit %v, want %v", tc.idx, tc.tags, m.hit, tc.want)
		}
	}
	if _, err := newTagMatcher(nil).spanAttrs(data, 3); err == nil {
		t.Error("span index out of range: no error")
	}
}
