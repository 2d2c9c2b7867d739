// CPU sampler: a perf_event program attached to one software cpu-clock event
// per online CPU (internal/profiler/cpu opens them). On each tick it records
// the user and kernel stacks of the current thread if its process is a target.
//
// Build: go generate ./internal/profiler/cpu/ (bpf2go).

#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#include "cpu_sample.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// cpu_targets: tgid -> 1 for every recorded process.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} cpu_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_sample_config);
} cpu_config SEC(".maps");

// cpu_events: user space resizes it before load (Config.RingBufferBytes).
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} cpu_events SEC(".maps");

// cpu_lost counts samples dropped because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_lost SEC(".maps");

// Force bpf2go to emit Go types for the shared structs.
const struct cpu_sample_event *unused_event __attribute__((unused));
const struct cpu_sample_config *unused_config __attribute__((unused));

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 zero = 0;

	if (tgid == 0) // idle
		return 0;

	struct cpu_sample_config *cfg = bpf_map_lookup_elem(&cpu_config, &zero);
	if (!cfg || !cfg->all) {
		if (!bpf_map_lookup_elem(&cpu_targets, &tgid))
			return 0;
	}

	struct cpu_sample_event *e = bpf_ringbuf_reserve(&cpu_events, sizeof(*e), 0);
	if (!e) {
		__u64 *lost = bpf_map_lookup_elem(&cpu_lost, &zero);
		if (lost)
			*lost += 1; // per-CPU slot: no atomic needed
		return 0;
	}

	e->ktime_ns = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->cpu = bpf_get_smp_processor_id();
	e->_pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->user_len = bpf_get_stack(ctx, e->user, sizeof(e->user), BPF_F_USER_STACK);
	e->kern_len = bpf_get_stack(ctx, e->kern, sizeof(e->kern), 0);

	// Waking the reader per sample costs more than the sample: batch the
	// wake-ups; the reader polls on a timer for the rest.
	__u64 flags = 0;
	if (cfg && cfg->wakeup_bytes)
		flags = bpf_ringbuf_query(&cpu_events, BPF_RB_AVAIL_DATA) >= cfg->wakeup_bytes ?
				BPF_RB_FORCE_WAKEUP :
				BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	return 0;
}
