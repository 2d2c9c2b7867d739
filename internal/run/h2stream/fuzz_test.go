package h2stream

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// FuzzPassThrough: whatever bytes an application writes (a valid HTTP/2
// stream, garbage, or a valid one cut anywhere), in whatever writes and
// partial sends, a Rewriter whose inject adds nothing sends exactly them, in
// order (but for an unfinished header block at the very end, which waits for
// the next write), and the Parser neither panics nor loops.
func FuzzPassThrough(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, o := range []genOpts{{client: true, streams: 3}, {streams: 3, padding: true}, {client: true, streams: 2, continuing: true, bigValues: true}} {
		s, _ := genStream(rng, o)
		f.Add(s, o.client, uint64(1))
	}
	f.Add([]byte(Preface+"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00"), true, uint64(2))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), false, uint64(3))
	f.Fuzz(func(t *testing.T, stream []byte, client bool, seed uint64) {
		p := NewParser(client)
		r := httpstream.NewRewriterFor(p)
		none := func(dst []byte, _ *httpstream.Message) []byte { return dst }
		wire := simulateWrites(t, r, stream, rand.New(rand.NewPCG(seed, 9)), none, 1+int(seed%5000))
		// What the Rewriter still holds at the end (an unfinished frame
		// header or header block: the application has more to write,
		// and the held bytes go out with its next write) is the only
		// difference.
		if !bytes.HasPrefix(stream, wire) {
			t.Fatalf("wire (%d bytes) is not the start of the application's %d bytes", len(wire), len(stream))
		}
		if held := len(stream) - len(wire); held > MaxBlockBytes+9 {
			t.Fatalf("%d bytes held at the end", held)
		}
		_ = p.Events()
	})
}

// FuzzRewriter: streams written by x/net's Framer and HPACK encoder, shaped
// by the fuzzer (table size, CONTINUATION, padding, large values, the
// application's own context, the peer's frame size, the write cuts), read
// back by a strict x/net peer from the Rewriter's output: the application's
// frames with exactly the added fields at the end of each block
// (checkRewrite).
func FuzzRewriter(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint32(64), false)
	f.Add(uint64(2), uint8(0xff), uint32(1), true)
	f.Add(uint64(3), uint8(0x0c), uint32(0), false)
	f.Fuzz(func(t *testing.T, seed uint64, shape uint8, table uint32, bigFrames bool) {
		o := genOpts{client: shape&1 != 0, streams: 1 + int(shape>>4), tableSize: table % 4097,
			continuing: shape&2 != 0, padding: shape&4 != 0, bigValues: shape&8 != 0}
		o.ownContext = o.client && seed%3 == 0
		maxFrame := uint32(16384)
		if bigFrames {
			maxFrame = 1 << 20
		}
		checkRewrite(t, o, maxFrame, seed)
	})
}

// FuzzUpgrade: a connection upgraded to h2c, whatever follows the 101 (a
// valid HTTP/2 stream, garbage, a cut one) and whatever the writes: a server's
// writes (the 101 then the bytes) or a client's (the upgrade request, the
// switch, then the bytes) go out exactly as written through an Upgradable
// whose inject adds nothing, but for an unfinished block held at the end.
func FuzzUpgrade(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, o := range []genOpts{{streams: 3}, {client: true, streams: 3, continuing: true}} {
		s, _ := genStream(rng, o)
		f.Add(s, o.client, uint64(1))
	}
	f.Add([]byte("\x00\x00\x00\x04\x00\x00\x00\x00\x00garbage"), false, uint64(2))
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"), false, uint64(3))
	f.Fuzz(func(t *testing.T, tail []byte, client bool, seed uint64) {
		kind, head := httpstream.Responses, switching
		if client {
			kind, head = httpstream.Requests, upgradeRequest
		}
		u := NewUpgradable(kind)
		u.ExpectResponse("GET")
		r := httpstream.NewRewriterFor(u)
		none := func(dst []byte, _ *httpstream.Message) []byte { return dst }
		rng := rand.New(rand.NewPCG(seed, 9))
		stream := append([]byte(head), tail...)
		var wire []byte
		if client {
			wire = simulateWrites(t, r, []byte(head), rng, none, 1+int(seed%50))
			if u.Switch() == nil {
				t.Fatal("no switch after a complete upgrade request")
			}
			wire = append(wire, simulateWrites(t, r, tail, rng, none, 1+int(seed%5000))...)
		} else {
			wire = simulateWrites(t, r, stream, rng, none, 1+int(seed%5000))
			if u.H2() == nil {
				t.Fatal("no switch after a 101 to h2c")
			}
		}
		if !bytes.HasPrefix(stream, wire) {
			t.Fatalf("wire (%d bytes) is not the start of the application's %d bytes", len(wire), len(stream))
		}
		if held := len(stream) - len(wire); held > MaxBlockBytes+9 {
			t.Fatalf("%d bytes held at the end", held)
		}
		_ = u.H2().Events()
	})
}
