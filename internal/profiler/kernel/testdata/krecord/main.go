// Command krecord runs a command under the kernel recorder and/or the
// per-container kernel metrics, for bench/kernel-overhead.sh (build: go build
// ./internal/profiler/kernel/testdata/krecord).
//
//	krecord -mode off|targeted|untargeted|empty [-kmetrics off|targeted|untargeted]
//	        [-syscall-hooks] [-follow-depth N] [-no-follow-forks] [-all] [-idle D]
//	        [-dump] [-cgroup=false] -- command args…
//
// -mode is the recorder (internal/profiler/kernel). off: not loaded.
// targeted: the command's process (and the processes it forks) are targets.
// untargeted: the programs are attached but the target is another (idle)
// process. empty: no recorder, but a program that returns at once attached
// to each tracepoint the recorder attaches to — what any tracepoint program
// costs the traced work on this machine (the dispatch floor). -kmetrics is
// the agent's kernel metrics (internal/kmetrics, what
// `rootline agent --kmetrics` loads). off: not loaded. targeted: every metric
// enabled, 1-in-1, for the command's cgroup (every km_* program attached, every
// event of the command recorded). untargeted: the same for another, empty
// cgroup. -follow-depth is the recorder's Config.FollowDepth (0: its default,
// -1: wakers not followed); -no-follow-forks makes the command's own process
// the only target, so that the processes it forks are recorded only as
// followed wakers (when they wake it); -all records every task (Config.All);
// -idle D records for D before releasing the command (the recorder's cost
// while its target sleeps, and what the machine's other work costs it). While the command runs the metrics are read once a second (an
// eager scraper; the agent pushes every 15 s by default).
//
// The command runs in a fresh cgroup v2 of its own in every mode (unless
// -cgroup=false), so that the modes compare alike; the cgroups are removed at
// the end. It is started blocked, moved into the cgroup, registered, then
// released, so its first event is recorded. On exit krecord prints
// "krecord key=value…" lines on stderr: the command's CPU time (with its
// children), events recorded, lost, BPF run time/count per program and per
// program family (sr_: recorder, km_: metrics), its own CPU time (in total,
// and in the command's window: without loading) and max RSS.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/rootline/rootline/internal/kmetrics"
	"github.com/rootline/rootline/internal/profiler"
	"github.com/rootline/rootline/internal/profiler/kernel"
)

func main() {
	mode := flag.String("mode", "targeted", "recorder: off, targeted, untargeted or empty")
	kmMode := flag.String("kmetrics", "off", "kernel metrics: off, targeted or untargeted")
	dump := flag.Bool("dump", false, "dump the command's window at the end (measures Dump)")
	hooks := flag.Bool("syscall-hooks", false, "track syscalls with sys_enter/sys_exit (Config.SyscallHooks)")
	followDepth := flag.Int("follow-depth", 0, "Config.FollowDepth (0: the default; -1: do not follow wakers)")
	noForks := flag.Bool("no-follow-forks", false, "record only the command's own process as a target (its children are followed wakers)")
	all := flag.Bool("all", false, "record every task (Config.All)")
	idleFor := flag.Duration("idle", 0, "record this long with the command started but not released")
	inCgroup := flag.Bool("cgroup", true, "run the command in a cgroup v2 of its own")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || !valid(*mode) || !valid(*kmMode) {
		fmt.Fprintln(os.Stderr, "usage: krecord -mode off|targeted|untargeted|empty [-kmetrics off|targeted|untargeted] -- command args…")
		os.Exit(2)
	}
	// Programs loaded before ours are someone else's (e.g. a test run).
	before := map[uint32]bool{}
	for _, p := range bpftoolProgs() {
		before[p.ID] = true
	}
	cg := kmetrics.DetectCgroups()
	defer removeCgroups()
	newCgroup := func(what string) string {
		if cg.V2Root == "" {
			fail(fmt.Errorf("no cgroup v2 hierarchy mounted (needed for -cgroup and -kmetrics)"))
		}
		dir := filepath.Join(cg.V2Root, fmt.Sprintf("rootline-krecord-%s.%d", what, os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			fail(err)
		}
		cgDirs = append(cgDirs, dir)
		return dir
	}
	var cmdCgroup string
	if *inCgroup || *kmMode == "targeted" {
		cmdCgroup = newCgroup("cmd")
	}
	var rec *kernel.Recorder
	if *mode == "empty" {
		detach, err := attachEmpty()
		if err != nil {
			fail(err)
		}
		defer detach()
	} else if *mode != "off" {
		var err error
		cfg := kernel.Config{SyscallHooks: *hooks, FollowDepth: *followDepth, NoFollowForks: *noForks, All: *all}
		if rec, err = kernel.New(cfg, nil); err != nil {
			fail(err)
		}
	}
	var km *kmetrics.Manager
	var kmKey uint64
	if *kmMode != "off" {
		dir := cmdCgroup
		if *kmMode == "untargeted" {
			dir = newCgroup("other")
		}
		var err error
		if km, kmKey, err = loadKmetrics(cg, dir); err != nil {
			fail(err)
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
	if cmdCgroup != "" {
		if err := os.WriteFile(filepath.Join(cmdCgroup, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			_ = cmd.Process.Kill()
			fail(err)
		}
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
	// Read the metrics once a second while the command runs.
	stopReads, readsDone := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		if km != nil {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
		loop:
			for {
				select {
				case <-stopReads:
					break loop
				case <-tick.C:
					if _, err := km.Read(); err == nil {
						n++
					}
				}
			}
		}
		readsDone <- n
	}()
	if *idleFor > 0 && rec != nil {
		// The target exists but waits on its stdin: what the recorder
		// records meanwhile is the machine's other work that involves it
		// (none unless it is woken) and, with -all, everything.
		rec.Flush(context.Background())
		st0 := rec.Stats()
		var ru0 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		time.Sleep(*idleFor)
		rec.Flush(context.Background())
		st := rec.Stats()
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		secs := idleFor.Seconds()
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		fmt.Fprintf(os.Stderr, "krecord idle seconds=%.1f events_per_s=%.1f bytes_per_s=%.0f followed_events_per_s=%.1f lost=%.0f process_cpu_pct=%.3f\n",
			secs, (st["events"]-st0["events"])/secs, (st["events"]-st0["events"])*float64(kernel.EventBytes)/secs,
			(st["followed_events"]-st0["followed_events"])/secs, st["lost"], 100*cpu.Seconds()/secs)
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	_, _ = io.WriteString(gate, "\n")
	_ = gate.Close()
	err = cmd.Wait()
	end := time.Now()
	close(stopReads)
	reads := <-readsDone
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
	if km != nil {
		// The configured cgroup's series and on-CPU intervals: a check that
		// the targeting works (untargeted: none).
		var series, mine, oncpu int
		if all, err := km.Read(); err == nil {
			reads++
			for _, s := range all {
				series++
				if s.CgroupID == kmKey&^kmetrics.V1Bit {
					mine++
					if s.Metric == kmetrics.OnCPU {
						oncpu += int(s.Count)
					}
				}
			}
		}
		fmt.Fprintf(os.Stderr, "krecord kmetrics reads=%d series=%d cgroup_series=%d cgroup_oncpu_count=%d\n", reads, series, mine, oncpu)
	}
	if rec != nil || km != nil || *mode == "empty" {
		report(rec, km, cmd.Process.Pid, start, end, ru0, *dump, before)
	}
	if err != nil {
		fail(err)
	}
}

func valid(mode string) bool {
	return mode == "off" || mode == "targeted" || mode == "untargeted" || mode == "empty"
}

// recorderTracepoints are the tracepoints the recorder attaches to by default
// (bpfSource.programs in internal/profiler/kernel/source_linux.go).
var recorderTracepoints = []string{"irq_handler_entry", "irq_handler_exit", "softirq_entry", "softirq_exit",
	"hrtimer_expire_entry", "hrtimer_expire_exit", "block_rq_issue", "block_rq_complete",
	"sched_process_fork", "sched_process_exec", "sched_process_exit", "sched_waking", "sched_wakeup_new", "sched_switch"}

// attachEmpty attaches a tp_btf program that returns at once, named sr_empty
// (so report counts it with the recorder's), to each recorder tracepoint.
func attachEmpty() (func(), error) {
	var closers []io.Closer
	detach := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	for _, tp := range recorderTracepoints {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sr_empty", Type: ebpf.Tracing,
			AttachType: ebpf.AttachTraceRawTp, AttachTo: tp, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			detach()
			return nil, fmt.Errorf("load an empty program for %s: %w", tp, err)
		}
		closers = append(closers, prog)
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			detach()
			return nil, fmt.Errorf("attach an empty program to %s: %w", tp, err)
		}
		closers = append(closers, l)
	}
	return detach, nil
}

// loadKmetrics loads the kernel metrics and enables every metric, 1-in-1,
// for the cgroup dir.
func loadKmetrics(cg kmetrics.Cgroups, dir string) (*kmetrics.Manager, uint64, error) {
	c, err := cg.PathContainer(dir)
	if err != nil {
		return nil, 0, err
	}
	k, err := kmetrics.LoadKernel()
	if err != nil {
		return nil, 0, err
	}
	m, err := kmetrics.New(k, kmetrics.Options{Cgroups: cg})
	if err != nil {
		_ = k.Close()
		return nil, 0, err
	}
	on, rate := true, uint32(1)
	st, err := m.Configure(kmetrics.ConfigRequest{Container: dir, Metrics: []string{"all"}, Enabled: &on, Rate: &rate})
	if err != nil {
		_ = m.Close()
		return nil, 0, err
	}
	fmt.Fprintf(os.Stderr, "krecord kmetrics cgroup=%s key=%d attached=%d\n", c.Name(), c.Key, len(st.Attached))
	return m, c.Key, nil
}

// cgDirs are the cgroups krecord made; removeCgroups removes them (their
// processes have exited).
var cgDirs []string

func removeCgroups() {
	for _, d := range cgDirs {
		for range 50 {
			if err := os.Remove(d); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func report(rec *kernel.Recorder, km *kmetrics.Manager, pid int, start, end time.Time, ru0 syscall.Rusage, dump bool, before map[uint32]bool) {
	st := map[string]float64{}
	if rec != nil {
		rec.Flush(context.Background())
		st = rec.Stats()
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	wcpu := cpu - time.Duration(ru0.Utime.Nano()+ru0.Stime.Nano())
	secs := end.Sub(start).Seconds()
	fmt.Fprintf(os.Stderr, "krecord stats seconds=%.3f events=%.0f events_per_s=%.0f lost=%.0f reader_cpu_s=%.3f process_cpu_s=%.3f cpu_pct=%.2f window_cpu_s=%.3f window_cpu_pct=%.2f maxrss_mib=%.1f\n",
		secs, st["events"], st["events"]/secs, st["lost"], st["reader_cpu_seconds"], cpu.Seconds(), 100*cpu.Seconds()/secs,
		wcpu.Seconds(), 100*wcpu.Seconds()/secs, float64(ru.Maxrss)/1024)
	// The followed wakers' share: records, bytes held (of the recorder's
	// memory budget), threads followed, wakers not followed (bounds).
	fmt.Fprintf(os.Stderr, "krecord follow events=%.0f followed_events=%.0f followed_share_pct=%.1f bytes_per_s=%.0f followed_bytes_per_s=%.0f followed_bytes_buffered=%.0f bytes_buffered=%.0f followed_threads=%.0f unfollowed=%.0f cuts=%.0f unthrottles=%.0f\n",
		st["events"], st["followed_events"], 100*st["followed_events"]/max(st["events"], 1), st["events"]*float64(kernel.EventBytes)/secs,
		st["followed_events"]*float64(kernel.EventBytes)/secs, st["followed_bytes_buffered"], st["bytes_buffered"],
		st["followed_threads"], st["unfollowed_threads"], st["follow_cuts"], st["unthrottles"])
	if dump && rec != nil {
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
	// bpftool's view of our programs (run_time_ns needs kernel.bpf_stats_enabled):
	// the recorder's sr_* and the metrics' km_* programs.
	for _, prefix := range []string{"sr_", "km_"} {
		var tns, cnt uint64
		for _, p := range bpftoolProgs() {
			if before[p.ID] || !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			tns += p.RunTimeNs
			cnt += p.RunCnt
			if p.RunCnt > 0 {
				fmt.Fprintf(os.Stderr, "krecord bpftool prog=%s run_cnt=%d run_time_ns=%d ns_per_run=%.1f\n", p.Name, p.RunCnt, p.RunTimeNs, float64(p.RunTimeNs)/float64(p.RunCnt))
			}
		}
		if cnt > 0 {
			fmt.Fprintf(os.Stderr, "krecord bpftool total prefix=%s run_cnt=%d run_time_ns=%d ns_per_run=%.1f\n", prefix, cnt, tns, float64(tns)/float64(cnt))
		}
	}
	if km != nil {
		_ = km.Close()
	}
	if rec != nil {
		_ = rec.Close()
	}
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
	removeCgroups()
	os.Exit(1)
}
