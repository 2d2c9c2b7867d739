package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rootline/rootline/internal/pidlock"
)

// LockFile in the store's directory is held by the Store that has it open
// and names that process. Two servers on one directory would each run
// retention, checkpoints and artifact clean-up on the other's data.
const LockFile = "LOCK"

// ErrDirInUse is returned by Open when another Store holds the directory.
var ErrDirInUse = errors.New("store directory in use")

// lockDir takes dir's lock file, or says which process holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := pidlock.Take(filepath.Join(dir, LockFile))
	var held *pidlock.HeldError
	switch {
	case errors.As(err, &held):
		holder := "another process"
		if held.PID != "" {
			holder = "process " + held.PID
		}
		return nil, fmt.Errorf("sqlite: %s: %w by %s (one server per data directory)", dir, ErrDirInUse, holder)
	case err != nil:
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return f, nil
}
