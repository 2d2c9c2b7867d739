package httpstream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// simOpts shapes how simulate writes.
type simOpts struct {
	maxWrite int  // largest write; 1 writes byte by byte
	partial  bool // the kernel takes random prefixes of the output
	iov      bool // writes are split into several buffers
}

// simulate pushes stream through r as an application and a kernel would:
// writes of random sizes, partial sends, retries from the first byte the
// application was not told was written. It returns the bytes on the wire.
func simulate(t testing.TB, r *Rewriter, stream []byte, rng *rand.Rand, inject InjectFunc, o simOpts) []byte {
	t.Helper()
	var wire, flat []byte
	pos, rounds := 0, 0
	for pos < len(stream) {
		if rounds++; rounds > 100*len(stream)+1000 {
			t.Fatalf("no progress at %d of %d", pos, len(stream))
		}
		n := min(len(stream)-pos, 1+rng.IntN(o.maxWrite))
		// Fresh buffers, scribbled over afterwards: the Rewriter must not
		// keep pointers into an earlier write's input.
		p := bytes.Clone(stream[pos : pos+n])
		var out Output
		var iov [][]byte
		if o.iov && n > 1 {
			for rest := p; len(rest) > 0; {
				k := rng.IntN(len(rest) + 1) // empty buffers too
				iov = append(iov, rest[:k])
				rest = rest[k:]
			}
			out = r.WriteV(iov, inject)
		} else {
			iov = [][]byte{p}
			out = r.Write(p, inject)
		}
		flat = out.AppendTo(flat[:0], iov...)
		if len(flat) != out.Len {
			t.Fatalf("Output.Len %d, segments hold %d", out.Len, len(flat))
		}
		if out.Unchanged && !bytes.Equal(flat, p) {
			t.Fatalf("Unchanged = %v for output %q of input %q: %+v", out.Unchanged, clip(flat), clip(p), out.Segments)
		}
		k := len(flat)
		if o.partial && k > 0 && rng.IntN(2) == 0 {
			k = rng.IntN(k + 1)
		}
		wire = append(wire, flat[:k]...)
		m := r.Sent(k)
		switch {
		case m < 0 || m > n:
			t.Fatalf("Sent(%d) = %d for a write of %d", k, m, n)
		case k == len(flat) && m != n:
			t.Fatalf("all %d output bytes sent but %d of %d input bytes acknowledged", k, m, n)
		}
		for i := range p {
			p[i] = 0xAA
		}
		pos += m
	}
	return wire
}

// numbered is an InjectFunc that inserts one numbered line per message and
// records the messages' methods and targets.
type numbered struct {
	n    int
	seen []string
}

func (c *numbered) inject(dst []byte, m *Message) []byte {
	line := fmt.Sprintf("X-Inject: %d\r\n", c.n)
	c.n++
	if m.Request {
		c.seen = append(c.seen, m.Method+" "+string(m.Target))
	} else {
		c.seen = append(c.seen, fmt.Sprintf("%d %s", m.Status, m.Method))
	}
	return append(dst, line...)
}

func numberedLine(i int) string { return fmt.Sprintf("X-Inject: %d\r\n", i) }

func TestRewriterExact(t *testing.T) {
	const get = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n"
	add := func(dst []byte, _ *Message) []byte { return append(dst, "X-Add: 1\r\n"...) }
	for _, tc := range []struct {
		name    string
		kind    Kind
		methods []string
		in      string
		inject  InjectFunc
		want    string
	}{
		{"get", Requests, nil, get, add, "GET /a HTTP/1.1\r\nHost: h\r\nX-Add: 1\r\n\r\n"},
		{"no header fields", Requests, nil, "GET / HTTP/1.0\r\n\r\n", add, "GET / HTTP/1.0\r\nX-Add: 1\r\n\r\n"},
		{"bare LF", Requests, nil, "GET / HTTP/1.1\nA: b\n\nGET / HTTP/1.1\n\n", add,
			"GET / HTTP/1.1\nA: b\nX-Add: 1\r\n\nGET / HTTP/1.1\nX-Add: 1\r\n\n"},
		{"body with a blank line", Requests, nil, "POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\r\n\r\n" + get, add,
			"POST / HTTP/1.1\r\nContent-Length: 4\r\nX-Add: 1\r\n\r\n\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\nX-Add: 1\r\n\r\n"},
		{"nil inject", Requests, nil, get + get, func(dst []byte, _ *Message) []byte { return dst }, get + get},
		{"line without LF is ignored", Requests, nil, get, func(dst []byte, _ *Message) []byte { return append(dst, "X: 1"...) }, get},
		{"only some messages", Requests, nil, get + "PUT / HTTP/1.1\r\n\r\n", func(dst []byte, m *Message) []byte {
			if m.Method == "PUT" {
				return []byte("X-Put: 1\r\n") // not an append: kept as it is
			}
			return nil
		}, get + "PUT / HTTP/1.1\r\nX-Put: 1\r\n\r\n"},
		{"lines beyond the arena's room", Requests, nil, get + get, func(dst []byte, _ *Message) []byte {
			return append(dst, "X-Big: "+strings.Repeat("b", 3*minArenaRoom)+"\r\n"...)
		}, "GET /a HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 3*minArenaRoom) + "\r\n\r\n" +
			"GET /a HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 3*minArenaRoom) + "\r\n\r\n"},
		{"response to HEAD", Responses, []string{"HEAD", "GET"},
			"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", add,
			"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Add: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Add: 1\r\n\r\nabc"},
		{"204 and 304", Responses, []string{"GET", "GET", "GET"},
			"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", add,
			"HTTP/1.1 204 No Content\r\nX-Add: 1\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nX-Add: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-Add: 1\r\n\r\nx"},
		{"upgrade then opaque", Responses, []string{"GET"},
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", add,
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nX-Add: 1\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"},
		{"close-delimited body", Responses, nil, "HTTP/1.0 200 OK\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", add,
			"HTTP/1.0 200 OK\r\nX-Add: 1\r\n\r\nHTTP/1.1 200 OK\r\n\r\n"},
		{"tls", Requests, nil, "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03GET / HTTP/1.1\r\n\r\n", add, "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03GET / HTTP/1.1\r\n\r\n"},
		{"http2 preface", Requests, nil, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", add, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{"garbage", Requests, nil, "\x00\x01\x02GET / HTTP/1.1\r\n\r\n", add, "\x00\x01\x02GET / HTTP/1.1\r\n\r\n"},
		{"bad chunk size mid-stream", Requests, nil,
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n" + get, add,
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Add: 1\r\n\r\nxyz\r\n" + get},
		{"bad content-length", Requests, nil, "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n" + get, add,
			"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n" + get},
		{"malformed header", Requests, nil, get + "GET / HTTP/1.1\r\nno colon\r\n\r\n" + get, add,
			"GET /a HTTP/1.1\r\nHost: h\r\nX-Add: 1\r\n\r\nGET / HTTP/1.1\r\nno colon\r\n\r\n" + get},
		{"headers too large", Requests, nil, "GET / HTTP/1.1\r\nX: " + strings.Repeat("y", MaxHeaderBytes) + "\r\n\r\n" + get, add,
			"GET / HTTP/1.1\r\nX: " + strings.Repeat("y", MaxHeaderBytes) + "\r\n\r\n" + get},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, uint64(len(tc.in))))
			for _, o := range []simOpts{
				{maxWrite: 1 << 30},
				{maxWrite: 1},
				{maxWrite: 7, partial: true},
				{maxWrite: 64, partial: true, iov: true},
			} {
				r := NewRewriter(tc.kind)
				for _, m := range tc.methods {
					r.ExpectResponse(m)
				}
				if got := simulate(t, r, []byte(tc.in), rng, tc.inject, o); string(got) != tc.want {
					t.Fatalf("%+v:\n got  %q\n want %q", o, got, tc.want)
				}
			}
		})
	}
}

// TestRewriterRandomStreams is the byte-exactness property on generated
// streams: the wire is the stream with exactly the injected lines added
// before each header block's final line break, however the application
// splits its writes and however the kernel cuts the sends.
func TestRewriterRandomStreams(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for run := range runs {
		o := genOpts{bareLF: run%3 == 0, bareLFChunks: run%3 == 0, emptyLines: run%2 == 0, closeBody: true, maxBody: 2000, maxMsgs: 6}
		var (
			s       genStream
			kind    = Requests
			methods []string
		)
		if run%2 == 0 {
			s = genRequests(rng, o)
		} else {
			kind = Responses
			s, methods = genResponses(rng, o)
		}
		brks := make([]int, len(s.msgs))
		var want []string
		for i, m := range s.msgs {
			brks[i] = m.brk
			if kind == Requests {
				want = append(want, m.method+" "+m.target)
			} else if m.status >= 200 {
				want = append(want, fmt.Sprintf("%d %s", m.status, m.method))
			} else {
				want = append(want, fmt.Sprintf("%d ", m.status))
			}
		}
		expected := expectInserted(s.data, brks, numberedLine)
		for _, so := range []simOpts{
			{maxWrite: 1 << 30},
			{maxWrite: 1},
			{maxWrite: 1 + rng.IntN(40), partial: true},
			{maxWrite: 1 + rng.IntN(3000), partial: true, iov: true},
		} {
			r := NewRewriter(kind)
			for _, m := range methods {
				r.ExpectResponse(m)
			}
			var c numbered
			got := simulate(t, r, s.data, rng, c.inject, so)
			if !bytes.Equal(got, expected) {
				t.Fatalf("run %d %v %+v: wire differs at byte %d of %d\nstream %q", run, kind, so, firstDiff(got, expected), len(expected), clip(s.data))
			}
			if fmt.Sprint(c.seen) != fmt.Sprint(want) {
				t.Fatalf("run %d: messages %q, want %q", run, c.seen, want)
			}
			if r, ok := r.Opaque(); ok {
				t.Fatalf("run %d: went opaque: %s", run, r)
			}
		}
	}
}

// TestRewriterNetHTTP reads the rewritten requests back with net/http: the
// injected line is a header, and bodies are intact.
func TestRewriterNetHTTP(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for run := range 100 {
		s := genRequests(rng, genOpts{bareLF: run%2 == 0, maxBody: 3000, maxMsgs: 5})
		var c numbered
		wire := simulate(t, NewRewriter(Requests), s.data, rng, c.inject, simOpts{maxWrite: 1 + rng.IntN(500), partial: true})
		br := bufio.NewReader(bytes.NewReader(wire))
		for i, m := range s.msgs {
			req, err := http.ReadRequest(br)
			if err != nil {
				t.Fatalf("run %d message %d: %v\n%q", run, i, err, clip(wire))
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				t.Fatalf("run %d message %d body: %v", run, i, err)
			}
			if req.Method != m.method || req.Header.Get("X-Inject") != fmt.Sprint(i) || !bytes.Equal(body, m.body) {
				t.Fatalf("run %d message %d: %s %q body %d bytes, want %s %d, %d bytes", run, i, req.Method, req.Header.Get("X-Inject"), len(body), m.method, i, len(m.body))
			}
		}
		if _, err := br.Peek(1); err != io.EOF {
			t.Fatalf("run %d: trailing bytes", run)
		}
	}
}

// TestRewriterPartialSendInsideInsertion walks a kernel that accepts every
// possible prefix of the output of one write, then the rest on retry.
func TestRewriterPartialSendInsideInsertion(t *testing.T) {
	in := []byte("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
	brk := bytes.Index(in, []byte("\r\n\r\n")) + 2
	ins := []byte("X-Trace: 0123456789\r\n")
	want := string(in[:brk]) + string(ins) + string(in[brk:])
	inject := func(dst []byte, _ *Message) []byte { return append(dst, ins...) }
	for k := 0; k <= len(want); k++ {
		r := NewRewriter(Requests)
		out := r.Write(in, inject)
		flat := out.AppendTo(nil, in)
		if string(flat) != want {
			t.Fatalf("output %q", flat)
		}
		m := r.Sent(k)
		var wantM int
		switch {
		case k <= brk:
			wantM = k
		case k < brk+len(ins):
			wantM = brk // the inserted line is not the application's
		default:
			wantM = k - len(ins)
		}
		if m != wantM {
			t.Fatalf("Sent(%d) = %d, want %d", k, m, wantM)
		}
		wire := flat[:k]
		if m < len(in) {
			retry := in[m:]
			out = r.Write(retry, inject)
			rest := out.AppendTo(nil, retry)
			wire = append(wire, rest...)
			if m2 := r.Sent(len(rest)); m+m2 != len(in) {
				t.Fatalf("k=%d: retry acknowledged %d+%d of %d", k, m, m2, len(in))
			}
		}
		if string(wire) != want {
			t.Fatalf("k=%d: wire %q", k, wire)
		}
	}
}

// TestRewriterShortRetries covers an application that retries with fewer
// bytes than it wrote before, including none.
func TestRewriterShortRetries(t *testing.T) {
	in := []byte("GET / HTTP/1.1\r\nA: b\r\n\r\nGET /2 HTTP/1.1\r\nContent-Length: 4\r\n\r\nbodyGET /3 HT")
	inject := func(dst []byte, _ *Message) []byte { return append(dst, "X: y\r\n"...) }
	want := "GET / HTTP/1.1\r\nA: b\r\nX: y\r\n\r\nGET /2 HTTP/1.1\r\nContent-Length: 4\r\nX: y\r\n\r\nbody"
	r := NewRewriter(Requests)
	if out := r.Write(in, inject); out.Len != len(want) {
		t.Fatalf("output of %d bytes", out.Len)
	}
	if m := r.Sent(0); m != 0 {
		t.Fatalf("Sent(0) = %d", m)
	}
	var wire []byte
	pos := 0
	for pos < len(in) {
		p := in[pos:min(len(in), pos+3)]
		out := r.Write(p, inject)
		b := out.AppendTo(nil, p)
		if len(b) > 0 {
			b = b[:1+len(b)/2] // the kernel takes half
		}
		wire = append(wire, b...)
		pos += r.Sent(len(b))
	}
	if string(wire) != want {
		t.Fatalf("wire %q\nwant %q", wire, want)
	}
	if m := r.Sent(5); m != 0 {
		t.Fatalf("Sent without Write = %d", m)
	}
}

// TestRewriterNoCopy checks that a write holding a whole message gives three
// segments, the body pointing into the input.
func TestRewriterNoCopy(t *testing.T) {
	in := []byte("POST / HTTP/1.1\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("b", 1024))
	r := NewRewriter(Requests)
	out := r.Write(in, func(dst []byte, _ *Message) []byte { return append(dst, "X: 1\r\n"...) })
	brk := bytes.Index(in, []byte("\r\n\r\n")) + 2
	s := out.Segments
	if len(s) != 3 || s[0].Data != nil || s[0].Off != 0 || s[0].Len != brk ||
		string(s[1].Data) != "X: 1\r\n" || s[2].Data != nil || s[2].Off != brk || s[2].Len != len(in)-brk {
		t.Fatalf("segments %+v", s)
	}
	if m := r.Sent(out.Len); m != len(in) {
		t.Fatalf("Sent = %d", m)
	}
}

func TestRewriterWriteVSegments(t *testing.T) {
	iov := [][]byte{[]byte("GET / HTTP/1.1\r\nHo"), []byte("st: h\r\n"), nil, []byte("\r\nGET /2 HTTP/1.1\r\n\r\n")}
	r := NewRewriter(Requests)
	out := r.WriteV(iov, nil)
	if !out.Unchanged || len(out.Segments) != 3 {
		t.Fatalf("unchanged %v segments %+v", out.Unchanged, out.Segments)
	}
	for i, s := range out.Segments {
		b := []int{0, 1, 3}[i]
		if s.Buf != b || s.Off != 0 || s.Len != len(iov[b]) {
			t.Fatalf("segment %d: %+v", i, s)
		}
	}
	if m := r.Sent(out.Len); m != out.Len {
		t.Fatalf("Sent = %d", m)
	}
}

func TestRewriterSetOpaque(t *testing.T) {
	r := NewRewriter(Requests)
	add := func(dst []byte, _ *Message) []byte { return append(dst, "X: 1\r\n"...) }
	out := r.Write([]byte("GET / HTTP/1.1\r\n"), add)
	if out.Len != 0 || r.Sent(0) != 16 {
		t.Fatalf("held block: %+v", out)
	}
	r.SetOpaque(ReasonUpgrade)
	in := []byte("Host: h\r\n\r\n")
	out = r.Write(in, add)
	if got := string(out.AppendTo(nil, in)); got != "GET / HTTP/1.1\r\nHost: h\r\n\r\n" {
		t.Fatalf("got %q", got)
	}
	if reason, ok := r.Opaque(); !ok || reason != ReasonUpgrade {
		t.Fatalf("Opaque() = %q %v", reason, ok)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// clip keeps failure messages readable.
func clip(b []byte) []byte {
	if len(b) > 600 {
		return append(b[:600:600], "…"...)
	}
	return b
}
