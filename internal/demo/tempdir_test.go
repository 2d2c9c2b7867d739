package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/procfs"
)

// A demo removes what killed demos left in the temporary directory, and
// nothing else: not a live demo's directory, not one without an owner.
func TestTempDirRemovesStale(t *testing.T) {
	start, err := procfs.StartTime(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, owner string) string {
		d := filepath.Join(tmp, tempPrefix+name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	live := mk("live", fmt.Sprintf("%d %d\n", os.Getpid(), start))
	reused := mk("reused", fmt.Sprintf("%d %d\n", os.Getpid(), start+1)) // our pid, another process's start
	killed := mk("killed", fmt.Sprintf("%d 12345\n", dead.Process.Pid))
	unowned := mk("unowned", "")
	d, err := tempDir()
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{live: true, reused: false, killed: false, unowned: true, d: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(dir), err == nil, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(d, ownerFile))
	if want := fmt.Sprintf("%d %d", os.Getpid(), start); err != nil || strings.TrimSpace(string(b)) != want {
		t.Errorf("owner of the new directory: %q (%v), want %q", b, err, want)
	}
}
