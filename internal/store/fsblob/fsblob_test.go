package fsblob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.BlobSuite{Open: func(t *testing.T) store.BlobStore {
		f, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return f
	}}.Run(t)
}

// TestLayout: a blob lives at <dir>/<first two hex digits>/<digest>, and
// Puts of the same content leave one file.
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<12)
	var d string
	for range 3 {
		if d, _, err = f.Put(context.Background(), bytes.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, d[:2], d)); err != nil {
		t.Fatalf("blob not at its content address: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, d[:2]))
	if err != nil || len(entries) != 1 {
		t.Fatalf("fan-out dir holds %d entries (%v), want 1", len(entries), err)
	}
	assertNoTemp(t, dir)
}

func TestOpenRemovesLeftoverTempFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := f.Put(context.Background(), strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	// What a Put killed before its rename leaves behind.
	if err := os.WriteFile(filepath.Join(dir, tempPrefix+"12345"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	assertNoTemp(t, dir)
	rc, err := f.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, _ := io.ReadAll(rc); string(got) != "kept" {
		t.Fatalf("blob lost: %q", got)
	}
}

// A failed Put removes its temporary file.
func TestFailedPutRemovesTempFile(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := f.Put(ctx, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put: %v, want context.Canceled", err)
	}
	assertNoTemp(t, dir)
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

// TestListSkipsTempAndStrayFiles: a Put in progress (a temporary file) and
// files that are not blobs are never listed, so an orphan sweep cannot take
// them.
func TestListSkipsTempAndStrayFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := f.Put(context.Background(), strings.NewReader("blob"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tempPrefix + "123", "README", "zz/not-a-digest", d[:2] + "/" + tempPrefix + "x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := f.List(context.Background(), func(b store.BlobInfo) error { got = append(got, b.Digest); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != d {
		t.Errorf("List = %v, want only %s", got, d)
	}
}
