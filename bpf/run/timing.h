// The Mirage wait model's clocks: run-queue delay of the threads that work
// on a request. (A downstream's timing fields are read by decode_timing in
// bpf/run/parse.h.)
#pragma once

#include "run/maps.h"
#include "run/parse.h"

static __always_inline __u64 run_delay(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	return BPF_CORE_READ(t, sched_info.run_delay);
}

// touch charges a request's run-queue wait on the calling thread since its
// last event there, and records the thread.
static __always_inline void touch(struct req *r)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 rd = run_delay();
	if (r->seg_tid == tid) {
		if (rd > r->seg_rd)
			r->local_ns += rd - r->seg_rd;
	} else {
		int known = 0;
		for (int i = 0; i < RD_MAX_TIDS; i++) {
			if (i < r->ntids && r->tids[i] == tid)
				known = 1;
		}
		if (!known && r->ntids < RD_MAX_TIDS) {
			__u32 k = r->ntids;
			if (k < RD_MAX_TIDS)
				r->tids[k] = tid;
			r->ntids = k + 1;
		}
		r->seg_tid = tid;
	}
	r->seg_rd = rd;
}
