package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCriticalMetricsFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for no error
	}{
		{"data dir", []string{"--data-dir", "/x"}, ""},
		{"server with window", []string{"--server", "http://h:16686", "--from", "2026-11-28T08:00:00Z", "--to", "2026-11-28T10:00:00Z"}, ""},
		{"neither source", nil, "exactly one of --data-dir and --server"},
		{"both sources", []string{"--data-dir", "/x", "--server", "http://h"}, "exactly one of"},
		{"bad time", []string{"--data-dir", "/x", "--from", "yesterday"}, "--from"},
		{"from after to", []string{"--data-dir", "/x", "--from", "1h", "--to", "2h"}, "before --to"},
		{"apply without agents", []string{"--data-dir", "/x", "--apply"}, "--apply needs the agents"},
		{"agent without apply", []string{"--data-dir", "/x", "--agent", "unix:/s"}, "--agent is for --apply"},
		{"bad costs", []string{"--data-dir", "/x", "--costs", "nosuch=1"}, "nosuch"},
		{"bad sidecar", []string{"--data-dir", "/x", "--sidecar", "("}, "--sidecar"},
		{"bad alpha", []string{"--data-dir", "/x", "--alpha", "1.5"}, "--alpha"},
		{"max-k", []string{"--data-dir", "/x", "--max-k", "1"}, "--max-k"},
		{"extra argument", []string{"--data-dir", "/x", "more"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseCritFlags(tc.args, io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if v, _ := parseWhen("30m", now); v != now.Add(-30*time.Minute).UnixNano() {
		t.Errorf("30m: %d", v)
	}
}

// A directory without a store is refused, not created.
func TestCriticalMetricsNoStore(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	if code := runCriticalMetrics(context.Background(), []string{"--data-dir", dir}, io.Discard, &stderr); code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "is not a Rootline data directory") {
		t.Errorf("stderr: %s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "rootline.db")); err == nil {
		t.Error("an empty store was created")
	}
}
