package mesh

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dropCache asks the kernel to drop f's clean pages from the page cache.
func dropCache(f *os.File) error {
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("memory fault: drop %s from the page cache: %w", f.Name(), err)
	}
	return nil
}
