package h2stream

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/http2"

	"github.com/rootline/rootline/internal/run/httpstream"
)

const (
	upgradeRequest = "GET /hello HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade, HTTP2-Settings\r\n" +
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"
	switching = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
)

// upInjector adds a line to HTTP/1.x heads and tpInjector's fields to
// HTTP/2 blocks.
type upInjector struct {
	tp tpInjector
	h1 int
}

func (c *upInjector) inject(dst []byte, m *httpstream.Message) []byte {
	if _, ok := m.Ext.(*Block); ok {
		return c.tp.inject(dst, m)
	}
	c.h1++
	return append(dst, "x-added: 1\r\n"...)
}

// withLine returns an HTTP/1.x head with "x-added: 1" before its final line
// break.
func withLine(head string) string {
	return head[:len(head)-2] + "x-added: 1\r\n\r\n"
}

// TestUpgradeServer: a server's writes are a 101 to h2c and then its HTTP/2
// frames (SETTINGS first, stream 1 answering the upgraded request), in any
// cuts: the 101 gets its line as an HTTP/1.x head, every HTTP/2 block its
// fields as HPACK literals, the switch happens once, at the 101's end, and
// a strict peer reads the frames.
func TestUpgradeServer(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		h2, blocks := genStream(rng, genOpts{streams: 12})
		stream := append([]byte(switching), h2...)
		want := readAsPeer(t, h2, false, 1<<24-1)
		u := NewUpgradable(httpstream.Responses)
		switches := 0
		u.OnSwitch = func(p *Parser) {
			if p.client {
				t.Fatal("a server's direction switched to a client's parser")
			}
			switches++
		}
		u.ExpectResponse("GET")
		r := httpstream.NewRewriterFor(u)
		var c upInjector
		wire := simulateWrites(t, r, stream, rng, c.inject, 1+int(seed*131%300))
		if reason, op := u.Opaque(); op {
			t.Fatalf("seed %d: went opaque: %s", seed, reason)
		}
		head := withLine(switching)
		if !bytes.HasPrefix(wire, []byte(head)) || switches != 1 || c.h1 != 1 || u.H2() == nil {
			t.Fatalf("seed %d: switches %d, HTTP/1.x heads %d; wire starts %q", seed, switches, c.h1, clip(wire))
		}
		got := readAsPeer(t, wire[len(head):], false, 16384)
		if added := comparePeer(t, seed, got, want, blocks, false); added != c.tp.n || added != len(blocks) {
			t.Fatalf("seed %d: %d blocks got fields, %d injected, %d blocks", seed, added, c.tp.n, len(blocks))
		}
		// Stream 1's response is an event of the HTTP/2 side.
		var first uint32
		for _, ev := range u.H2().Events() {
			if ev.Kind == EvHeaders && first == 0 {
				first = ev.Stream
			}
		}
		if first != 1 {
			t.Fatalf("seed %d: first response block on stream %d, want 1", seed, first)
		}
	}
}

// TestUpgradeOther: a 101 to another protocol (WebSocket) and a 101 to h2c
// on a client's direction (which switches only when told) pass the rest
// through untouched, with no switch.
func TestUpgradeOther(t *testing.T) {
	frames := []byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}
	ws := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	u := NewUpgradable(httpstream.Responses)
	u.OnSwitch = func(*Parser) { t.Fatal("switched on a WebSocket upgrade") }
	u.ExpectResponse("GET")
	r := httpstream.NewRewriterFor(u)
	var c upInjector
	in := append([]byte(ws), frames...)
	out := r.Write(in, c.inject)
	wire := out.AppendTo(nil, in)
	r.Sent(len(wire))
	if string(wire) != withLine(ws)+string(frames) || u.H2() != nil {
		t.Fatalf("wire %q", wire)
	}
	if reason, op := u.Opaque(); !op || reason != httpstream.ReasonUpgrade {
		t.Fatalf("opaque %v %q, want the upgrade's", op, reason)
	}
	if IsH2cUpgrade([]byte("websocket")) || !IsH2cUpgrade([]byte("foo, H2C")) {
		t.Fatal("IsH2cUpgrade")
	}
}

// TestUpgradeClient: a client's writes are the upgrade request (an HTTP/1.x
// head: lines inserted), then, once told the server switched, its
// connection preface and HTTP/2 frames: fields added as HPACK literals.
func TestUpgradeClient(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 13))
		u := NewUpgradable(httpstream.Requests)
		r := httpstream.NewRewriterFor(u)
		var c upInjector
		wire := simulateWrites(t, r, []byte(upgradeRequest), rng, c.inject, 1+int(seed*7%60))
		if string(wire) != withLine(upgradeRequest) || u.H2() != nil {
			t.Fatalf("seed %d: request %q", seed, wire)
		}
		p := u.Switch()
		if p == nil || !p.client || u.Switch() != p {
			t.Fatalf("seed %d: Switch gave %v", seed, p)
		}
		h2, blocks := genStream(rng, genOpts{client: true, streams: 10, ownContext: true})
		want := readAsPeer(t, h2, true, 1<<24-1)
		wire = simulateWrites(t, r, h2, rng, c.inject, 1+int(seed*977%5000))
		got := readAsPeer(t, wire, true, 16384)
		if added := comparePeer(t, seed, got, want, blocks, true); added != c.tp.n {
			t.Fatalf("seed %d: %d blocks got fields, %d injected", seed, added, c.tp.n)
		}
	}
}

// TestParseSettingsHeader: the HTTP2-Settings value of an upgrade request.
func TestParseSettingsHeader(t *testing.T) {
	var payload []byte
	for _, s := range []http2.Setting{{ID: http2.SettingHeaderTableSize, Val: 64},
		{ID: http2.SettingMaxFrameSize, Val: 1 << 20}, {ID: http2.SettingMaxHeaderListSize, Val: 9000},
		{ID: http2.SettingEnablePush, Val: 0}} {
		payload = append(payload, byte(s.ID>>8), byte(s.ID), byte(s.Val>>24), byte(s.Val>>16), byte(s.Val>>8), byte(s.Val))
	}
	s, err := ParseSettingsHeader([]byte(base64.RawURLEncoding.EncodeToString(payload)))
	if err != nil || s != (Settings{HeaderTableSize: 64, HasTableSize: true, MaxFrameSize: 1 << 20, MaxHeaderListSize: 9000}) {
		t.Fatalf("%+v %v", s, err)
	}
	if s, err := ParseSettingsHeader([]byte("")); err != nil || s != (Settings{}) {
		t.Fatalf("empty: %+v %v", s, err)
	}
	for _, bad := range []string{"!!", "AAMAAAB", base64.RawURLEncoding.EncodeToString(make([]byte, 6*65))} {
		if _, err := ParseSettingsHeader([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
