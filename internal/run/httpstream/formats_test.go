package httpstream

import (
	"errors"
	"testing"
)

func TestParseFormats(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Formats
		err  bool
	}{
		{"w3c", FormatW3C, false},
		{"tracecontext", FormatW3C, false},
		{" W3C , request-id", FormatW3C | FormatRequestID, false},
		{"w3c,b3,b3multi,request-id", AllFormats, false},
		{"all", AllFormats, false},
		{"b3,b3multi", FormatB3 | FormatB3Multi, false},
		{"none", 0, false},
		{"none,w3c", 0, true},
		{"", 0, true},
		{"w3c,", 0, true},
		{"jaeger", 0, true},
	} {
		got, err := ParseFormats(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseFormats(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Errorf("ParseFormats(%q): error %v is not ErrFormat", tc.in, err)
		}
		if err == nil {
			back, err := ParseFormats(got.String())
			if err != nil || back != got {
				t.Errorf("ParseFormats(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
			}
		}
	}
}

func TestInjectFormats(t *testing.T) {
	ctx := Context{TraceID: tid(w3cTrace), SpanID: sid(w3cSpan), Sampled: true, TraceState: "congo=t61", RequestID: "req-1"}
	child := sid("00f067aa0ba902b7")
	const (
		w3c = "traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-01\r\ntracestate: congo=t61\r\n"
		b3  = "b3: " + w3cTrace + "-00f067aa0ba902b7-1-" + w3cSpan + "\r\n"
		b3m = "x-b3-traceid: " + w3cTrace + "\r\nx-b3-spanid: 00f067aa0ba902b7\r\n" +
			"x-b3-parentspanid: " + w3cSpan + "\r\nx-b3-sampled: 1\r\n"
		rid = "x-request-id: req-1\r\n"
	)
	for _, tc := range []struct {
		name     string
		f        Formats
		existing Headers
		want     string
	}{
		{"all", AllFormats, nil, w3c + b3 + b3m + rid},
		{"w3c", FormatW3C, nil, w3c},
		{"b3", FormatB3, nil, b3},
		{"b3multi", FormatB3Multi, nil, b3m},
		{"request-id", FormatRequestID, nil, rid},
		{"w3c and request-id", FormatW3C | FormatRequestID, nil, w3c + rid},
		{"none", 0, nil, ""},
		// What the application wrote decides whatever the formats: its own
		// B3 context means no trace header at all, even W3C's.
		{"w3c, app has b3", FormatW3C, hdrs("b3: " + b3Trace + "-" + b3Span + "-1"), ""},
		{"w3c, app has tracestate", FormatW3C, hdrs("tracestate: mine=1"), "traceparent: 00-" + w3cTrace + "-00f067aa0ba902b7-01\r\n"},
		{"request-id, app has one", FormatRequestID | FormatW3C, hdrs("X-Request-Id: mine"), w3c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendInjectFormats(nil, ctx, child, tc.existing, tc.f))
			if got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if got, want := string(AppendInjectHeaders(nil, ctx, child, nil)), w3c+b3+b3m+rid; got != want {
		t.Fatalf("AppendInjectHeaders is not every format:\n%q", got)
	}
}
