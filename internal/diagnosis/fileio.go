package diagnosis

import (
	"context"
	"fmt"

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

// covering are spans as profiles are read for (analysis.SlowSpan): each
// with its threads and the CPU profiles among arts whose window holds it —
// a capture's window reaches before and after the spans it was taken for,
// so it holds other spans of the process too (the normal ones before the
// onset among them).
func covering(spans []*model.Span, arts []store.Artifact) []analysis.SlowSpan {
	var out []analysis.SlowSpan
	for _, s := range spans {
		var mine []store.Artifact
		for _, a := range arts {
			if a.Start <= s.Start && s.End() <= a.End {
				mine = append(mine, a)
			}
		}
		out = append(out, analysis.SlowSpan{TraceID: s.TraceID, SpanID: s.SpanID, Service: s.Service, Start: s.Start, End: s.End(),
			Exclusive: s.Duration, Threads: analysis.SpanThreads(s), Artifacts: mine})
	}
	return out
}

// fileIO splits the running time of a tally's spans: the kernel's states
// say a thread ran, not what it ran, and a thread writing a file spends
// much of its time on CPU in the kernel (copying into the page cache,
// allocating blocks, writing back on fsync, dropping the pages on unlink)
// besides the time it blocks on the disk. The eBPF CPU profiles captured
// while the spans ran (arts) record each sample's kernel stack; the share
// of the spans' threads' samples within the spans that were in file-system
// code (analysis.FileSystemFrame) is moved from running to disk. It is done
// for the slow spans and for the baseline alike, so that a service whose
// normal requests write files does not look as if its disk use grew.
// Nothing changes without such profiles, with fewer than
// minFileIOSampleNs of samples, or below minFileIOShare. what names the
// spans in the evidence line ("slow spans", "spans before the onset").
func (d *Diagnoser) fileIO(ctx context.Context, v *Verdict, what string, w *waitTally, arts []store.Artifact) {
	run := w.by[critpath.Running]
	if run <= 0 || len(arts) == 0 || len(w.spans) == 0 {
		return
	}
	b, err := (&analysis.Profiles{Reader: d.Source}).Explain(ctx, covering(w.spans, arts))
	if err != nil || b.KernelOnCPUNs < minFileIOSampleNs {
		return
	}
	share := float64(b.FileIONs) / float64(b.KernelOnCPUNs)
	if share < minFileIOShare {
		return
	}
	moved := share * run
	w.by[critpath.Running] -= moved
	w.by[critpath.Disk] += moved
	v.Evidence = append(v.Evidence, fmt.Sprintf("CPU profiles (kernel stacks) of %d of %s's %s: %.0f%% of their threads' %.0f ms on CPU was in file-system code (page cache, fsync, writeback); "+
		"%.1f ms of the time the kernel saw them running counts as disk",
		b.OnCPUSpans, v.Service, what, 100*share, float64(b.KernelOnCPUNs)/1e6, moved))
}
