package test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/bpftest"
	"github.com/rootline/rootline/internal/run/readtap"
)

func wirePeer(t *testing.T) string { return buildTestdata(t, "wire") }

var execCommand = exec.Command

// startTraced starts argv under `rootline run` with env added and, when
// listens, waits for the "listening <port>" line and returns the port.
func startTraced(t *testing.T, env []string, listens bool, runFlags []string, argv ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd, port, _ := startTracedStderr(t, env, listens, runFlags, argv...)
	return cmd, port
}

// startTracedStderr is startTraced that also returns what `rootline run`
// writes to stderr.
func startTracedStderr(t *testing.T, env []string, listens bool, runFlags []string, argv ...string) (*exec.Cmd, int, *lockedBuffer) {
	t.Helper()
	args := append(append([]string{"run", "--agent", ""}, runMode...), runFlags...)
	args = append(append(args, "--"), argv...)
	cmd := exec.Command(rootlineBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, cmd, func() { t.Logf("%s stderr:\n%s", argv[0], stderr.String()) })
	if !listens {
		go func() { _, _ = io.Copy(io.Discard, out) }()
		return cmd, 0, stderr
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		port, err := strconv.Atoi(strings.TrimPrefix(l, "listening "))
		if err != nil {
			t.Fatalf("unexpected first line %q", l)
		}
		return cmd, port, stderr
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not start; stderr:\n%s", argv[0], stderr.String())
	}
	return nil, 0, stderr
}

// stripAdded walks got against want and removes from got whole lines that
// are not in want; each must start at a line start and be one of the header
// names in added. It returns the removed lines, or an error at the first
// difference that is not such a line.
func stripAdded(got, want []byte, added map[string]bool) ([]string, error) {
	var lines []string
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		if i < len(got) && j < len(want) && got[i] == want[j] {
			i++
			j++
			continue
		}
		if i >= len(got) {
			return lines, fmt.Errorf("wire ended at %d, %d bytes of the application's missing", i, len(want)-j)
		}
		if i == 0 || got[i-1] != '\n' {
			return lines, fmt.Errorf("bytes differ at wire offset %d (app offset %d) not at a line start: %q vs %q", i, j, snip(got, i), snip(want, j))
		}
		end := bytes.Index(got[i:], []byte("\r\n"))
		colon := bytes.IndexByte(got[i:], ':')
		if end < 0 || colon < 0 || colon > end || !added[strings.ToLower(string(got[i:i+colon]))] {
			return lines, fmt.Errorf("unexpected line at wire offset %d (app offset %d): %q vs %q", i, j, snip(got, i), snip(want, j))
		}
		lines = append(lines, string(got[i:i+end]))
		i += end + 2
	}
	return lines, nil
}

func snip(b []byte, i int) []byte { return b[i:min(len(b), i+40)] }

// TestRunByteExactResponses: a traced server writes random responses in
// random pieces (single bytes, writev, header blocks cut anywhere, large
// chunked bodies); the client receives exactly those bytes plus the
// compact timing line per response.
func TestRunByteExactResponses(t *testing.T) { forEachMode(t, testRunByteExactResponses) }

func testRunByteExactResponses(t *testing.T) {
	dir := t.TempDir()
	_, port := startTraced(t, []string{"LISTEN=127.0.0.1:0", "OUT=" + dir}, true, []string{"--server", ""}, wirePeer(t))
	r := rand.New(rand.NewPCG(1, 2))
	for conn := 1; conn <= 3; conn++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		const n = 15
		var reqs []byte
		for k := range n {
			reqs = fmt.Appendf(reqs, "GET /?seed=%d HTTP/1.1\r\nHost: wire\r\nX-Pad: %s\r\n\r\n", conn*100+k, strings.Repeat("p", r.IntN(300)))
		}
		go func() {
			// Requests in random pieces, some a byte at a time, some pipelined.
			p := reqs
			for len(p) > 0 {
				k := min(len(p), []int{1, 3, 50, 2000}[r.IntN(4)])
				if _, err := c.Write(p[:k]); err != nil {
					return
				}
				p = p[k:]
			}
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("conn %d: read: %v", conn, err)
		}
		want, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("conn-%d.bin", conn)))
		if err != nil {
			t.Fatal(err)
		}
		lines, err := stripAdded(got, want, timingNames)
		if err != nil {
			t.Fatalf("conn %d (%d bytes on the wire, %d written by the app): %v", conn, len(got), len(want), err)
		}
		if len(lines) != n {
			t.Fatalf("conn %d: %d added lines, want %d (1 per response): %q", conn, len(lines), n, lines)
		}
		for _, l := range lines {
			if !compactLine.MatchString(l) {
				t.Fatalf("conn %d: added line %q is not a compact timing line", conn, l)
			}
		}
		t.Logf("conn %d: %d response bytes identical apart from %d added lines", conn, len(want), len(lines))
	}
}

// TestRunByteExactRequests: a traced client writes random requests in random
// pieces to a slow reader (so the kernel takes partial writes); the wire
// carries exactly its bytes plus propagation lines, and every request got a
// traceparent.
func TestRunByteExactRequests(t *testing.T) { forEachMode(t, testRunByteExactRequests) }

func testRunByteExactRequests(t *testing.T) {
	prop := map[string]bool{"traceparent": true, "tracestate": true, "b3": true, "x-b3-traceid": true,
		"x-b3-spanid": true, "x-b3-parentspanid": true, "x-b3-sampled": true, "x-request-id": true}
	const n = 40
	lines := tracedRequestLines(t, n, nil, prop)
	tp := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "traceparent: 00-") {
			tp++
		}
	}
	if tp != n {
		t.Fatalf("%d requests carry a traceparent, want %d; added lines: %d", tp, n, len(lines))
	}
}

// TestRunPropagateFormats: with -propagate, each mode writes exactly the
// configured header lines on every request (and only those), the
// application's bytes otherwise unchanged.
func TestRunPropagateFormats(t *testing.T) { forEachMode(t, testRunPropagateFormats) }

func testRunPropagateFormats(t *testing.T) {
	const n = 12
	for _, tc := range []struct {
		propagate string
		// lines each request gets, by name (the traced client's calls are
		// roots: no x-b3-parentspanid, no tracestate)
		want map[string]int
	}{
		{"w3c", map[string]int{"traceparent": 1}},
		{"w3c,request-id", map[string]int{"traceparent": 1, "x-request-id": 1}},
		{"b3", map[string]int{"b3": 1}},
		{"b3multi", map[string]int{"x-b3-traceid": 1, "x-b3-spanid": 1, "x-b3-sampled": 1}},
		{"none", map[string]int{}},
	} {
		t.Run(tc.propagate, func(t *testing.T) {
			allowed := map[string]bool{}
			for name := range tc.want {
				allowed[name] = true
			}
			lines := tracedRequestLines(t, n, []string{"--propagate", tc.propagate}, allowed)
			got := map[string]int{}
			for _, l := range lines {
				name, _, _ := strings.Cut(l, ":")
				got[strings.ToLower(name)]++
			}
			for name, per := range tc.want {
				if got[name] != per*n {
					t.Errorf("%d %s lines for %d requests, want %d", got[name], name, n, per*n)
				}
			}
			if len(lines) != len(tc.want)*n {
				t.Errorf("%d lines added, want %d: %q", len(lines), len(tc.want)*n, lines)
			}
		})
	}
}

// tracedRequestLines runs the wire peer's client under `rootline run` with
// flags, writing n random requests in random pieces to a slow reader (so
// the kernel takes partial writes), checks that the wire carries exactly
// its bytes plus whole lines named in allowed, and returns those lines.
func tracedRequestLines(t *testing.T, n int, flags []string, allowed map[string]bool) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := filepath.Join(t.TempDir(), "sent.bin")
	cmd, _ := startTraced(t, []string{"TARGET=" + l.Addr().String(), "OUT=" + out, "SEED=5", fmt.Sprint("N=", n)}, false,
		append([]string{"--server", ""}, flags...), wirePeer(t))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			break
		}
		time.Sleep(200 * time.Microsecond) // a slow reader: partial writes on the other side
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("traced client: %v", err)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := stripAdded(got, want, allowed)
	if err != nil {
		t.Fatalf("%d bytes on the wire, %d written by the app: %v", len(got), len(want), err)
	}
	t.Logf("%d request bytes identical apart from %d added lines", len(want), len(lines))
	return lines
}

// runMode is the `rootline run` flags choosing how it traces, for the run
// tests (forEachMode); nil is the default (-mode auto: the in-kernel
// datapath as root).
var runMode []string

// forEachMode runs f with each way `rootline run` traces: the in-kernel
// datapath (no ptrace), the ptrace supervisor with the eBPF read tap, and
// the ptrace supervisor alone.
func forEachMode(t *testing.T, f func(*testing.T)) {
	requireTracing(t)
	for _, m := range []struct {
		name  string
		flags []string
	}{
		{"ebpf", []string{"--mode", "ebpf"}},
		{"ptrace+readtap", []string{"--mode", "ptrace", "--reads", "ebpf"}},
		{"ptrace", []string{"--mode", "ptrace", "--reads", "ptrace"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			if m.name == "ptrace+readtap" {
				tap, err := readtap.Open(4096)
				if err != nil {
					bpftest.Missing(t, err.Error())
				}
				tap.Close()
			}
			runMode = m.flags
			defer func() { runMode = nil }()
			f(t)
		})
	}
}

// requireTracing skips when ptrace is not allowed here (and fails under
// ROOTLINE_REQUIRE_BPF=1, where the whole stack is expected to work).
func requireTracing(t *testing.T) {
	t.Helper()
	bpftest.RequireRoot(t, "rootline run (ptrace of arbitrary commands)")
}

// TestRunTLSPassThrough: HTTPS (HTTP/1.1 and HTTP/2 over TLS) to a traced
// server passes through untouched: the handshake and the answers are intact
// and no header is added to what the application sees.
func TestRunTLSPassThrough(t *testing.T) {
	requireTracing(t)
	_, port := startTraced(t, []string{"TLS_LISTEN=127.0.0.1:0"}, true, []string{"--server", ""}, wirePeer(t))
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for range 5 {
			resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
			if err != nil {
				t.Fatalf("h2=%v: %v", h2, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := "secure HTTP/1.1 \"\""
			if h2 {
				want = "secure HTTP/2.0 \"\""
			}
			if string(body) != want || anyTiming(resp.Header) {
				t.Fatalf("h2=%v: got %q (headers %v), want %q untouched", h2, body, resp.Header, want)
			}
		}
	}
}

// TestRunReadTapOverflow: when the eBPF read tap's buffer cannot hold a read
// (here a 4 KiB buffer and a request with a 6 KB header), the connection
// passes through untraced from then on: the responses stay byte-exact, those
// before the loss carry the timing line, those after none, and the service
// keeps answering.
func TestRunReadTapOverflow(t *testing.T) {
	requireTracing(t)
	if tap, err := readtap.Open(4096); err != nil {
		bpftest.Missing(t, err.Error())
	} else {
		tap.Close()
	}
	dir := t.TempDir()
	runMode = []string{"--mode", "ptrace", "--reads", "ebpf"}
	defer func() { runMode = nil }()
	_, port := startTraced(t, []string{"LISTEN=127.0.0.1:0", "OUT=" + dir}, true,
		[]string{"--server", "", "--reads.buffer-bytes", "4096"}, wirePeer(t))
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	for i := range 10 {
		pad := "small"
		if i == 5 {
			pad = strings.Repeat("x", 6000) // one read larger than the whole buffer
		}
		if _, err := fmt.Fprintf(c, "GET /?seed=%d HTTP/1.1\r\nHost: wire\r\nX-Pad: %s\r\n\r\n", 700+i, pad); err != nil {
			t.Fatal(err)
		}
		rsp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if _, err := io.Copy(io.Discard, rsp.Body); err != nil {
			t.Fatalf("response %d body: %v", i, err)
		}
		rsp.Body.Close()
	}
	c.Close()
	want, err := os.ReadFile(filepath.Join(dir, "conn-1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got := raw.Bytes()[:raw.Len()-br.Buffered()]
	lines, err := stripAdded(got, want, timingNames)
	if err != nil {
		t.Fatalf("%d bytes on the wire, %d written by the app: %v", len(got), len(want), err)
	}
	// A line for each of the 5 responses before the loss, maybe for the
	// one whose request was lost (its response was written before the gap
	// showed), none after.
	if len(lines) != 5 && len(lines) != 6 {
		t.Fatalf("%d added lines, want 5 or 6: %q", len(lines), lines)
	}
	t.Logf("%d response bytes identical apart from %d added lines; the connection went untraced at the lost read", len(want), len(lines))
}

// TestRunLongHeads: request heads with kilobytes of other headers before the
// context. Inbound, the context after 3 and 7 KB of padding still continues
// the caller's trace. Outbound, an application that set its own traceparent
// past the padding sends exactly that one, whatever the head's length (the
// datapath keeps 8 KiB of a head: past that it adds nothing rather than risk
// a second context); one that set none gets Rootline's up to 7 KB of padding.
func TestRunLongHeads(t *testing.T) { forEachMode(t, testRunLongHeads) }

func testRunLongHeads(t *testing.T) {
	needTool(t, "python3")
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var mu sync.Mutex
	seen := map[string][]string{} // X-Case → the traceparent values received
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.Header.Get("X-Case")] = r.Header.Values("traceparent")
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer down.Close()
	got := func(c string) []string { mu.Lock(); defer mu.Unlock(); return seen[c] }

	// Outbound: a Python client writes X-Case, X-Pad and then, in the "own"
	// cases, its own traceparent, in that order.
	client := `
import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port)
for case in sys.argv[2:]:
    pad, kind = case.split("-")
    h = {"X-Case": case, "X-Pad": "p" * int(pad)}
    if kind == "own":
        h["traceparent"] = "` + own + `"
    c.request("POST", "/", body=b"z" * 10, headers=h)
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
`
	cases := []string{"100-own", "3000-own", "7000-own", "10000-own", "3000-none", "7000-none", "10000-none"}
	cmd, _ := startTraced(t, nil, false, []string{"--server", ""}, append([]string{"python3", "-c", client, down.URL}, cases...)...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client: %v", err)
	}
	for _, c := range cases {
		tps := got(c)
		switch {
		case strings.HasSuffix(c, "-own"):
			if len(tps) != 1 || tps[0] != own {
				t.Errorf("%s: downstream got traceparent %q, want only the application's own", c, tps)
			}
		case c == "10000-none":
			if len(tps) > 1 {
				t.Errorf("%s: downstream got %d traceparents: %q", c, len(tps), tps)
			}
		default:
			if len(tps) != 1 || tps[0] == own || len(tps[0]) != 55 {
				t.Errorf("%s: downstream got traceparent %q, want Rootline's", c, tps)
			}
		}
	}

	// Inbound: the context comes after the padding.
	forward := tracedForwarder(t)
	for _, pad := range []int{3000, 7000} {
		h := forward(fmt.Sprintf("X-Pad: %s\r\ntraceparent: %s\r\n", strings.Repeat("p", pad), own))
		if tps := h.Values("traceparent"); len(tps) != 1 || !strings.HasPrefix(tps[0], own[:36]) {
			t.Errorf("in-%d: downstream got traceparent %q, want the caller's trace %s", pad, tps, own[3:35])
		}
	}

	// Responses: a Python server writes a long Set-Cookie before
	// Content-Length; the connection stays traced after it (the framing is
	// found within the 8 KiB kept).
	server := `
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path.split("=")[1])
        self.send_response(200)
        self.send_header("Set-Cookie", "c=" + "k" * n)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print("listening", s.server_address[1], flush=True)
s.serve_forever()
`
	_, port := startTraced(t, nil, true, []string{"--server", ""}, "python3", "-c", server)
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, n := range []int{10, 7000, 10, 10} {
		rsp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/?n=%d", port, n))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rsp.Body)
		rsp.Body.Close()
		if string(body) != "hello" || len(rsp.Header.Get("Set-Cookie")) != n+2 {
			t.Fatalf("n=%d: body %q, Set-Cookie of %d bytes", n, body, len(rsp.Header.Get("Set-Cookie")))
		}
		if !hasTiming(rsp.Header) {
			t.Errorf("n=%d: response without timing fields (the connection went untraced)", n)
		}
	}
}

// tracedForwarder starts gomid under `rootline run` (the current mode) in
// front of a downstream that records what it receives, and returns a
// function that sends one request with the given extra header lines (each
// ending in CRLF) on a kept connection and returns the headers of the
// request the service made downstream for it.
func tracedForwarder(t *testing.T) func(lines string) http.Header {
	t.Helper()
	got := make(chan http.Header, 1)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(down.Close)
	_, port := startTraced(t, []string{"LISTEN=127.0.0.1:0", "CALL=" + down.URL}, true, []string{"--server", ""}, buildTestdata(t, "gomid"))
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	br := bufio.NewReader(conn)
	return func(lines string) http.Header {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: mid\r\n%s\r\n", lines); err != nil {
			t.Fatal(err)
		}
		rsp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, rsp.Body)
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", rsp.StatusCode)
		}
		select {
		case h := <-got:
			return h
		default:
			t.Fatal("the service answered without calling downstream")
			return nil
		}
	}
}

// TestRunSamplingDeny: a request without a context but with a B3 decision
// not to sample (`b3: 0`, `X-B3-Sampled: 0` alone) starts a trace that is
// not sampled, and says so downstream; without one it is sampled.
func TestRunSamplingDeny(t *testing.T) { forEachMode(t, testRunSamplingDeny) }

func testRunSamplingDeny(t *testing.T) {
	forward := tracedForwarder(t)
	for _, c := range []struct {
		lines   string
		sampled bool
	}{
		{"b3: 0\r\n", false},
		{"X-B3-Sampled: 0\r\n", false},
		{"X-B3-Sampled: false\r\n", false},
		{"", true},
		{"b3: 1\r\n", true},
		{"X-B3-Sampled: 1\r\n", true},
	} {
		h := forward(c.lines)
		tp, b3, xs := h.Get("traceparent"), h.Get("b3"), h.Get("X-B3-Sampled")
		flag, b3s, want := "-00", "-0", "0"
		if c.sampled {
			flag, b3s, want = "-01", "-1", "1"
		}
		if len(tp) != 55 || !strings.HasSuffix(tp, flag) || !strings.Contains(b3, b3s) || xs != want {
			t.Errorf("%q: downstream got traceparent %q, b3 %q, X-B3-Sampled %q; want sampled=%v", c.lines, tp, b3, xs, c.sampled)
		}
	}
}

// stopAtCleanup ends the started cmd when the test ends: SIGTERM, then
// SIGKILL after 10 s; failed, when set, runs after it if the test failed.
func stopAtCleanup(t *testing.T, cmd *exec.Cmd, failed func()) {
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if failed != nil && t.Failed() {
			failed()
		}
	})
}
