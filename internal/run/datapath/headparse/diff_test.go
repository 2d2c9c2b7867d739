package headparse

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/run/httpstream"
	"github.com/rootline/rootline/internal/run/httpstream/tracecontexttest"
)

// goView is what httpstream's parser (the ptrace mode's) finds in a request
// head, in the terms of a Result.
type goView struct {
	opaque  httpstream.Reason // "" unless the stream went opaque first
	headLen int               // 0: the head has not ended
	msg     *httpstream.Message
	ctx     httpstream.Context
	ctxOK   bool
	denied  bool
}

func goParse(b []byte, split int) goView {
	p := httpstream.NewParser(httpstream.Requests)
	var v goView
	base := 0
	for _, chunk := range [][]byte{b[:split], b[split:]} {
		for _, ev := range p.Feed(chunk) {
			switch {
			case v.opaque != "" || v.headLen > 0:
			case ev.Kind == httpstream.EventOpaque:
				v.opaque = ev.Reason
			case ev.Kind == httpstream.EventHeaders:
				v.headLen = base + ev.End
				v.msg = ev.Msg
				v.ctx, v.ctxOK = httpstream.ExtractContext(ev.Msg.Headers)
				v.denied = !v.ctxOK && httpstream.SamplingDenied(ev.Msg.Headers)
			}
		}
		base += len(chunk)
	}
	return v
}

// startLineReason: httpstream found no request line; the datapath's check
// of the start line is its own (narrower: upper-case methods of at most 24
// characters), and a connection either finds not HTTP passes untouched.
func startLineReason(r httpstream.Reason) bool {
	switch r {
	case httpstream.ReasonNotHTTP, httpstream.ReasonMalformedStart, httpstream.ReasonTLS, httpstream.ReasonHTTP2:
		return true
	}
	return false
}

var (
	startOnce sync.Once
	parser    *Parser
	parserDir string
	startErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if parser != nil {
		parser.Close()
	}
	if parserDir != "" {
		os.RemoveAll(parserDir)
	}
	os.Exit(code)
}

// datapathParser starts the parser once per test process; it skips the
// test when there is no C compiler.
func datapathParser(t testing.TB) *Parser {
	t.Helper()
	startOnce.Do(func() {
		parserDir, startErr = os.MkdirTemp("", "headparse")
		if startErr == nil {
			parser, startErr = Start(parserDir)
		}
	})
	if errors.Is(startErr, ErrNoCompiler) {
		t.Skip("no C compiler to build the datapath's parser for user space: " + startErr.Error())
	}
	if startErr != nil {
		t.Fatal(startErr)
	}
	return parser
}

// compare feeds b to both parsers and returns the first difference in what
// they extract, or "".
func compare(t testing.TB, b []byte, split int) string {
	p := datapathParser(t)
	if len(b) > p.MaxHead() {
		b = b[:p.MaxHead()]
	}
	split = max(0, min(split, len(b)))
	c, err := p.ParseRequest(b, split)
	if err != nil {
		t.Fatal(err)
	}
	g := goParse(b, split)
	if c.Status == NotHTTP || startLineReason(g.opaque) {
		return ""
	}
	switch {
	case c.Status == More && g.headLen == 0 && g.opaque == "":
		return ""
	case c.Status == More:
		if g.opaque != "" {
			return "" // httpstream gave up on a field line the datapath has not seen end yet
		}
		return fmt.Sprintf("head end: datapath still reading, httpstream ended it at %d", g.headLen)
	case g.opaque == httpstream.ReasonMalformedHeader:
		if c.Has&HasBadField == 0 {
			return fmt.Sprintf("malformed field line: httpstream refused the head, the datapath did not (head %d bytes)", c.HeadLen)
		}
		return ""
	case g.opaque == httpstream.ReasonHeadersTooLarge:
		return ""
	case g.headLen == 0 && g.opaque == "":
		return fmt.Sprintf("head end: datapath ended it at %d, httpstream still reading", c.HeadLen)
	}
	if c.Has&HasBadField != 0 {
		if g.opaque == "" && !folded(g.msg) {
			return fmt.Sprintf("malformed field line: the datapath refused the head, httpstream did not (%d bytes)", g.headLen)
		}
		return ""
	}
	if g.opaque == httpstream.ReasonBadContentLength || g.opaque == httpstream.ReasonBadTransferEncoding {
		if c.Has&(HasBadCL|HasTEOther) == 0 {
			return fmt.Sprintf("framing: httpstream refused it (%s), the datapath did not (has %#x cl %d)", g.opaque, c.Has, c.CL)
		}
		return ""
	}
	if g.opaque != "" {
		return fmt.Sprintf("httpstream went opaque (%s), the datapath read a head of %d", g.opaque, c.HeadLen)
	}
	if c.HeadLen != g.headLen {
		return fmt.Sprintf("head length: datapath %d, httpstream %d", c.HeadLen, g.headLen)
	}
	if c.Has&(HasBadCL|HasTEOther) != 0 {
		return fmt.Sprintf("framing: the datapath refused its Content-Length, httpstream took %v %d", g.msg.Body, g.msg.ContentLength)
	}
	m := g.msg
	chunked := c.Has&HasChunked != 0
	if chunked != (m.Body == httpstream.BodyChunked) {
		return fmt.Sprintf("framing: datapath chunked=%v, httpstream %v", chunked, m.Body)
	}
	if !chunked {
		cl := int64(0)
		if c.Has&HasCL != 0 {
			cl = int64(c.CL)
		}
		gl := int64(0)
		if m.Body == httpstream.BodyLength {
			gl = m.ContentLength
		}
		if cl != gl {
			return fmt.Sprintf("framing: datapath Content-Length %d, httpstream %v %d", cl, m.Body, gl)
		}
	}
	if c.IsHead != (m.Method == "HEAD") {
		return fmt.Sprintf("HEAD: datapath %v, httpstream method %q", c.IsHead, m.Method)
	}
	if c.CtxOK != g.ctxOK {
		return fmt.Sprintf("context found: datapath %v, httpstream %v", c.CtxOK, g.ctxOK)
	}
	if c.CtxOK {
		if c.Trace != g.ctx.TraceID || c.Span != spanU64(g.ctx.SpanID) || c.Sampled != g.ctx.Sampled {
			return fmt.Sprintf("context: datapath %x-%016x sampled=%v, httpstream %s-%s sampled=%v",
				c.Trace, c.Span, c.Sampled, g.ctx.TraceID, g.ctx.SpanID, g.ctx.Sampled)
		}
		if c.TraceState != g.ctx.TraceState {
			return fmt.Sprintf("tracestate: datapath %q, httpstream %q", c.TraceState, g.ctx.TraceState)
		}
	} else if c.Denied != g.denied {
		return fmt.Sprintf("sampling denied: datapath %v, httpstream %v", c.Denied, g.denied)
	}
	if c.RequestID != g.ctx.RequestID {
		return fmt.Sprintf("x-request-id: datapath %q, httpstream %q", c.RequestID, g.ctx.RequestID)
	}
	return ""
}

// folded reports whether a field line of m continues the one before it
// (obsolete line folding, a line starting with SP or HTAB): httpstream keeps
// such a value, the datapath leaves the connection untouched; either way the
// service's bytes pass as they are.
func folded(m *httpstream.Message) bool {
	return strings.Contains(string(m.Raw), "\n ") || strings.Contains(string(m.Raw), "\n\t")
}

// compareResponse feeds the response head b (answering a HEAD request when
// headReq) to both parsers and returns the first difference in how they
// delimit what follows it, or "".
func compareResponse(t testing.TB, b []byte, split int, headReq bool) string {
	p := datapathParser(t)
	if len(b) > p.MaxHead() {
		b = b[:p.MaxHead()]
	}
	split = max(0, min(split, len(b)))
	c, err := p.ParseResponse(b, split, headReq)
	if err != nil {
		t.Fatal(err)
	}
	gp := httpstream.NewParser(httpstream.Responses)
	method := "GET"
	if headReq {
		method = "HEAD"
	}
	gp.ExpectResponse(method)
	var (
		opaque  httpstream.Reason
		headLen int
		msg     *httpstream.Message
	)
	base := 0
	for _, chunk := range [][]byte{b[:split], b[split:]} {
		for _, ev := range gp.Feed(chunk) {
			switch {
			case opaque != "" || headLen > 0:
			case ev.Kind == httpstream.EventOpaque:
				opaque = ev.Reason
			case ev.Kind == httpstream.EventHeaders:
				headLen, msg = base+ev.End, ev.Msg
			}
		}
		base += len(chunk)
	}
	if c.Status == NotHTTP || startLineReason(opaque) {
		return ""
	}
	switch {
	case c.Status == More && headLen == 0 && opaque == "":
		return ""
	case c.Status == More:
		if opaque != "" {
			return ""
		}
		return fmt.Sprintf("head end: datapath still reading, httpstream ended it at %d", headLen)
	case opaque == httpstream.ReasonMalformedHeader:
		if c.Framing != RBOpaque || c.Has&HasBadField == 0 {
			return fmt.Sprintf("malformed field line: httpstream refused the head, the datapath did not (framing %d)", c.Framing)
		}
		return ""
	case opaque == httpstream.ReasonHeadersTooLarge:
		return ""
	case opaque == httpstream.ReasonUpgrade:
		// 101: httpstream stops (another protocol follows); the datapath
		// takes it as interim and goes opaque on the next bytes if they
		// are not a head.
		if c.Framing != RBInterim {
			return fmt.Sprintf("101: datapath framing %d", c.Framing)
		}
		return ""
	case headLen == 0 && opaque == "":
		return fmt.Sprintf("head end: datapath ended it at %d, httpstream still reading", c.HeadLen)
	}
	if c.Has&HasBadField != 0 {
		if opaque == "" && !folded(msg) {
			return fmt.Sprintf("malformed field line: the datapath refused the head, httpstream did not (%d bytes)", headLen)
		}
		return ""
	}
	if opaque == httpstream.ReasonBadContentLength || opaque == httpstream.ReasonBadTransferEncoding {
		if c.Framing != RBOpaque {
			return fmt.Sprintf("framing: httpstream refused it (%s), the datapath did not (framing %d, has %#x)", opaque, c.Framing, c.Has)
		}
		return ""
	}
	if opaque != "" {
		return fmt.Sprintf("httpstream went opaque (%s), the datapath read a head of %d", opaque, c.HeadLen)
	}
	if c.HeadLen != headLen {
		return fmt.Sprintf("head length: datapath %d, httpstream %d", c.HeadLen, headLen)
	}
	if c.StatusCode != msg.Status {
		return fmt.Sprintf("status: datapath %d, httpstream %d", c.StatusCode, msg.Status)
	}
	want := RBClose
	switch {
	case msg.Status >= 100 && msg.Status < 200:
		want = RBInterim
	case msg.Body == httpstream.BodyNone, msg.Body == httpstream.BodyLength && msg.ContentLength == 0:
		want = RBNone
	case msg.Body == httpstream.BodyChunked:
		want = RBChunked
	case msg.Body == httpstream.BodyLength:
		want = RBLength
		if c.CL != uint64(msg.ContentLength) {
			return fmt.Sprintf("framing: datapath Content-Length %d, httpstream %d", c.CL, msg.ContentLength)
		}
	}
	if c.Framing != want {
		return fmt.Sprintf("framing: datapath %d, httpstream %v (%d), status %d", c.Framing, msg.Body, want, msg.Status)
	}
	return compareTiming(c, msg.Headers)
}

// compareTiming checks that the datapath reads a response's timing fields
// as httpstream.ParseTiming does: the same server time and largest wait, or
// nothing where ParseTiming refuses them. The datapath reads the long form
// leniently (leading digits, the first rootline-wait field only), so where
// a long field is malformed, or rootline-wait repeats, only the compact
// form's part is held to agreement.
func compareTiming(c Result, h httpstream.Headers) string {
	tm, err := httpstream.ParseTiming(h)
	long, waits := 0, 0
	for _, f := range h {
		switch strings.ToLower(string(f.Name)) {
		case httpstream.HeaderServerTime:
			long++
		case httpstream.HeaderWait:
			long++
			waits++
		}
	}
	if err != nil || !tm.HasServerTime {
		if long == 0 && c.Timed {
			return fmt.Sprintf("timing: the datapath read server time %d µs, httpstream none (%v)", c.ServerUs, err)
		}
		return ""
	}
	if !c.Timed || c.ServerUs != uint64(tm.ServerTime/time.Microsecond) {
		return fmt.Sprintf("timing: datapath timed %v, %d µs; httpstream %s", c.Timed, c.ServerUs, tm.ServerTime)
	}
	var wait time.Duration
	for _, w := range tm.Waits {
		wait = max(wait, w.Duration)
	}
	if waits <= 1 && c.WaitUs != uint64(wait/time.Microsecond) {
		return fmt.Sprintf("timing: datapath largest wait %d µs, httpstream %s", c.WaitUs, wait)
	}
	return ""
}

// TestTimingForms: both parsers read each form of the timing fields to the
// same values, and refuse the same malformed compact ones.
func TestTimingForms(t *testing.T) {
	for _, tc := range []struct {
		lines        string
		timed        bool
		server, wait uint64
	}{
		{"rl: 1234;l=12;n=3;r=456\r\n", true, 1234, 456},
		{"RL: 0\r\n", true, 0, 0},
		{"rl:   77;r=5;xy=9;l=80   \r\n", true, 77, 80},
		{"rl: 999999999999999;n=999999999999999\r\n", true, 999999999999999, 999999999999999},
		{"rootline-server-time: 1234\r\nrootline-wait: 12;kind=local, 3;kind=net, 456;kind=remote\r\n", true, 1234, 456},
		{"rootline-server-time: 40\r\nrl: 40;n=2\r\nrootline-wait: 9;kind=remote\r\n", true, 40, 9},
		{"rl: 40;r=90\r\nrootline-wait: 9;kind=remote\r\n", true, 40, 90},
		{"rl: 40\r\nrootline-server-time: 41\r\n", false, 0, 0},
		{"rl: 40\r\nrl: 40\r\n", false, 0, 0},
		{"rl: 40;l=1;l=1\r\n", false, 0, 0},
		{"rl: \r\n", false, 0, 0},
		{"rl: ;l=3\r\n", false, 0, 0},
		{"rl: 4;\r\n", false, 0, 0},
		{"rl: 4;l\r\n", false, 0, 0},
		{"rl: 4;l=\r\n", false, 0, 0},
		{"rl: 4;=5\r\n", false, 0, 0},
		{"rl: 4;L=5\r\n", false, 0, 0},
		{"rl: 4;abcdefghi=5\r\n", false, 0, 0},
		{"rl: 4; l=5\r\n", false, 0, 0},
		{"rl: 4, 5\r\n", false, 0, 0},
		{"rl: 1000000000000000\r\n", false, 0, 0},
		{"rl: 1;r=1000000000000000\r\n", false, 0, 0},
		{"rl: 1;x=y\r\n", false, 0, 0},
		{"rl: 1" + strings.Repeat(";x=1", 32) + "\r\n", false, 0, 0},
		{"rl: 1" + strings.Repeat(";x=1", 31) + "\r\n", true, 1, 0},
	} {
		head := []byte("HTTP/1.1 200 OK\r\n" + tc.lines + "Content-Length: 0\r\n\r\n")
		for _, split := range []int{0, 20, len(head) - 3} {
			c, err := datapathParser(t).ParseResponse(head, split, false)
			if err != nil {
				t.Fatal(err)
			}
			if c.Timed != tc.timed || tc.timed && (c.ServerUs != tc.server || c.WaitUs != tc.wait) {
				t.Errorf("%q split %d: datapath timed %v, server %d, wait %d; want %v %d %d", tc.lines, split, c.Timed, c.ServerUs, c.WaitUs, tc.timed, tc.server, tc.wait)
			}
			if d := compareResponse(t, head, split, false); d != "" {
				t.Errorf("%q split %d: %s", tc.lines, split, d)
			}
		}
	}
}

func spanU64(s httpstream.SpanID) uint64 {
	var v uint64
	for _, b := range s {
		v = v<<8 | uint64(b)
	}
	return v
}

// TestTraceContextVectors: the datapath's parser finds each W3C Trace
// Context vector's context and tracestate (the table httpstream's tests and
// the end-to-end tests use).
func TestTraceContextVectors(t *testing.T) {
	for _, v := range tracecontexttest.Load(t) {
		t.Run(v.Name, func(t *testing.T) {
			head := v.Head()
			r, err := datapathParser(t).ParseRequest(head, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != Head || r.HeadLen != len(head) || r.Has&HasBadField != 0 {
				t.Fatalf("head not read: %+v", r)
			}
			if r.CtxOK != (v.Trace != "") {
				t.Fatalf("context found = %v, want %v", r.CtxOK, v.Trace != "")
			}
			if r.CtxOK {
				if got := hex.EncodeToString(r.Trace[:]); got != v.Trace {
					t.Errorf("trace %s, want %s", got, v.Trace)
				}
				if got := fmt.Sprintf("%016x", r.Span); got != v.Parent {
					t.Errorf("parent %s, want %s", got, v.Parent)
				}
				if r.Sampled != v.Sampled {
					t.Errorf("sampled %v, want %v", r.Sampled, v.Sampled)
				}
			}
			want, _ := v.WantTraceState()
			if r.TraceState != want {
				t.Errorf("tracestate %q, want %q", r.TraceState, want)
			}
			if d := compare(t, head, len(head)/2); d != "" {
				t.Errorf("differs from httpstream: %s", d)
			}
		})
	}
}

// seeds are request heads that exercise each thing compared; they start the
// fuzz corpus and run as a test.
func seeds() []string {
	const tp = "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
	var s []string
	for _, h := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n",
		"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: 5,\r\nContent-Length: , 5,,5\r\n\r\n",
		"POST /x HTTP/1.1\r\nContent-Length: ,\r\n\r\n",
		"HEAD / HTTP/1.0\nHost: a\n\n",
		"GET / HTTP/1.1\r\n" + tp + "tracestate: a=1, b=2\r\nx-request-id: abc\r\n\r\n",
		"GET / HTTP/1.1\r\n" + tp + "tracestate: a=1\r\nTraceState: b=2,,\r\n\r\n",
		"GET / HTTP/1.1\r\nb3: 80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90\r\n\r\n",
		"GET / HTTP/1.1\r\nX-B3-TraceId: 80f198ee56343ba8\r\nX-B3-SpanId: e457b5a2e4d86bd1\r\nX-B3-Sampled: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nb3: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nx-request-id: \x01\r\nx-request-id: ok\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:     a    \r\n" + tp + "\r\n",
		"GET / HTTP/1.1\r\nFolded: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nBad : a\r\n\r\n",
	} {
		s = append(s, h)
	}
	return s
}

// responseSeeds are response heads for each framing.
func responseSeeds() []string {
	return []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 5x\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 200 OK\r\nrootline-server-time: 1234\r\nrootline-wait: 12;kind=local, 3;kind=net\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nrl: 1234;l=12;n=3;r=456\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nrl: 40;r=90\r\nrootline-server-time: 40\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nRL: 7;q=1;n=0\r\nrl: 7\r\n\r\n",
	}
}

func TestDifferentialSeeds(t *testing.T) {
	for i, h := range seeds() {
		for _, split := range []int{0, 1, len(h) / 2, len(h) - 1} {
			if d := compare(t, []byte(h), split); d != "" {
				t.Errorf("seed %d split %d %q: %s", i, split, h, d)
			}
		}
	}
	for i, h := range responseSeeds() {
		for _, split := range []int{0, 1, len(h) / 2, len(h) - 1} {
			for _, head := range []bool{false, true} {
				if d := compareResponse(t, []byte(h), split, head); d != "" {
					t.Errorf("response seed %d split %d HEAD %v %q: %s", i, split, head, h, d)
				}
			}
		}
	}
}

// FuzzHeadParser feeds the same head to the datapath's parser and
// httpstream's and fails on the first thing they extract differently: a
// request head when kind is even, else a response head (answering HEAD when
// kind&2 is set).
func FuzzHeadParser(f *testing.F) {
	for _, h := range seeds() {
		f.Add([]byte(h), uint16(len(h)/2), uint8(0))
	}
	for _, v := range tracecontexttest.Load(f) {
		h := v.Head()
		f.Add(h, uint16(len(h)/3), uint8(0))
	}
	for i, h := range responseSeeds() {
		f.Add([]byte(h), uint16(len(h)/2), uint8(1|2*(i%2)))
	}
	f.Fuzz(func(t *testing.T, b []byte, split uint16, kind uint8) {
		var d string
		if kind&1 == 0 {
			d = compare(t, b, int(split))
		} else {
			d = compareResponse(t, b, int(split), kind&2 != 0)
		}
		if d != "" {
			t.Fatalf("%s\nhead %q (split %d, kind %d)", d, truncate(b), split, kind)
		}
	})
}

func truncate(b []byte) string {
	s := string(b)
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
