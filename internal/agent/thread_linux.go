package agent

import "golang.org/x/sys/unix"

// cgroup2SuperMagic is the f_type statfs reports for a cgroup v2 directory.
const cgroup2SuperMagic = unix.CGROUP2_SUPER_MAGIC

// setThreadNice sets the nice value of the calling OS thread (Linux keeps
// one per thread).
func setThreadNice(nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}
