package httpstream

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// record renders one Event at absolute stream positions, copying what it
// needs from the Message, so that records can be compared across splits.
func record(ev Event, base int) string {
	switch ev.Kind {
	case EventStart:
		return fmt.Sprintf("start@%d", base+ev.Offset)
	case EventHeaders:
		m := ev.Msg
		var b strings.Builder
		fmt.Fprintf(&b, "hdr@%d-%d ", base+ev.Offset, base+ev.End)
		if m.Request {
			fmt.Fprintf(&b, "%s %s 1.%d", m.Method, m.Target, m.Minor)
		} else {
			fmt.Fprintf(&b, "%d %s 1.%d", m.Status, m.Method, m.Minor)
		}
		for _, h := range m.Headers {
			fmt.Fprintf(&b, " [%s=%s]", h.Name, h.Value)
		}
		switch m.Body {
		case BodyNone:
			b.WriteString(" none")
		case BodyLength:
			fmt.Fprintf(&b, " len=%d", m.ContentLength)
		case BodyChunked:
			b.WriteString(" chunked")
		case BodyClose:
			b.WriteString(" close")
		}
		if got := base + ev.End - len(m.Raw); got < 0 {
			b.WriteString(" BADRAW")
		}
		return b.String()
	case EventBody:
		return fmt.Sprintf("body@%d-%d/%d", base+ev.Offset, base+ev.End, ev.Len)
	case EventEnd:
		if ev.Truncated {
			return "end!"
		}
		return fmt.Sprintf("end@%d", base+ev.Offset)
	case EventOpaque:
		return fmt.Sprintf("opaque@%d:%s", base+ev.Offset, ev.Reason)
	}
	return "?"
}

// parseChunks feeds chunks to a new parser and returns the records, with
// adjacent body records merged so that they do not depend on the split.
func parseChunks(kind Kind, methods []string, chunks [][]byte, close bool) []string {
	p := NewParser(kind)
	for _, m := range methods {
		p.ExpectResponse(m)
	}
	var recs []string
	var body [3]int // the last body record: offset, end, length
	base := 0
	add := func(evs []Event) {
		for _, ev := range evs {
			if ev.Kind == EventBody {
				// Merge consecutive body events: how many there are
				// depends on the split.
				a, b, n := base+ev.Offset, base+ev.End, ev.Len
				if k := len(recs); k > 0 && strings.HasPrefix(recs[k-1], "body@") {
					recs = recs[:k-1]
					a, n = body[0], body[2]+n
				}
				body = [3]int{a, b, n}
				recs = append(recs, fmt.Sprintf("body@%d-%d/%d", a, b, n))
				continue
			}
			recs = append(recs, record(ev, base))
		}
	}
	for _, c := range chunks {
		add(p.Feed(c))
		base += len(c)
	}
	if close {
		add(p.Close())
	}
	return recs
}

// splits returns ways to cut s: whole, byte by byte, and a few random cuts.
func splits(s []byte, rng *rand.Rand) map[string][][]byte {
	out := map[string][][]byte{"whole": {s}}
	var ones [][]byte
	for i := range s {
		ones = append(ones, s[i:i+1])
	}
	out["bytes"] = ones
	for k := range 4 {
		out[fmt.Sprintf("random%d", k)] = randomCuts(s, rng)
	}
	return out
}

func randomCuts(s []byte, rng *rand.Rand) [][]byte {
	var cs [][]byte
	for len(s) > 0 {
		n := 1 + rng.IntN(min(len(s), 1+rng.IntN(64)))
		cs = append(cs, s[:n])
		s = s[n:]
	}
	return cs
}

func TestParser(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n" // 27 bytes
	for _, tc := range []struct {
		name    string
		kind    Kind
		methods []string
		in      string
		close   bool
		want    []string
	}{
		{
			name: "get",
			in:   get,
			want: []string{"start@0", "hdr@25-27 GET / 1.1 [Host=a] none", "end@27"},
		},
		{
			name: "post content-length",
			in:   "POST /x?y=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
			want: []string{"start@0", "hdr@41-43 POST /x?y=1 1.1 [Content-Length=5] len=5", "body@43-48/5", "end@48"},
		},
		{
			name: "content-length list of equal values",
			in:   "POST / HTTP/1.1\r\nContent-Length: 2, 2\r\ncontent-length:2\r\n\r\nhi",
			want: []string{"start@0", "hdr@57-59 POST / 1.1 [Content-Length=2, 2] [content-length=2] len=2", "body@59-61/2", "end@61"},
		},
		{
			name: "chunked with extensions and trailers",
			in:   "POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;a=1;b=\"x\"\r\nhello\r\n00A\r\n0123456789\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
			want: []string{"start@0", "hdr@46-48 POST /u 1.1 [Transfer-Encoding=chunked] chunked", "body@61-83/15", "end@106"},
		},
		{
			name: "chunked with bare LF",
			in:   "POST / HTTP/1.1\nTransfer-Encoding: gzip, Chunked\n\n3\nabc\n0\n\n",
			want: []string{"start@0", "hdr@49-50 POST / 1.1 [Transfer-Encoding=gzip, Chunked] chunked", "body@52-55/3", "end@59"},
		},
		{
			name: "pipelined keep-alive",
			in:   get + "PUT /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" + "DELETE /b HTTP/1.0\r\n\r\n",
			want: []string{
				"start@0", "hdr@25-27 GET / 1.1 [Host=a] none", "end@27",
				"start@27", "hdr@63-65 PUT /a 1.1 [Content-Length=3] len=3", "body@65-68/3", "end@68",
				"start@68", "hdr@88-90 DELETE /b 1.0 none", "end@90",
			},
		},
		{
			name: "empty lines between messages",
			in:   "\r\n" + get + "\r\n\n" + get,
			want: []string{"start@2", "hdr@27-29 GET / 1.1 [Host=a] none", "end@29", "start@32", "hdr@57-59 GET / 1.1 [Host=a] none", "end@59"},
		},
		{
			name: "bare LF and whitespace",
			in:   "GET /p HTTP/1.0\nA:  1 \nB:\t\nC:x\n\n",
			want: []string{"start@0", "hdr@31-32 GET /p 1.0 [A=1] [B=] [C=x] none", "end@32"},
		},
		{
			name: "obsolete line folding",
			in:   "GET / HTTP/1.1\r\nX-Long: a\r\n  b\r\n\r\n",
			want: []string{"start@0", "hdr@32-34 GET / 1.1 [X-Long=a\r\n  b] none", "end@34"},
		},
		{
			name: "connect request goes opaque",
			in:   "CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n\x16\x03\x01",
			want: []string{"start@0", "hdr@37-39 CONNECT h:443 1.1 [Host=h:443] none", "end@39", "opaque@39:connect"},
		},
		{
			name: "upgrade request stays http",
			in:   "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
			want: []string{"start@0", "hdr@59-61 GET /ws 1.1 [Upgrade=websocket] [Connection=Upgrade] none", "end@61"},
		},
		{
			name: "tls client hello",
			in:   "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
			want: []string{"opaque@0:tls"},
		},
		{
			name: "http2 preface",
			in:   "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04",
			want: []string{"start@0", "opaque@11:http2"},
		},
		{
			name: "binary",
			in:   "\x00\x00\x00\x08\x04\xd2\x16\x2f",
			want: []string{"opaque@0:not-http"},
		},
		{
			name: "other text protocol",
			in:   "set foo 0 0 5\r\nhello\r\n",
			want: []string{"start@0", "opaque@8:not-http"},
		},
		{
			name: "http/0.9",
			in:   "GET /\r\n",
			want: []string{"start@0", "opaque@5:not-http"},
		},
		{
			name: "garbage after a message",
			in:   get + "hello world\r\n",
			want: []string{"start@0", "hdr@25-27 GET / 1.1 [Host=a] none", "end@27", "start@27", "opaque@38:malformed start line"},
		},
		{
			name: "header without colon",
			in:   "GET / HTTP/1.1\r\nHost a\r\n\r\n",
			want: []string{"start@0", "opaque@23:malformed header"},
		},
		{
			name: "space before colon",
			in:   "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
			want: []string{"start@0", "opaque@25:malformed header"},
		},
		{
			name: "folding without a field",
			in:   "GET / HTTP/1.1\r\n a\r\n\r\n",
			want: []string{"start@0", "opaque@19:malformed header"},
		},
		{
			name: "bad content-length",
			in:   "POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\nhello",
			want: []string{"start@0", "opaque@39:bad content-length"},
		},
		{
			name: "conflicting content-length",
			in:   "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
			want: []string{"start@0", "opaque@57:bad content-length"},
		},
		{
			name: "request transfer-encoding not chunked",
			in:   "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx",
			want: []string{"start@0", "opaque@44:bad transfer-encoding"},
		},
		{
			name: "transfer-encoding wins over content-length",
			in:   "POST / HTTP/1.1\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
			want: []string{"start@0", "hdr@66-68 POST / 1.1 [Content-Length=100] [Transfer-Encoding=chunked] chunked", "body@71-72/1", "end@79"},
		},
		{
			name: "bad chunk size",
			in:   "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
			want: []string{"start@0", "hdr@45-47 POST / 1.1 [Transfer-Encoding=chunked] chunked", "opaque@47:bad chunk"},
		},
		{
			name: "chunk data not followed by a line break",
			in:   "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
			want: []string{"start@0", "hdr@45-47 POST / 1.1 [Transfer-Encoding=chunked] chunked", "body@50-52/2", "opaque@52:bad chunk"},
		},
		{
			name: "chunk size too large",
			in:   "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
			want: []string{"start@0", "hdr@45-47 POST / 1.1 [Transfer-Encoding=chunked] chunked", "opaque@62:bad chunk"},
		},
		{
			name: "chunk line too long",
			in:   "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 5000),
			want: []string{"start@0", "hdr@45-47 POST / 1.1 [Transfer-Encoding=chunked] chunked", "opaque@4143:bad chunk"},
		},
		{
			name: "headers too large",
			in:   "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHeaderBytes) + "\r\n\r\n",
			want: []string{"start@0", fmt.Sprintf("opaque@%d:headers too large", MaxHeaderBytes)},
		},
		{
			name: "request line too large",
			in:   "GET /" + strings.Repeat("a", MaxHeaderBytes) + " HTTP/1.1\r\n\r\n",
			want: []string{"start@0", fmt.Sprintf("opaque@%d:headers too large", MaxHeaderBytes)},
		},
		{
			name: "header block of exactly the limit",
			in:   "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHeaderBytes-23) + "\r\n\r\n",
			want: []string{"start@0", fmt.Sprintf("hdr@%d-%d GET / 1.1 [X=%s] none", MaxHeaderBytes-2, MaxHeaderBytes, strings.Repeat("a", MaxHeaderBytes-23)), fmt.Sprintf("end@%d", MaxHeaderBytes)},
		},
		{
			name:  "truncated request",
			in:    "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
			close: true,
			want:  []string{"start@0", "hdr@37-39 POST / 1.1 [Content-Length=10] len=10", "body@39-42/3", "end!"},
		},
		{
			name:    "response content-length",
			kind:    Responses,
			methods: []string{"GET"},
			in:      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
			want:    []string{"start@0", "hdr@36-38 200 GET 1.1 [Content-Length=2] len=2", "body@38-40/2", "end@40"},
		},
		{
			name:    "responses to HEAD and GET pipelined",
			kind:    Responses,
			methods: []string{"HEAD", "GET"},
			in:      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			want: []string{
				"start@0", "hdr@36-38 200 HEAD 1.1 [Content-Length=5] none", "end@38",
				"start@38", "hdr@74-76 200 GET 1.1 [Content-Length=5] len=5", "body@76-81/5", "end@81",
			},
		},
		{
			name:    "204 and 304 have no body",
			kind:    Responses,
			methods: []string{"DELETE", "GET"},
			in:      "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nHTTP/1.1 304\r\nTransfer-Encoding: chunked\r\n\r\n",
			want: []string{
				"start@0", "hdr@44-46 204 DELETE 1.1 [Content-Length=5] none", "end@46",
				"start@46", "hdr@88-90 304 GET 1.1 [Transfer-Encoding=chunked] none", "end@90",
			},
		},
		{
			name:    "100 continue then the final response",
			kind:    Responses,
			methods: []string{"POST", "HEAD"},
			in:      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
			want: []string{
				"start@0", "hdr@23-25 100  1.1 none", "end@25",
				"start@25", "hdr@63-65 103  1.1 [Link=</a>] none", "end@65",
				"start@65", "hdr@106-108 201 POST 1.1 [Content-Length=1] len=1", "body@108-109/1", "end@109",
			},
		},
		{
			name:    "switching protocols",
			kind:    Responses,
			methods: []string{"GET"},
			in:      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello",
			want:    []string{"start@0", "hdr@54-56 101 GET 1.1 [Upgrade=websocket] none", "end@56", "opaque@56:upgrade"},
		},
		{
			name:    "connect established",
			kind:    Responses,
			methods: []string{"CONNECT"},
			in:      "HTTP/1.1 200 Connection Established\r\n\r\n\x16\x03\x03",
			want:    []string{"start@0", "hdr@37-39 200 CONNECT 1.1 none", "end@39", "opaque@39:connect"},
		},
		{
			name:    "connect refused",
			kind:    Responses,
			methods: []string{"CONNECT"},
			in:      "HTTP/1.1 407 Proxy Auth\r\nContent-Length: 2\r\n\r\nno",
			want:    []string{"start@0", "hdr@44-46 407 CONNECT 1.1 [Content-Length=2] len=2", "body@46-48/2", "end@48"},
		},
		{
			name:  "close-delimited",
			kind:  Responses,
			in:    "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nsome body",
			close: true,
			want:  []string{"start@0", "hdr@28-30 200  1.0 [Server=x] close", "body@30-39/9", "end@39"},
		},
		{
			name: "transfer-encoding not chunked is close-delimited",
			kind: Responses,
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz",
			want: []string{"start@0", "hdr@42-44 200  1.1 [Transfer-Encoding=gzip] close", "body@44-46/2"},
		},
		{
			name: "chunked response",
			kind: Responses,
			in:   "HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n" + "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
			want: []string{
				"start@0", "hdr@47-49 500  1.1 [transfer-encoding=chunked] chunked", "body@52-53/1", "end@60",
				"start@60", "hdr@94-96 200  1.1 [Content-Length=0] len=0", "end@96",
			},
		},
		{
			name: "response status without digits",
			kind: Responses,
			in:   "HTTP/1.1 OK\r\n\r\n",
			want: []string{"start@0", "opaque@9:not-http"},
		},
		{
			name: "response to a TLS client",
			kind: Responses,
			in:   "\x16\x03\x03\x00\x5a\x02",
			want: []string{"opaque@0:tls"},
		},
		{
			name: "response that is a request",
			kind: Responses,
			in:   get,
			want: []string{"opaque@0:not-http"},
		},
		{
			name: "http2 response",
			kind: Responses,
			in:   "HTTP/2 200\r\n\r\n",
			want: []string{"start@0", "opaque@5:http2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.in))))
			for how, chunks := range splits([]byte(tc.in), rng) {
				got := parseChunks(tc.kind, tc.methods, chunks, tc.close)
				if !slices.Equal(got, tc.want) {
					t.Fatalf("%s:\n got  %q\n want %q", how, got, tc.want)
				}
			}
		})
	}
}

// TestParserMessagesOfOneFeed checks that every Message of a Feed stays
// intact until the next Feed, also when one block started in an earlier
// Feed.
func TestParserMessagesOfOneFeed(t *testing.T) {
	p := NewParser(Requests)
	p.Feed([]byte("GET /first HTTP/1.1\r\nX-A: "))
	evs := p.Feed([]byte("1\r\n\r\nGET /second HTTP/1.1\r\nX-B: 2\r\n\r\nGET /third HTTP/1.1\r\nX-C: 3\r\n\r\nGET /fo"))
	var got []string
	for _, ev := range evs {
		if ev.Kind == EventHeaders {
			got = append(got, fmt.Sprintf("%s %s %s=%s", ev.Msg.Raw[:3], ev.Msg.Target, ev.Msg.Headers[0].Name, ev.Msg.Headers[0].Value))
		}
	}
	want := []string{"GET /first X-A=1", "GET /second X-B=2", "GET /third X-C=3"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	evs = p.Feed([]byte("urth HTTP/1.1\r\n\r\n"))
	if len(evs) != 2 || evs[0].Kind != EventHeaders || string(evs[0].Msg.Raw) != "GET /fourth HTTP/1.1\r\n\r\n" {
		t.Fatalf("fourth: %+v", evs)
	}
}

func TestParserSetOpaque(t *testing.T) {
	p := NewParser(Requests)
	p.Feed([]byte("GET / HTTP/1.1\r\n"))
	p.SetOpaque(ReasonUpgrade)
	evs := p.Feed([]byte("\r\n"))
	if len(evs) != 1 || evs[0].Kind != EventOpaque || evs[0].Reason != ReasonUpgrade {
		t.Fatalf("got %+v", evs)
	}
	if r, ok := p.Opaque(); !ok || r != ReasonUpgrade {
		t.Fatalf("Opaque() = %q, %v", r, ok)
	}
	if evs := p.Feed([]byte("GET / HTTP/1.1\r\n\r\n")); len(evs) != 0 {
		t.Fatalf("opaque parser reported %+v", evs)
	}
}

func TestParserPipelineTooDeep(t *testing.T) {
	p := NewParser(Responses)
	for range MaxPipeline + 1 {
		p.ExpectResponse("GET")
	}
	evs := p.Feed([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	if len(evs) != 1 || evs[0].Reason != ReasonPipelineTooDeep {
		t.Fatalf("got %+v", evs)
	}
}

// TestParserMethodQueue checks that a long-lived keep-alive connection
// matches responses to requests in order while the queue is compacted.
func TestParserMethodQueue(t *testing.T) {
	p := NewParser(Responses)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n")
	var queue []string
	for i := range 5000 {
		m := "GET"
		if i%3 == 0 {
			m = "HEAD"
		}
		p.ExpectResponse(m)
		queue = append(queue, m)
		if i%2 == 1 {
			continue // keep a backlog of two every other round
		}
		for _, want := range queue {
			evs := p.Feed(resp)
			if len(evs) < 2 || evs[1].Kind != EventHeaders {
				t.Fatalf("round %d: %+v", i, evs)
			}
			method, body := evs[1].Msg.Method, evs[1].Msg.Body
			if method != want || (method == "HEAD") != (body == BodyNone) {
				t.Fatalf("round %d: method %s (want %s) body %v", i, method, want, body)
			}
			if body != BodyNone {
				p.Feed([]byte("x"))
			}
		}
		queue = queue[:0]
	}
}

func TestHeadersGet(t *testing.T) {
	h := Headers{{Name: []byte("Content-Type"), Value: []byte("a")}, {Name: []byte("content-type"), Value: []byte("b")}}
	if got := string(h.Get("CONTENT-TYPE")); got != "a" {
		t.Fatalf("Get = %q", got)
	}
	if h.Has("content-length") || !h.Has("Content-type") {
		t.Fatal("Has")
	}
}

// TestParserTinyChunks checks that a body of many tiny chunks gives one body
// event per Feed, not one per chunk.
func TestParserTinyChunks(t *testing.T) {
	var b strings.Builder
	b.WriteString("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 10000 {
		b.WriteString("1\r\nx\r\n")
	}
	b.WriteString("0\r\n\r\n")
	evs := NewParser(Requests).Feed([]byte(b.String()))
	if len(evs) != 4 || evs[2].Kind != EventBody || evs[2].Len != 10000 {
		t.Fatalf("%d events, body %+v", len(evs), evs[min(2, len(evs)-1)])
	}
}
