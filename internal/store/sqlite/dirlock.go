package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile in the store's directory is held (flock) by the Store that has
// it open and names that process. Two servers on one directory would each
// run retention, checkpoints and artifact clean-up on the other's data.
const LockFile = "LOCK"

// ErrDirInUse is returned by Open when another Store holds the directory.
var ErrDirInUse = errors.New("store directory in use")

// lockDir takes dir's lock file, or says which process holds it.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "process " + pid
			}
			return nil, fmt.Errorf("sqlite: %s: %w by %s (one server per data directory)", dir, ErrDirInUse, holder)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
