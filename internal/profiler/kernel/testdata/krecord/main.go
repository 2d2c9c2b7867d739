// Command krecord runs a command under the kernel recorder, for
// bench/kernel-overhead.sh (build: go build ./internal/profiler/kernel/testdata/krecord).
//
//	krecord -mode off|targeted|untargeted [-syscall-hooks] [-dump] -- command args…
//
// off: the recorder is not loaded. targeted: the command's process (and
// the processes it forks) are targets. untargeted: the programs are
// attached but the target is another (idle) process. The command is started
// blocked, registered, then released, so its first event is recorded. On
// exit krecord prints "krecord key=value…" lines on stderr: the command's
// CPU time (with its children), events recorded, lost, BPF run time/count
// per program, its own CPU time and max RSS.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

func main() {
	mode := flag.String("mode", "targeted", "off, targeted or untargeted")
	dump := flag.Bool("dump", false, "dump the command's window at the end (measures Dump)")
	hooks := flag.Bool("syscall-hooks", false, "track syscalls with sys_enter/sys_exit (Config.SyscallHooks)")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: krecord -mode off|targeted|untargeted -- command args…")
		os.Exit(2)
	}
	// Programs loaded before ours are someone else's (e.g. a test run).
	before := map[uint32]bool{}
	for _, p := range bpftoolProgs() {
		before[p.ID] = true
	}
	var rec *kernel.Recorder
	if *mode != "off" {
		var err error
		if rec, err = kernel.New(kernel.Config{SyscallHooks: *hooks}, nil); err != nil {
			fmt.Fprintln(os.Stderr, "krecord:", err)
			os.Exit(1)
		}
	}
	// The command waits for a line on its stdin before it execs.
	cmd := exec.Command("sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	gate, err := cmd.StdinPipe()
	if err != nil {
		fail(err)
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	var idle *exec.Cmd
	switch *mode {
	case "targeted":
		if err := rec.Start(context.Background(), profiler.Target{PID: cmd.Process.Pid}); err != nil {
			fail(err)
		}
	case "untargeted":
		idle = exec.Command("sleep", "3600")
		if err := idle.Start(); err != nil {
			fail(err)
		}
		if err := rec.Start(context.Background(), profiler.Target{PID: idle.Process.Pid}); err != nil {
			fail(err)
		}
	}
	start := time.Now()
	_, _ = io.WriteString(gate, "\n")
	_ = gate.Close()
	err = cmd.Wait()
	end := time.Now()
	// The command's CPU time including the children it waited for: the BPF
	// programs' run time is charged to the tasks they trace.
	if ps := cmd.ProcessState; ps != nil {
		fmt.Fprintf(os.Stderr, "krecord child cpu_s=%.4f user_s=%.4f sys_s=%.4f wall_s=%.4f\n",
			(ps.UserTime() + ps.SystemTime()).Seconds(), ps.UserTime().Seconds(), ps.SystemTime().Seconds(), end.Sub(start).Seconds())
	}
	if idle != nil {
		_ = idle.Process.Kill()
		_ = idle.Wait()
	}
	if rec != nil {
		report(rec, cmd.Process.Pid, start, end, *dump, before)
	}
	if err != nil {
		fail(err)
	}
}

func report(rec *kernel.Recorder, pid int, start, end time.Time, dump bool, before map[uint32]bool) {
	rec.Flush(context.Background())
	st := rec.Stats()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	secs := end.Sub(start).Seconds()
	fmt.Fprintf(os.Stderr, "krecord stats seconds=%.3f events=%.0f events_per_s=%.0f lost=%.0f reader_cpu_s=%.3f process_cpu_s=%.3f cpu_pct=%.2f maxrss_mib=%.1f\n",
		secs, st["events"], st["events"]/secs, st["lost"], st["reader_cpu_seconds"], cpu.Seconds(), 100*cpu.Seconds()/secs, float64(ru.Maxrss)/1024)
	if dump {
		t0 := time.Now()
		arts, err := rec.Dump(context.Background(), profiler.Target{PID: pid}, profiler.Window{Start: start, End: end})
		if err != nil && len(arts) == 0 {
			fmt.Fprintln(os.Stderr, "krecord: dump:", err)
		}
		took := time.Since(t0)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		for _, a := range arts {
			fmt.Fprintf(os.Stderr, "krecord dump kind=%s bytes=%d attrs=%v took=%v maxrss_after_mib=%.1f\n", a.Kind, len(a.Data), a.Attributes, took, float64(ru.Maxrss)/1024)
		}
	}
	// bpftool's view of our programs (run_time_ns needs kernel.bpf_stats_enabled).
	var tns, cnt uint64
	for _, p := range bpftoolProgs() {
		if before[p.ID] || !strings.HasPrefix(p.Name, "sr_") {
			continue
		}
		tns += p.RunTimeNs
		cnt += p.RunCnt
		if p.RunCnt > 0 {
			fmt.Fprintf(os.Stderr, "krecord bpftool prog=%s run_cnt=%d run_time_ns=%d ns_per_run=%.1f\n", p.Name, p.RunCnt, p.RunTimeNs, float64(p.RunTimeNs)/float64(p.RunCnt))
		}
	}
	if cnt > 0 {
		fmt.Fprintf(os.Stderr, "krecord bpftool total run_cnt=%d run_time_ns=%d ns_per_run=%.1f\n", cnt, tns, float64(tns)/float64(cnt))
	}
	_ = rec.Close()
}

type bpfProg struct {
	ID        uint32 `json:"id"`
	Name      string `json:"name"`
	RunTimeNs uint64 `json:"run_time_ns"`
	RunCnt    uint64 `json:"run_cnt"`
}

// bpftoolProgs lists the loaded BPF programs with `bpftool -j prog show`
// (none if bpftool is missing).
func bpftoolProgs() []bpfProg {
	out, err := exec.Command("bpftool", "-j", "prog", "show").Output()
	if err != nil {
		return nil
	}
	var progs []bpfProg
	_ = json.Unmarshal(out, &progs)
	return progs
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "krecord:", err)
	os.Exit(1)
}
