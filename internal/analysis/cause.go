package analysis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// SlowSpan is one of the culprit's anomalous spans in a slow trace: a
// request whose exclusive time an Explainer explains.
type SlowSpan struct {
	TraceID model.TraceID
	SpanID  model.SpanID
	Service string
	// Start and End bound the span, Unix ns (End cut to its caller's CLIENT
	// span when it outlasted it).
	Start, End int64
	// Exclusive is the part of it not covered by its child spans, ns.
	Exclusive int64
	// Threads are the threads that worked on it (rootline.thread.ids,
	// thread.id); none when its producer did not say.
	Threads []int64
	// Artifacts are the artifacts captured for it, in the store's order.
	Artifacts []store.Artifact
}

// Breakdown is where the culprit's slow spans spent their exclusive time, as
// measured: the summary its cause is named from (see cause). Each amount
// comes with the exclusive time of the spans it was measured for, so that a
// part nobody measured is unknown rather than zero.
type Breakdown struct {
	// OnCPUNs is the time the spans' own threads were on CPU within the
	// spans; OnCPUOfNs is the exclusive time of the OnCPUSpans spans it was
	// measured for; OnCPUSources counts those spans by source ("eBPF CPU
	// profiles", "JFR execution samples").
	OnCPUNs, OnCPUOfNs int64
	OnCPUSpans         int
	OnCPUSources       map[string]int
	// LockNs is the time the spans' threads were blocked entering a Java
	// monitor (each span's share capped at its exclusive time); LockOfNs and
	// LockSpans as for OnCPU. JFR keeps only monitor-enter events longer than
	// its threshold (10 ms with the agent's settings).
	LockNs, LockOfNs int64
	LockSpans        int
	// FileIONs is the part of OnCPUNs, of the spans measured from eBPF CPU
	// profiles (which record the kernel stack; JFR does not), that their
	// threads spent in the kernel's file-system code (FileSystemFrame):
	// writing to the page cache, fsync, writeback, block requests (not
	// the memory reclaim under them, which is ReclaimNs).
	// KernelOnCPUNs is the on-CPU time of those spans, the total it is a
	// part of.
	FileIONs, KernelOnCPUNs int64
	// AnonFaultNs is the part of KernelOnCPUNs in the fault-in of fresh
	// anonymous pages (AnonFaultFrame; not reclaim or swap under it): the
	// page allocated and zeroed for the thread that first touched it.
	// JVMNs is the part of KernelOnCPUNs measured in JVMs (HotSpot's
	// libjvm.so mapped), and JVMAnonFaultNs the part of AnonFaultNs: a
	// JVM's fresh pages are mostly its heap, which the collector grows and
	// gives back.
	AnonFaultNs, JVMNs, JVMAnonFaultNs int64
	// ReclaimNs is the part of KernelOnCPUNs in memory reclaim or swap
	// (direct reclaim, a cgroup's reclaim over its memory.high, swap-in),
	// under whatever the thread was doing: memory pressure.
	ReclaimNs int64
}

// Explainer measures where slow spans spent their exclusive time. Profiles
// reads the profiles captured for them; a measurement of the per-request
// kernel critical path (on CPU, runnable, blocked and on what) is meant to
// be a sibling whose amounts Breakdown gains and cause reads.
type Explainer interface {
	// Explain measures spans (the culprit's anomalous spans in slow traces,
	// newest first). A partial Breakdown comes with the error that cut part
	// of it short.
	Explain(ctx context.Context, spans []SlowSpan) (Breakdown, error)
}

// lockShareForCause is the share of the culprit's exclusive time spent
// waiting for locks from which the verdict names lock/blocking even when
// its threads were mostly on CPU (JVM monitors spin before they park; a
// lock's holder works on CPU while the others wait).
const lockShareForCause = 0.25

// nameCause names the culprit's cause from the growth of its times and,
// when its own time grew more than the calls into it and not mostly as
// run-queue wait, from what was measured of its slow spans (explain is
// called only then). It returns evidence with what it read added.
func nameCause(top ServiceScore, evidence []string, explain func() (Breakdown, error)) (string, []string) {
	switch {
	case top.NetDeltaMs > top.SelfDeltaMs:
		return CauseNetwork, append(evidence, fmt.Sprintf("calls into %s grew by %.1f ms beyond its own time (client time − server time)", top.Service, top.NetDeltaMs))
	case top.LocalDeltaMs > 0 && top.LocalDeltaMs >= 0.5*top.SelfDeltaMs:
		return CauseRunQueue, append(evidence, fmt.Sprintf("%s's threads waited %.1f ms more per trace for a CPU (rootline.wait.local_ms)", top.Service, top.LocalDeltaMs))
	}
	b, err := explain()
	if err != nil {
		evidence = append(evidence, "profiles unreadable: "+err.Error())
	}
	return b.cause(evidence)
}

// cause names the cause the measurements point to and adds what they showed
// to evidence.
func (b Breakdown) cause(evidence []string) (string, []string) {
	share := func(ns, of int64) float64 { return float64(ns) / float64(max(of, 1)) }
	onCPU, locked := share(b.OnCPUNs, b.OnCPUOfNs), share(b.LockNs, b.LockOfNs)
	var sources []string
	for src, n := range b.OnCPUSources {
		sources = append(sources, fmt.Sprintf("%d %s", n, src))
	}
	slices.Sort(sources)
	cpuLine := fmt.Sprintf("on CPU for %.0f%% of its exclusive time (%s)", 100*onCPU, strings.Join(sources, ", "))
	var cause string
	switch {
	case b.LockSpans > 0 && locked >= lockShareForCause:
		cause = CauseBlocking
		if b.OnCPUSpans > 0 {
			evidence = append(evidence, cpuLine+": what runs inside the lock, or spins waiting for it")
		}
	case b.OnCPUSpans == 0 || b.OnCPUOfNs <= 0:
		cause = CauseSelfTime
		evidence = append(evidence, "no CPU profile captured for its slow spans: cannot tell CPU work from blocking")
	case onCPU >= 0.5:
		cause = CauseCPU
		evidence = append(evidence, cpuLine)
	default:
		cause = CauseBlocking
		evidence = append(evidence, cpuLine+": blocked (lock, sleep, I/O or GC)")
	}
	if b.LockSpans > 0 {
		evidence = append(evidence, fmt.Sprintf("blocked entering Java monitors for %.0f%% of its exclusive time (JFR's monitor-enter events, those over its threshold, in %d slow spans)",
			100*locked, b.LockSpans))
	}
	return cause, evidence
}

// linkedEvidence counts the captured artifacts linked to svc's anomalous
// spans by kind, and says so and to how many of the spans ("" when none).
func linkedEvidence(svc string, anoms []Anomaly) (map[string]int, string) {
	kinds := map[string]int{}
	seen := map[string]bool{}
	linked, total := 0, 0
	for _, a := range anoms {
		if a.Span.Service != svc {
			continue
		}
		total++
		if len(a.Artifacts) > 0 {
			linked++
		}
		for _, art := range a.Artifacts {
			if !seen[art.ID] {
				seen[art.ID] = true
				kinds[art.Kind]++
			}
		}
	}
	if linked == 0 {
		return kinds, ""
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(parts)
	return kinds, fmt.Sprintf("evidence captured for %s: %s artifacts, linked to %d of its %d anomalous spans", svc, strings.Join(parts, ", "), linked, total)
}

// CaptureTrouble says how many of svc's captures since from did not complete
// and why (the first reason), so that missing evidence is explained; "" when
// all completed.
func CaptureTrouble(caps []Capture, svc string, from time.Time) string {
	states := map[string]int{}
	reason := ""
	for _, cp := range caps {
		if cp.Service != svc || cp.Created.Before(from) {
			continue
		}
		states[cp.State]++
		// A pending or requested capture has not failed yet, whatever it
		// last reported.
		if reason == "" && cp.Error != "" && cp.State != "pending" && cp.State != "requested" {
			reason = cp.Error
		}
	}
	if reason == "" {
		return ""
	}
	var parts []string
	for st, n := range states {
		parts = append(parts, fmt.Sprintf("%d %s", n, st))
	}
	slices.Sort(parts)
	if len(reason) > 200 {
		reason = reason[:200] + "…"
	}
	return fmt.Sprintf("captures of %s: %s; first problem: %s", svc, strings.Join(parts, ", "), reason)
}
