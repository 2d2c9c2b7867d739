//go:build !linux

package autoscale

import "time"

// threadCPU is wall time off Linux (the experiment needs Linux cgroups and
// BPF anyway).
func threadCPU() time.Duration { return time.Duration(time.Now().UnixNano()) }
