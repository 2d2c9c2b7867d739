// Package image builds Rootline's OCI image — one image for every role, the
// first argument choosing it — without Docker: a single layer holding the
// static rootline binary and the few files a distroless image has, written
// as an OCI image layout or a tarball that `docker load` and `ctr import`
// read, or pushed to a registry.
//
// The build is reproducible: the same binary gives the same image digest.
// Every tar entry has a fixed time (Options.Created), fixed owners and
// modes, and the entries are written in sorted order; the config's created
// time is the same fixed time.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRootUID is the image's default user (distroless' "nonroot"). The server
// and the webhook run as it; the agent and privileged roles override it
// with runAsUser: 0 in their manifests.
const NonRootUID = 65532

// BinaryPath is where the binary is in the image (its ENTRYPOINT).
const BinaryPath = "/rootline"

// DataDir is the image's working directory, writable by NonRootUID: the
// server's default --data-dir (rootline-data) lands in it, and a volume
// mounted there keeps the store.
const DataDir = "/var/lib/rootline"

// Options are the inputs of Build.
type Options struct {
	// Binary is the path of the rootline binary (statically linked:
	// CGO_ENABLED=0, since the image has no libc).
	Binary string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Created is the time of every file and of the image; the zero value
	// is the Unix epoch. SOURCE_DATE_EPOCH is the usual source.
	Created time.Time
	// Architecture is the image's platform architecture (e.g. amd64).
	Architecture string
}

// ErrNotStatic is returned by Build for a binary that needs a dynamic loader.
var ErrNotStatic = errors.New("binary is dynamically linked (build it with CGO_ENABLED=0)")

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	if o.Architecture == "" {
		return nil, errors.New("image: the architecture is required")
	}
	created := o.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if isDynamic(bin) {
		return nil, fmt.Errorf("image: %s: %w", o.Binary, ErrNotStatic)
	}
	layerTar, err := rootfs(bin, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "rootline image build", Comment: "rootline binary"},
	})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = o.Architecture
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir: DataDir,
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "rootline",
			"org.opencontainers.image.description": "Rootline: why was this request slow (server, agent, run, webhook: the first argument picks the role)",
			"org.opencontainers.image.version":     o.Version,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// rootfs is the image's single layer, uncompressed.
func rootfs(bin []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	dir := func(name string, mode int64, uid int) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid}}
	}
	file := func(name string, mode int64, data []byte) entry {
		return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootUID, NonRootUID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootUID)
	entries := []entry{
		file(BinaryPath[1:], 0o755, bin),
		dir("etc", 0o755, 0),
		file("etc/passwd", 0o644, []byte(passwd)),
		file("etc/group", 0o644, []byte(group)),
		dir("home", 0o755, 0),
		dir("home/nonroot", 0o700, NonRootUID),
		dir("root", 0o700, 0),
		dir("tmp", 0o1777, 0),
		dir("var", 0o755, 0),
		dir("var/lib", 0o755, 0),
		dir(DataDir[1:], 0o750, NonRootUID),
	}
	sort.Slice(entries, func(i, j int) bool {
		return path.Clean(entries[i].hdr.Name) < path.Clean(entries[j].hdr.Name)
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = mtime
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// isDynamic reports whether an ELF binary asks for a program interpreter
// (PT_INTERP), which the image does not have. A file that is not ELF is not
// judged here.
func isDynamic(bin []byte) bool {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}
