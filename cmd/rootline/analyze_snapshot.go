package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

func init() {
	registerAnalyze("kernel-snapshot", analyzeCommand{
		Summary: "what a kernel snapshot file holds (either format), or the whole of it as JSON",
		Run:     runAnalyzeSnapshot,
	})
}

// maxSnapshotFile bounds the file read: the larger of the formats' own
// bounds (a gzipped JSON snapshot inflates to at most 4 GiB).
const maxSnapshotFile = kernel.MaxSnapshotBytes

func runAnalyzeSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rootline analyze kernel-snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the whole snapshot as one JSON object (the fields of docs/agent.md)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline analyze kernel-snapshot [--json] FILE

Reads a kernel snapshot artifact — kernel-*.rlks.zst (the binary format,
version 3, what agents write) or kernel-*.json.gz (gzipped JSON, versions 1 and
2, written by earlier agents) — as downloaded from GET /api/v1/artifacts/{id},
and prints what it holds: its format, process, window, threads and records.
With --json, prints the whole snapshot as JSON instead (for jq and scripts;
docs/agent.md lists the fields).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "rootline analyze kernel-snapshot: give one FILE")
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze kernel-snapshot: %v\n", err)
		return 1
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSnapshotFile+1))
	if err == nil && len(data) > maxSnapshotFile {
		err = fmt.Errorf("larger than %d bytes", int64(maxSnapshotFile))
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze kernel-snapshot: %s: %v\n", path, err)
		return 1
	}
	s, err := kernel.DecodeSnapshot(data)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze kernel-snapshot: %s: %v\n", path, err)
		return 1
	}
	if *asJSON {
		w := bufio.NewWriterSize(stdout, 1<<20)
		if err := json.NewEncoder(w).Encode(s); err != nil {
			return 1
		}
		if err := w.Flush(); err != nil {
			return 1
		}
		return 0
	}
	printSnapshotSummary(stdout, s, len(data), kernel.IsBinarySnapshot(data))
	return 0
}

// printSnapshotSummary prints what a snapshot holds.
func printSnapshotSummary(w io.Writer, s *kernel.Snapshot, size int, binary bool) {
	format := "gzipped JSON (" + kernel.MediaTypeJSON + ")"
	if binary {
		format = "binary (" + kernel.MediaType + ")"
	}
	fmt.Fprintf(w, "format     version %d, %s, %d bytes\n", s.Version, format, size)
	fmt.Fprintf(w, "process    %d\n", s.PID)
	fmt.Fprintf(w, "window     %s → %s (%s)\n", time.Unix(0, s.Start).UTC().Format(time.RFC3339Nano),
		time.Unix(0, s.End).UTC().Format(time.RFC3339Nano), time.Duration(s.End-s.Start))
	targets, recorded, unrecorded := 0, 0, 0
	for _, t := range s.Threads {
		switch {
		case t.Target:
			targets++
		case t.Recorded:
			recorded++
		default:
			unrecorded++
		}
	}
	fmt.Fprintf(w, "threads    %d: %d of the target, %d wakers recorded, %d wakers listed without intervals\n",
		len(s.Threads), targets, recorded, unrecorded)
	fmt.Fprintf(w, "intervals  %d\nwakeups    %d\ndisk I/Os  %d\n", len(s.Intervals), len(s.Wakeups), len(s.DiskIOs))
	fmt.Fprintf(w, "records    %d kernel records, %d lost by the recorder", s.Events, s.Lost)
	if s.Lost > 0 {
		fmt.Fprint(w, " (paths may be wrong where they fell)")
	}
	fmt.Fprintln(w)
	if s.Truncated != nil {
		fmt.Fprintf(w, "truncated  %d wakers beyond the follow depth, %d beyond the thread bound\n", s.Truncated.Depth, s.Truncated.Count)
	}
}
