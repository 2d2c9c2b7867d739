//go:build !linux

package agent

import "errors"

// cgroup2SuperMagic is Linux's CGROUP2_SUPER_MAGIC (no cgroups elsewhere).
const cgroup2SuperMagic = 0x63677270

// setThreadNice is Linux-only: elsewhere the nice value is per process.
func setThreadNice(int) error {
	return errors.New("per-thread priorities are Linux-only")
}
