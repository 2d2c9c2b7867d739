// The kernel types the datapath reads (CO-RE: only the fields named here,
// relocated at load) and the user-space layouts it copies.
#pragma once

#include <linux/types.h>

struct pt_regs {
	unsigned long r14;
	unsigned long bx;
	unsigned long ax;
	unsigned long dx;
	unsigned long si;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct sched_info {
	unsigned long long run_delay;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct sched_info sched_info;
} __attribute__((preserve_access_index));

struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

struct sock_common {
	unsigned short skc_family;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	int sk_sndbuf;
	int sk_wmem_queued;
	void *sk_user_data;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 write_seq;
	__u32 rcv_nxt;    // the next byte expected
	__u32 copied_seq; // the next byte the application reads
} __attribute__((preserve_access_index));

// A received segment: its struct tcp_skb_cb (seq, end_seq) is at the start
// of cb while TCP processes it.
struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));

struct iovec_u {
	__u64 base;
	__u64 len;
};

struct user_msghdr_u {
	__u64 name;
	__s32 namelen;
	__s32 _pad;
	__u64 iov;
	__u64 iovlen;
};

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
