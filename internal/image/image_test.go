package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

func writeFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rootline")
	if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReproducible: the same binary gives the same digest however often and
// whenever it is built, a different binary or time a different one, and the
// layout written and read back holds that same image.
func TestReproducible(t *testing.T) {
	bin := writeFile(t, "#!/bin/sh\necho rootline\n")
	opts := Options{Binary: bin, Version: "v1", Created: time.Unix(1700000000, 0), Architecture: "amd64"}
	a, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a build that read the clock would differ now
	b, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of one binary: %s and %s", da, db)
	}
	other := opts
	other.Binary = writeFile(t, "#!/bin/sh\necho other\n")
	c, _ := Build(other)
	if dc, _ := c.Digest(); dc == da {
		t.Fatalf("a different binary gave the same digest %s", dc)
	}
	later := opts
	later.Created = opts.Created.Add(time.Second)
	d, _ := Build(later)
	if dd, _ := d.Digest(); dd == da {
		t.Fatalf("a different SOURCE_DATE_EPOCH gave the same digest %s", dd)
	}

	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(a, dir, "rootline:v1"); err != nil {
		t.Fatal(err)
	}
	back, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dback, _ := back.Digest(); dback != da {
		t.Fatalf("layout holds %s, built %s", dback, da)
	}
}

// TestContents checks the config (entrypoint, non-root user, working
// directory) and the layer: sorted entries, fixed times and owners, the
// binary's bytes and mode.
func TestContents(t *testing.T) {
	const script = "#!/bin/sh\necho rootline\n"
	created := time.Unix(1700000000, 0).UTC()
	img, err := Build(Options{Binary: writeFile(t, script), Version: "v9", Created: created, Architecture: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/rootline" {
		t.Errorf("entrypoint %q", got)
	}
	if cf.Config.User != "65532:65532" || cf.Config.WorkingDir != DataDir || cf.Architecture != "arm64" || cf.OS != "linux" {
		t.Errorf("config user %q workdir %q platform %s/%s", cf.Config.User, cf.Config.WorkingDir, cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(created) || cf.Config.Labels["org.opencontainers.image.version"] != "v9" {
		t.Errorf("created %v labels %v", cf.Created, cf.Config.Labels)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		names = append(names, name)
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
		switch name {
		case "rootline":
			data, _ := io.ReadAll(tr)
			if string(data) != script || h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("binary: %q mode %o uid %d", data, h.Mode, h.Uid)
			}
		case "var/lib/rootline":
			if h.Uid != NonRootUID || h.Mode != 0o750 {
				t.Errorf("data dir uid %d mode %o", h.Uid, h.Mode)
			}
		case "tmp":
			if h.Mode != 0o1777 {
				t.Errorf("tmp mode %o", h.Mode)
			}
		}
	}
	want := []string{"etc", "etc/group", "etc/passwd", "home", "home/nonroot", "root", "rootline", "tmp", "var", "var/lib", "var/lib/rootline"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
}

// TestRefusesDynamic: a binary that needs a dynamic loader would not start
// in the image; Build says so.
func TestRefusesDynamic(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh to use as a dynamically linked binary")
	}
	_, err := Build(Options{Binary: "/bin/sh", Architecture: "amd64"})
	if !errors.Is(err, ErrNotStatic) {
		t.Fatalf("Build(/bin/sh) = %v, want ErrNotStatic", err)
	}
}
