package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/rootline/rootline/internal/analysis"
	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/diagnosis"
	"github.com/rootline/rootline/internal/store"
)

func init() {
	registerAnalyze("diagnose", analyzeCommand{
		Summary: "the incidents the server opened and their verdicts: culprit service, cause, evidence, what is missing",
		Run:     runAnalyzeDiagnose,
	})
}

type diagnoseFlags struct {
	sourceFlags
	service, from, to string
	json              bool
}

func parseDiagnoseFlags(args []string, stderr io.Writer) (diagnoseFlags, error) {
	var f diagnoseFlags
	fs := flag.NewFlagSet("rootline analyze diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs, time.Minute)
	fs.StringVar(&f.from, "from", "24h", "incidents that ended after this: an RFC 3339 time, Unix nanoseconds, or a duration before now")
	fs.StringVar(&f.to, "to", "", "incidents that started before this (same forms; default now)")
	fs.StringVar(&f.service, "service", "", "only incidents whose culprit or entry point is this service")
	fs.BoolVar(&f.json, "json", false, "print the JSON of GET /api/v1/incidents")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline analyze diagnose (--data-dir DIR | --server URL) [--from T] [--to T] [--service S] [--json]

Prints the incidents the server opened — surges of anomalous requests at an
entry point — with their verdicts: the culprit service, the cause (cpu,
cpu-contention, cpu-throttle, lock, disk, network, gc, memory, downstream or
unknown), the confidence, the evidence lines, the runner-up, an example trace
and what evidence is missing (docs/diagnosis.md).

--server asks GET /api/v1/incidents of a running server. --data-dir reads a
stopped server's store and computes each incident's verdict again from what
it holds now (snapshots and profiles that arrived after the server last
computed it count).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := f.parse(fs, args); err != nil {
		return f, err
	}
	return f, f.check()
}

func runAnalyzeDiagnose(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseDiagnoseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze diagnose: %v\n", err)
		return 2
	}
	now := time.Now()
	from, to, err := parseRange(f.from, f.to, now)
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze diagnose: %v\n", err)
		return 2
	}
	var incs []diagnosis.Incident
	if f.dataDir != "" {
		incs, err = diagnoseOffline(ctx, f, from, to, stderr)
	} else {
		incs, err = diagnoseRemote(ctx, f, from, to)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rootline analyze diagnose: %v\n", err)
		return 1
	}
	if f.json {
		return printJSON(stdout, map[string]any{"incidents": incs})
	}
	printIncidents(stdout, incs)
	return 0
}

func diagnoseRemote(ctx context.Context, f diagnoseFlags, from, to int64) ([]diagnosis.Incident, error) {
	q := url.Values{}
	if from > 0 {
		q.Set("since", strconv.FormatInt(from, 10))
	}
	if to > 0 {
		q.Set("until", strconv.FormatInt(to, 10))
	}
	if f.service != "" {
		q.Set("service", f.service)
	}
	var resp struct {
		Incidents []diagnosis.Incident `json:"incidents"`
	}
	if err := f.get(ctx, "/api/v1/incidents", q, &resp); err != nil {
		return nil, err
	}
	return resp.Incidents, nil
}

func diagnoseOffline(ctx context.Context, f diagnoseFlags, from, to int64, progress io.Writer) ([]diagnosis.Incident, error) {
	st, err := openDataDir(f.dataDir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ist := st.Incidents()
	if ist == nil {
		return nil, errors.New("this store keeps no incidents")
	}
	list, err := ist.FindIncidents(ctx, store.IncidentQuery{Service: f.service, From: from, To: to, Limit: 1000})
	if err != nil {
		return nil, err
	}
	d := &diagnosis.Diagnoser{Source: &analysis.StoreSource{Spans: st, Artifacts: st},
		Paths: &critpath.Analyzer{Spans: st, Artifacts: st}, Metrics: st, Config: diagnosis.DefaultConfig()}
	out := make([]diagnosis.Incident, 0, len(list))
	for i, s := range list {
		inc, err := diagnosis.FromStored(s)
		if err != nil {
			fmt.Fprintf(progress, "skipping an unreadable incident: %v\n", err)
			continue
		}
		fmt.Fprintf(progress, "diagnosing incident %d of %d (%s)…\n", i+1, len(list), inc.Entry)
		v, err := d.Diagnose(ctx, &inc)
		if err != nil {
			return nil, fmt.Errorf("incident %s: %w", inc.ID, err)
		}
		inc.Verdict = v
		out = append(out, inc)
	}
	return out, nil
}

// printIncidents writes incidents for a person.
func printIncidents(w io.Writer, incs []diagnosis.Incident) {
	if len(incs) == 0 {
		fmt.Fprintln(w, "No incidents in the time range.")
		return
	}
	ts := func(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.000") }
	for _, inc := range incs {
		until := "open"
		if inc.End > 0 {
			until = ts(inc.End)
		}
		fmt.Fprintf(w, "Incident %s  %s  %s → %s  (%s)\n", inc.ID, inc.Entry, ts(inc.Start), until, inc.State)
		fmt.Fprintf(w, "  %d anomalous of %d requests; detector baseline %.1f ms\n", inc.Anomalous, inc.Requests, inc.BaselineMs)
		v := inc.Verdict
		if v == nil {
			fmt.Fprintln(w, "  no verdict yet")
			continue
		}
		svc := v.Service
		switch {
		case svc == "" && v.Node != "":
			svc = "node " + v.Node
		case svc == "":
			svc = "(none)"
		}
		fmt.Fprintf(w, "  verdict      %s / %s  (confidence %.2f; service %.2f)\n", svc, v.Cause, v.Confidence, v.ServiceConfidence)
		if v.RunnerUp != nil {
			fmt.Fprintf(w, "  runner-up    %s / %s: %s\n", v.RunnerUp.Service, cmp.Or(v.RunnerUp.Cause, "-"), v.RunnerUp.Why)
		}
		if v.ExampleTraceID != "" {
			fmt.Fprintf(w, "  example      trace %s\n", v.ExampleTraceID)
		}
		for _, e := range v.Evidence {
			fmt.Fprintf(w, "  evidence     %s\n", e)
		}
		for _, m := range v.Missing {
			fmt.Fprintf(w, "  missing      %s\n", m)
		}
		if v.Advice != nil {
			fmt.Fprintf(w, "  advice       %s (%s)\n", v.Advice.Explanation, v.Advice.Scaling)
		}
		fmt.Fprintln(w)
	}
}
