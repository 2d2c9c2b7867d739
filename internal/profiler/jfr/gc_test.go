package jfr

import (
	"cmp"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

type refEvent struct {
	Values struct {
		StartTime string `json:"startTime"`
		Duration  string `json:"duration"`
	} `json:"values"`
}

// TestGCPauses records a JVM in a GC storm and reads its pauses; the JDK's
// own `jfr print` is the reference for every pause's start and duration.
func TestGCPauses(t *testing.T) {
	requireJDK(t)
	dir := t.TempDir()
	if out, err := exec.Command("javac", "-d", dir, "testdata/GCStorm.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	rec := filepath.Join(dir, "gc.jfr")
	cmd := exec.Command("java", "-Xmx32m", "-XX:+UseG1GC", "-XX:StartFlightRecording=filename="+rec+",settings=default", "-cp", dir, "GCStorm", "1500")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("java: %v\n%s", err, out)
	}
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := GCPauses(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("jfr", "print", "--json", "--events", pauseEvent, rec).Output()
	if err != nil {
		t.Fatalf("jfr print: %v", err)
	}
	var ref struct {
		Recording struct {
			Events []refEvent `json:"events"`
		} `json:"recording"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Recording.Events) < 5 {
		t.Fatalf("the storm made only %d pauses", len(ref.Recording.Events))
	}
	if len(got) != len(ref.Recording.Events) {
		t.Fatalf("%d pauses, jfr print says %d", len(got), len(ref.Recording.Events))
	}
	type pause struct {
		start int64
		dur   time.Duration
	}
	var want []pause
	var total time.Duration
	for _, e := range ref.Recording.Events {
		start, err := time.Parse(time.RFC3339Nano, e.Values.StartTime)
		if err != nil {
			t.Fatal(err)
		}
		dur, err := time.ParseDuration(strings.ToLower(strings.TrimPrefix(e.Values.Duration, "PT")))
		if err != nil {
			t.Fatalf("duration %q: %v", e.Values.Duration, err)
		}
		want = append(want, pause{start.UnixNano(), dur})
		total += dur
	}
	slices.SortFunc(want, func(a, b pause) int { return cmp.Compare(a.start, b.start) })
	for i, w := range want {
		if d := got[i].Start - w.start; d < -1000 || d > 1000 {
			t.Errorf("pause %d starts at %d, jfr print says %d", i, got[i].Start, w.start)
		}
		if d := time.Duration(got[i].End-got[i].Start) - w.dur; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("pause %d lasts %v, jfr print says %v", i, time.Duration(got[i].End-got[i].Start), w.dur)
		}
	}
	t.Logf("%d pauses, %v in all", len(got), total)
	// Damaged input is an error, not a panic.
	if _, err := GCPauses(data[:len(data)/2]); err == nil {
		t.Fatal("a truncated recording read without an error")
	}
	if _, err := GCPauses([]byte("not a recording")); err == nil {
		t.Fatal("garbage read without an error")
	}
}
