package webhook

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry resolves an image's ENTRYPOINT and CMD from its registry's image
// config (the manifest and the config blob, no layers), with the keychain
// of a Docker config file ($DOCKER_CONFIG) for private registries.
//
// Answers are cached: by digest for good (a digest names one config), by
// tag for TagTTL, failures for FailTTL, so that a ReplicaSet creating 100
// Pods asks the registry once, and a registry outage costs one time-out per
// image per FailTTL, not one per Pod.
type Registry struct {
	// TagTTL is how long a tag's answer is kept (a tag may be moved).
	TagTTL time.Duration
	// FailTTL is how long a failure is kept.
	FailTTL time.Duration
	// Platform chooses the image of a multi-platform index.
	Platform v1.Platform
	// Transport is the HTTP transport (nil: the default).
	Transport http.RoundTripper
	// Keychain finds credentials (nil: anonymous).
	Keychain authn.Keychain

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	entrypoint, cmd []string
	err             error
	until           time.Time // zero: for good
}

// maxCached bounds the cache; past it, it starts again empty.
const maxCached = 4096

// NewRegistry returns a Registry for images of this platform, with the
// default keychain.
func NewRegistry() *Registry {
	return &Registry{
		TagTTL:   10 * time.Minute,
		FailTTL:  time.Minute,
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Keychain: authn.DefaultKeychain,
	}
}

// Resolve implements Resolver.
func (r *Registry) Resolve(ctx context.Context, image string) ([]string, []string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, nil, fmt.Errorf("image %q: %w", image, err)
	}
	key := ref.Name()
	now := time.Now()
	r.mu.Lock()
	if c, ok := r.cache[key]; ok && (c.until.IsZero() || now.Before(c.until)) {
		r.mu.Unlock()
		return c.entrypoint, c.cmd, c.err
	}
	r.mu.Unlock()

	ep, cmd, err := r.fetch(ctx, ref)
	if ctx.Err() != nil && err != nil {
		// A time-out of this request is not the registry's answer: do not
		// keep it for the next Pod, which may have more time.
		return nil, nil, fmt.Errorf("image %s: registry did not answer in time: %w", key, err)
	}
	c := cached{entrypoint: ep, cmd: cmd, err: err}
	switch {
	case err != nil:
		c.until = now.Add(r.FailTTL)
	case !isDigest(ref):
		c.until = now.Add(r.TagTTL)
	}
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= maxCached {
		r.cache = map[string]cached{}
	}
	r.cache[key] = c
	r.mu.Unlock()
	return ep, cmd, err
}

func (r *Registry) fetch(ctx context.Context, ref name.Reference) ([]string, []string, error) {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(r.Platform)}
	if r.Keychain != nil {
		opts = append(opts, remote.WithAuthFromKeychain(r.Keychain))
	}
	if r.Transport != nil {
		opts = append(opts, remote.WithTransport(r.Transport))
	}
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: %w", ref.Name(), err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("image %s: config: %w", ref.Name(), err)
	}
	return cf.Config.Entrypoint, cf.Config.Cmd, nil
}

func isDigest(ref name.Reference) bool {
	_, ok := ref.(name.Digest)
	return ok
}
