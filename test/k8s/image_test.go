package k8s

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/rootline/rootline/internal/image"
)

// extract writes img's filesystem into dir (regular files and folders,
// with their modes).
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode&0o777)|0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("unexpected entry %s of type %c", h.Name, h.Typeflag)
		}
	}
}

// TestImage reads back the image `make image` wrote, checks its config,
// runs the binary from its layers, and builds it again from that binary:
// the digest must be the same (reproducible).
func TestImage(t *testing.T) {
	needCluster(t)
	img, err := image.ReadLayout(os.Getenv("ROOTLINE_IMAGE_LAYOUT"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/rootline" {
		t.Fatalf("config: user %q entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	dir := t.TempDir()
	extract(t, img, dir)
	bin := filepath.Join(dir, "rootline")
	got, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("rootline version from the image: %v\n%s", err, got)
	}
	want, err := exec.Command(os.Getenv("ROOTLINE_BIN"), "version").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || !strings.HasPrefix(string(got), "rootline ") {
		t.Fatalf("image binary says %q, bin/rootline says %q", got, want)
	}
	// The binary needs no file of the image but itself: it runs with the
	// extracted folder as its root's only content (no libc, no loader).
	if out, err := exec.Command("file", bin).Output(); err == nil && strings.Contains(string(out), "dynamically linked") {
		t.Fatalf("image binary is dynamically linked: %s", out)
	}

	again, err := image.Build(image.Options{
		Binary: bin, Version: cf.Config.Labels["org.opencontainers.image.version"],
		Created: cf.Created.Time, Architecture: cf.Architecture,
	})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("rebuilt from the same binary: %s, make image wrote %s", d2, d1)
	}
	t.Logf("image %s: rootline version from its layer: %s", d1, strings.TrimSpace(string(got)))
}

var pushed struct {
	once          sync.Once
	rootline, app string
	err           error
}

// testImages pushes the Rootline image and an application image whose
// config has an ENTRYPOINT and a CMD (with a $(...) that Kubernetes must not
// expand) to the test registry, once, and returns their references.
func testImages(t *testing.T) (rootlineRef, appRef string) {
	t.Helper()
	pushed.once.Do(func() {
		reg := registryHost()
		img, err := image.ReadLayout(os.Getenv("ROOTLINE_IMAGE_LAYOUT"))
		if err != nil {
			pushed.err = err
			return
		}
		pushed.rootline = reg + "/rootline:test"
		ref, _ := name.ParseReference(pushed.rootline)
		if pushed.err = remote.Write(ref, img); pushed.err != nil {
			return
		}
		app, err := mutate.Config(empty.Image, v1.Config{
			Entrypoint: []string{"/app/shop", "--listen=:8080"},
			Cmd:        []string{"--greeting", "$(NOT_A_VAR)"},
		})
		if err != nil {
			pushed.err = err
			return
		}
		pushed.app = reg + "/shop:v1"
		ref, _ = name.ParseReference(pushed.app)
		pushed.err = remote.Write(ref, app)
	})
	if pushed.err != nil {
		t.Fatalf("pushing the test images: %v", pushed.err)
	}
	return pushed.rootline, pushed.app
}
