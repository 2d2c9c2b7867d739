package httpstream

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// FuzzRewriterSplits checks, on any byte stream, that the Parser finds the
// same things however the stream is cut, and that the Rewriter's wire output
// under random writes, iovecs and partial sends is the stream with exactly
// one line inserted at each header block's final line break as a one-shot
// parse finds it (the bytes of a header block left unfinished at the end of
// the stream stay held). Nothing may panic.
func FuzzRewriterSplits(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 9))
	o := genOpts{bareLF: true, bareLFChunks: true, emptyLines: true, closeBody: true, maxBody: 300, maxMsgs: 4, traceHeaders: true}
	for i := range 8 {
		f.Add(genRequests(rng, o).data, uint64(i), false)
		s, _ := genResponses(rng, o)
		f.Add(s.data, uint64(i), true)
	}
	for i, s := range []string{
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00",
		"GET / HTTP/1.1\r\n\r\n\x00\x01garbage",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\r",
		"CONNECT a:1 HTTP/1.1\r\n\r\n\x16\x03",
	} {
		f.Add([]byte(s), uint64(i), false)
	}
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 101 Switching\r\n\r\n\x81\x00"), uint64(3), true)

	f.Fuzz(checkSplits)
}

func checkSplits(t *testing.T, stream []byte, seed uint64, responses bool) {
	kind := Requests
	var methods []string
	if responses {
		kind = Responses
		choices := []string{"GET", "HEAD", "POST", "GET", "CONNECT", "DELETE", "HEAD", "GET"}
		for i := range 16 {
			methods = append(methods, choices[(seed>>(3*i))&7])
		}
	}

	// The reference: the whole stream in one Feed.
	ref := NewParser(kind)
	for _, m := range methods {
		ref.ExpectResponse(m)
	}
	var brks []int
	held := -1
	for _, ev := range ref.Feed(stream) {
		switch ev.Kind {
		case EventStart:
			held = ev.Offset
		case EventHeaders:
			if ev.Offset < 0 || ev.Offset >= ev.End || ev.End > len(stream) {
				t.Fatalf("headers event %+v in a stream of %d", ev, len(stream))
			}
			brks = append(brks, ev.Offset)
			held = -1
		case EventOpaque:
			held = -1
		}
	}
	expected := expectInserted(stream, brks, numberedLine)
	if held >= 0 {
		expected = expected[:len(expected)-(len(stream)-held)]
	}

	rng := rand.New(rand.NewPCG(seed, uint64(len(stream))))
	whole := parseRecs(kind, methods, [][]byte{stream})
	if cut := parseRecs(kind, methods, randomCuts(stream, rng)); !slices.Equal(whole, cut) {
		t.Fatalf("parser depends on the split:\n whole %+v\n cut   %+v", whole, cut)
	}

	r := NewRewriter(kind)
	for _, m := range methods {
		r.ExpectResponse(m)
	}
	var c numbered
	so := simOpts{maxWrite: 1 + int(seed%97), partial: seed&(1<<60) == 0, iov: seed&(1<<61) == 0}
	if got := simulate(t, r, stream, rng, c.inject, so); !bytes.Equal(got, expected) {
		t.Fatalf("%+v: wire differs at byte %d\n got  %q\n want %q", so, firstDiff(got, expected), clip(got), clip(expected))
	}
	if c.n != len(brks) {
		t.Fatalf("inject called %d times for %d header blocks", c.n, len(brks))
	}
}

// rec is a cheap, comparable form of an Event at stream positions.
type rec struct {
	kind     EventKind
	off, end int
	reason   Reason
	trunc    bool
	raw      string // the header block, for EventHeaders
	body     BodyKind
	length   int64
	method   string
}

// parseRecs is parseChunks for the fuzzer: no formatting, and Close at the
// end.
func parseRecs(kind Kind, methods []string, chunks [][]byte) []rec {
	p := NewParser(kind)
	for _, m := range methods {
		p.ExpectResponse(m)
	}
	var recs []rec
	base := 0
	add := func(evs []Event) {
		for _, ev := range evs {
			r := rec{kind: ev.Kind, off: base + ev.Offset, end: base + ev.End, reason: ev.Reason, trunc: ev.Truncated, length: int64(ev.Len)}
			if n := len(recs); ev.Kind == EventBody && n > 0 && recs[n-1].kind == EventBody {
				recs[n-1].end = r.end
				recs[n-1].length += r.length
				continue
			}
			if m := ev.Msg; m != nil {
				r.raw, r.body, r.length, r.method = string(m.Raw), m.Body, m.ContentLength, m.Method
			}
			recs = append(recs, r)
		}
	}
	for _, c := range chunks {
		add(p.Feed(c))
		base += len(c)
	}
	add(p.Close())
	return recs
}
