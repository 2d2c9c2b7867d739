package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

func init() {
	registerAnalyze("replay", analyzeCommand{
		Summary: "the incidents the open/close rule (with other settings, if given) opens on stored spans, and when",
		Run:     runAnalyzeReplay,
	})
}

// replaySlice is how much span time one read of the store covers.
const replaySlice = 10 * time.Second

// replayMaxSpans bounds the spans a replay reads.
const replayMaxSpans = 5_000_000

type replayFlags struct {
	dataDir, from, to string
	delay             time.Duration
	cfg               diagnosis.Config
	json              bool
}

func parseReplayFlags(args []string, stderr io.Writer) (replayFlags, error) {
	f := replayFlags{cfg: diagnosis.DefaultConfig()}
	fs := flag.NewFlagSet("rootline analyze replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.dataDir, "data-dir", "", "a stopped server's data directory")
	fs.StringVar(&f.from, "from", "1h", "replay spans that started after this: an RFC 3339 time, Unix nanoseconds, or a duration before now")
	fs.StringVar(&f.to, "to", "", "… and before this (same forms; default now)")
	fs.DurationVar(&f.delay, "delay", time.Second, "how long after its end each span counts as arrived (the senders' batching)")
	fs.BoolVar(&f.json, "json", false, "print the incidents as JSON")
	f.cfg.RegisterRuleFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline analyze replay --data-dir DIR [--from T] [--to T] [--diagnosis.SETTING V …] [--json]

Applies the server's incident rule (docs/diagnosis.md, "When an incident
opens") to the spans a stopped server stored, one step a second as the server
does, each span counted --delay after it ended, and prints the incidents it
opens: when, on which entry point, by which trigger, and when they close. No
verdict is computed.

With the defaults it shows what the server's rule does on that traffic; with
other --diagnosis.* settings, what they would have done: how soon a known
fault's incident opens, and whether any opens where nothing was wrong. The
anomaly flags are the detector's, as stored.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlagsOnly(fs, args); err != nil {
		return f, err
	}
	if f.dataDir == "" {
		return f, errors.New("--data-dir is required")
	}
	return f, f.cfg.Validate()
}

func runAnalyzeReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseReplayFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze replay: %v\n", err)
		return 2
	}
	now := time.Now()
	from, to, err := parseRange(f.from, f.to, now)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze replay: %v\n", err)
		return 2
	}
	if to == 0 {
		to = now.UnixNano()
	}
	spans, err := replaySpans(ctx, f.dataDir, from, to, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze replay: %v\n", err)
		return 1
	}
	opened, err := diagnosis.Replay(f.cfg, spans, f.delay)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze replay: %v\n", err)
		return 1
	}
	if f.json {
		return printJSON(stdout, map[string]any{"spans": len(spans), "incidents": opened})
	}
	fmt.Fprintf(stdout, "%d spans replayed, %d incidents opened\n", len(spans), len(opened))
	for _, o := range opened {
		closed := "still open"
		if o.Closed > 0 {
			closed = "closed " + time.Unix(0, o.Closed).UTC().Format(time.TimeOnly)
		}
		fmt.Fprintf(stdout, "%s  opened %s (started %s, %.1fs before)  %-9s %s  %d of %d requests anomalous, %s\n",
			o.ID, o.At.UTC().Format("15:04:05.000"), time.Unix(0, o.Start).UTC().Format("15:04:05.000"),
			o.At.Sub(time.Unix(0, o.Start)).Seconds(), o.Trigger, o.Entry, o.Anomalous, o.Requests, closed)
	}
	return 0
}

// replaySpans reads the spans of the traces that started in [from, to),
// a slice of time at a time, with progress on stderr.
func replaySpans(ctx context.Context, dir string, from, to int64, progress io.Writer) ([]*model.Span, error) {
	st, err := openDataDir(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []*model.Span
	seen := map[model.TraceID]bool{}
	for t := from; t < to; t += int64(replaySlice) {
		traces, err := st.FindTraces(ctx, store.TraceQuery{StartMin: t, StartMax: min(t+int64(replaySlice), to) - 1, Limit: replayMaxSpans})
		if err != nil {
			return nil, err
		}
		for _, tr := range traces {
			if len(tr) == 0 || seen[tr[0].TraceID] {
				continue
			}
			seen[tr[0].TraceID] = true
			out = append(out, tr...)
		}
		if len(out) > replayMaxSpans {
			return nil, fmt.Errorf("more than %d spans: replay a shorter time (--from/--to)", replayMaxSpans)
		}
	}
	fmt.Fprintf(progress, "read %d spans of %d traces\n", len(out), len(seen))
	return out, nil
}
