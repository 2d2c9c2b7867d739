package diagnosis

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// File I/O on CPU: bounds on what the CPU profiles must show before the
// time the kernel saw a culprit's threads running is split.
const (
	// minFileIOSampleNs is the on-CPU time (eBPF samples of the spans'
	// threads within the spans) below which the share is not read: five
	// samples at 99 Hz.
	minFileIOSampleNs = 50e6
	// minFileIOShare is the share of it in file-system code below which
	// nothing moves.
	minFileIOShare = 0.05
)

// cpuArtifacts are the eBPF CPU profiles captured for culprit's anomalous
// spans (anoms), each once.
func cpuArtifacts(anoms []analysis.Anomaly, culprit string) []store.Artifact {
	var out []store.Artifact
	seen := map[string]bool{}
	for _, a := range anoms {
		if a.Span == nil || a.Span.Service != culprit {
			continue
		}
		for _, art := range a.Artifacts {
			if art.Kind == "cpu" && !seen[art.ID] {
				seen[art.ID] = true
				out = append(out, art)
			}
		}
	}
	return out
}

// threadWindows are what the profiles are read for (analysis.SlowSpan):
// the threads that worked on spans, over each CPU profile of arts within
// [from, to]. A capture's window reaches before and after the spans it was
// taken for, and the same threads serve the other requests there: their
// samples in the whole window, not only within the spans whose paths were
// read, are enough to measure a share at 99 Hz (a span of 20 ms holds two
// samples at most).
func threadWindows(spans []*model.Span, arts []store.Artifact, from, to int64) []analysis.SlowSpan {
	var threads []int64
	for _, s := range spans {
		for _, t := range analysis.SpanThreads(s) {
			if !slices.Contains(threads, t) {
				threads = append(threads, t)
			}
		}
	}
	var out []analysis.SlowSpan
	for _, a := range arts {
		if a0, a1 := max(a.Start, from), min(a.End, to); a1 > a0 && len(threads) > 0 {
			out = append(out, analysis.SlowSpan{Service: a.Service, Start: a0, End: a1, Exclusive: a1 - a0, Threads: threads, Artifacts: []store.Artifact{a}})
		}
	}
	return out
}

// onCPUSplit splits the time a tally's spans' threads ran, or waited for a
// CPU their own process's threads held: the kernel's states say a thread
// ran, not what it ran. The eBPF CPU profiles captured for the culprit
// (arts) record each sample's kernel stack, and two things a thread does on
// CPU in the kernel are a resource's cost rather than its program's work,
// and a third is the memory's:
//
//   - A thread writing a file spends much of its time on CPU in file-system
//     code (copying into the page cache, allocating blocks, writing back on
//     fsync, dropping the pages on unlink) besides the time it blocks on the
//     disk: that share (analysis.FileSystemFrame) is disk.
//   - A JVM's thread that touches a heap page its collector has just
//     committed (the heap grown, or given back and taken again, under an
//     allocation storm) allocates and zeroes it in a page fault: that share
//     (analysis.AnonFaultFrame, in profiles of a process with libjvm.so
//     mapped) is gc — the collector's heap, not the request's work. Other
//     runtimes' fresh pages stay their own cpu.
//   - A thread that needs a page when none is free reclaims (or compacts,
//     or swaps in) before it gets one, on its own CPU time, under whatever
//     it was doing (a fault, a write): that share (reclaim, counted before
//     the other two) is memory.
//
// Each share of the samples of the spans' threads in [from, to] is moved
// to its state from running and from the run-queue wait behind the
// process's own threads (OwnQueue: the CPU went to that same mix of work).
// It is done for the slow spans (from the onset) and for the baseline
// (before it) alike, so that a service whose normal requests write files
// or fault pages in does not look as if that grew. Nothing changes without
// such profiles, with fewer than minFileIOSampleNs of samples, or below
// minFileIOShare. what names the spans in the evidence line ("slow spans",
// "spans before the onset").
func (d *Diagnoser) onCPUSplit(ctx context.Context, v *Verdict, what string, w *waitTally, arts []store.Artifact, from, to int64) {
	if w.by[critpath.Running]+w.by[OwnQueue] <= 0 || len(arts) == 0 || len(w.spans) == 0 {
		return
	}
	b, err := (&analysis.Profiles{Reader: d.Source}).Explain(ctx, threadWindows(w.spans, arts, from, to))
	if err != nil || b.KernelOnCPUNs < minFileIOSampleNs {
		return
	}
	onCPU := float64(b.KernelOnCPUNs)
	before := map[string]float64{critpath.Running: w.by[critpath.Running], OwnQueue: w.by[OwnQueue]}
	for _, part := range []struct {
		ns        int64
		state, in string
	}{
		{b.FileIONs, critpath.Disk, "file-system code (page cache, fsync, writeback)"},
		{b.JVMAnonFaultNs, critpath.GC, "a JVM's page faults on fresh anonymous memory (heap pages its collector committed, allocated and zeroed on first touch)"},
		{b.ReclaimNs, critpath.Memory, "memory reclaim, compaction or swap (no free page: the machine's or its cgroup's memory short)"},
	} {
		share := float64(part.ns) / onCPU
		if share < minFileIOShare {
			continue
		}
		var moved []string
		for _, m := range []struct{ st, what string }{
			{critpath.Running, "the time the kernel saw them running"},
			{OwnQueue, "their run-queue wait behind their own process's threads"},
		} {
			if ms := share * before[m.st]; ms > 0 {
				w.by[m.st] -= ms
				w.by[part.state] += ms
				moved = append(moved, fmt.Sprintf("%.1f ms of %s", ms, m.what))
			}
		}
		v.Evidence = append(v.Evidence, fmt.Sprintf("CPU profiles (kernel stacks) of the threads of %s's %s (%d capture windows): %.0f%% of their %.0f ms on CPU was in %s; %s count as %s",
			v.Service, what, b.OnCPUSpans, 100*share, onCPU/1e6, part.in, strings.Join(moved, " and "), StateCause(part.state)))
	}
}
