// Shared between bpf/kmetrics.c and its Go loader (internal/kmetrics reads
// these structs through the bpf2go-generated types in kmetrics_bpfel.go).
// Layout rules: bpf/README.md.
#pragma once

#include <linux/types.h>

// Metric ids: the index of a metric in kmetrics_config.rate and its bit in
// kmetrics_config.enabled. Must match the Metric constants in
// internal/kmetrics/metric.go.
#define KM_ONCPU 0          // on-CPU time per run interval, ns (histogram)
#define KM_OFFCPU 1         // blocked time, switch-out (not runnable) to switch-in, ns (histogram)
#define KM_RUNQ 2           // run-queue latency, wakeup or preemption to switch-in, ns (histogram)
#define KM_PF_USER 3        // page faults from user mode (counter)
#define KM_PF_KERNEL 4      // page faults in kernel mode (counter)
#define KM_DISK_BYTES 5     // block request size at issue, bytes (histogram)
#define KM_DISK_LAT 6       // block request issue to completion, ns (histogram)
#define KM_TCP_SEND 7       // bytes per successful send on a TCP socket (histogram)
#define KM_TCP_RECV 8       // bytes per successful receive on a TCP socket (histogram)
#define KM_TCP_RETRANS 9    // TCP segment retransmissions (counter)
#define KM_TCP_SYNACK 10    // SYN/ACK retransmissions (counter)
#define KM_DROPS 11         // freed-not-consumed packets, by drop reason (counter)
#define KM_DNS_LAT 12       // UDP query to port 53 until the first reply is read, ns (histogram)
#define KM_TLB_FLUSH 13     // TLB flushes; sum = pages flushed (counter)
#define KM_NR_METRICS 14
#define KM_MAX_METRICS 16   // room in kmetrics_config.rate

#define KM_BUCKETS 64       // log2 buckets: bucket i counts values v with floor(log2(v)) == i (v=0 in bucket 0)
#define KM_DROP_REASONS 256 // drop reasons above this are folded into reason 0
#define KM_FAST_KEYS 8      // config keys scanned before (instead of) a hash lookup

// Container keys: the cgroup v2 id (kernfs node id of the unified
// hierarchy), or the cgroup v1 id of the cpu controller's hierarchy with
// KM_V1_BIT set (ids of different hierarchies may collide). Key 0 in the
// config map is the default for every container without its own entry.
#define KM_V1_BIT (1ULL << 63)

// kmetrics_config: the config map's value (ViperProbe Algorithm 1). A metric
// is recorded for a container when bit KM_x of enabled is set; then 1 event in
// rate[KM_x] is sampled (0 and 1 mean every event).
struct kmetrics_config {
	__u32 rate[KM_MAX_METRICS];
	__u32 enabled;
	__u32 _pad;
};

// kmetrics_key: the key of the histogram map.
struct kmetrics_key {
	__u64 cgroup;  // container key (see KM_V1_BIT)
	__u32 metric;  // KM_x
	__u32 _pad;
};

// kmetrics_hist: the per-CPU value of the histogram map. Counters use count
// and sum only.
struct kmetrics_hist {
	__u64 count;
	__u64 sum;
	__u64 buckets[KM_BUCKETS];
};

// kmetrics_drop_key: the key of the drop counters (value: per-CPU __u64).
struct kmetrics_drop_key {
	__u64 cgroup;
	__u32 reason;  // enum skb_drop_reason
	__u32 _pad;
};

// kmetrics_globals: the one entry of km_globals. dflt is the config of every
// container without its own entry; gen is bumped by user space on every
// config change so that intervals started under an older config are dropped;
// keys lists the config map's keys while they are few, so that events of
// containers without an entry (the common, untargeted case) skip the hash
// lookup; v1 is non-zero while some config key is a cgroup v1 key (only then
// is the second lookup paid). Written by internal/kmetrics/bpf_linux.go.
struct kmetrics_globals {
	struct kmetrics_config dflt;
	__u64 gen;
	__u64 keys[KM_FAST_KEYS]; // the config map's keys, while there are at most KM_FAST_KEYS
	__u32 nkeys;              // keys in the config map
	__u32 v1;
};
