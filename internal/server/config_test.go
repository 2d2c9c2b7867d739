package server

import (
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
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
			if c, ok := load(t, tc.args, tc.wantErr); ok {
				tc.check(t, c)
			}
		})
	}
}

// load runs Load on args: when wantErr is set it checks the error mentions
// it and returns false; otherwise it fails on any error.
func load(t *testing.T, args []string, wantErr string) (Config, bool) {
	t.Helper()
	c, err := Load(args, func(fs *flag.FlagSet) {})
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want it to mention %q", err, wantErr)
		}
		return c, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return c, true
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

func TestReceiverAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "ingest")
	if err := os.WriteFile(tokenFile, []byte("ingest-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	public := []string{"--otlp.grpc.addr", "0.0.0.0:4317"}
	for _, tc := range []struct {
		name             string
		args             []string
		authEnv, ingest  string
		wantErr          string
		wantToken        string
		wantOpenReceiver bool
	}{
		{name: "loopback needs nothing", args: nil},
		{name: "beyond loopback without credentials", args: public, wantErr: "ROOTLINE_INGEST_TOKEN"},
		{name: "zipkin beyond loopback", args: []string{"--zipkin.addr", ":9411"}, wantErr: "--zipkin.addr"},
		{name: "the server's token", args: public, authEnv: "server-token", wantToken: "server-token"},
		{name: "an ingest token", args: public, authEnv: "server-token", ingest: "ingest-env", wantToken: "ingest-env"},
		{name: "an ingest token file", args: append([]string{"--receiver.auth.token-file", tokenFile}, public...), ingest: "ingest-env", wantToken: "ingest-token"},
		{name: "a client CA", args: append([]string{"--receiver.tls.cert-file", "c", "--receiver.tls.key-file", "k", "--receiver.tls.client-ca-file", "ca"}, public...)},
		{name: "unauthenticated on purpose", args: append([]string{"--receiver.allow-unauthenticated"}, public...), authEnv: "server-token", wantOpenReceiver: true},
		{name: "client CA without a certificate", args: []string{"--receiver.tls.client-ca-file", "ca"}, wantErr: "client_ca_file needs cert_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ROOTLINE_AUTH_TOKEN", tc.authEnv)
			t.Setenv("ROOTLINE_INGEST_TOKEN", tc.ingest)
			c, ok := load(t, tc.args, tc.wantErr)
			if !ok {
				return
			}
			if c.Receiver.AuthToken != tc.wantToken {
				t.Errorf("receiver token %q, want %q", c.Receiver.AuthToken, tc.wantToken)
			}
			if tc.wantOpenReceiver && c.Receiver.AuthToken != "" {
				t.Error("allow-unauthenticated kept a token")
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	t.Setenv("ROOTLINE_AUTH_TOKEN", "")
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "default", check: func(t *testing.T, c Config) {
			d := c.withDerived()
			if c.MemoryLimit != 1<<30 || d.Receiver.MaxInflightBytes != 256<<20 || d.Pipeline.QueueBytes != 128<<20 {
				t.Errorf("limit %v in flight %d queue %d", c.MemoryLimit, d.Receiver.MaxInflightBytes, d.Pipeline.QueueBytes)
			}
			if b := c.withDerived().memoryBound(); b > int64(c.MemoryLimit) {
				t.Errorf("the default bounds add up to %d, over the default limit", b)
			}
		}},
		{name: "derived shares", args: []string{"--memory-limit", "2GiB"}, check: func(t *testing.T, c Config) {
			if d := c.withDerived(); d.Receiver.MaxInflightBytes != 512<<20 || d.Pipeline.QueueBytes != 256<<20 {
				t.Errorf("in flight %d queue %d", d.Receiver.MaxInflightBytes, d.Pipeline.QueueBytes)
			}
		}},
		{name: "set bounds are kept", args: []string{"--memory-limit", "2GiB", "--receiver.max-inflight-bytes", "100000000", "--pipeline.queue-bytes", "1000"},
			check: func(t *testing.T, c Config) {
				if d := c.withDerived(); d.Receiver.MaxInflightBytes != 100000000 || d.Pipeline.QueueBytes != 1000 {
					t.Errorf("in flight %d queue %d", d.Receiver.MaxInflightBytes, d.Pipeline.QueueBytes)
				}
			}},
		{name: "GOMEMLIMIT replaces the default", env: "3GiB", check: func(t *testing.T, c Config) {
			if c.MemoryLimit != 3<<30 {
				t.Errorf("limit %v", c.MemoryLimit)
			}
		}},
		{name: "the flag wins over GOMEMLIMIT", env: "3GiB", args: []string{"--memory-limit=1500MiB"}, check: func(t *testing.T, c Config) {
			if c.MemoryLimit != 1500<<20 {
				t.Errorf("limit %v", c.MemoryLimit)
			}
		}},
		{name: "no limit", args: []string{"--memory-limit", "0"}, check: func(t *testing.T, c Config) {
			if c.MemoryLimit != 0 {
				t.Errorf("limit %v", c.MemoryLimit)
			}
		}},
		{name: "bounds over the limit", args: []string{"--memory-limit", "512MiB"}, wantErr: "more than --memory-limit 512MiB"},
		{name: "not a size", args: []string{"--memory-limit", "lots"}, wantErr: "not a size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
				v, _ := ParseByteSize(tc.env)
				debug.SetMemoryLimit(int64(v)) // as the runtime does at start
			}
			if c, ok := load(t, tc.args, tc.wantErr); ok {
				tc.check(t, c)
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"1GiB": 1 << 30, "512 MiB": 512 << 20, "2GB": 2e9, "65536": 65536, "1.5KiB": 1536, "0": 0} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1XB", "GiB", "1e30"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", bad)
		}
	}
	for v, want := range map[ByteSize]string{1 << 30: "1GiB", 1536 << 20: "1536MiB", 1000: "1000", 0: "0", 3 << 10: "3KiB"} {
		if got := v.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", v, got, want)
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

// TestLoadFile: the fields a file names replace the defaults, the others
// stay; an empty file is the defaults; an unknown field is an error.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := DefaultConfig()
	if err := cfg.LoadFile(write("a.yaml", "capture:\n  min_interval: 1h\n")); err != nil {
		t.Fatal(err)
	}
	if cfg.Capture.MinInterval != time.Hour {
		t.Errorf("capture.min_interval = %v, want 1h", cfg.Capture.MinInterval)
	}
	if def := DefaultConfig(); cfg.Capture.MaxPerMinute != def.Capture.MaxPerMinute || cfg.QueryAddr != def.QueryAddr {
		t.Errorf("fields the file does not name changed: max_per_minute %d, query addr %q", cfg.Capture.MaxPerMinute, cfg.QueryAddr)
	}
	empty := DefaultConfig()
	if err := empty.LoadFile(write("empty.yaml", "")); err != nil {
		t.Errorf("empty file: %v", err)
	}
	bad := DefaultConfig()
	if err := bad.LoadFile(write("bad.yaml", "capture:\n  min_intervall: 1h\n")); err == nil || !strings.Contains(err.Error(), "min_intervall") {
		t.Errorf("unknown field: err = %v, want one naming it", err)
	}
	if err := bad.LoadFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("missing file: no error")
	}
}
