package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// A command that cannot be run gets the shell's status and a plain reason,
// not a report about tracing.
func TestRunMissingCommand(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		code  int
		says  string
	}{
		{filepath.Join(dir, "missing"), 127, "no such file"},
		{"rootline-no-such-command", 127, "executable file not found"},
		{plain, 126, "permission denied"},
	} {
		var stderr bytes.Buffer
		code := run([]string{"run", "--", tc.argv0}, io.Discard, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.says) || strings.Contains(stderr.String(), "datapath") {
			t.Errorf("run %s: status %d, stderr %q; want %d and %q", tc.argv0, code, stderr.String(), tc.code, tc.says)
		}
	}
}

// The metrics listener's flags: off by default, a token needed beyond
// loopback, thresholds checked before anything starts.
func TestRunMetricsFlags(t *testing.T) {
	t.Setenv("ROOTLINE_AUTH_TOKEN", "")
	for _, tc := range []struct {
		name  string
		args  []string
		token string
		fails string
	}{
		{"off", nil, "", ""},
		{"loopback", []string{"-metrics.listen", "127.0.0.1:0"}, "", ""},
		{"beyond loopback without a token", []string{"-metrics.listen", "0.0.0.0:9464"}, "", "beyond loopback"},
		{"beyond loopback with a token", []string{"-metrics.listen", ":9464"}, "s3cret", ""},
		{"not an address", []string{"-metrics.listen", "9464"}, "", "-metrics.listen"},
		{"half TLS", []string{"-metrics.listen", "127.0.0.1:0", "-metrics.tls.cert-file", "c.pem"}, "", "key"},
		{"policy", []string{"-metrics.policy", "avg"}, "", "unknown aggregation policy"},
		{"window", []string{"-metrics.window", "10ms"}, "", "at least 1s"},
		{"sla fraction", []string{"-metrics.sla-fraction", "1.5"}, "", "sla-fraction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ROOTLINE_AUTH_TOKEN", tc.token)
			f, err := parseRunFlags(append(tc.args, "--", "true"), io.Discard)
			if tc.fails == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(tc.args) == 0 && (f.metrics.Listen != "" || f.metrics.Model.MinWait != time.Millisecond || f.metrics.Window != 30*time.Second) {
					t.Fatalf("defaults %+v", f.metrics)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.fails) {
				t.Fatalf("error %v, want one saying %q", err, tc.fails)
			}
		})
	}
}

// -protocol: HTTP/2 is declared so that -mode auto picks the supervisor;
// the eBPF datapath alone would leave it untraced, so that combination is
// refused before anything starts.
func TestRunProtocolFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		mode  string
		fails string
	}{
		{nil, "auto", ""},
		{[]string{"-protocol", "grpc"}, "auto", ""},
		{[]string{"-protocol", "h2c", "-mode", "ptrace"}, "ptrace", ""},
		{[]string{"-protocol", "http1", "-mode", "ebpf"}, "ebpf", ""},
		{[]string{"-protocol", "grpc", "-mode", "ebpf"}, "", "does not trace HTTP/2"},
		{[]string{"-protocol", "http2"}, "", "want http1, h2c or grpc"},
	} {
		f, err := parseRunFlags(append(tc.args, "--", "true"), io.Discard)
		if tc.fails != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fails) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.fails)
			}
			continue
		}
		if err != nil || f.mode != tc.mode {
			t.Errorf("%v: mode %q, err %v; want %q", tc.args, f.mode, err, tc.mode)
		}
	}
}

func TestRunPropagateFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		omit  httpstream.Formats
		fails string
	}{
		{nil, 0, ""},
		{[]string{"-propagate", "w3c"}, httpstream.FormatB3 | httpstream.FormatB3Multi | httpstream.FormatRequestID, ""},
		{[]string{"-propagate", "w3c,request-id"}, httpstream.FormatB3 | httpstream.FormatB3Multi, ""},
		{[]string{"-propagate", "none"}, httpstream.AllFormats, ""},
		{[]string{"-propagate", "jaeger"}, 0, "-propagate"},
		{[]string{"-propagate", ""}, 0, "empty name"},
		{[]string{"-sample", "0.1"}, 0, ""},
		{[]string{"-sample", "0"}, 0, "-sample"},
		{[]string{"-sample", "1.5"}, 0, "-sample"},
	} {
		f, err := parseRunFlags(append(tc.args, "--", "true"), io.Discard)
		if tc.fails != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fails) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.fails)
			}
			continue
		}
		if err != nil || f.omit != tc.omit {
			t.Errorf("%v: omit %v, err %v; want %v", tc.args, f.omit, err, tc.omit)
		}
	}
}

// -timing-header: compact by default, long on request, nothing else.
func TestRunTimingHeaderFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		want  httpstream.TimingForm
		fails string
	}{
		{nil, httpstream.TimingCompact, ""},
		{[]string{"-timing-header", "compact"}, httpstream.TimingCompact, ""},
		{[]string{"-timing-header", "long"}, httpstream.TimingLong, ""},
		{[]string{"-timing-header", "short"}, 0, "want compact or long"},
	} {
		f, err := parseRunFlags(append(tc.args, "--", "true"), io.Discard)
		if tc.fails != "" {
			if err == nil || !strings.Contains(err.Error(), tc.fails) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.fails)
			}
			continue
		}
		if err != nil || f.timing != tc.want {
			t.Errorf("%v: timing %v, err %v; want %v", tc.args, f.timing, err, tc.want)
		}
	}
}
