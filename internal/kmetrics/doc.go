// Package kmetrics collects per-container kernel metrics with eBPF, after
// ViperProbe (Brown honors thesis, 2020, §4, Table 2, Algorithm 1): log2
// histograms and counters keyed by (metric, container), switched on, off
// and sampled per container and per metric at run time without reloading
// programs.
//
// # Kernel side
//
// bpf/kmetrics.c holds one tp_btf program per tracepoint (kprobes and fentry
// do not work on the target kernels; see ../shared/MACHINE-NOTES.md). Each
// program finds the container of the event — the task's cgroup v2 id, or on
// hybrid hosts its cgroup v1 id in the cpu controller's hierarchy (marked with
// V1Bit), or for TCP retransmissions and drops the socket's cgroup v2 id —
// looks up its config in a hash map (falling back to a default entry), and
// returns unless the metric is enabled there; then it samples 1 event in N
// with bpf_get_prandom_u32 (Algorithm 1). Values go to per-CPU maps. The
// Manager attaches a program only while some container (or the default)
// enables a metric that needs it, and detaches it when none does.
//
// # Metrics (Table 2)
//
//	oncpu               on-CPU time per run interval (sched_switch in → out), histogram, s
//	offcpu              time blocked until back on a CPU (includes the run-queue wait after wakeup), histogram, s
//	runq                run-queue latency, wakeup or preemption → switch-in, histogram, s
//	page_faults_user    exceptions:page_fault_user, counter
//	page_faults_kernel  exceptions:page_fault_kernel, counter
//	disk_io_bytes       block:block_rq_issue request size, histogram, bytes
//	disk_io_latency     block_rq_issue → block_rq_complete, histogram, s
//	tcp_send_bytes      sock:sock_send_length on TCP sockets: bytes per send, histogram (sum = bytes sent)
//	tcp_recv_bytes      sock:sock_recv_length on TCP sockets: bytes per receive, histogram (sum = bytes received)
//	tcp_retransmits     tcp:tcp_retransmit_skb, counter
//	tcp_synack_retransmits  tcp:tcp_retransmit_synack, counter (the listener's cgroup)
//	drops               skb:kfree_skb with a reason other than "consumed", counter by reason
//	dns_latency         UDP send to port 53 → first successful read on the same socket, histogram, s
//	tlb_flushes         tlb:tlb_flush, counter (sum = pages, full flushes count 0 pages)
//	cpu_throttled       time the cgroup's CPU quota held its threads off the CPUs, counter in s (count = periods
//	                    throttled): read by user space from the cgroup's cpu.stat at each Read, no BPF program
//
// Attribution limits, by design of the tracepoints: block requests are
// charged to the task that submits them (direct I/O and synchronous
// writes: the application, also when a busy device has the request issued
// later by a kblockd worker or by another task running the queue —
// block_rq_insert, in the submitter's context, names it; page-cache
// writeback: the flusher's cgroup). TCP bytes are
// counted in sock_sendmsg/sock_recvmsg, so calls that bypass them are not
// seen. Retransmissions and drops happen in softirq or timer context and are
// charged to the socket's cgroup v2 id: containers known only by a cgroup v1
// id do not get them; drops without a socket go to container key 0 ("none")
// under the default config. TLB flushes are charged to the task in whose
// context the flush ran (a remote shootdown to the interrupted task). DNS
// latency needs a connected UDP socket (glibc, musl and Go connect theirs);
// an unconnected sendto to port 53 carries its address in the message, which
// the tracepoint does not give; DNS over TCP or TLS is counted as TCP bytes.
//
// Left out, and why:
//   - CPU cache hit ratio: needs hardware PMU counters (perf_event), not a
//     tracepoint; the hosts this was built on (VMs) do not expose them
//     (`perf stat -e cache-misses` says "not supported").
//   - Page-cache hit ratio: tracepoints give lookups per read call
//     (filemap:mm_filemap_get_pages, a page range) and insertions
//     (filemap:mm_filemap_add_to_page_cache), but not hits; readahead inserts
//     pages before anyone asks for them, so lookups minus insertions is not a
//     hit count. Tools that measure it (bcc cachestat) use kprobes.
//
// # User side
//
// Manager owns the config (a default entry plus one entry per container; a
// new entry starts as a copy of the default), applies ConfigRequests live and
// decodes the maps into Series labelled with the container (its cgroup path)
// and service: the services of the agent's targets in that cgroup (registered
// by `rootline run` or configured), else the OpenTelemetry environment
// (OTEL_SERVICE_NAME, service.name in OTEL_RESOURCE_ATTRIBUTES) of its first
// members. Every config change bumps a generation in BPF, which drops the
// intervals opened under the previous config (so a re-enabled metric never
// reports an interval that started while it was off). Values are cumulative
// since load and are raw sampled counts: with 1-in-N sampling they are about
// 1/N of the events. The values of removed cgroups (without a config entry)
// are deleted from the maps at the next read.
//
// Manager is a prometheus.Collector (histograms in seconds or bytes with
// container, service and cgroup_id labels); ToOTLP and Pusher send the same
// series as OTLP metrics to the server's /v1/metrics. Component plugs all of
// it into the agent: GET /api/v1/kmetrics and PUT /api/v1/kmetrics/config.
//
// The BPF side sits behind the Kernel interface, so everything above it is
// tested without root; the tests named TestBPF* load the real programs.
package kmetrics
