// Shared layout of the goroutine tracker (bpf/go_sched.c), mirrored in Go by
// bpf2go (internal/profiler/goroutine/gosched_bpfel.go): change both sides
// together and run `go generate ./internal/profiler/goroutine/`.
#pragma once

#include <linux/types.h>

// struct go_sched_config is element 0 of the gs_config array.
struct go_sched_config {
	__u32 wakeup_bytes; // wake the reader only once this much data is
	                    // pending (0: on every event); it also polls
	__u32 _pad;
};

// struct go_sched_layout is a tracked process's runtime.g layout
// (gs_layout, by tgid).
struct go_sched_layout {
	__u32 goid_off;       // offset of runtime.g.goid (int64 / uint64)
	__u32 waitreason_off; // offset of runtime.g.waitreason (uint8)
};

// struct go_sched_event is one goroutine status change: runtime.casgstatus
// (gp, oldval, newval) as the thread tid called it.
struct go_sched_event {
	__u64 ktime_ns; // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u64 goid;     // gp's goroutine id
	__u32 tgid;
	__u32 tid;
	__u32 oldval; // runtime _G* status, _Gscan bit cleared
	__u32 newval;
	__u8 reason; // gp.waitreason when newval is _Gwaiting, else 0
	__u8 _pad[7];
};
