package test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The timing lines rootline run writes (httpstream.HeaderCompact): the
// compact one, with the waits that are 0 left out, and the long pair.
var (
	compactLine = regexp.MustCompile(`^rl: (0|[1-9][0-9]{0,14})(;l=[1-9][0-9]{0,14})?(;n=[1-9][0-9]{0,14})?(;r=[1-9][0-9]{0,14})?$`)
	longST      = regexp.MustCompile(`^rootline-server-time: [0-9]{1,15}$`)
	longWait    = regexp.MustCompile(`^rootline-wait: [0-9]{1,15};kind=local, [0-9]{1,15};kind=net, [0-9]{1,15};kind=remote$`)
)

// TestRunTimingHeaderBytes: in each mode, a traced server's responses carry
// exactly one compact timing line each (two long ones with --timing-header
// long) and nothing else is added: the bytes on the wire are the
// application's plus those lines, counted per response (per hop). A traced
// client's requests with --propagate w3c carry exactly one 70-byte
// traceparent line each. The test logs the in-band bytes per hop and per
// request of a 13-hop request (bench/RESULTS.md).
func TestRunTimingHeaderBytes(t *testing.T) { forEachMode(t, testRunTimingHeaderBytes) }

func testRunTimingHeaderBytes(t *testing.T) {
	const n = 12
	perHop := map[string]float64{}
	for _, form := range []string{"compact", "long"} {
		t.Run(form, func(t *testing.T) {
			dir := t.TempDir()
			_, port := startTraced(t, []string{"LISTEN=127.0.0.1:0", "OUT=" + dir}, true,
				[]string{"--server", "", "--timing-header", form}, wirePeer(t))
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			var reqs []byte
			for k := range n {
				reqs = fmt.Appendf(reqs, "GET /?seed=%d HTTP/1.1\r\nHost: wire\r\n\r\n", 900+k)
			}
			if _, err := c.Write(reqs); err != nil {
				t.Fatal(err)
			}
			_ = c.(*net.TCPConn).CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			got, err := io.ReadAll(c)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, "conn-1.bin"))
			if err != nil {
				t.Fatal(err)
			}
			lines, err := stripAdded(got, want, timingNames)
			if err != nil {
				t.Fatalf("%d bytes on the wire, %d written by the app: %v", len(got), len(want), err)
			}
			added := 0
			for _, l := range lines {
				added += len(l) + 2
			}
			if len(got)-len(want) != added {
				t.Fatalf("%d bytes added on the wire, the added lines hold %d", len(got)-len(want), added)
			}
			switch form {
			case "compact":
				if len(lines) != n {
					t.Fatalf("%d lines added to %d responses, want one each: %q", len(lines), n, lines)
				}
				for _, l := range lines {
					if !compactLine.MatchString(l) {
						t.Fatalf("added line %q is not a compact timing line", l)
					}
				}
			case "long":
				if len(lines) != 2*n {
					t.Fatalf("%d lines added to %d responses, want two each: %q", len(lines), n, lines)
				}
				for i := 0; i < len(lines); i += 2 {
					if !longST.MatchString(lines[i]) || !longWait.MatchString(lines[i+1]) {
						t.Fatalf("added lines %q, %q are not the long timing lines", lines[i], lines[i+1])
					}
				}
			}
			perHop[form] = float64(added) / n
			t.Logf("%s: %d responses, %d bytes added (%.1f B per response), e.g. %q", form, n, added, perHop[form], lines[0])
		})
	}
	tp := 0
	for _, l := range tracedRequestLines(t, n, []string{"--propagate", "w3c"}, map[string]bool{"traceparent": true}) {
		if !strings.HasPrefix(l, "traceparent: 00-") {
			t.Fatalf("added request line %q", l)
		}
		tp += len(l) + 2
	}
	if tp != 70*n {
		t.Fatalf("%d traceparent bytes on %d requests, want 70 each", tp, n)
	}
	for _, form := range []string{"compact", "long"} {
		if b, ok := perHop[form]; ok {
			t.Logf("in-band bytes, %s timing: %.1f B per hop (traceparent 70 B + response %.1f B), %.0f B per request of 13 hops",
				form, 70+b, b, 13*(70+b))
		}
	}
}

// TestRunTimingMixedForms: a mesh half upgraded. A callee writing one form
// answers a caller under rootline run writing the other (the long form with
// --timing-header long, as a caller of before the compact form reads and
// writes): the caller's CLIENT span still carries the callee's server time
// (the callee burns 30 ms of CPU per request, so it is at least that), and
// the caller's own response carries its own form, whole.
func TestRunTimingMixedForms(t *testing.T) { forEachMode(t, testRunTimingMixedForms) }

func testRunTimingMixedForms(t *testing.T) {
	for _, tc := range []struct{ callee, caller string }{{"compact", "long"}, {"long", "compact"}} {
		t.Run(tc.callee+"-callee", func(t *testing.T) {
			col := newCollector(t)
			_, leafPort := startTraced(t, []string{"LISTEN=127.0.0.1:0", "SPIN_MS=30"}, true,
				[]string{"--service", "leaf", "--server", col.URL, "--timing-header", tc.callee}, pySvc(t)...)
			_, midPort := startTraced(t, []string{"LISTEN=127.0.0.1:0", fmt.Sprintf("CALL=http://127.0.0.1:%d", leafPort)}, true,
				[]string{"--service", "mid", "--server", col.URL, "--timing-header", tc.caller}, pySvc(t)...)
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", midPort))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			var traces []string
			for i := range 3 {
				trace := randHex(16)
				traces = append(traces, trace)
				if _, err := fmt.Fprintf(c, "GET /mixed%d HTTP/1.1\r\nHost: mid\r\ntraceparent: 00-%s-%s-01\r\n\r\n", i, trace, randHex(8)); err != nil {
					t.Fatal(err)
				}
				var raw bytes.Buffer
				rsp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(br, &raw)), nil)
				if err != nil {
					t.Fatal(err)
				}
				head, _, _ := strings.Cut(raw.String(), "\r\n\r\n")
				_, _ = io.Copy(io.Discard, rsp.Body)
				rsp.Body.Close()
				if rsp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", rsp.StatusCode)
				}
				b := checkTimingForm(t, tc.caller, head)
				t.Logf("mid's response (a hop with a downstream call): %d B of %s timing lines", b, tc.caller)
			}
			got := col.traces(t, traces, 3)
			for _, trace := range traces {
				var client, leaf *otlpSpan
				for i, s := range got[trace] {
					switch {
					case s.Service == "mid" && s.Kind == ptrace.SpanKindClient:
						client = &got[trace][i]
					case s.Service == "leaf" && s.Kind == ptrace.SpanKindServer:
						leaf = &got[trace][i]
					}
				}
				if client == nil || leaf == nil {
					t.Fatalf("trace %s: no mid CLIENT or leaf SERVER span:\n%s", trace, describe(got[trace]))
				}
				st, ok := client.Attrs["rootline.downstream.server_time_ms"].(float64)
				leafMs := float64(leaf.End.Sub(leaf.Start)) / float64(time.Millisecond)
				t.Logf("trace %s: mid's CLIENT span: callee server time %.3f ms (leaf's SERVER span %.3f ms)", trace, st, leafMs)
				if !ok || st < 30 || st > leafMs+1 {
					t.Errorf("trace %s: mid's CLIENT span has callee server time %v (present %v), want ≥ 30 ms and ≤ the leaf's SERVER span %.3f ms",
						trace, client.Attrs["rootline.downstream.server_time_ms"], ok, leafMs)
				}
			}
		})
	}
}

// checkTimingForm checks that a response head carries rootline run's
// timing lines of form, and none of the other, and returns their bytes
// (with their line breaks).
func checkTimingForm(t *testing.T, form, head string) int {
	t.Helper()
	var compact, st, wait []string
	for _, l := range strings.Split(head, "\r\n") {
		name, _, _ := strings.Cut(strings.ToLower(l), ":")
		switch name {
		case "rl":
			compact = append(compact, l)
		case "rootline-server-time":
			st = append(st, l)
		case "rootline-wait":
			wait = append(wait, l)
		}
	}
	switch {
	case form == "compact" && (len(compact) != 1 || !compactLine.MatchString(compact[0]) || len(st)+len(wait) > 0),
		form == "long" && (len(compact) > 0 || len(st) != 1 || len(wait) != 1 || !longST.MatchString(st[0]) || !longWait.MatchString(wait[0])):
		t.Fatalf("response head does not carry the %s timing lines alone:\n%s", form, head)
	}
	n := 0
	for _, l := range append(append(compact, st...), wait...) {
		n += len(l) + 2
	}
	return n
}

// TestRunTimingOwnFields: a response that already carries timing fields
// (the application's own, or a downstream's it passes on) reaches the
// client with exactly those fields, unchanged, and none of rootline run's,
// whichever form the application wrote; a response without any gets
// rootline run's line. A second set would make the caller refuse both.
func TestRunTimingOwnFields(t *testing.T) { forEachMode(t, testRunTimingOwnFields) }

func testRunTimingOwnFields(t *testing.T) {
	needTool(t, "python3")
	server := `
import http.server
OWN = {"/compact": [("rl", "5;r=7")], "/long": [("rootline-server-time", "6"), ("rootline-wait", "1;kind=local")],
       "/wait-only": [("Rootline-Wait", "2;kind=net")], "/none": []}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        for k, v in OWN[self.path]:
            self.send_header(k, v)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print("listening", s.server_address[1], flush=True)
s.serve_forever()
`
	_, port := startTraced(t, nil, true, []string{"--server", ""}, "python3", "-c", server)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	for _, tc := range []struct {
		path string
		want []string // the response's timing lines, in order
	}{
		{"/compact", []string{"rl: 5;r=7"}},
		{"/long", []string{"rootline-server-time: 6", "rootline-wait: 1;kind=local"}},
		{"/wait-only", []string{"Rootline-Wait: 2;kind=net"}},
		{"/none", nil},
	} {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: own\r\n\r\n", tc.path); err != nil {
			t.Fatal(err)
		}
		var raw bytes.Buffer
		rsp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(br, &raw)), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, rsp.Body)
		rsp.Body.Close()
		head, _, _ := strings.Cut(raw.String(), "\r\n\r\n")
		var got []string
		for _, l := range strings.Split(head, "\r\n") {
			name, _, _ := strings.Cut(strings.ToLower(l), ":")
			if timingNames[name] {
				got = append(got, l)
			}
		}
		if tc.want == nil {
			if len(got) != 1 || !compactLine.MatchString(got[0]) {
				t.Errorf("%s: timing lines %q, want rootline run's one rl line", tc.path, got)
			}
			continue
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: timing lines %q, want the application's %q alone", tc.path, got, tc.want)
		}
	}
}
