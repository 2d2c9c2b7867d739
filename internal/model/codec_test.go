package model

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func codecFixture() []*Span {
	return []*Span{
		{
			TraceID: TraceID{0xff, 1, 2}, SpanID: SpanID{0x80, 9}, ParentSpanID: SpanID{7},
			Service: "checkout", Name: "POST /cart/{id}", Kind: KindClient,
			Start: -5, Duration: math.MaxInt64, StatusCode: StatusError, StatusMessage: "upstream reset — 503",
			Scope: "rootline/supervisor",
			Attributes: []KeyValue{
				String("unicode", "日本語 ✓"), Bool("b", true), Int("neg", math.MinInt64), Float("nz", math.Copysign(0, -1)),
				Float("inf", math.Inf(1)), {Key: "raw", Value: Value{Type: TypeBytes, Str: "\x00\xff"}},
				// Every field of a value is kept, not only the one its type names.
				{Key: "odd", Value: Value{Type: TypeInt, Str: "x", Int: 3, Float: 1.5}},
			},
			Resource: []KeyValue{String(AttrServiceName, "checkout"), Int(AttrProcessPID, 42)},
			Events:   []Event{{Time: 10, Name: "retry", Attributes: []KeyValue{Int("attempt", 2)}}, {Time: -1, Name: ""}},
			Links:    []Link{{TraceID: TraceID{3}, SpanID: SpanID{4}, Attributes: []KeyValue{String("k", "v")}}, {}},
		},
		{}, // nothing set
	}
}

func TestCodecRoundTrip(t *testing.T) {
	spans := codecFixture()
	b := AppendSpans([]byte("prefix"), spans)
	got, err := DecodeSpans(b[len("prefix"):])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, spans) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, spans)
	}
	if n := EncodedSize(spans[0]); n != len(appendSpan(nil, spans[0])) || n < 100 {
		t.Errorf("EncodedSize = %d", n)
	}
	if got, err := DecodeSpans(AppendSpans(nil, nil)); err != nil || len(got) != 0 {
		t.Errorf("empty batch: %v, %v", got, err)
	}
}

// TestCodecRejects: every truncation and a few corruptions of a valid
// encoding fail with ErrBadEncoding, never a panic or a wrong success.
func TestCodecRejects(t *testing.T) {
	b := AppendSpans(nil, codecFixture())
	for i := 0; i < len(b); i++ {
		if _, err := DecodeSpans(b[:i]); !errors.Is(err, ErrBadEncoding) {
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrBadEncoding", i, len(b), err)
		}
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"version", append([]byte{9}, b[1:]...)},
		{"trailing bytes", append(append([]byte(nil), b...), 0)},
		{"huge count", []byte{codecV1, 0xff, 0xff, 0xff, 0xff, 0x0f}},
	} {
		if _, err := DecodeSpans(tc.data); !errors.Is(err, ErrBadEncoding) {
			t.Errorf("%s: %v, want ErrBadEncoding", tc.name, err)
		}
	}
}

func FuzzDecodeSpans(f *testing.F) {
	f.Add(AppendSpans(nil, codecFixture()))
	f.Add([]byte{codecV1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		spans, err := DecodeSpans(data)
		if err != nil {
			return
		}
		// What decodes survives another round trip unchanged (data itself
		// may differ: a varint can be written in more than one way; bytes
		// are compared, not values, as NaN != NaN).
		enc := AppendSpans(nil, spans)
		again, err := DecodeSpans(enc)
		if err != nil || string(AppendSpans(nil, again)) != string(enc) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}
