// Package fsblob is the filesystem backend of store.BlobStore: artifact
// content in a local directory.
//
// A blob is named by the lowercase hex SHA-256 of its content and lives at
// <dir>/<first two hex digits>/<digest>. Writes go to a temporary file in <dir>
// (same filesystem, so the final rename is atomic), are fsynced, renamed into
// place and made durable by fsyncing the parent directory. A reader therefore
// sees either the whole blob or none of it, even after a crash.
//
// One process owns a directory at a time: Open removes the temporary files a
// crashed writer left behind, which would break a concurrent writer of another
// process.
package fsblob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rootline/rootline/internal/store"
)

var _ store.BlobStore = (*FS)(nil)

// tempPrefix marks files that are still being written.
const tempPrefix = ".tmp-"

// FS is a blob store rooted at one directory. It is safe for concurrent use.
//
// FS does not coordinate Put with Delete of the same digest: a Put that finds
// the blob already present returns at once, and a concurrent Delete may then
// remove it. Callers that delete blobs still referenced elsewhere (a garbage
// collector) must serialise the two themselves.
type FS struct {
	dir string
}

// Open opens (creating if needed) the blob store in dir and removes the
// temporary files an interrupted Put left behind.
func Open(dir string) (*FS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsblob: create %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("fsblob: read %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("fsblob: remove leftover temp file: %w", err)
			}
		}
	}
	return &FS{dir: dir}, nil
}

// Dir returns the root directory.
func (f *FS) Dir() string { return f.dir }

func (f *FS) path(digest string) (string, error) {
	if !store.ValidDigest(digest) {
		return "", fmt.Errorf("%w: %q", store.ErrBadDigest, digest)
	}
	return filepath.Join(f.dir, digest[:2], digest), nil
}

// Put stores the content of r and returns its digest and size. The blob is
// durable when Put returns nil. Storing content that is already present is
// cheap on disk (the new copy is discarded) but still reads all of r.
func (f *FS) Put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	tmp, err := os.CreateTemp(f.dir, tempPrefix+"*")
	if err != nil {
		return "", 0, fmt.Errorf("fsblob: create temp file: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		if tmp != nil {
			tmp.Close()
		}
		if tmpName != "" {
			os.Remove(tmpName)
		}
	}()

	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, r})
	if err != nil {
		return "", 0, fmt.Errorf("fsblob: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, fmt.Errorf("fsblob: sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		tmp = nil
		return "", 0, fmt.Errorf("fsblob: close: %w", err)
	}
	tmp = nil
	digest = hex.EncodeToString(h.Sum(nil))

	sub := filepath.Join(f.dir, digest[:2])
	final := filepath.Join(sub, digest)
	if _, err := os.Stat(final); err == nil {
		return digest, size, nil // dedupe: the deferred cleanup drops our copy
	}
	created, err := mkdir(sub)
	if err != nil {
		return "", 0, fmt.Errorf("fsblob: %w", err)
	}
	if created {
		// The new fan-out directory must itself survive a crash.
		if err := syncDir(f.dir); err != nil {
			return "", 0, fmt.Errorf("fsblob: %w", err)
		}
	}
	// Renaming over an identical blob written concurrently is harmless: both
	// files have the same content and rename is atomic.
	if err := os.Rename(tmpName, final); err != nil {
		return "", 0, fmt.Errorf("fsblob: rename: %w", err)
	}
	tmpName = ""
	if err := syncDir(sub); err != nil {
		return "", 0, fmt.Errorf("fsblob: %w", err)
	}
	return digest, size, nil
}

// Open returns the content of a blob; the caller closes it. A missing blob is
// an error wrapping store.ErrNotFound.
func (f *FS) Open(_ context.Context, digest string) (io.ReadCloser, error) {
	p, err := f.path(digest)
	if err != nil {
		return nil, err
	}
	file, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", digest, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("fsblob: %w", err)
	}
	return file, nil
}

// Stat returns the size and modification time of a blob, or an error
// wrapping store.ErrNotFound.
func (f *FS) Stat(_ context.Context, digest string) (store.BlobInfo, error) {
	p, err := f.path(digest)
	if err != nil {
		return store.BlobInfo{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return store.BlobInfo{}, fmt.Errorf("blob %s: %w", digest, store.ErrNotFound)
	}
	if err != nil {
		return store.BlobInfo{}, fmt.Errorf("fsblob: %w", err)
	}
	return store.BlobInfo{Digest: digest, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// Delete removes a blob. Deleting a missing blob is not an error. The removal
// is not fsynced: after a crash a deleted blob may reappear, which only costs
// space.
func (f *FS) Delete(_ context.Context, digest string) error {
	p, err := f.path(digest)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fsblob: %w", err)
	}
	return nil
}

// List calls fn for every blob under the fan-out directories. Temporary
// files (a Put in progress) and names that are not digests are skipped, so a
// sweep never sees half-written content.
func (f *FS) List(ctx context.Context, fn func(store.BlobInfo) error) error {
	subs, err := os.ReadDir(f.dir)
	if err != nil {
		return fmt.Errorf("fsblob: list: %w", err)
	}
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(f.dir, sub.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("fsblob: list: %w", err)
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			name := e.Name()
			if !store.ValidDigest(name) || name[:2] != sub.Name() || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since ReadDir
			}
			if err != nil {
				return fmt.Errorf("fsblob: list: %w", err)
			}
			if err := fn(store.BlobInfo{Digest: name, Size: fi.Size(), Modified: fi.ModTime()}); err != nil {
				return err
			}
		}
	}
	return nil
}

// mkdir creates dir if missing and reports whether it did.
func mkdir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return false, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
