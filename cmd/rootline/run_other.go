//go:build !linux

package main

import (
	"fmt"
	"io"
)

// runRun: `rootline run` traces with ptrace, seccomp and eBPF, all Linux's.
func runRun(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "rootline run: Linux only (x86-64): it traces with ptrace, seccomp and eBPF")
	return 2
}
