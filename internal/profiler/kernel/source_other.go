//go:build !linux

package kernel

import (
	"fmt"
	"log/slog"
	"runtime"
)

// New reports ErrUnavailable: the recorder's events come from Linux
// tracepoints. Snapshots recorded on Linux still decode everywhere
// (DecodeSnapshot), which is what `rootline analyze` needs off Linux.
func New(cfg Config, logger *slog.Logger) (*Recorder, error) {
	return nil, fmt.Errorf("%w: the kernel recorder needs Linux (this is %s)", ErrUnavailable, runtime.GOOS)
}

// gettid has no thread ids to give off Linux.
func gettid() int { return 0 }
