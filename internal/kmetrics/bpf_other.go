//go:build !linux

package kmetrics

import "fmt"

// LoadKernel fails: the BPF programs need Linux.
func LoadKernel() (Kernel, error) {
	return nil, fmt.Errorf("%w: needs Linux", ErrUnavailable)
}
