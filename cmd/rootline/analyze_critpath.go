package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
)

func init() {
	registerAnalyze("critical-path", analyzeCommand{
		Summary: "why each captured span of a trace was slow: its kernel critical path, states and blocking requests",
		Run:     runAnalyzeCritpath,
	})
}

type critpathFlags struct {
	sourceFlags
	trace          string
	json, segments bool
}

func parseCritpathFlags(args []string, stderr io.Writer) (critpathFlags, error) {
	var f critpathFlags
	fs := flag.NewFlagSet("rootline analyze critical-path", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs, 2*time.Minute)
	fs.StringVar(&f.trace, "trace", "", "the trace id (hex)")
	fs.BoolVar(&f.json, "json", false, "print the JSON of GET /api/v1/traces/{id}/critical-path")
	fs.BoolVar(&f.segments, "segments", false, "list every segment of each path (default: the longest ten)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline analyze critical-path (--data-dir DIR | --server URL) --trace ID [flags]

For each span of the trace that a kernel snapshot explains (the anomalous spans
the agent captured), prints its critical path: where its time went, following
the threads that woke its own across threads and processes — running, run
queue, CPU quota (throttled), lock, disk, network, sleep, memory, GC, unknown —
and the other requests it waited for ("blocked by"). Paths stored when the
capture completed are shown as they are; others are computed from the snapshot.

--data-dir reads a stopped server's store in the default layout (the database
and the artifacts' blobs in that directory; a running server holds it locked:
use --server). --server asks GET /api/v1/traces/{id}/critical-path.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := f.parse(fs, args); err != nil {
		return f, err
	}
	if f.trace == "" {
		return f, errors.New("--trace is required")
	}
	if err := f.check(); err != nil {
		return f, err
	}
	if _, err := model.ParseTraceID(f.trace); err != nil {
		return f, fmt.Errorf("--trace: %w", err)
	}
	return f, nil
}

func runAnalyzeCritpath(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseCritpathFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze critical-path: %v\n", err)
		return 2
	}
	var res *critpath.TraceResult
	if f.dataDir != "" {
		res, err = critpathOffline(ctx, f)
	} else {
		res, err = critpathRemote(ctx, f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze critical-path: %v\n", err)
		return 1
	}
	if f.json {
		return printJSON(stdout, res)
	}
	printCritpath(stdout, res, f.segments)
	return 0
}

func critpathOffline(ctx context.Context, f critpathFlags) (*critpath.TraceResult, error) {
	st, err := openDataDir(f.dataDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	id, _ := model.ParseTraceID(f.trace)
	an := &critpath.Analyzer{Spans: st, Artifacts: st}
	return an.Trace(ctx, id)
}

func critpathRemote(ctx context.Context, f critpathFlags) (*critpath.TraceResult, error) {
	var res critpath.TraceResult
	if err := f.get(ctx, "/api/v1/traces/"+url.PathEscape(f.trace)+"/critical-path", nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// printCritpath writes the paths for a person.
func printCritpath(w io.Writer, res *critpath.TraceResult, all bool) {
	fmt.Fprintf(w, "Trace %s: %d span(s) with a critical path\n", res.TraceID, len(res.Spans))
	for _, p := range res.Spans {
		fmt.Fprintf(w, "\n%s %s  span %s  %.1f ms", p.Service, p.Operation, p.SpanID, p.Ms)
		if p.Lost > 0 {
			fmt.Fprintf(w, "  (the recorder had dropped %d kernel records)", p.Lost)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  path states  %s\n", critpath.Shares(p.States, p.Ms))
		fmt.Fprintf(w, "  own waits    %s\n", critpath.Shares(p.Waits, p.Ms))
		for _, b := range p.BlockedBy {
			wait := ""
			if b.Wait != "" {
				wait = " while waiting on " + b.Wait
			}
			fmt.Fprintf(w, "  blocked by   %s %s (trace %s span %s): %.1f ms%s\n", b.Service, b.Operation, b.TraceID, b.SpanID, b.Ms, wait)
		}
		var ths []string
		for _, t := range p.Threads {
			ths = append(ths, fmt.Sprintf("%d %s (pid %d) %.1f ms", t.TID, t.Comm, t.PID, t.Ms))
		}
		fmt.Fprintf(w, "  threads      %s\n", strings.Join(ths, "; "))
		if len(p.HeldBy) > 0 {
			fmt.Fprintf(w, "  CPU held by  %s (while its threads waited in a run queue)\n", holders(p.HeldBy))
		}
		comm := map[uint32]string{}
		for _, t := range p.Threads {
			comm[t.TID] = t.Comm
		}
		segs := p.Segments
		if !all && len(segs) > 10 {
			segs = slices.Clone(segs)
			slices.SortStableFunc(segs, func(a, b critpath.SegmentJSON) int { return cmp.Compare(b.End-b.Start, a.End-a.Start) })
			segs = segs[:10]
			slices.SortFunc(segs, func(a, b critpath.SegmentJSON) int { return cmp.Compare(a.Start, b.Start) })
			fmt.Fprintf(w, "  path (the longest 10 of %d segments; --segments lists all):\n", len(p.Segments))
		} else {
			fmt.Fprintln(w, "  path:")
		}
		for _, s := range segs {
			line := fmt.Sprintf("    +%9.3f ms %8.3f ms  %-9s %6d %-15s", float64(s.Start-p.Start)/1e6, s.Ms, s.State, s.TID, comm[s.TID])
			var extra []string
			if s.Syscall != "" {
				extra = append(extra, s.Syscall)
			}
			if s.Device != "" {
				extra = append(extra, "on "+s.Device)
			}
			if s.Wait != "" {
				extra = append(extra, "(own thread waiting on "+s.Wait+")")
			}
			if s.Blocking {
				extra = append(extra, "blocked by span "+s.SpanID)
			}
			if len(s.HeldBy) > 0 {
				extra = append(extra, "behind "+holders(s.HeldBy))
			}
			fmt.Fprintln(w, strings.TrimRight(line+" "+strings.Join(extra, " "), " "))
		}
	}
	if len(res.Shared) > 0 {
		fmt.Fprintln(w, "\nShared by several paths (where requests contended):")
		for _, s := range res.Shared {
			var who []string
			for _, r := range s.Spans {
				who = append(who, r.Service+" "+r.Operation+" ("+r.SpanID+")")
			}
			fmt.Fprintf(w, "  %.1f ms %s on %d %s: %s\n", s.Ms, s.State, s.TID, s.Comm, strings.Join(who, ", "))
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// holders names who held the CPU a path's threads waited for.
func holders(hs []critpath.HolderJSON) string {
	var out []string
	for _, h := range hs {
		who := ""
		switch {
		case h.Target:
			who = ", the captured process"
		case h.Observer:
			who = ", Rootline's own"
		}
		out = append(out, fmt.Sprintf("%s (pid %d%s) %.1f ms", h.Comm, h.PID, who, h.Ms))
	}
	return strings.Join(out, ", ")
}
