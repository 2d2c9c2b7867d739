//go:build !linux || !amd64

package supervisor

import (
	"context"
	"errors"
)

// MaybeLauncher does nothing outside Linux on x86-64.
func MaybeLauncher() {}

// Config configures Run.
type Config struct{}

// Hooks are not called outside Linux on x86-64.
type Hooks struct{}

// Run is only implemented on Linux on x86-64.
func Run(ctx context.Context, cfg Config, argv []string, hooks Hooks) (int, error) {
	return -1, errors.New("supervisor: only supported on linux/amd64")
}
