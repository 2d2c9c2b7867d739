// Shared layout of the CPU sampler (bpf/cpu_sample.c). Every struct here is
// mirrored in Go by bpf2go (internal/profiler/cpu/cpusample_bpfel.go) and read
// by internal/profiler/cpu/reader.go: change both sides together and run
// `go generate ./internal/profiler/cpu/`. See bpf/README.md for the rules.
#pragma once

#include <linux/types.h>

// MAX_STACK_FRAMES is the deepest stack recorded; deeper stacks are cut.
#define MAX_STACK_FRAMES 127
#define TASK_COMM_LEN 16

// struct cpu_sample_config is element 0 of the cpu_config array.
struct cpu_sample_config {
	__u32 all;          // non-zero: sample every process, not only cpu_targets
	__u32 wakeup_bytes; // wake the reader only once this much data is
	                    // pending (0: on every sample); it also polls

};

// struct cpu_sample_event is one sample in the cpu_events ring buffer.
// Fixed size; 8-byte aligned fields first, explicit padding, no holes.
struct cpu_sample_event {
	__u64 ktime_ns;  // bpf_ktime_get_ns (CLOCK_MONOTONIC)
	__u32 tgid;      // process id
	__u32 tid;       // thread id
	__s32 user_len;  // bytes of user[] filled, or a negative errno
	__s32 kern_len;  // bytes of kern[] filled, or a negative errno
	__u32 cpu;
	__u32 _pad;
	char comm[TASK_COMM_LEN];
	__u64 user[MAX_STACK_FRAMES];
	__u64 kern[MAX_STACK_FRAMES];
};
