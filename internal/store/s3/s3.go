// Package s3 keeps artifact content (store.BlobStore) in an S3-compatible
// object store: AWS S3, MinIO, SeaweedFS's S3 gateway, Ceph RGW. An object
// is named <prefix><sha256 of the content>.
//
// Put reads the content first, hashing it: into memory up to one part, into
// a spool file beyond (a JFR recording of a busy JVM runs to tens of MB),
// and only then uploads it under its digest, so that a failed read leaves
// nothing behind and no object is ever named for content it does not hold.
// Content larger than a part goes up as a multipart upload, which S3 makes
// visible only once complete. Every request is signed (SigV4) with the
// payload's SHA-256 over plain HTTP and carries a Content-MD5 the server
// checks; Open checks the SHA-256 of what it reads against the name and
// fails the read at its end if they differ.
//
// Retention is the span store's: a purge deletes the blobs of the artifacts
// it deletes and sweeps orphans through List. `rootline storage init`
// creates the bucket and a lifecycle rule that aborts multipart uploads a
// crashed writer left incomplete.
package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"

	"github.com/rootline/rootline/internal/store"
	"github.com/rootline/rootline/internal/tlsconf"
)

var _ store.BlobStore = (*Store)(nil)

// Environment variables the credentials are read from when the
// configuration names no files (the AWS SDKs' names).
const (
	AccessKeyEnv = "AWS_ACCESS_KEY_ID"
	SecretKeyEnv = "AWS_SECRET_ACCESS_KEY"
)

// MinPartSize is S3's smallest part of a multipart upload (but the last).
const MinPartSize = 5 << 20

// ErrCorrupt is returned by a read of a blob whose content does not hash to
// its name.
var ErrCorrupt = errors.New("s3: blob content does not match its digest")

// Config configures the bucket.
type Config struct {
	// Endpoint is the server's URL, e.g. https://s3.eu-west-1.amazonaws.com
	// or http://127.0.0.1:8333.
	Endpoint string `yaml:"endpoint"`
	// Region of the bucket (default us-east-1).
	Region string `yaml:"region"`
	// Bucket holds the blobs (default "rootline").
	Bucket string `yaml:"bucket"`
	// Prefix is put before every object name (default "blobs/").
	Prefix string `yaml:"prefix"`
	// BucketLookup is "auto" (the default), "path" (http://host/bucket/key,
	// what most S3-compatible servers need) or "dns" (http://bucket.host/key).
	BucketLookup string `yaml:"bucket_lookup"`
	// AccessKeyIDFile and SecretAccessKeyFile hold the credentials; when
	// empty they come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. They
	// are never logged.
	AccessKeyIDFile     string `yaml:"access_key_id_file"`
	SecretAccessKeyFile string `yaml:"secret_access_key_file"`
	// TLS for an https endpoint (a private CA, a client certificate).
	TLS tlsconf.Client `yaml:"tls"`
	// PartSize is the part of a multipart upload, and the largest content
	// held in memory while it is hashed (default 16 MiB, at least 5 MiB).
	PartSize int64 `yaml:"part_size"`
	// SpoolDir holds content larger than a part while it is hashed
	// (default: the system's temporary directory).
	SpoolDir string `yaml:"spool_dir"`
	// Timeout bounds one request but an upload's (default 30s).
	Timeout time.Duration `yaml:"timeout"`
}

// ApplyDefaults fills in the defaults of unset fields.
func (c *Config) ApplyDefaults() {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.Bucket == "" {
		c.Bucket = "rootline"
	}
	if c.Prefix == "" {
		c.Prefix = "blobs/"
	}
	if c.BucketLookup == "" {
		c.BucketLookup = "auto"
	}
	if c.PartSize == 0 {
		c.PartSize = 16 << 20
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
}

// Validate checks the configuration (after ApplyDefaults).
func (c Config) Validate() error {
	var errs []error
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		errs = append(errs, fmt.Errorf("s3: endpoint %q must be an http(s) URL without a path", c.Endpoint))
	}
	if u != nil && u.Scheme == "http" && c.TLS.On() {
		errs = append(errs, errors.New("s3: tls settings need an https endpoint"))
	}
	if len(c.Bucket) < 3 || len(c.Bucket) > 63 || strings.ContainsAny(c.Bucket, "/ _") {
		errs = append(errs, fmt.Errorf("s3: bucket %q is not a valid bucket name", c.Bucket))
	}
	if _, ok := lookups[c.BucketLookup]; !ok {
		errs = append(errs, fmt.Errorf("s3: bucket_lookup must be auto, path or dns, got %q", c.BucketLookup))
	}
	if c.PartSize < MinPartSize || c.PartSize > 5<<30 {
		errs = append(errs, fmt.Errorf("s3: part_size must be between 5 MiB and 5 GiB, got %d", c.PartSize))
	}
	return errors.Join(errs...)
}

var lookups = map[string]minio.BucketLookupType{"auto": minio.BucketLookupAuto, "path": minio.BucketLookupPath, "dns": minio.BucketLookupDNS}

// credentials reads the access key pair from the files or the environment.
func (c Config) credentials() (id, secret string, err error) {
	read := func(file, env string) (string, error) {
		if file == "" {
			return os.Getenv(env), nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("s3: credentials: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if id, err = read(c.AccessKeyIDFile, AccessKeyEnv); err != nil {
		return "", "", err
	}
	if secret, err = read(c.SecretAccessKeyFile, SecretKeyEnv); err != nil {
		return "", "", err
	}
	if (id == "") != (secret == "") {
		return "", "", errors.New("s3: an access key id needs its secret and the other way round")
	}
	return id, secret, nil
}

// Store implements store.BlobStore on a bucket. It is safe for concurrent
// use.
type Store struct {
	cfg    Config
	client *minio.Client
	log    *slog.Logger
}

func newClient(cfg Config) (*minio.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.Endpoint)
	id, secret, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = cfg.Timeout
	tc, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	opts := &minio.Options{
		Secure: u.Scheme == "https", Transport: tr, Region: cfg.Region, BucketLookup: lookups[cfg.BucketLookup],
		MaxRetries: 3,
	}
	if id != "" {
		opts.Creds = credentials.NewStaticV4(id, secret, "")
	}
	return minio.New(u.Host, opts)
}

// Open connects to the bucket (after ApplyDefaults) and checks that it
// exists.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Store, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3: bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, unavailable(err))
	}
	if !ok {
		return nil, fmt.Errorf("s3: bucket %s does not exist at %s: run `rootline storage init`", cfg.Bucket, cfg.Endpoint)
	}
	logger = logger.With("component", "s3")
	logger.Info("opened", "endpoint", cfg.Endpoint, "bucket", cfg.Bucket, "prefix", cfg.Prefix)
	return &Store{cfg: cfg, client: c, log: logger}, nil
}

// Init creates the bucket when missing, and a lifecycle rule that aborts
// multipart uploads left incomplete for a day; a server that does not
// support lifecycle rules only gets a warning. It is idempotent.
func Init(ctx context.Context, cfg Config, logger *slog.Logger) (created bool, err error) {
	c, err := newClient(cfg)
	if err != nil {
		return false, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return false, fmt.Errorf("s3: bucket %s: %w", cfg.Bucket, unavailable(err))
	}
	if !ok {
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			if code := minio.ToErrorResponse(err).Code; code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
				return false, fmt.Errorf("s3: create bucket %s: %w", cfg.Bucket, err)
			}
		} else {
			created = true
		}
	}
	lc := lifecycle.NewConfiguration()
	lc.Rules = []lifecycle.Rule{{
		ID: "rootline-abort-incomplete-uploads", Status: "Enabled",
		RuleFilter:                     lifecycle.Filter{Prefix: cfg.Prefix},
		AbortIncompleteMultipartUpload: lifecycle.AbortIncompleteMultipartUpload{DaysAfterInitiation: 1},
	}}
	if err := c.SetBucketLifecycle(ctx, cfg.Bucket, lc); err != nil {
		logger.Warn("the S3 server refused the lifecycle rule that aborts incomplete uploads; abort them by other means",
			"bucket", cfg.Bucket, "err", err)
	}
	return created, nil
}

func (s *Store) key(digest string) string { return s.cfg.Prefix + digest }

// unavailable marks errors a later attempt may not meet (the server cannot
// be reached, answers 5xx or throttles) as store.ErrUnavailable.
func unavailable(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	r := minio.ToErrorResponse(err)
	if r.StatusCode != 0 && r.StatusCode < 500 && r.StatusCode != http.StatusTooManyRequests && r.StatusCode != http.StatusRequestTimeout {
		return err
	}
	return errors.Join(store.ErrUnavailable, err)
}

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey"
}

// Put stores the content of r under its SHA-256 and returns the digest and
// size.
func (s *Store) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	if err := ctx.Err(); err != nil {
		return "", 0, err
	}
	sha := sha256.New()
	mem := &bytes.Buffer{}
	n, err := io.Copy(io.MultiWriter(mem, sha), io.LimitReader(r, s.cfg.PartSize+1))
	if err != nil {
		return "", 0, fmt.Errorf("s3: read content: %w", err)
	}
	body, size := io.ReadSeeker(bytes.NewReader(mem.Bytes())), n
	if n > s.cfg.PartSize {
		f, err := os.CreateTemp(s.cfg.SpoolDir, "rootline-blob-*")
		if err != nil {
			return "", 0, fmt.Errorf("s3: spool content: %w", err)
		}
		defer func() { f.Close(); os.Remove(f.Name()) }()
		if _, err := f.Write(mem.Bytes()); err != nil {
			return "", 0, fmt.Errorf("s3: spool content: %w", err)
		}
		mem = nil
		more, err := io.Copy(io.MultiWriter(f, sha), &ctxReader{ctx, r})
		if err != nil {
			return "", 0, fmt.Errorf("s3: read content: %w", err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", 0, err
		}
		body, size = f, n+more
	}
	if err := ctx.Err(); err != nil {
		return "", 0, err
	}
	digest := hex.EncodeToString(sha.Sum(nil))
	opts := minio.PutObjectOptions{
		ContentType: "application/octet-stream", SendContentMd5: true, PartSize: uint64(s.cfg.PartSize),
		DisableMultipart: size <= s.cfg.PartSize, UserMetadata: map[string]string{"Sha256": digest},
	}
	if _, err := s.client.PutObject(ctx, s.cfg.Bucket, s.key(digest), body, size, opts); err != nil {
		if ctx.Err() != nil {
			return "", 0, ctx.Err()
		}
		return "", 0, fmt.Errorf("s3: put %s: %w", digest, unavailable(err))
	}
	return digest, size, nil
}

// ctxReader ends a long read when its context does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open returns the content of a blob, checked against its digest as it is
// read: the read that reaches the end fails with ErrCorrupt on a mismatch.
func (s *Store) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	if _, err := s.Stat(ctx, digest); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, s.key(digest), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("s3: open %s: %w", digest, unavailable(err))
	}
	return &verifier{rc: obj, want: digest, h: sha256.New()}, nil
}

type verifier struct {
	rc   io.ReadCloser
	want string
	h    hash.Hash
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, fmt.Errorf("%w: %s read back as %s", ErrCorrupt, v.want, got)
		}
	} else if err != nil && notFound(err) {
		err = fmt.Errorf("s3: %s: %w", v.want, store.ErrNotFound)
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }

// Stat returns a blob's size and modification time.
func (s *Store) Stat(ctx context.Context, digest string) (store.BlobInfo, error) {
	if !store.ValidDigest(digest) {
		return store.BlobInfo{}, fmt.Errorf("s3: %q: %w", digest, store.ErrBadDigest)
	}
	info, err := s.client.StatObject(ctx, s.cfg.Bucket, s.key(digest), minio.StatObjectOptions{})
	if err != nil {
		if notFound(err) {
			return store.BlobInfo{}, fmt.Errorf("s3: %s: %w", digest, store.ErrNotFound)
		}
		return store.BlobInfo{}, fmt.Errorf("s3: stat %s: %w", digest, unavailable(err))
	}
	return store.BlobInfo{Digest: digest, Size: info.Size, Modified: info.LastModified}, nil
}

// Delete removes a blob; a missing one is not an error.
func (s *Store) Delete(ctx context.Context, digest string) error {
	if !store.ValidDigest(digest) {
		return fmt.Errorf("s3: %q: %w", digest, store.ErrBadDigest)
	}
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.key(digest), minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("s3: delete %s: %w", digest, unavailable(err))
	}
	return nil
}

// List calls fn for every blob under the prefix. Objects whose names are
// not digests (not written by this package) are skipped.
func (s *Store) List(ctx context.Context, fn func(store.BlobInfo) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine when fn fails
	for obj := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix, Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("s3: list: %w", unavailable(obj.Err))
		}
		d := strings.TrimPrefix(obj.Key, s.cfg.Prefix)
		if !store.ValidDigest(d) {
			continue
		}
		if err := fn(store.BlobInfo{Digest: d, Size: obj.Size, Modified: obj.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}
