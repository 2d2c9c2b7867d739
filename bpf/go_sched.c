// Goroutine tracker: a uprobe on the Go runtime's runtime.casgstatus(gp,
// oldval, newval), called on every goroutine status change (runnable,
// running, in a syscall, waiting), records which goroutine each thread of a
// tracked Go process runs and why a goroutine waits (gp.waitreason, set by
// gopark before the change to _Gwaiting). Go's register ABI (1.17+, amd64):
// gp in AX, oldval in BX, newval in CX. No uretprobe: Go moves stacks.
//
// Build: go generate ./internal/profiler/goroutine/ (bpf2go).

#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

#include "go_sched.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define G_SCAN 0x1000
#define G_WAITING 4
#define G_COPYSTACK 8 // a stack being grown: says nothing of the goroutine's state

// gs_layout: tgid -> the runtime.g offsets of its binary.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct go_sched_layout);
} gs_layout SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct go_sched_config);
} gs_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} gs_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gs_lost SEC(".maps");

const struct go_sched_event *unused_gs_event __attribute__((unused));
const struct go_sched_layout *unused_gs_layout __attribute__((unused));
const struct go_sched_config *unused_gs_config __attribute__((unused));

SEC("uprobe")
int go_casgstatus(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct go_sched_layout *l = bpf_map_lookup_elem(&gs_layout, &tgid);
	if (!l)
		return 0;
	void *gp = (void *)ctx->rax;
	__u32 oldval = (__u32)ctx->rbx & ~G_SCAN;
	__u32 newval = (__u32)ctx->rcx & ~G_SCAN;
	if (oldval == newval || oldval == G_COPYSTACK || newval == G_COPYSTACK)
		return 0;

	struct go_sched_event *e = bpf_ringbuf_reserve(&gs_events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&gs_lost, &zero);
		if (lost)
			*lost += 1;
		return 0;
	}
	e->ktime_ns = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->oldval = oldval;
	e->newval = newval;
	e->goid = 0;
	e->reason = 0;
	__builtin_memset(e->_pad, 0, sizeof(e->_pad));
	bpf_probe_read_user(&e->goid, sizeof(e->goid), gp + l->goid_off);
	if (newval == G_WAITING)
		bpf_probe_read_user(&e->reason, sizeof(e->reason), gp + l->waitreason_off);
	// Waking the reader per event costs more than the event: batch the
	// wake-ups; the reader polls on a timer for the rest.
	__u32 zero = 0;
	struct go_sched_config *cfg = bpf_map_lookup_elem(&gs_config, &zero);
	__u64 flags = 0;
	if (cfg && cfg->wakeup_bytes)
		flags = bpf_ringbuf_query(&gs_events, BPF_RB_AVAIL_DATA) >= cfg->wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	return 0;
}
