package h2stream

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"

	"golang.org/x/net/http2"

	"github.com/rootline/rootline/internal/run/httpstream"
)

// Upgradable is the Framing of what one side of an HTTP/1.x connection
// writes, for an httpstream.Rewriter, that follows the connection into
// HTTP/2 when it is upgraded (RFC 7540 §3.2, "Upgrade: h2c"):
//
//   - a server's direction (Responses) switches by itself right after a
//     "101 Switching Protocols" response whose Upgrade is h2c: the bytes
//     that follow it, in the same write or later, are the server's HTTP/2
//     frames (SETTINGS first);
//   - a client's direction (Requests) switches when told (Switch), once the
//     client read that 101: its next bytes are the connection preface.
//
// Until then it is the HTTP/1.x Parser; a 101 to another protocol makes the
// stream opaque as before. OnSwitch, if set, is called with the HTTP/2
// Parser as the switch happens (inside Feed for a server, so before the
// Rewriter handles any HTTP/2 event).
type Upgradable struct {
	h1   *httpstream.Parser
	h2   *Parser
	kind httpstream.Kind
	// up: the HTTP/1.x message just parsed was a 101 to h2c.
	up  bool
	evs []httpstream.Event

	OnSwitch func(*Parser)
}

// NewUpgradable returns the Framing of a server's (Responses) or a client's
// (Requests) writes.
func NewUpgradable(kind httpstream.Kind) *Upgradable {
	return &Upgradable{h1: httpstream.NewParser(kind), kind: kind}
}

// H2 returns the HTTP/2 Parser once the stream switched, else nil.
func (u *Upgradable) H2() *Parser { return u.h2 }

// Switch makes the stream HTTP/2 from the next byte fed on and returns its
// Parser: for a client's direction, once the server's 101 to h2c was read.
// An opaque stream stays opaque (nil).
func (u *Upgradable) Switch() *Parser {
	if u.h2 != nil {
		return u.h2
	}
	if _, opaque := u.h1.Opaque(); opaque {
		return nil
	}
	return u.start()
}

func (u *Upgradable) start() *Parser {
	u.h2 = NewParser(u.kind == httpstream.Requests)
	if u.OnSwitch != nil {
		u.OnSwitch(u.h2)
	}
	return u.h2
}

// Feed implements httpstream.Framing.
func (u *Upgradable) Feed(data []byte) []httpstream.Event {
	if u.h2 != nil {
		return u.h2.Feed(data)
	}
	evs := u.h1.Feed(data)
	if u.kind != httpstream.Responses {
		return evs
	}
	for i, ev := range evs {
		switch {
		case ev.Kind == httpstream.EventHeaders && ev.Msg != nil:
			u.up = ev.Msg.Status == 101 && IsH2cUpgrade(ev.Msg.Headers.Get("upgrade"))
		case ev.Kind == httpstream.EventOpaque && ev.Reason == httpstream.ReasonUpgrade && u.up:
			// The HTTP/1.x part ends here: what follows in this chunk is
			// the start of HTTP/2, at offsets shifted by the 101's end.
			u.evs = append(u.evs[:0], evs[:i]...)
			h2 := u.start()
			off := ev.Offset
			for _, e := range h2.Feed(data[off:]) {
				if e.Offset >= 0 {
					e.Offset += off
				}
				e.End += off
				u.evs = append(u.evs, e)
			}
			return u.evs
		}
	}
	return evs
}

// SetOpaque implements httpstream.Framing.
func (u *Upgradable) SetOpaque(reason httpstream.Reason) {
	if u.h2 != nil {
		u.h2.SetOpaque(reason)
		return
	}
	u.h1.SetOpaque(reason)
}

// Opaque implements httpstream.Framing.
func (u *Upgradable) Opaque() (httpstream.Reason, bool) {
	if u.h2 != nil {
		return u.h2.Opaque()
	}
	return u.h1.Opaque()
}

// ExpectResponse implements httpstream.Framing.
func (u *Upgradable) ExpectResponse(method string) {
	if u.h2 == nil {
		u.h1.ExpectResponse(method)
	}
}

// Rebuilds reports whether m is an HTTP/2 header block, which Rebuild
// makes; lines are inserted into an HTTP/1.x head as usual.
func (u *Upgradable) Rebuilds(m *httpstream.Message) bool {
	_, ok := m.Ext.(*Block)
	return ok && u.h2 != nil
}

// Rebuild implements httpstream.Rebuilder for the HTTP/2 blocks.
func (u *Upgradable) Rebuild(m *httpstream.Message, block, lines []byte) []byte {
	if !u.Rebuilds(m) {
		return nil
	}
	return u.h2.Rebuild(m, block, lines)
}

// IsH2cUpgrade reports whether an Upgrade header's value names HTTP/2 in
// cleartext ("h2c", perhaps among other protocols in a request's list).
func IsH2cUpgrade(v []byte) bool {
	for _, p := range strings.Split(string(v), ",") {
		if strings.EqualFold(strings.TrimSpace(p), "h2c") {
			return true
		}
	}
	return false
}

// ErrSettingsHeader: an HTTP2-Settings value that is not a base64url SETTINGS
// payload.
var ErrSettingsHeader = errors.New("h2stream: malformed HTTP2-Settings")

// ParseSettingsHeader reads the HTTP2-Settings field of an upgrade request
// (RFC 7540 §3.2.1: a SETTINGS frame's payload in base64url without
// padding): the client's settings, which apply to what the server writes
// from its first frame on.
func ParseSettingsHeader(v []byte) (Settings, error) {
	var s Settings
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(strings.TrimSpace(string(v)), "="))
	if err != nil || len(b)%6 != 0 || len(b) > 6*64 {
		return s, ErrSettingsHeader
	}
	for ; len(b) > 0; b = b[6:] {
		val := binary.BigEndian.Uint32(b[2:6])
		switch http2.SettingID(binary.BigEndian.Uint16(b[:2])) {
		case http2.SettingHeaderTableSize:
			s.HeaderTableSize, s.HasTableSize = val, true
		case http2.SettingMaxFrameSize:
			s.MaxFrameSize = val
		case http2.SettingMaxHeaderListSize:
			s.MaxHeaderListSize = val
		}
	}
	return s, nil
}
