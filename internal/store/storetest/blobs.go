package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootline/rootline/internal/store"
)

// BlobSuite runs the store.BlobStore tests.
type BlobSuite struct {
	// Open returns a fresh, empty blob store; see SpanSuite.Open.
	Open    func(t *testing.T) store.BlobStore
	CleanUp func(t *testing.T)
}

// Run runs the suite.
func (s BlobSuite) Run(t *testing.T) {
	runAll(t, s.Open, s.CleanUp, []subtest[store.BlobStore]{
		{"PutOpenStatDelete", false, testBlobRoundTrip},
		{"Missing", false, testBlobMissing},
		{"BadDigest", false, testBlobBadDigest},
		{"ConcurrentPutSameContent", false, testBlobConcurrentPut},
		{"FailedPutLeavesNothing", false, testBlobFailedPut},
		{"List", false, testBlobList},
	})
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readBlob(t *testing.T, st store.BlobStore, digest string) []byte {
	t.Helper()
	rc, err := st.Open(context.Background(), digest)
	return readAll(t, "Open("+digest+")", rc, err)
}

// listBlobs returns every blob List reports, by digest.
func listBlobs(t *testing.T, st store.BlobStore) map[string]store.BlobInfo {
	t.Helper()
	got := map[string]store.BlobInfo{}
	err := st.List(context.Background(), func(b store.BlobInfo) error {
		if _, dup := got[b.Digest]; dup {
			t.Errorf("%s listed twice", b.Digest)
		}
		got[b.Digest] = b
		return nil
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return got
}

func testBlobRoundTrip(t *testing.T, st store.BlobStore) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"small", []byte("hello, blob")},
		{"large", bytes.Repeat([]byte("0123456789abcdef"), 1<<16)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Add(-time.Second) // filesystem clocks are coarse
			d, n, err := st.Put(ctx, bytes.NewReader(tc.content))
			if err != nil {
				t.Fatal(err)
			}
			if want := digestOf(tc.content); d != want {
				t.Fatalf("digest %s, want %s", d, want)
			}
			if n != int64(len(tc.content)) {
				t.Fatalf("size %d, want %d", n, len(tc.content))
			}
			if got := readBlob(t, st, d); !bytes.Equal(got, tc.content) {
				t.Fatal("content differs")
			}
			info, err := st.Stat(ctx, d)
			if err != nil || info.Size != n || info.Digest != d || info.Modified.Before(before) {
				t.Fatalf("Stat = %+v, %v; want size %d, modified after %v", info, err, n, before)
			}
			if err := st.Delete(ctx, d); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Open(ctx, d); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Open after Delete: %v, want ErrNotFound", err)
			}
		})
	}
}

func testBlobMissing(t *testing.T, st store.BlobStore) {
	ctx := context.Background()
	d := digestOf([]byte("never stored"))
	if _, err := st.Open(ctx, d); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	if _, err := st.Stat(ctx, d); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, d); err != nil {
		t.Errorf("Delete of a missing blob: %v", err)
	}
}

// testBlobBadDigest: digests name files and object keys; anything but 64
// lowercase hex digits is refused (no path traversal).
func testBlobBadDigest(t *testing.T, st store.BlobStore) {
	ctx := context.Background()
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
		if _, err := st.Open(ctx, d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Open(%q): %v, want ErrBadDigest", d, err)
		}
		if _, err := st.Stat(ctx, d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Stat(%q): %v, want ErrBadDigest", d, err)
		}
		if err := st.Delete(ctx, d); !errors.Is(err, store.ErrBadDigest) {
			t.Errorf("Delete(%q): %v, want ErrBadDigest", d, err)
		}
	}
}

func testBlobConcurrentPut(t *testing.T, st store.BlobStore) {
	content := bytes.Repeat([]byte("same bytes "), 10000)
	const n = 16
	var wg sync.WaitGroup
	digests := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			digests[i], _, errs[i] = st.Put(context.Background(), bytes.NewReader(content))
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
	if got := readBlob(t, st, digests[0]); !bytes.Equal(got, content) {
		t.Fatal("content differs")
	}
	if got := listBlobs(t, st); len(got) != 1 {
		t.Fatalf("List after %d Puts of one content: %d blobs, want 1", n, len(got))
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// testBlobFailedPut: a Put that fails (its context ends, its reader fails)
// returns the cause and leaves nothing a reader or a sweep sees.
func testBlobFailedPut(t *testing.T, st store.BlobStore) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := st.Put(ctx, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with an ended context: %v, want context.Canceled", err)
	}
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("some bytes"), errReader{boom})
	if _, _, err := st.Put(context.Background(), r); !errors.Is(err, boom) {
		t.Errorf("Put with a failing reader: %v, want %v", err, boom)
	}
	if got := listBlobs(t, st); len(got) != 0 {
		t.Errorf("failed Puts left %d blobs", len(got))
	}
}

// testBlobList sees every stored blob once, with its size, and stops at the
// callback's first error.
func testBlobList(t *testing.T, st store.BlobStore) {
	want := map[string]int64{}
	for _, c := range []string{"a", "bb", "ccc"} {
		d, n, err := st.Put(context.Background(), strings.NewReader(c))
		if err != nil {
			t.Fatal(err)
		}
		want[d] = n
	}
	got := listBlobs(t, st)
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for d, n := range want {
		if got[d].Size != n || got[d].Modified.IsZero() {
			t.Errorf("%s: %+v, want size %d and a modification time", d, got[d], n)
		}
	}
	stop := errors.New("stop")
	calls := 0
	if err := st.List(context.Background(), func(store.BlobInfo) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("List with a failing callback: %v after %d calls, want stop after 1", err, calls)
	}
}
