package demo

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rootline/rootline/internal/procfs"
)

const (
	tempPrefix = "rootline-demo-"
	// ownerFile in a demo's temporary directory names the demo that made it
	// (pid and start time), so that a later demo can tell a live one's
	// directory from a killed one's.
	ownerFile = "owner"
)

// tempDir makes the demo's temporary directory (its store, the mesh's
// files, the agent's log and token) after removing those that demos killed
// before their cleanup left behind.
func tempDir() (string, error) {
	removeStaleTempDirs()
	d, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return "", err
	}
	if start, err := procfs.StartTime(os.Getpid()); err == nil {
		_ = os.WriteFile(filepath.Join(d, ownerFile), fmt.Appendf(nil, "%d %d\n", os.Getpid(), start), 0o600)
	}
	return d, nil
}

// removeStaleTempDirs removes the temporary directories of demos that no
// longer run. A directory without an owner (one being made, or an older
// build's) is left alone, and so is everything where /proc cannot tell.
func removeStaleTempDirs() {
	if _, err := procfs.StartTime(os.Getpid()); err != nil {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		var pid int
		var start uint64
		if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil || procfs.Alive(pid, start) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
