package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSidecarSpans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		envoy bool
		spans string
		noRun bool
		want  bool
	}{
		{"run: rootline run makes the spans", true, SpansRun, false, false},
		{"default: both", true, "", false, true},
		{"both", true, SpansBoth, false, true},
		{"sidecar", true, SpansSidecar, true, true},
		{"no rootline run: the sidecars are the only source", true, SpansRun, true, true},
		{"no sidecars", false, SpansBoth, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sidecarSpans(tc.envoy, tc.spans, tc.noRun); got != tc.want {
				t.Errorf("sidecarSpans(%v, %q, %v) = %v, want %v", tc.envoy, tc.spans, tc.noRun, got, tc.want)
			}
		})
	}
}

// Bad --spans values are refused before anything starts (exit 2, a message
// that names the choices).
func TestSpansFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--spans", "envoy"}, "--spans must be run, sidecar or both"},
		{[]string{"--spans", "sidecar", "--no-envoy"}, "--spans sidecar needs the sidecars"},
		{[]string{"--protocol", "http2"}, "--protocol must be http or grpc"},
	} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("demo %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.msg)
		}
	}
}

func TestSubnetGateway(t *testing.T) {
	for in, want := range map[string]string{"10.77.0.0/24": "10.77.0.1", "10.78.5.0/24": "10.78.5.1", "fd00::/64": "", "nope": ""} {
		got, err := SubnetGateway(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("SubnetGateway(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
