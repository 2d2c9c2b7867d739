//go:build !linux

package demo

import "syscall"

// childAttr makes a helper process of the demo a group of its own, so that
// Ctrl-C goes to the demo, which stops it.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
