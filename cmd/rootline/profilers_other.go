//go:build !linux

package main

import (
	"errors"
	"io"
)

// enableBPFStats: BPF is Linux's.
func enableBPFStats() (io.Closer, error) {
	return nil, errors.New("BPF statistics are Linux-only")
}
