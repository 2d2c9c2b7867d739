package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/rootline/rootline/internal/engines"
	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/store/sqlite"
	"github.com/rootline/rootline/internal/store/storetest"
)

// testConfig is a fresh bucket on the run's S3 server, created by Init.
func testConfig(t *testing.T) Config {
	t.Helper()
	endpoint, region := engines.S3(t)
	var b [5]byte
	rand.Read(b[:])
	cfg := Config{Endpoint: endpoint, Region: region, Bucket: "rl-test-" + hex.EncodeToString(b[:]), BucketLookup: "path"}
	cfg.ApplyDefaults()
	if _, err := Init(context.Background(), cfg, nil); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return cfg
}

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.BlobSuite{Open: func(t *testing.T) store.BlobStore { return openTest(t) }}.Run(t)
}

// TestArtifactsOnS3: the artifact and retention suites of the embedded span
// store with its content in S3 (the same pairing the Cassandra store's
// tests run with a real bucket).
func TestArtifactsOnS3(t *testing.T) {
	var mu sync.Mutex
	blobs := map[*sqlite.Store]*Store{}
	open := func(t *testing.T) *sqlite.Store {
		b := openTest(t)
		st, err := sqlite.Open(sqlite.Config{Dir: t.TempDir(), Blobs: b}, nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		blobs[st] = b
		mu.Unlock()
		return st
	}
	storetest.ArtifactSuite{Open: func(t *testing.T) storetest.ArtifactStore { return open(t) }}.Run(t)
	storetest.RetentionSuite{
		Open: func(t *testing.T) storetest.RetentionStore { return open(t) },
		Blobs: func(st storetest.RetentionStore) store.BlobStore {
			mu.Lock()
			defer mu.Unlock()
			return blobs[st.(*sqlite.Store)]
		},
	}.Run(t)
}

// TestMultipart: content larger than a part goes up in parts (S3 names a
// multipart object's ETag "<md5 of the parts' md5s>-<parts>") and reads back
// whole.
func TestMultipart(t *testing.T) {
	cfg := testConfig(t)
	cfg.PartSize = MinPartSize
	s, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 2*MinPartSize+12345)
	rand.Read(content)
	ctx := context.Background()
	d, n, err := s.Put(ctx, bytes.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if d != hex.EncodeToString(sum[:]) || n != int64(len(content)) {
		t.Fatalf("Put = %s, %d", d, n)
	}
	info, err := s.client.StatObject(ctx, cfg.Bucket, s.key(d), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-3") {
		t.Errorf("ETag %q: want a multipart upload of 3 parts", info.ETag)
	}
	rc, err := s.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
}

// TestCorruptContent: an object whose bytes no longer hash to its name (a
// tampered or damaged object) fails the read instead of serving it.
func TestCorruptContent(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	d, _, err := s.Put(ctx, strings.NewReader("the real content"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.PutObject(ctx, s.cfg.Bucket, s.key(d), strings.NewReader("something else"), -1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a tampered object: %v, want ErrCorrupt", err)
	}
}

// TestCredentials: a wrong secret is refused by the server (the requests
// are really signed), and Init is idempotent.
func TestCredentials(t *testing.T) {
	cfg := testConfig(t)
	if created, err := Init(context.Background(), cfg, nil); err != nil || created {
		t.Fatalf("second Init = %v, %v; want nothing created", created, err)
	}
	t.Setenv(SecretKeyEnv, "not-the-secret")
	if _, err := Open(context.Background(), cfg, nil); err == nil {
		t.Fatal("Open with a wrong secret key succeeded")
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no endpoint", Config{}, "endpoint"},
		{"endpoint with path", Config{Endpoint: "http://h:1/x"}, "without a path"},
		{"bad bucket", Config{Endpoint: "http://h:1", Bucket: "a/b"}, "bucket"},
		{"small part", Config{Endpoint: "http://h:1", PartSize: 1 << 20}, "part_size"},
		{"bad lookup", Config{Endpoint: "http://h:1", BucketLookup: "virtual"}, "bucket_lookup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.ApplyDefaults()
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
