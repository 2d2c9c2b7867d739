package server

import (
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Detector.Window != 500 || c.Detector.Threshold != 3 || c.Detector.MinFill != 20 || c.Pipeline.KeyBy != "operation" ||
				c.Retention.Normal != 24*time.Hour || c.Retention.Anomalous != 7*24*time.Hour || synchronous(t, c) != "FULL" {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "yaml file", args: []string{"--config", "testdata/full.good.yml"}, check: func(t *testing.T, c Config) {
			if c.Detector.Window != 1000 || c.Pipeline.KeyBy != "service" || c.Retention.Normal != 12*time.Hour ||
				c.Capture.Kinds[0] != "cpu" || synchronous(t, c) != "NORMAL" || c.QueryAddr != "127.0.0.1:17000" {
				t.Fatalf("yaml not applied: %+v", c)
			}
		}},
		{name: "flags override yaml", args: []string{"--config=testdata/full.good.yml", "--detector.window", "70", "--retention.normal=1h"}, check: func(t *testing.T, c Config) {
			if c.Detector.Window != 70 || c.Retention.Normal != time.Hour || c.Detector.Threshold != 4 {
				t.Fatalf("override: window %d normal %v threshold %v", c.Detector.Window, c.Retention.Normal, c.Detector.Threshold)
			}
		}},
		{name: "public query with token", args: []string{"--query.addr", "0.0.0.0:16686"}, env: "tok", check: func(t *testing.T, c Config) {
			if c.AuthToken != "tok" || c.Capture.AuthToken != "tok" {
				t.Fatal("token not propagated")
			}
		}},
		{name: "storage layout", args: []string{"--config", "testdata/storage.good.yml"}, check: func(t *testing.T, c Config) {
			st, err := c.StorageConfig()
			if err != nil {
				t.Fatal(err)
			}
			if st.Spans.Type != "sqlite" || st.Spans.SQLite.Dir != "/tmp/rootline-test/db" || st.Spans.SQLite.Synchronous != "NORMAL" ||
				st.Artifacts.Type != "fs" || st.Artifacts.FS.Dir != "/tmp/rootline-test/artifacts" || st.Metrics.Type != "sqlite" ||
				c.Retention.MaxBytes != -1 || c.Retention.MaxClockSkew != 10*time.Minute {
				t.Fatalf("storage: %+v %+v %+v, retention %+v", st.Spans.SQLite, st.Artifacts.FS, st.Metrics, c.Retention)
			}
		}},
		{name: "default storage directories", args: []string{"--data-dir", "/tmp/x"}, check: func(t *testing.T, c Config) {
			st, err := c.StorageConfig()
			if err != nil {
				t.Fatal(err)
			}
			if st.Spans.SQLite.Dir != "/tmp/x" || st.Artifacts.FS.Dir != "/tmp/x/blobs" {
				t.Fatalf("dirs %q %q, want the data dir and its blobs/", st.Spans.SQLite.Dir, st.Artifacts.FS.Dir)
			}
			if c.Storage.Spans.SQLite != nil {
				t.Fatal("StorageConfig modified the loaded configuration")
			}
		}},
		{name: "storage conflicts with sqlite section", args: []string{"--config", "testdata/storage-conflict.bad.yml"}, wantErr: "disagree"},
		{name: "storage section of another type", args: []string{"--config", "testdata/storage-section.bad.yml"}, wantErr: "storage.spans.sqlite section is given"},
		{name: "unknown artifact store", args: []string{"--storage.artifacts.type", "s4"}, wantErr: `storage.artifacts.type "s4"`},
		{name: "bad disk fraction", args: []string{"--retention.max-disk-fraction", "1.5"}, wantErr: "max-disk-fraction"},
		{name: "unknown yaml key", args: []string{"--config", "testdata/unknown-key.bad.yml"}, wantErr: "windw"},
		{name: "bad threshold", args: []string{"--config", "testdata/bad-threshold.bad.yml"}, wantErr: "threshold"},
		{name: "public query without token", args: []string{"--config", "testdata/public-query.bad.yml"}, wantErr: "ROOTLINE_AUTH_TOKEN"},
		{name: "bad key-by flag", args: []string{"--detector.key-by", "trace"}, wantErr: "key_by"},
		{name: "bad synchronous", args: []string{"--sqlite.synchronous", "OFF"}, wantErr: "FULL or NORMAL"},
		{name: "missing config file", args: []string{"--config", "testdata/nope.yml"}, wantErr: "read config"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ROOTLINE_AUTH_TOKEN", tc.env)
			c, err := Load(tc.args, func(fs *flag.FlagSet) {})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func synchronous(t *testing.T, c Config) string {
	t.Helper()
	st, err := c.StorageConfig()
	if err != nil {
		t.Fatal(err)
	}
	return st.Spans.SQLite.Synchronous
}

func TestDefaultMaxBytes(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		fs       int64
		fraction float64
		want     int64
	}{
		{100 * gib, 0.5, 50 * gib},           // a share of a large disk
		{1000 * gib, 0.25, 250 * gib},        // another share
		{1500 * 1 << 20, 0.5, gib},           // the floor on a small disk
		{512 << 20, 0.5, 512 << 20 * 9 / 10}, // never beyond 90 % of a tiny one
	} {
		if got := DefaultMaxBytes(tc.fs, tc.fraction); got != tc.want {
			t.Errorf("DefaultMaxBytes(%d, %v) = %d, want %d", tc.fs, tc.fraction, got, tc.want)
		}
	}
}

func TestLoadTokenFile(t *testing.T) {
	t.Setenv("ROOTLINE_AUTH_TOKEN", "")
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"--auth.token-file", p, "--query.addr", "[::]:1"}, nil)
	if err != nil || c.AuthToken != "s3cret" {
		t.Fatalf("token %q err %v", c.AuthToken, err)
	}
}

func TestHelp(t *testing.T) {
	_, err := Load([]string{"-h"}, func(fs *flag.FlagSet) {})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true,
		":16686": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "bad": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestResolveMaxBytes: an explicit cap, no cap, and the automatic cap from
// the filesystem the store grows on.
func TestResolveMaxBytes(t *testing.T) {
	dir := t.TempDir()
	fsBytes, err := filesystemBytes(dir)
	if err != nil || fsBytes <= 0 {
		t.Fatalf("filesystem size %d, %v", fsBytes, err)
	}
	for _, tc := range []struct {
		r    Retention
		want int64
	}{
		{Retention{MaxBytes: 12345}, 12345},
		{Retention{MaxBytes: -1}, 0},
		{Retention{MaxDiskFraction: 0.5}, DefaultMaxBytes(fsBytes, 0.5)},
	} {
		got, err := resolveMaxBytes(tc.r, dir, slog.New(slog.DiscardHandler))
		if err != nil || got != tc.want {
			t.Errorf("resolveMaxBytes(%+v) = %d, %v; want %d", tc.r, got, err, tc.want)
		}
	}
}
