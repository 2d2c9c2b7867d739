package image

import (
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteLayout writes img as an OCI image layout in dir (replacing what is
// there), its manifest annotated with ref as org.opencontainers.image.ref.name
// (the tag `skopeo copy oci:DIR:TAG` and `crane push` use).
func WriteLayout(img v1.Image, dir, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, mutate.IndexMediaType(empty.Index, types.OCIImageIndex))
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	return nil
}

// WriteTarball writes img as a `docker load` tarball tagged ref.
func WriteTarball(img v1.Image, path, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	return nil
}

// ReadLayout returns the image of an OCI layout written by WriteLayout.
func ReadLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("oci layout: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("oci layout: %w", err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("oci layout %s: %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}
