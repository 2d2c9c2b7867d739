//go:build !linux

package mesh

import "errors"

func attachDropper(string, float64) (func() error, error) {
	return nil, errors.New("packet loss needs Linux (a tc BPF program)")
}
