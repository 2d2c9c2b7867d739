package overhead

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    []float64
		want float64
	}{
		{"none", nil, 0},
		{"one", []float64{3}, 3},
		{"odd", []float64{5, 1, 3}, 3},
		{"even: mean of the middle two", []float64{4, 1, 10, 2}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Median(tc.v); got != tc.want {
				t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
	if got := Median([]time.Duration{3, 1, 2, 4}); got != 2 {
		t.Errorf("Median of durations 1..4 = %v, want 2 (2.5 truncated)", got)
	}
}

func TestMedianLatency(t *testing.T) {
	type round struct {
		lat Latency
		cpu time.Duration
	}
	rounds := []round{
		{Latency{Mean: 3, P50: 2, P95: 9, P99: 10, Errors: 1, Sent: 100}, 7},
		{Latency{Mean: 1, P50: 1, P95: 5, P99: 30, Errors: 0, Sent: 90}, 5},
		{Latency{Mean: 2, P50: 4, P95: 7, P99: 20, Errors: 2, Sent: 110}, 6},
	}
	got := MedianLatency(rounds, func(r round) Latency { return r.lat })
	want := Latency{Mean: 2, P50: 2, P95: 7, P99: 20, Errors: 3, Sent: 300}
	if got != want {
		t.Errorf("MedianLatency = %+v, want %+v", got, want)
	}
	if got := MedianOf(rounds, func(r round) time.Duration { return r.cpu }); got != 6 {
		t.Errorf("MedianOf cpu = %v, want 6", got)
	}
	if got := want.ErrorPercent(); got != 1 {
		t.Errorf("ErrorPercent = %v, want 1", got)
	}
	if got := (Latency{}).ErrorPercent(); got != 0 {
		t.Errorf("ErrorPercent of nothing sent = %v, want 0", got)
	}
}

func TestParseRates(t *testing.T) {
	got, err := ParseRates("10,25.5,40")
	if err != nil || !slices.Equal(got, []float64{10, 25.5, 40}) {
		t.Errorf("ParseRates = %v, %v", got, err)
	}
	if _, err := ParseRates("10,x"); err == nil {
		t.Error("ParseRates(10,x): no error")
	}
}

func TestCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Work until the CPU time shows (it counts in 10 ms ticks).
	self := CPU(os.Getpid())
	for end := time.Now().Add(10 * time.Second); self == 0 && time.Now().Before(end); self = CPU(os.Getpid()) {
	}
	if self <= 0 {
		t.Fatalf("CPU of this process = %v after up to 10 s of work", self)
	}
	if tree := TreeCPU(os.Getpid()); tree < self {
		t.Errorf("TreeCPU = %v < CPU %v", tree, self)
	}
	// A child that worked and was waited for counts in CPUWithChildren.
	before := CPUWithChildren(os.Getpid())
	if err := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done").Run(); err != nil {
		t.Fatal(err)
	}
	if after := CPUWithChildren(os.Getpid()); after-before < 10*time.Millisecond || after < CPU(os.Getpid()) {
		t.Errorf("CPUWithChildren %v → %v around a busy child (own CPU %v)", before, after, CPU(os.Getpid()))
	}
	if got := CPU(-1); got != 0 {
		t.Errorf("CPU of no process = %v", got)
	}
	// This test binary is among the commands, with at least its own CPU.
	exe, _ := os.Executable()
	own := CPU(os.Getpid()) // read first: it only grows
	if got := CPUByCommand()[filepath.Base(exe)]; got < own {
		t.Errorf("CPUByCommand[%s] = %v < CPU %v read before it", filepath.Base(exe), got, own)
	}
	// By command within this process's tree: this binary with at least its
	// own CPU, and a live busy child under its own name, nothing else.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 3000000 ]; do i=$((i+1)); done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	for end := time.Now().Add(10 * time.Second); CPU(child.Process.Pid) == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	own = CPU(os.Getpid())
	tree := TreeCPUByCommand(os.Getpid())
	if tree[filepath.Base(exe)] < own || tree["sh"] <= 0 || len(tree) != 2 {
		t.Errorf("TreeCPUByCommand = %v; want %s ≥ %v and a busy sh", tree, filepath.Base(exe), own)
	}
	// The machine was busy at least as long as this process and its
	// waited-for children, since both started after boot.
	withChildren := CPUWithChildren(os.Getpid())
	if m := MachineCPU(); m < withChildren {
		t.Errorf("MachineCPU %v < this process's CPU %v read before it", m, withChildren)
	}
}

func TestPairedCI(t *testing.T) {
	for _, tc := range []struct {
		name       string
		diffs      []float64
		mean, half float64
	}{
		{"none", nil, math.NaN(), math.NaN()},
		{"one: no interval", []float64{2}, 2, math.NaN()},
		// sd 1, n 3: t(2) = 4.303, half = 4.303/sqrt(3).
		{"three rounds", []float64{1, 2, 3}, 2, 4.303 / math.Sqrt(3)},
		{"equal: zero width", []float64{5, 5, 5, 5}, 5, 0},
		// 40 rounds: the normal quantile.
		{"many rounds", append(make([]float64, 20), []float64{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}...), 1,
			1.96 * math.Sqrt(40.0/39) / math.Sqrt(40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mean, half := PairedCI(tc.diffs)
			same := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9 }
			if !same(mean, tc.mean) || !same(half, tc.half) {
				t.Errorf("PairedCI(%v) = %v ± %v, want %v ± %v", tc.diffs, mean, half, tc.mean, tc.half)
			}
		})
	}
}
