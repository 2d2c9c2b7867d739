// Package bearer checks "Authorization: Bearer <token>" credentials, the one
// way every Rootline listener that takes a token compares it: the scheme is
// case-insensitive (RFC 9110 §11.1, RFC 6750 §2.1) and the token is compared
// by its SHA-256 digest in constant time, so neither its bytes nor its length
// leak through timing. Tokens and Authorization headers are never logged.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"
)

// Token is a configured bearer token. The zero Token is "no token": Check
// then accepts every request, and Required reports false.
type Token struct {
	set    bool
	digest [sha256.Size]byte
}

// New returns the Token for s; an empty s gives the zero Token (no check).
func New(s string) Token {
	if s == "" {
		return Token{}
	}
	return Token{set: true, digest: sha256.Sum256([]byte(s))}
}

// Required reports whether a token is configured.
func (t Token) Required() bool { return t.set }

// Result of a Check.
type Result int

const (
	// OK: no token is configured, or the header carries the right one.
	OK Result = iota
	// Missing: no "Bearer" credentials in the header.
	Missing
	// Invalid: "Bearer" credentials with another token.
	Invalid
)

// Check compares the credentials of an Authorization header value with t.
func (t Token) Check(authorization string) Result {
	if !t.set {
		return OK
	}
	tok, ok := Parse(authorization)
	if !ok {
		return Missing
	}
	got := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(got[:], t.digest[:]) != 1 {
		return Invalid
	}
	return OK
}

// Parse extracts the token of an "Authorization: Bearer <token>" value; the
// scheme is case-insensitive, surrounding blanks are ignored.
func Parse(authorization string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Challenge is the WWW-Authenticate value to answer a failed Check with.
func (r Result) Challenge() string {
	if r == Invalid {
		return `Bearer realm="rootline", error="invalid_token"`
	}
	return `Bearer realm="rootline"`
}

// Message is a short reason for a failed Check, for the error body.
func (r Result) Message() string {
	switch r {
	case Missing:
		return "a bearer token is required"
	case Invalid:
		return "invalid bearer token"
	}
	return ""
}
