package fsblob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rootline/rootline/internal/store"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t *testing.T, f *FS, digest string) []byte {
	t.Helper()
	rc, err := f.Open(context.Background(), digest)
	if err != nil {
		t.Fatalf("Open(%s): %v", digest, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPutOpenStatDelete(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"small", []byte("hello, blob")},
		{"large", bytes.Repeat([]byte("0123456789abcdef"), 1<<16)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, n, err := f.Put(context.Background(), bytes.NewReader(tc.content))
			if err != nil {
				t.Fatal(err)
			}
			if want := digestOf(tc.content); d != want {
				t.Fatalf("digest %s, want %s", d, want)
			}
			if n != int64(len(tc.content)) {
				t.Fatalf("size %d, want %d", n, len(tc.content))
			}
			if _, err := os.Stat(filepath.Join(dir, d[:2], d)); err != nil {
				t.Fatalf("blob not at its content address: %v", err)
			}
			if got := readAll(t, f, d); !bytes.Equal(got, tc.content) {
				t.Fatal("content differs")
			}
			info, err := f.Stat(context.Background(), d)
			if err != nil || info.Size != n || info.Digest != d || info.Modified.IsZero() {
				t.Fatalf("Stat = %+v, %v; want size %d", info, err, n)
			}
			if err := f.Delete(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Open(context.Background(), d); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Open after Delete: %v, want ErrNotFound", err)
			}
		})
	}
	assertNoTemp(t, dir)
}

func TestMissing(t *testing.T) {
	f, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := digestOf([]byte("never stored"))
	if _, err := f.Open(context.Background(), d); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	if _, err := f.Stat(context.Background(), d); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	if err := f.Delete(context.Background(), d); err != nil {
		t.Errorf("Delete of a missing blob: %v", err)
	}
}

func TestBadDigest(t *testing.T) {
	f, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good := digestOf([]byte("x"))
	for _, d := range []string{
		"",
		"abc",
		strings.ToUpper(good),
		good[:63],
		good + "0",
		"../" + good[3:],
		good[:62] + "/.",
		strings.Repeat("g", 64),
	} {
		if _, err := f.Open(context.Background(), d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Open(%q): %v, want ErrBadDigest", d, err)
		}
		if _, err := f.Stat(context.Background(), d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Stat(%q): %v, want ErrBadDigest", d, err)
		}
		if err := f.Delete(context.Background(), d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Delete(%q): %v, want ErrBadDigest", d, err)
		}
	}
}

func TestConcurrentPutSameContent(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("same bytes "), 10000)
	const n = 16
	var wg sync.WaitGroup
	digests := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			digests[i], _, errs[i] = f.Put(context.Background(), bytes.NewReader(content))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if digests[i] != digests[0] {
			t.Fatalf("digests differ: %s vs %s", digests[i], digests[0])
		}
	}
	if got := readAll(t, f, digests[0]); !bytes.Equal(got, content) {
		t.Fatal("content differs")
	}
	entries, err := os.ReadDir(filepath.Join(dir, digests[0][:2]))
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
	if got := readAll(t, f, d); string(got) != "kept" {
		t.Fatalf("blob lost: %q", got)
	}
}

func TestPutCanceled(t *testing.T) {
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

func TestPutReadError(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("some bytes"), errReader{boom})
	if _, _, err := f.Put(context.Background(), r); !errors.Is(err, boom) {
		t.Fatalf("Put: %v, want %v", err, boom)
	}
	assertNoTemp(t, dir)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

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

// TestList sees every stored blob once and never a temporary file or a
// stray name, so an orphan sweep cannot take a Put in progress.
func TestList(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, c := range []string{"a", "bb", "ccc"} {
		d, n, err := f.Put(context.Background(), strings.NewReader(c))
		if err != nil {
			t.Fatal(err)
		}
		want[d] = n
	}
	// A Put in progress and files that are not blobs.
	for _, p := range []string{tempPrefix + "123", "README", "zz/not-a-digest"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int64{}
	err = f.List(context.Background(), func(b store.BlobInfo) error {
		if _, dup := got[b.Digest]; dup {
			t.Errorf("%s listed twice", b.Digest)
		}
		got[b.Digest] = b.Size
		if b.Modified.IsZero() {
			t.Errorf("%s has no modification time", b.Digest)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for d, n := range want {
		if got[d] != n {
			t.Errorf("%s: size %d, want %d", d, got[d], n)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := f.List(context.Background(), func(store.BlobInfo) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("List with a failing callback: %v after %d calls, want stop after 1", err, calls)
	}
}
