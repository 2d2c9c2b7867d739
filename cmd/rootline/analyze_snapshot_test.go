package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// TestAnalyzeKernelSnapshot: the command reads both formats, summarises
// them, prints them as the same JSON, and refuses what is not a snapshot.
func TestAnalyzeKernelSnapshot(t *testing.T) {
	s := &kernel.Snapshot{PID: 7, Start: 1_700_000_000_000_000_000, End: 1_700_000_000_500_000_000, Lost: 2, Events: 30,
		Threads: []kernel.Thread{{TID: 7, PID: 7, Comm: "app", Target: true, Recorded: true},
			{TID: 9, PID: 9, Comm: "db", Depth: 1, Recorded: true, Since: 1_700_000_000_000_000_100}},
		Intervals: []kernel.Interval{{TID: 7, State: kernel.StateBlocked, Reason: kernel.ReasonLock, Start: 1_700_000_000_000_000_000,
			End: 1_700_000_000_400_000_000, CPU: -1, Wakeup: 0},
			{TID: 9, State: kernel.StateRunning, Start: 1_700_000_000_000_000_100, End: 1_700_000_000_400_000_000, CPU: 1, Wakeup: -1}},
		Wakeups: []kernel.Wakeup{{TS: 1_700_000_000_400_000_000, Wakee: 7, Waker: 9, Context: kernel.CtxNameThread, Causal: true, CPU: 1}}}
	dir := t.TempDir()
	var outs []kernel.Snapshot
	for _, f := range []struct {
		name string
		enc  func(*kernel.Snapshot, io.Writer) error
		want string
	}{
		{"a" + kernel.FileExt, (*kernel.Snapshot).Encode, "version 3, binary (" + kernel.MediaType},
		{"a.json.gz", (*kernel.Snapshot).EncodeJSON, "version 2, gzipped JSON (" + kernel.MediaTypeJSON},
	} {
		var buf bytes.Buffer
		if err := f.enc(s, &buf); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		if rc := runAnalyze(context.Background(), []string{"kernel-snapshot", path}, &out, &errb); rc != 0 {
			t.Fatalf("%s: exit %d: %s", f.name, rc, errb.String())
		}
		for _, want := range []string{f.want, "process    7", "(500ms)", "2: 1 of the target, 1 wakers recorded, 0 wakers",
			"intervals  2", "wakeups    1", "30 kernel records, 2 lost"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: summary lacks %q:\n%s", f.name, want, out.String())
			}
		}
		out.Reset()
		if rc := runAnalyze(context.Background(), []string{"kernel-snapshot", "--json", path}, &out, &errb); rc != 0 {
			t.Fatalf("%s --json: exit %d: %s", f.name, rc, errb.String())
		}
		var got kernel.Snapshot
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s --json: %v", f.name, err)
		}
		got.Version = 0
		outs = append(outs, got)
	}
	if !reflect.DeepEqual(outs[0], outs[1]) {
		t.Errorf("the formats print different JSON:\n%+v\n%+v", outs[0], outs[1])
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("RLKSNAP\x00\x03\x01\x7f"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if rc := runAnalyze(context.Background(), []string{"kernel-snapshot", bad}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "malformed kernel snapshot") {
		t.Errorf("a malformed file: exit %d, %q", rc, errb.String())
	}
	if rc := runAnalyze(context.Background(), []string{"kernel-snapshot"}, &out, &errb); rc != 2 {
		t.Errorf("no file: exit %d", rc)
	}
}
