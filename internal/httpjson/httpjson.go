// Package httpjson holds the small HTTP conventions Rootline's JSON APIs share
// (agent registration and capture on the server, the agent's dump API): bearer
// token checks, JSON bodies in and out, and the loopback rule for listeners.
package httpjson

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/rootline/rootline/internal/bearer"
)

// MaxBody bounds JSON request bodies.
const MaxBody = 1 << 20

// RequireBearer wraps next so that it answers 401 unless the request carries
// "Authorization: Bearer <token>" (see package bearer). An empty token
// disables the check.
func RequireBearer(token string, next http.Handler) http.Handler {
	tok := bearer.New(token)
	if !tok.Required() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if res := tok.Check(r.Header.Get("Authorization")); res != bearer.OK {
			w.Header().Set("WWW-Authenticate", res.Challenge())
			Error(w, http.StatusUnauthorized, res.Message())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Decode reads a JSON body of at most MaxBytes into v. strict refuses unknown
// fields; lenient decoding lets a newer peer add fields.
func Decode(w http.ResponseWriter, r *http.Request, v any, strict bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type must be application/json, got %q", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body: %v", err)
	}
	return nil
}

// Write answers v as JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers {"error": msg} with status.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]string{"error": msg})
}

// IsLoopback reports whether a listen address only accepts local connections.
// APIs that can trigger dumps or read artifacts need a token otherwise.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
