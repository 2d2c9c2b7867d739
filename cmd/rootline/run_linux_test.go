package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command that cannot be run gets the shell's status and a plain reason,
// not a report about tracing.
func TestRunMissingCommand(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		code  int
		says  string
	}{
		{filepath.Join(dir, "missing"), 127, "no such file"},
		{"rootline-no-such-command", 127, "executable file not found"},
		{plain, 126, "permission denied"},
	} {
		var stderr bytes.Buffer
		code := run([]string{"run", "--", tc.argv0}, io.Discard, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.says) || strings.Contains(stderr.String(), "datapath") {
			t.Errorf("run %s: status %d, stderr %q; want %d and %q", tc.argv0, code, stderr.String(), tc.code, tc.says)
		}
	}
}
