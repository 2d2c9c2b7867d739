package kclock

import "golang.org/x/sys/unix"

// Boottime is CLOCK_BOOTTIME (bpf_ktime_get_boot_ns): CLOCK_MONOTONIC plus
// the time the machine was suspended.
const Boottime Clock = unix.CLOCK_BOOTTIME
