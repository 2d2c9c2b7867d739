package httpstream

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// genMsg is one generated message and what an independent oracle knows
// about it.
type genMsg struct {
	method string // request method, or the method the response answers
	target string
	status int
	body   []byte // decoded body
	brk    int    // stream offset of the final line break of the header block
}

// genStream is a generated HTTP/1.x stream.
type genStream struct {
	data []byte
	msgs []genMsg
}

// genOpts says which liberties the generator may take.
type genOpts struct {
	bareLF       bool // some header lines end in a bare LF
	bareLFChunks bool // and some chunk framing lines (Go's net/http refuses those)
	emptyLines   bool // empty lines between requests
	closeBody    bool // a close-delimited last response
	maxBody      int
	maxMsgs      int
	traceHeaders bool // some requests carry their own traceparent
}

var genMethods = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PROPFIND"}

// tricky bytes that a parser confusing body and headers would trip on.
var genTraps = []string{"\r\n\r\n", "\n\n", "HTTP/1.1 200 OK\r\n", "GET / HTTP/1.1\r\n", "0\r\n\r\n", "\x16\x03\x01"}

func genBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		if rng.IntN(20) == 0 {
			b = append(b, genTraps[rng.IntN(len(genTraps))]...)
			continue
		}
		b = append(b, byte(rng.UintN(256)))
	}
	return b[:n]
}

func genToken(rng *rand.Rand, n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return string(b)
}

func genValue(rng *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789 ;=,/:\"()"
	b := make([]byte, rng.IntN(60))
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return strings.Trim(string(b), " ")
}

// genEOL returns a line end; a generated message uses bare LFs only when
// bareLF is set, and then for about a third of its lines.
func genEOL(rng *rand.Rand, o genOpts) string {
	if o.bareLF && rng.IntN(3) == 0 {
		return "\n"
	}
	return "\r\n"
}

// genBody appends framing headers and returns the body's wire form and
// decoded form. chunked is only used on HTTP/1.1.
func genBody(rng *rand.Rand, o genOpts, hdr *strings.Builder, allowChunked bool, eol func() string) (wire, body []byte, chunked bool) {
	ceol := func() string { return "\r\n" }
	if o.bareLFChunks {
		ceol = eol
	}
	switch k := rng.IntN(3); {
	case k == 0:
		return nil, nil, false
	case k == 1 || !allowChunked:
		body = genBytes(rng, rng.IntN(o.maxBody+1))
		fmt.Fprintf(hdr, "Content-Length: %d%s", len(body), eol())
		return body, body, false
	}
	hdr.WriteString("Transfer-Encoding: chunked" + eol())
	var w []byte
	for range rng.IntN(5) {
		c := genBytes(rng, 1+rng.IntN(max(1, o.maxBody/3)))
		size := fmt.Sprintf("%x", len(c))
		if rng.IntN(4) == 0 {
			size = strings.ToUpper(size)
		}
		if rng.IntN(4) == 0 {
			size = "00" + size
		}
		w = append(w, size...)
		if rng.IntN(4) == 0 {
			w = append(w, ";ext="+genToken(rng, 3)...)
		}
		w = append(w, ceol()...)
		w = append(w, c...)
		w = append(w, ceol()...)
		body = append(body, c...)
	}
	w = append(w, '0')
	w = append(w, ceol()...)
	for range rng.IntN(3) {
		w = append(w, "X-Trailer-"+genToken(rng, 3)+": "+genValue(rng)+ceol()...)
	}
	w = append(w, ceol()...)
	return w, body, true
}

// genRequests returns a random keep-alive request stream.
func genRequests(rng *rand.Rand, o genOpts) genStream {
	var s genStream
	eol := func() string { return genEOL(rng, o) }
	for range 1 + rng.IntN(o.maxMsgs) {
		if o.emptyLines && rng.IntN(5) == 0 {
			s.data = append(s.data, "\r\n"...)
		}
		var hdr strings.Builder
		m := genMsg{method: genMethods[rng.IntN(len(genMethods))], target: "/" + genToken(rng, rng.IntN(30))}
		if rng.IntN(3) == 0 {
			m.target += "?q=" + genToken(rng, 8) + "&x=%20"
		}
		minor := 1
		if rng.IntN(6) == 0 {
			minor = 0
		}
		fmt.Fprintf(&hdr, "%s %s HTTP/1.%d%s", m.method, m.target, minor, eol())
		for range rng.IntN(12) {
			fmt.Fprintf(&hdr, "X-%s:%s%s%s", genToken(rng, 1+rng.IntN(12)), strings.Repeat(" ", rng.IntN(2)), genValue(rng), eol())
		}
		if o.traceHeaders && rng.IntN(4) == 0 {
			hdr.WriteString("traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + eol())
		}
		wire, body, _ := genBody(rng, o, &hdr, minor == 1, eol)
		s.data = append(s.data, hdr.String()...)
		m.brk = len(s.data)
		m.body = body
		s.data = append(s.data, eol()...)
		s.data = append(s.data, wire...)
		s.msgs = append(s.msgs, m)
	}
	return s
}

// genResponses returns a random response stream and the methods of the
// requests it answers, in order.
func genResponses(rng *rand.Rand, o genOpts) (genStream, []string) {
	var s genStream
	var methods []string
	eol := func() string { return genEOL(rng, o) }
	n := 1 + rng.IntN(o.maxMsgs)
	for i := range n {
		method := genMethods[rng.IntN(len(genMethods))]
		methods = append(methods, method)
		if rng.IntN(6) == 0 { // an interim response first
			var hdr strings.Builder
			fmt.Fprintf(&hdr, "HTTP/1.1 100 Continue%s", eol())
			s.data = append(s.data, hdr.String()...)
			s.msgs = append(s.msgs, genMsg{status: 100, brk: len(s.data)})
			s.data = append(s.data, eol()...)
		}
		statuses := []int{200, 201, 204, 301, 304, 404, 500}
		m := genMsg{method: method, status: statuses[rng.IntN(len(statuses))]}
		var hdr strings.Builder
		fmt.Fprintf(&hdr, "HTTP/1.1 %d %s%s", m.status, genToken(rng, rng.IntN(10)), eol())
		for range rng.IntN(10) {
			fmt.Fprintf(&hdr, "X-%s: %s%s", genToken(rng, 1+rng.IntN(12)), genValue(rng), eol())
		}
		noBody := method == "HEAD" || m.status == 204 || m.status == 304
		var wire, body []byte
		if o.closeBody && i == n-1 && !noBody && rng.IntN(2) == 0 {
			wire = genBytes(rng, rng.IntN(o.maxBody+1))
			body = wire
		} else {
			var chunked bool
			wire, body, chunked = genBody(rng, o, &hdr, true, eol)
			if wire == nil && !noBody {
				hdr.WriteString("Content-Length: 0" + eol())
			}
			if noBody {
				wire, body = nil, nil
				_ = chunked // the framing header stays: it must be ignored
			}
		}
		s.data = append(s.data, hdr.String()...)
		m.brk = len(s.data)
		m.body = body
		s.data = append(s.data, eol()...)
		s.data = append(s.data, wire...)
		s.msgs = append(s.msgs, m)
	}
	return s, methods
}

// expectInserted returns data with lines[i] inserted at brks[i].
func expectInserted(data []byte, brks []int, lines func(i int) string) []byte {
	var out []byte
	prev := 0
	for i, b := range brks {
		out = append(out, data[prev:b]...)
		out = append(out, lines(i)...)
		prev = b
	}
	return append(out, data[prev:]...)
}
