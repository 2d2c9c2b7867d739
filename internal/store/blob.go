package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"time"
)

// ErrBadDigest is returned for a digest that is not 64 lowercase hex digits.
// Digests name files and object keys, so anything else is refused before it
// reaches a backend (no path traversal through "../").
var ErrBadDigest = errors.New("malformed blob digest")

// BlobInfo describes one stored blob.
type BlobInfo struct {
	Digest   string // lowercase hex SHA-256 of the content
	Size     int64
	Modified time.Time // when the blob was last written
}

// BlobStore keeps content-addressed blobs: the bytes of artifacts. Their
// metadata and links to spans live with the span store (ArtifactStore), which
// names a blob by its digest.
//
// Put MUST NOT return nil before the blob is durable, and a reader MUST see
// either the whole blob or none of it (an interrupted Put leaves nothing
// that Open, Stat or List return). Open and Stat of a missing blob return an
// error wrapping ErrNotFound; a malformed digest an error wrapping
// ErrBadDigest. Delete of a missing blob is not an error. Implementations MUST
// be safe for concurrent use; they need not order a Put against a Delete of
// the same digest (the span store serialises those, see sqlite's blobMu).
type BlobStore interface {
	// Put stores the content of r and returns its digest and size. Storing
	// content that is already present still reads all of r.
	Put(ctx context.Context, r io.Reader) (digest string, size int64, err error)
	// Open returns the content of a blob; the caller closes it.
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
	// Stat returns the size and modification time of a blob.
	Stat(ctx context.Context, digest string) (BlobInfo, error)
	// Delete removes a blob.
	Delete(ctx context.Context, digest string) error
	// List calls fn for every stored blob, in no particular order, until fn
	// returns an error (which List returns). Blobs written or deleted during
	// List may or may not be seen. Sweeps of orphan blobs use it.
	List(ctx context.Context, fn func(BlobInfo) error) error
}

// ValidDigest reports whether d is 64 lowercase hex digits.
func ValidDigest(d string) bool {
	if len(d) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
