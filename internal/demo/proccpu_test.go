package demo

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want time.Duration
		ok   bool
	}{
		{"1234 (rootline) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 125 0 0 20 0 12 0 100 0", 3750 * time.Millisecond, true},
		{"1234 (a b) c)) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0", 100 * time.Millisecond, true},
		{"1234 (short) S 1 2 3", 0, false},
		{"no parenthesis", 0, false},
		{"1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 3", 0, false},
	} {
		got, err := parseStatCPU(tc.stat)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseStatCPU(%q) = %v, %v; want %v (ok %v)", tc.stat, got, err, tc.want, tc.ok)
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if _, err := processCPU(os.Getpid()); err != nil {
			t.Errorf("own CPU time: %v", err)
		}
	}
}
