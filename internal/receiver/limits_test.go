package receiver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/rootline/rootline/internal/model"
)

// oneSpan returns traces holding one valid span and that span.
func oneSpan() (ptrace.Traces, ptrace.ResourceSpans, ptrace.Span) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(model.AttrServiceName, "svc")
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(pcommon.TraceID{1})
	s.SetSpanID(pcommon.SpanID{2})
	s.SetName("op")
	s.SetStartTimestamp(1_700_000_000_000_000_000)
	s.SetEndTimestamp(1_700_000_000_001_000_000)
	return td, rs, s
}

// nestSlices puts into m under key an array nested depth deep (depth 1 is an
// array of one string).
func nestSlices(m pcommon.Map, key string, depth int) {
	sl := m.PutEmptySlice(key)
	for range depth - 1 {
		sl = sl.AppendEmpty().SetEmptySlice()
	}
	sl.AppendEmpty().SetStr("leaf")
}

// nestMaps is nestSlices with maps: {"k":{"k":…{"k":"leaf"}}}.
func nestMaps(m pcommon.Map, key string, depth int) {
	mm := m.PutEmptyMap(key)
	for range depth - 1 {
		mm = mm.PutEmptyMap("k")
	}
	mm.PutStr("k", "leaf")
}

func intAttr(t *testing.T, kvs []model.KeyValue, key string) int64 {
	t.Helper()
	v := attr(t, kvs, key)
	if v.Type != model.TypeInt {
		t.Fatalf("%s = %+v, want an int", key, v)
	}
	return v.Int
}

func hasAttr(kvs []model.KeyValue, key string) bool {
	for _, kv := range kvs {
		if kv.Key == key {
			return true
		}
	}
	return false
}

func TestLimitsCountsAndLengths(t *testing.T) {
	lim := Limits{MaxAttributes: 3, MaxEvents: 2, MaxLinks: 1, MaxValueBytes: 8, MaxNameBytes: 12}
	for _, tc := range []struct {
		name  string
		build func(rs ptrace.ResourceSpans, s ptrace.Span)
		check func(t *testing.T, s *model.Span)
	}{
		{
			name:  "within every limit nothing is added",
			build: func(_ ptrace.ResourceSpans, s ptrace.Span) { s.Attributes().PutStr("a", "short") },
			check: func(t *testing.T, s *model.Span) {
				if len(s.Attributes) != 1 || hasAttr(s.Resource, AttrDroppedAttributes) {
					t.Errorf("attributes %v, resource %v", s.Attributes, s.Resource)
				}
			},
		},
		{
			name: "span attributes past the count are dropped and counted with the client's",
			build: func(_ ptrace.ResourceSpans, s ptrace.Span) {
				for i := range 5 {
					s.Attributes().PutInt(fmt.Sprintf("k%d", i), int64(i))
				}
				s.SetDroppedAttributesCount(7)
			},
			check: func(t *testing.T, s *model.Span) {
				for _, k := range []string{"k0", "k1", "k2"} {
					attr(t, s.Attributes, k)
				}
				if hasAttr(s.Attributes, "k3") {
					t.Errorf("k3 kept: %v", s.Attributes)
				}
				if n := intAttr(t, s.Attributes, AttrDroppedAttributes); n != 2+7 {
					t.Errorf("dropped = %d, want 9", n)
				}
			},
		},
		{
			name: "a key longer than MaxNameBytes is dropped, not cut",
			build: func(_ ptrace.ResourceSpans, s ptrace.Span) {
				s.Attributes().PutStr("a-key-that-is-too-long", "v")
				s.Attributes().PutStr("ok", "v")
			},
			check: func(t *testing.T, s *model.Span) {
				if len(s.Attributes) != 2 || !hasAttr(s.Attributes, "ok") {
					t.Errorf("long key kept: %v", s.Attributes)
				}
				if n := intAttr(t, s.Attributes, AttrDroppedAttributes); n != 1 {
					t.Errorf("dropped = %d", n)
				}
			},
		},
		{
			name: "resource attributes are limited in the resource",
			build: func(rs ptrace.ResourceSpans, _ ptrace.Span) {
				for i := range 4 {
					rs.Resource().Attributes().PutInt(fmt.Sprintf("r%d", i), 1)
				}
			},
			check: func(t *testing.T, s *model.Span) {
				// service.name plus r0, r1 fit; r2, r3 do not.
				if n := intAttr(t, s.Resource, AttrDroppedAttributes); n != 2 {
					t.Errorf("resource dropped = %d, resource %v", n, s.Resource)
				}
				if hasAttr(s.Attributes, AttrDroppedAttributes) {
					t.Errorf("span counted the resource's drops: %v", s.Attributes)
				}
			},
		},
		{
			name: "events and links past the count are dropped and counted, theirs attributes limited",
			build: func(_ ptrace.ResourceSpans, s ptrace.Span) {
				for i := range 4 {
					e := s.Events().AppendEmpty()
					e.SetName(fmt.Sprintf("an-event-name-%d", i))
					e.SetTimestamp(1_700_000_000_000_000_500)
					for j := range 4 {
						e.Attributes().PutInt(fmt.Sprintf("e%d", j), 1)
					}
				}
				s.SetDroppedEventsCount(1)
				for range 3 {
					l := s.Links().AppendEmpty()
					l.SetTraceID(pcommon.TraceID{9})
					l.SetSpanID(pcommon.SpanID{9})
					l.SetDroppedAttributesCount(2)
				}
			},
			check: func(t *testing.T, s *model.Span) {
				if len(s.Events) != 2 || len(s.Links) != 1 {
					t.Fatalf("events %d links %d", len(s.Events), len(s.Links))
				}
				if s.Events[0].Name != "an-event-nam" {
					t.Errorf("event name %q, want it cut to 12 bytes", s.Events[0].Name)
				}
				if n := intAttr(t, s.Events[0].Attributes, AttrDroppedAttributes); n != 1 {
					t.Errorf("event dropped attributes = %d", n)
				}
				if n := intAttr(t, s.Links[0].Attributes, AttrDroppedAttributes); n != 2 {
					t.Errorf("link dropped attributes = %d", n)
				}
				if n := intAttr(t, s.Attributes, AttrDroppedEvents); n != 1+2 {
					t.Errorf("dropped events = %d", n)
				}
				if n := intAttr(t, s.Attributes, AttrDroppedLinks); n != 2 {
					t.Errorf("dropped links = %d", n)
				}
			},
		},
		{
			name: "values and names are cut, at a UTF-8 boundary",
			build: func(rs ptrace.ResourceSpans, s ptrace.Span) {
				rs.Resource().Attributes().PutStr(model.AttrServiceName, "a-service-name-too-long")
				s.SetName("aéééééé")
				s.Status().SetMessage("a long status message")
				s.Attributes().PutStr("s", "aaaaaaaé")
				s.Attributes().PutEmptyBytes("b").FromRaw([]byte("0123456789"))
				s.Attributes().PutEmptySlice("arr").FromRaw([]any{"abcdef", "ghi"})
			},
			check: func(t *testing.T, s *model.Span) {
				if s.Service != "a-service-na" || s.Name != "aééééé" || s.StatusMessage != "a long s" {
					t.Errorf("service %q name %q status %q", s.Service, s.Name, s.StatusMessage)
				}
				if v := attr(t, s.Attributes, "s"); v.Str != "aaaaaaa" {
					t.Errorf("s = %q, want the é dropped whole", v.Str)
				}
				if v := attr(t, s.Attributes, "b"); v.Str != "01234567" {
					t.Errorf("b = %q", v.Str)
				}
				if v := attr(t, s.Attributes, "arr"); v.Str != `["abcdef` {
					t.Errorf("arr = %q", v.Str)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td, rs, s := oneSpan()
			tc.build(rs, s)
			spans, err := FromPdata(td, lim)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, spans[0])
		})
	}
}

func TestLimitsDepth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		build   func(s ptrace.Span)
		wantErr string
	}{
		{name: "arrays at the limit", build: func(s ptrace.Span) { nestSlices(s.Attributes(), "a", 16) }},
		{name: "maps at the limit", build: func(s ptrace.Span) { nestMaps(s.Attributes(), "a", 16) }},
		{name: "arrays past the limit", build: func(s ptrace.Span) { nestSlices(s.Attributes(), "a", 17) },
			wantErr: "resourceSpans[0].scopeSpans[0].spans[0]: attributes: attribute value nested deeper than 16 levels (limit receiver.limits.max_attribute_depth)"},
		{name: "maps past the limit in an event", build: func(s ptrace.Span) {
			e := s.Events().AppendEmpty()
			e.SetTimestamp(1_700_000_000_000_000_500)
			nestMaps(e.Attributes(), "a", 17)
		}, wantErr: "events[0].attributes: attribute value nested deeper than 16"},
		{name: "a deep value is refused even where it would be dropped", build: func(s ptrace.Span) {
			for i := range 128 {
				s.Attributes().PutInt(fmt.Sprintf("k%03d", i), 1)
			}
			nestSlices(s.Attributes(), "z", 17)
		}, wantErr: "nested deeper than 16"},
		{name: "very deep", build: func(s ptrace.Span) { nestSlices(s.Attributes(), "a", 100_000) }, wantErr: "nested deeper than 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td, _, s := oneSpan()
			tc.build(s)
			spans, err := FromPdata(td, Limits{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(spans) != 1 {
					t.Fatalf("%d spans", len(spans))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if _, ok := err.(*InvalidError); !ok {
				t.Errorf("err is %T, want *InvalidError", err)
			}
		})
	}
}

// randomValue fills v with a random value at most depth deep, using the
// value kinds JSON can hold exactly (no NaN or infinities).
func randomValue(r *rand.Rand, v pcommon.Value, depth int) {
	kinds := 7
	if depth <= 1 {
		kinds = 5
	}
	switch r.IntN(kinds) {
	case 0:
		v.SetStr([]string{"", "plain", "quote \" backslash \\ <tag> & é", "ctl \x01\n\t\r", "bad \xff utf8", "sep \u2028"}[r.IntN(6)])
	case 1:
		v.SetBool(r.IntN(2) == 1)
	case 2:
		v.SetInt(r.Int64() - math.MaxInt64/2)
	case 3:
		v.SetDouble([]float64{0, -1.5, 1e-7, 3.25e21, 123456.789, math.SmallestNonzeroFloat64}[r.IntN(6)])
	case 4:
		v.SetEmptyBytes().FromRaw([]byte{byte(r.IntN(256)), 0, 0xff})
	case 5:
		sl := v.SetEmptySlice()
		for range r.IntN(4) {
			randomValue(r, sl.AppendEmpty(), depth-1)
		}
	case 6:
		m := v.SetEmptyMap()
		for range r.IntN(4) {
			randomValue(r, m.PutEmpty(fmt.Sprintf("k%d", r.IntN(5))), depth-1)
		}
	}
}

// TestJSONTextMatchesAsString checks the bounded, non-recursive JSON writer
// against pdata's own AsString (encoding/json) on random values.
func TestJSONTextMatchesAsString(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		v := pcommon.NewValueEmpty()
		if i%2 == 0 {
			v.SetEmptySlice()
		} else {
			v.SetEmptyMap()
		}
		for range r.IntN(5) {
			if v.Type() == pcommon.ValueTypeSlice {
				randomValue(r, v.Slice().AppendEmpty(), 5)
			} else {
				randomValue(r, v.Map().PutEmpty(fmt.Sprintf("k%d", r.IntN(5))), 5)
			}
		}
		want := v.AsString()
		got, ok := jsonText(v, 16, 1<<20)
		if !ok || got != want {
			t.Fatalf("value %d:\n got %s (ok %v)\nwant %s", i, got, ok, want)
		}
		// A cut keeps a prefix of the whole text.
		if cut, _ := jsonText(v, 16, 10); !strings.HasPrefix(want, cut) || len(cut) > 10 {
			t.Fatalf("cut %q is not a prefix of %q within 10 bytes", cut, want)
		}
	}
}

func TestJSONTextSpecialFloats(t *testing.T) {
	v := pcommon.NewValueSlice()
	v.Slice().AppendEmpty().SetDouble(math.NaN())
	v.Slice().AppendEmpty().SetDouble(math.Inf(-1))
	got, ok := jsonText(v, 16, 100)
	if !ok || got != `["NaN","-Inf"]` {
		t.Errorf("got %s", got)
	}
}

func TestZipkinLimits(t *testing.T) {
	var tags, anns []string
	for i := range 5 {
		tags = append(tags, fmt.Sprintf(`"t%d":"0123456789"`, i))
		anns = append(anns, fmt.Sprintf(`{"timestamp":1700000000000001,"value":"annotation-%d"}`, i))
	}
	tags = append(tags, `"a-very-long-key":"v"`)
	body := `[{"traceId":"1","id":"2","name":"a long span name","timestamp":1700000000000000,"duration":5,` +
		`"localEndpoint":{"serviceName":"service-name"},"tags":{` + strings.Join(tags, ",") + `},` +
		`"annotations":[` + strings.Join(anns, ",") + `]}]`
	spans, err := FromZipkin([]byte(body), Limits{MaxAttributes: 3, MaxEvents: 2, MaxValueBytes: 4, MaxNameBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	s := spans[0]
	if s.Name != "a long s" || s.Service != "service-" {
		t.Errorf("name %q service %q", s.Name, s.Service)
	}
	if v := attr(t, s.Attributes, "t0"); v.Str != "0123" {
		t.Errorf("t0 = %q", v.Str)
	}
	if hasAttr(s.Attributes, "t3") {
		t.Errorf("t3 kept: %v", s.Attributes)
	}
	if n := intAttr(t, s.Attributes, AttrDroppedAttributes); n != 3 {
		t.Errorf("dropped attributes = %d, want 2 over the count and 1 long key", n)
	}
	if n := intAttr(t, s.Attributes, AttrDroppedEvents); n != 3 || len(s.Events) != 2 || s.Events[0].Name != "annotati" {
		t.Errorf("dropped events = %d, events %v", n, s.Events)
	}
}
