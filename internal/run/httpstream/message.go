package httpstream

// Kind says which side of HTTP/1.x a byte stream carries.
type Kind uint8

const (
	// Requests is the client-to-server direction.
	Requests Kind = iota
	// Responses is the server-to-client direction.
	Responses
)

// String returns "requests" or "responses".
func (k Kind) String() string {
	if k == Responses {
		return "responses"
	}
	return "requests"
}

// Header is one header field. Name and Value point into memory the Parser
// owns; Value has its surrounding whitespace removed. A value continued on
// following lines (obsolete line folding) keeps the folding bytes.
type Header struct {
	Name  []byte
	Value []byte
}

// Headers is a header list in wire order.
type Headers []Header

// Get returns the value of the first field named name (ASCII
// case-insensitive), or nil.
func (h Headers) Get(name string) []byte {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return h[i].Value
		}
	}
	return nil
}

// Has reports whether a field named name (ASCII case-insensitive) is present.
func (h Headers) Has(name string) bool {
	for i := range h {
		if equalFold(h[i].Name, name) {
			return true
		}
	}
	return false
}

// BodyKind is how a message's body is delimited (RFC 9112 §6.3).
type BodyKind uint8

const (
	// BodyNone: the message ends with its header block (requests without a
	// length, 1xx/204/304 responses and responses to HEAD).
	BodyNone BodyKind = iota
	// BodyLength: Content-Length bytes follow.
	BodyLength
	// BodyChunked: chunked transfer coding.
	BodyChunked
	// BodyClose: the body runs until the connection closes (a response with
	// neither length nor chunked coding).
	BodyClose
)

// Message describes one HTTP/1.x message whose header block is complete.
// Everything it points to belongs to the Parser and stays valid only until the
// next call to the Parser (or, inside an InjectFunc, until it returns).
type Message struct {
	// Request is true for requests, false for responses.
	Request bool
	// Method is the request method; for a response, the method of the request
	// it answers as told by ExpectResponse ("" when unknown).
	Method string
	// Target is the request-target (requests only).
	Target []byte
	// Status is the response status code (responses only).
	Status int
	// Minor is the protocol's minor version: 1 for HTTP/1.1.
	Minor int
	// Headers are the header fields in wire order.
	Headers Headers
	// Raw is the whole header block, from the first byte of the start line
	// through the final line break.
	Raw []byte
	// Body is how the body is delimited; ContentLength is its length when
	// Body is BodyLength.
	Body          BodyKind
	ContentLength int64
	// Ext is another Framing's own description of the message
	// (internal/run/h2stream: its header block); nil for HTTP/1.x.
	Ext any
}

// Reason says why a stream went opaque.
type Reason string

// Reasons a stream goes opaque. The first three classify a stream that does
// not start with HTTP/1.x at all; the others a stream that stopped being
// parseable HTTP/1.x.
const (
	ReasonTLS                 Reason = "tls"
	ReasonHTTP2               Reason = "http2"
	ReasonNotHTTP             Reason = "not-http"
	ReasonMalformedStart      Reason = "malformed start line"
	ReasonMalformedHeader     Reason = "malformed header"
	ReasonHeadersTooLarge     Reason = "headers too large"
	ReasonBadContentLength    Reason = "bad content-length"
	ReasonBadTransferEncoding Reason = "bad transfer-encoding"
	ReasonBadChunk            Reason = "bad chunk"
	ReasonTrailersTooLarge    Reason = "trailers too large"
	// ReasonUpgrade: a 101 Switching Protocols response; what follows is
	// another protocol.
	ReasonUpgrade Reason = "upgrade"
	// ReasonConnect: a CONNECT request, or a 2xx response to one; what
	// follows is a tunnel.
	ReasonConnect Reason = "connect"
	// ReasonPipelineTooDeep: more than MaxPipeline requests await responses.
	ReasonPipelineTooDeep Reason = "pipeline too deep"
	// ReasonClosed: data fed after Close.
	ReasonClosed Reason = "closed"
)

// EventKind tells what an Event reports.
type EventKind uint8

const (
	// EventStart: the first byte of a message's start line is at Offset.
	EventStart EventKind = iota + 1
	// EventHeaders: the header block is complete. [Offset, End) is its final
	// line break ("\r\n" or "\n"): injected header lines go right before
	// Offset. Offset is -1 when the final CR arrived at the end of the
	// previous chunk. Msg describes the message.
	EventHeaders
	// EventBody: Len bytes of body payload lie in [Offset, End). A chunked
	// body's framing is not counted in Len but may lie in the range: one
	// event covers all of a message's payload in a chunk.
	EventBody
	// EventEnd: the message ended just before Offset.
	EventEnd
	// EventOpaque: parsing stopped at Offset for Reason; the rest of the
	// stream is opaque. Reported once.
	EventOpaque
	// EventRelease: the bytes since the last EventStart need no rewriting
	// after all (another Framing's event; the HTTP/1.x Parser never reports
	// it).
	EventRelease
)

// String returns the kind's name, e.g. "headers".
func (k EventKind) String() string {
	switch k {
	case EventStart:
		return "start"
	case EventHeaders:
		return "headers"
	case EventBody:
		return "body"
	case EventEnd:
		return "end"
	case EventOpaque:
		return "opaque"
	case EventRelease:
		return "release"
	}
	return "unknown"
}

// Event is one thing the Parser found in a fed chunk. Offsets are relative to
// that chunk.
type Event struct {
	Kind   EventKind
	Offset int
	End    int
	// Len is the payload byte count of an EventBody.
	Len int
	// Msg is set for EventHeaders.
	Msg *Message
	// Reason is set for EventOpaque.
	Reason Reason
	// Truncated is set on an EventEnd from Close when the message had not
	// ended.
	Truncated bool
}

// equalFold reports whether b and s are equal ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
