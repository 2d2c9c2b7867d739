//go:build linux && amd64

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// launcherEnv marks a re-execution of the rootline binary as the launcher
// of a traced command. Its value selects the mode; only "1" exists.
const launcherEnv = "ROOTLINE_SUPERVISOR_EXEC"

// untracedEnv passes Config.Untraced to the launcher: comma-separated
// syscall numbers left out of the filter.
const untracedEnv = "ROOTLINE_SUPERVISOR_UNTRACED"

// MaybeLauncher turns the current process into the launcher of a traced
// command when the supervisor started it, and returns otherwise. main (and a
// test binary's TestMain) MUST call it first, before flags are parsed or any
// goroutine started: Go cannot run code between fork and exec, so Run
// re-executes the binary, which installs the seccomp filter on its own
// thread and then execs the command in place (argv is os.Args[1:]).
// MaybeLauncher does not return in launcher mode.
func MaybeLauncher() {
	if os.Getenv(launcherEnv) != "1" {
		return
	}
	runtime.LockOSThread()
	os.Unsetenv(launcherEnv)
	untraced := os.Getenv(untracedEnv)
	os.Unsetenv(untracedEnv)
	err := launch(os.Args[1:], untraced)
	fmt.Fprintf(os.Stderr, "rootline: launcher: %v\n", err)
	os.Exit(127)
}

func launch(argv []string, untraced string) error {
	if len(argv) == 0 {
		return errors.New("no command")
	}
	skip := map[uint32]bool{}
	for _, f := range strings.Split(untraced, ",") {
		if f == "" {
			continue
		}
		nr, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", untracedEnv, untraced, err)
		}
		skip[uint32(nr)] = true
	}
	var traced []uint32
	for _, nr := range TracedSyscalls {
		if !skip[nr] {
			traced = append(traced, nr)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if _, err := installFilter(buildFilter(traced, unix.SECCOMP_RET_TRACE), 0); err != nil {
		return err
	}
	// The thread is locked, so exec runs on the filtered thread.
	return syscall.Exec(path, argv, os.Environ())
}
