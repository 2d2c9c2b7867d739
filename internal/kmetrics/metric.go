package kmetrics

import (
	"fmt"
	"slices"
	"strings"
)

// Metric is one per-container kernel metric. Its value is the metric's index
// in the BPF config (must match the KM_* ids in bpf/kmetrics.h).
type Metric uint32

// The metrics of ViperProbe's Table 2 that tracepoints give on this kernel.
const (
	OnCPU Metric = iota
	OffCPU
	RunqLatency
	PageFaultsUser
	PageFaultsKernel
	DiskIOBytes
	DiskIOLatency
	TCPSendBytes
	TCPRecvBytes
	TCPRetransmits
	TCPSynAckRetransmits
	Drops
	DNSLatency
	TLBFlushes
	// CPUThrottled is read by user space from the container's cpu.stat,
	// not recorded by a BPF program (the ids before it are bpf/kmetrics.h's
	// KM_*; the programs never see this one).
	CPUThrottled
	numMetrics
)

// MaxMetrics is the number of rate slots in the BPF config.
const MaxMetrics = 16

// Kind says how a metric is aggregated.
type Kind int

const (
	// Histogram metrics keep count, sum and log2 buckets of a value.
	Histogram Kind = iota
	// Counter metrics keep a count of events (and a sum of what each carries).
	Counter
)

// Unit of a histogram's values in BPF.
type Unit int

const (
	Nanoseconds Unit = iota
	Bytes
	Events
)

type metricInfo struct {
	name  string // API name
	kind  Kind
	unit  Unit
	prom  string // Prometheus / OTLP name
	help  string
	progs []program
}

var metricInfos = [numMetrics]metricInfo{
	OnCPU: {"oncpu", Histogram, Nanoseconds, "rootline_kernel_oncpu_seconds",
		"Time a container's threads ran per on-CPU interval (sched_switch in to out).", []program{progSchedSwitch}},
	OffCPU: {"offcpu", Histogram, Nanoseconds, "rootline_kernel_offcpu_seconds",
		"Time a container's threads were off CPU after blocking, until they ran again (includes the run-queue wait after wakeup).", []program{progSchedSwitch}},
	RunqLatency: {"runq", Histogram, Nanoseconds, "rootline_kernel_runq_latency_seconds",
		"Run-queue latency: wakeup or preemption to switch-in.", []program{progSchedSwitch, progSchedWakeup, progSchedWakeupNew}},
	PageFaultsUser: {"page_faults_user", Counter, Events, "rootline_kernel_page_faults_user_total",
		"Page faults taken in user mode (exceptions:page_fault_user).", []program{progPageFaultUser}},
	PageFaultsKernel: {"page_faults_kernel", Counter, Events, "rootline_kernel_page_faults_kernel_total",
		"Page faults taken in kernel mode (exceptions:page_fault_kernel).", []program{progPageFaultKernel}},
	DiskIOBytes: {"disk_io_bytes", Histogram, Bytes, "rootline_kernel_disk_io_bytes",
		"Size of the block requests the container submitted (block:block_rq_issue; block:block_rq_insert names the submitter of a request another task issues, until block_rq_complete).", []program{progBlockInsert, progBlockMerge, progBlockIssue, progBlockComplete}},
	DiskIOLatency: {"disk_io_latency", Histogram, Nanoseconds, "rootline_kernel_disk_io_latency_seconds",
		"Block request latency, issue to completion.", []program{progBlockInsert, progBlockMerge, progBlockIssue, progBlockComplete}},
	TCPSendBytes: {"tcp_send_bytes", Histogram, Bytes, "rootline_kernel_tcp_send_bytes",
		"Bytes per successful send on a TCP socket (sock:sock_send_length); sum is the bytes sent.", []program{progSockSend}},
	TCPRecvBytes: {"tcp_recv_bytes", Histogram, Bytes, "rootline_kernel_tcp_recv_bytes",
		"Bytes per successful receive on a TCP socket (sock:sock_recv_length); sum is the bytes received.", []program{progSockRecv}},
	TCPRetransmits: {"tcp_retransmits", Counter, Events, "rootline_kernel_tcp_retransmits_total",
		"TCP segment retransmissions (tcp:tcp_retransmit_skb), by the socket's cgroup.", []program{progTCPRetransmit}},
	TCPSynAckRetransmits: {"tcp_synack_retransmits", Counter, Events, "rootline_kernel_tcp_synack_retransmits_total",
		"SYN/ACK retransmissions (tcp:tcp_retransmit_synack), by the listener's cgroup.", []program{progTCPSynAck}},
	Drops: {"drops", Counter, Events, "rootline_kernel_skb_drops_total",
		"Packets freed with a drop reason (skb:kfree_skb), by the socket's cgroup and reason.", []program{progKfreeSkb}},
	DNSLatency: {"dns_latency", Histogram, Nanoseconds, "rootline_kernel_dns_latency_seconds",
		"Time from a UDP send to port 53 to the first read on the same socket.", []program{progSockSend, progSockRecv}},
	TLBFlushes: {"tlb_flushes", Counter, Events, "rootline_kernel_tlb_flushes_total",
		"TLB flushes (tlb:tlb_flush) in the container's context.", []program{progTLBFlush}},
	CPUThrottled: {"cpu_throttled", Counter, Nanoseconds, "rootline_kernel_cpu_throttled_seconds_total",
		"Time the container's CPU quota held its threads off the CPUs (its cgroup's cpu.stat: throttled_usec, v1 throttled_time; summed over CPUs).", nil},
}

// Metrics lists every metric.
func Metrics() []Metric {
	out := make([]Metric, numMetrics)
	for i := range out {
		out[i] = Metric(i)
	}
	return out
}

// String is the metric's API name ("oncpu", "runq"…).
func (m Metric) String() string {
	if m < numMetrics {
		return metricInfos[m].name
	}
	return fmt.Sprintf("metric(%d)", uint32(m))
}

// Kind is how the metric is aggregated.
func (m Metric) Kind() Kind { return metricInfos[m].kind }

// Unit is the unit of the metric's BPF values.
func (m Metric) Unit() Unit { return metricInfos[m].unit }

// ExportName is the metric's Prometheus and OTLP name.
func (m Metric) ExportName() string { return metricInfos[m].prom }

// FromCgroup says whether user space reads the metric from the
// container's cgroup files (cgroupSeries) rather than BPF maps.
func (m Metric) FromCgroup() bool { return m == CPUThrottled }

// Help describes the metric.
func (m Metric) Help() string { return metricInfos[m].help }

// MarshalText writes the API name.
func (m Metric) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads an API name.
func (m *Metric) UnmarshalText(b []byte) error {
	v, err := ParseMetric(string(b))
	*m = v
	return err
}

// ParseMetric returns the metric with API name s.
func ParseMetric(s string) (Metric, error) {
	for i, mi := range metricInfos {
		if mi.name == strings.ToLower(strings.TrimSpace(s)) {
			return Metric(i), nil
		}
	}
	names := make([]string, 0, numMetrics)
	for _, mi := range metricInfos {
		names = append(names, mi.name)
	}
	return 0, fmt.Errorf("unknown kernel metric %q (have: %s)", s, strings.Join(names, ", "))
}

// ParseMetrics reads a comma-separated list of metric names, or "all".
func ParseMetrics(s string) ([]Metric, error) {
	if strings.TrimSpace(s) == "all" {
		return Metrics(), nil
	}
	var out []Metric
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		m, err := ParseMetric(part)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// program is one BPF program of bpf/kmetrics.c; it is attached while some
// container enables one of the metrics that need it.
type program int

const (
	progSchedSwitch program = iota
	progSchedWakeup
	progSchedWakeupNew
	progPageFaultUser
	progPageFaultKernel
	progBlockIssue
	progBlockComplete
	progBlockInsert
	progBlockMerge
	progSockSend
	progSockRecv
	progTCPRetransmit
	progTCPSynAck
	progKfreeSkb
	progTLBFlush
	numPrograms
)

var programNames = [numPrograms]string{
	"km_sched_switch", "km_sched_wakeup", "km_sched_wakeup_new", "km_page_fault_user", "km_page_fault_kernel",
	"km_block_rq_issue", "km_block_rq_complete", "km_block_rq_insert", "km_block_rq_merge", "km_sock_send", "km_sock_recv", "km_tcp_retransmit_skb",
	"km_tcp_retransmit_synack", "km_kfree_skb", "km_tlb_flush",
}

func (p program) String() string { return programNames[p] }

// programSet is a bit set of programs.
type programSet uint32

func (s programSet) has(p program) bool { return s&(1<<p) != 0 }

// programsFor returns the programs the metrics in mask need.
func programsFor(mask uint32) programSet {
	var s programSet
	for m := range numMetrics {
		if mask&(1<<m) != 0 {
			for _, p := range metricInfos[m].progs {
				s |= 1 << p
			}
		}
	}
	return s
}
