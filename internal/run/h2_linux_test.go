//go:build linux && amd64

package run

import "testing"

func TestIsH2ServerStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"empty SETTINGS", []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, true},
		{"two settings", append([]byte{0, 0, 12, 4, 0, 0, 0, 0, 0}, make([]byte, 12)...), true},
		{"SETTINGS ack", []byte{0, 0, 0, 4, 1, 0, 0, 0, 0}, false},
		{"odd length", []byte{0, 0, 7, 4, 0, 0, 0, 0, 0}, false},
		{"on a stream", []byte{0, 0, 0, 4, 0, 0, 0, 0, 1}, false},
		{"HEADERS", []byte{0, 0, 6, 1, 4, 0, 0, 0, 1}, false},
		{"short", []byte{0, 0, 0, 4, 0}, false},
		{"HTTP/1.1 response", []byte("HTTP/1.1 200 OK\r\n"), false},
		{"client preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), false},
	} {
		if got := isH2ServerStart(tc.in); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
