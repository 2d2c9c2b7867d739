package server

import (
	"fmt"
	"os"
	"syscall"
)

// filesystemBytes is the size of the filesystem holding dir (created if
// missing).
func filesystemBytes(dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs: %w", err)
	}
	return int64(st.Blocks) * int64(st.Bsize), nil
}
