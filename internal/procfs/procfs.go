// Package procfs reads what Rootline needs of /proc.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StartTime is when process pid started, in clock ticks since boot (field 22
// of /proc/<pid>/stat). With the pid it names one process: a pid reused by
// another process has another start time.
func StartTime(pid int) (uint64, error) {
	st, _, err := stat(pid)
	return st, err
}

// stat reads the start time and the state (field 3: R, S, D, Z…) of pid.
func stat(pid int) (start uint64, state string, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// The fields after the command name, which may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state); starttime is field 22.
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0], err
}

// Alive reports whether the process pid that started at start still runs.
// A zombie (exited, not yet reaped by its parent) does not: its memory and
// file descriptors are gone, only its pid and start time are left.
func Alive(pid int, start uint64) bool {
	st, state, err := stat(pid)
	return err == nil && st == start && notExited(state)
}

// Running reports whether process pid exists and has not exited (a zombie
// has).
func Running(pid int) bool {
	_, state, err := stat(pid)
	return err == nil && notExited(state)
}

// notExited: any state but zombie (Z) and dead (X).
func notExited(state string) bool { return state != "Z" && state != "X" }
