//go:build !linux

package mesh

import (
	"errors"
	"syscall"
)

func procAttr(bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func pinPID(int, int) error { return errors.New("pinning a process to a CPU needs Linux") }
