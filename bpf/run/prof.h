// Profiling checkpoints of the datapath (bench/datapath-prof.sh): built with
// -DRD_PROF, PROF(i) adds the time since the previous checkpoint to slot i
// of the per-CPU map rd_prof and counts it at slot 64 + i (~0.1-0.15 µs
// each); PROF_START() starts a program's timeline. Without RD_PROF they are
// nothing.
#pragma once

#include "run/maps.h"

#ifdef RD_PROF
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 128);
	__type(key, __u32);
	__type(value, __u64);
} rd_prof SEC(".maps");
static __always_inline void prof_start(void)
{
	__u32 k = 127;
	__u64 *l = bpf_map_lookup_elem(&rd_prof, &k);
	if (l)
		*l = bpf_ktime_get_ns();
}
static __always_inline void prof(__u32 i)
{
	__u32 k = 127;
	__u64 *l = bpf_map_lookup_elem(&rd_prof, &k);
	if (!l)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 *v = bpf_map_lookup_elem(&rd_prof, &i);
	if (v)
		*v += now - *l;
	__u32 j = i + 64;
	__u64 *n = bpf_map_lookup_elem(&rd_prof, &j);
	if (n)
		*n += 1;
	*l = bpf_ktime_get_ns();
}
#define PROF_START() prof_start()
#define PROF(i) prof(i)
#else
#define PROF_START()
#define PROF(i)
#endif
