package mesh

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/rootline/rootline/internal/pidlock"
	"github.com/rootline/rootline/internal/procfs"
)

// The state of a running mesh lives beside a lock file per prefix: the lock
// is held for the mesh's lifetime (the kernel drops it when the process
// dies), so a Start that gets it knows anything left under its prefix is a
// leftover of a killed run, and the pid file says which processes were ours.

func stateDir() string {
	if os.Geteuid() == 0 {
		return "/run/rootline"
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("rootline-%d", os.Geteuid()))
}

func lockPrefix(prefix string) (*os.File, error) {
	if err := os.MkdirAll(stateDir(), 0o755); err != nil {
		return nil, err
	}
	f, err := pidlock.Take(filepath.Join(stateDir(), "mesh-"+prefix+".lock"))
	var held *pidlock.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("mesh: prefix %q (pid %s): %w", prefix, held.PID, ErrBusy)
	}
	return f, err
}

func pidFile(prefix string) string { return filepath.Join(stateDir(), "mesh-"+prefix+".pids") }

// recordPID notes a started process with its start time, so that a later
// cleanup never kills an unrelated process that reused the pid.
func recordPID(prefix string, pid int) {
	st, err := procfs.StartTime(pid)
	if err != nil {
		return
	}
	f, err := os.OpenFile(pidFile(prefix), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %d\n", pid, st)
}

func clearPIDs(prefix string) { os.Remove(pidFile(prefix)) }

// killRecorded kills the process groups of recorded processes still alive.
func killRecorded(prefix string) int {
	f, err := os.Open(pidFile(prefix))
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var st uint64
		if _, err := fmt.Sscan(sc.Text(), &pid, &st); err != nil || pid <= 1 {
			continue
		}
		// The same process, even a zombie: its group may still hold
		// processes to kill.
		if now, err := procfs.StartTime(pid); err == nil && now == st {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}
