// Shared with internal/run/readtap (Go reads these from raw bytes).
#pragma once

#include <linux/types.h>

// A read is copied in chunks of at most RR_CHUNK bytes, at most
// RR_MAX_CHUNKS of them; a longer read is flagged RR_F_TRUNC.
#define RR_CHUNK 8192
#define RR_MAX_CHUNKS 16

#define RR_F_LAST 1  // the read's last chunk
#define RR_F_TRUNC 2 // the read was longer than RR_CHUNK * RR_MAX_CHUNKS

// rr_key: a watched socket, (process, descriptor).
struct rr_key {
	__u32 tgid;
	__s32 fd;
};

// rr_watch: the value of a watched socket.
struct rr_watch {
	__u32 seq; // successful reads so far
	__u32 _pad;
};

// rr_read: one chunk of a successful read on a watched socket. Only the
// first len bytes of data are written to the ring buffer.
struct rr_read {
	__u64 ts;    // CLOCK_MONOTONIC at the read's exit
	__u64 g;     // the thread's R14 at the call (Go's current goroutine)
	__u64 run_delay; // the thread's run-queue wait so far (schedstat's 2nd field)
	__u32 tgid;
	__u32 tid;
	__s32 fd;
	__u32 seq;   // the read's number on this socket (rr_watch.seq)
	__u32 off;   // offset of this chunk in the read
	__u32 len;   // bytes of data in this chunk
	__u32 total; // bytes the read returned
	__u32 flags; // RR_F_*
	__u8 data[2 * RR_CHUNK]; // twice the chunk so the verifier sees a bounded copy
};
