package critmetrics

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rootline/rootline/internal/kmetrics"
)

// Cost is what recording one event of a metric costs in its BPF programs.
type Cost struct {
	// NsPerEvent is the CPU time (ns) the metric's programs spend per
	// recorded event: the sum of their per-run costs, each program running
	// about once per event of the metric.
	NsPerEvent float64 `json:"nsPerEvent"`
	// Source says where the figure comes from.
	Source string `json:"source"`
}

// CostTable maps metric names to their cost per event.
type CostTable map[string]Cost

// The per-run costs of bench/RESULTS.md, "Per-container kernel metrics",
// BPF cost per event with every metric enabled for the benchmark's cgroup
// (the targeted column: the cost when a container records).
const (
	nsSchedSwitch = 313
	nsSchedWakeup = 143
	nsTLBFlush    = 153
	nsPageFault   = 135
	nsSockSend    = 56
	nsSockRecv    = 55
	nsBlockIssue  = 279
	nsBlockDone   = 527
	nsAllPrograms = 122 // the mean over every program's runs
)

const benchSource = "bench/RESULTS.md (kmetrics, targeted ns/run)"

// DefaultCosts is the cost table measured by bench/kmetrics-overhead.sh.
// Metrics whose programs the benchmark did not exercise (retransmissions,
// drops, kernel page faults) take the mean of all programs or their
// sibling's figure, and say so.
func DefaultCosts() CostTable {
	return CostTable{
		kmetrics.OnCPU.String():                {nsSchedSwitch, benchSource + ": km_sched_switch"},
		kmetrics.OffCPU.String():               {nsSchedSwitch, benchSource + ": km_sched_switch"},
		kmetrics.RunqLatency.String():          {nsSchedSwitch + nsSchedWakeup, benchSource + ": km_sched_switch + km_sched_wakeup"},
		kmetrics.PageFaultsUser.String():       {nsPageFault, benchSource + ": km_page_fault_user"},
		kmetrics.PageFaultsKernel.String():     {nsPageFault, "assumed equal to km_page_fault_user (not exercised by the benchmark)"},
		kmetrics.DiskIOBytes.String():          {nsBlockIssue + nsBlockDone, benchSource + ": km_block_rq_issue + km_block_rq_complete"},
		kmetrics.DiskIOLatency.String():        {nsBlockIssue + nsBlockDone, benchSource + ": km_block_rq_issue + km_block_rq_complete"},
		kmetrics.TCPSendBytes.String():         {nsSockSend, benchSource + ": km_sock_send"},
		kmetrics.TCPRecvBytes.String():         {nsSockRecv, benchSource + ": km_sock_recv"},
		kmetrics.TCPRetransmits.String():       {nsAllPrograms, "assumed: the mean of all programs (not exercised by the benchmark)"},
		kmetrics.TCPSynAckRetransmits.String(): {nsAllPrograms, "assumed: the mean of all programs (not exercised by the benchmark)"},
		kmetrics.Drops.String():                {nsAllPrograms, "assumed: the mean of all programs (not exercised by the benchmark)"},
		kmetrics.DNSLatency.String():           {nsSockSend + nsSockRecv, benchSource + ": km_sock_send + km_sock_recv"},
		kmetrics.TLBFlushes.String():           {nsTLBFlush, benchSource + ": km_tlb_flush"},
		kmetrics.CPUThrottled.String():         {0, "no BPF program: read from the cgroup's cpu.stat once per read"},
	}
}

// ParseCosts reads overrides: a JSON file ({"runq": 400, …} in ns per event)
// when s names one, else "metric=ns,metric=ns". They replace the defaults
// of the metrics they name.
func (t CostTable) ParseCosts(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	set := func(name string, ns float64, src string) error {
		mt, err := kmetrics.ParseMetric(name)
		if err != nil {
			return err
		}
		if ns < 0 || ns != ns {
			return fmt.Errorf("cost of %s: %v is not a non-negative number", name, ns)
		}
		t[mt.String()] = Cost{NsPerEvent: ns, Source: src}
		return nil
	}
	if !strings.Contains(s, "=") {
		b, err := os.ReadFile(s)
		if err != nil {
			return fmt.Errorf("costs: %w", err)
		}
		var m map[string]float64
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("costs %s: want a JSON object of metric names to ns per event: %w", s, err)
		}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			if err := set(name, m[name], s); err != nil {
				return fmt.Errorf("costs %s: %w", s, err)
			}
		}
		return nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("costs: %q: want metric=ns", kv)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("costs: %q: %w", kv, err)
		}
		if err := set(strings.TrimSpace(name), ns, "--costs"); err != nil {
			return err
		}
	}
	return nil
}
