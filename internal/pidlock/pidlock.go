// Package pidlock takes lock files that name their holder: an exclusive
// flock, held while the file stays open and dropped by the kernel when the
// process dies, on a file that holds the holder's pid.
package pidlock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// HeldError is Take's error when another process holds the lock.
type HeldError struct {
	Path string
	PID  string // the holder's pid as its file says, "" if unknown
}

func (e *HeldError) Error() string {
	if e.PID == "" {
		return e.Path + ": held by another process"
	}
	return fmt.Sprintf("%s: held by process %s", e.Path, e.PID)
}

// Take locks path (made if missing) without waiting and writes this
// process's pid into it; closing the file releases the lock. When another
// process holds it, the error is a *HeldError.
func Take(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &HeldError{Path: path, PID: strings.TrimSpace(string(b))}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
