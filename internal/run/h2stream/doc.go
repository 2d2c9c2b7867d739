// Package h2stream is the HTTP/2 side of `rootline run`'s byte-stream logic
// (internal/run/httpstream is the HTTP/1.x side): it follows one direction of
// a cleartext HTTP/2 connection (h2c, and gRPC over it) as the service reads
// or writes it, and rewrites the header blocks the service writes so that
// they carry the trace context (requests) or the wait model's fields
// (responses), without touching anything else.
//
// The frame layer and HPACK are golang.org/x/net/http2 and .../hpack: frames
// are split here (the 9-byte header says how long each is) and handed whole
// to an http2.Framer, header blocks to an hpack.Decoder that keeps the
// direction's dynamic table. DATA payloads are counted, never copied.
//
// Adding fields without disturbing the peer's HPACK state: the added fields
// are literal header fields without indexing with a literal name (RFC 7541
// §6.2.2), appended to the end of the header block, so the peer's dynamic
// table, and the application's encoder that mirrors it, are the same as
// without them. The last frame of the block (HEADERS or CONTINUATION, the one
// with END_HEADERS) grows by their length; when it would then exceed the
// peer's SETTINGS_MAX_FRAME_SIZE, END_HEADERS moves to a CONTINUATION frame
// that carries them. A block whose fields would then exceed the peer's
// SETTINGS_MAX_HEADER_LIST_SIZE, or whose name list already has the field, is
// left as it is. HEADERS are not flow-controlled: no window changes.
//
// Parser implements httpstream.Framing, so that httpstream.Rewriter holds a
// header block that is split across writes, maps partial writes back to the
// application's bytes and sends every other byte as it is: see
// NewRewriter. Upgradable is the Framing of an HTTP/1.x connection that may
// become HTTP/2 by "Upgrade: h2c" (RFC 7540 §3.2): the HTTP/1.x Parser until
// the 101, this package's Parser from the byte after it.
package h2stream
