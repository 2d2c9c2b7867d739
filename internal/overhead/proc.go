package overhead

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rootline/rootline/internal/procfs"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ).
const userHZ = 100

// CPU returns the user+system CPU time process pid has used, 0 if it is
// gone.
func CPU(pid int) time.Duration {
	return ticks(stat(pid)) * (time.Second / userHZ)
}

// CPUWithChildren is CPU plus the CPU time of the children process pid
// has waited for (cutime+cstime): short-lived helpers it ran count too.
func CPUWithChildren(pid int) time.Duration {
	f := stat(pid)
	if len(f) <= 16 {
		return 0
	}
	cu, _ := strconv.ParseInt(f[15], 10, 64)
	cs, _ := strconv.ParseInt(f[16], 10, 64)
	return (ticks(f) + time.Duration(cu+cs)) * (time.Second / userHZ)
}

// TreeCPU returns the user+system CPU time of the processes pids and of all
// their descendants that are alive.
func TreeCPU(pids ...int) time.Duration {
	var total time.Duration
	for _, pid := range Tree(pids...) {
		total += CPU(pid)
	}
	return total
}

// TreeCPUByCommand is TreeCPU by command, named as CPUByCommand names them:
// on a machine shared with other work, the CPU of one's own processes only.
func TreeCPUByCommand(pids ...int) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, pid := range Tree(pids...) {
		if f := stat(pid); f != nil {
			out[commandName(pid, f)] += ticks(f) * (time.Second / userHZ)
		}
	}
	return out
}

// Tree returns pids and all their live descendants.
func Tree(pids ...int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := stat(pid); len(f) > 3 {
			ppid, _ := strconv.Atoi(f[3])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range pids {
		walk(pid)
	}
	return out
}

// MachineCPU returns the CPU time all CPUs of the machine have spent
// busy since boot (user, nice, system, irq and softirq of /proc/stat; not
// idle, iowait or steal): what a workload and everything beside it cost,
// wherever it ran.
func MachineCPU() time.Duration {
	return StatTime(StatUser, StatNice, StatSystem, StatIRQ, StatSoftIRQ)
}

// Columns of the "cpu" line of /proc/stat, for StatTime.
const (
	StatUser    = procfs.StatUser
	StatNice    = procfs.StatNice
	StatSystem  = procfs.StatSystem
	StatIdle    = procfs.StatIdle
	StatIOWait  = procfs.StatIOWait
	StatIRQ     = procfs.StatIRQ
	StatSoftIRQ = procfs.StatSoftIRQ
	StatSteal   = procfs.StatSteal
)

// StatTime returns the sum of the given columns of the "cpu" line of
// /proc/stat (all CPUs since boot), 0 if it cannot be read.
func StatTime(cols ...int) time.Duration {
	t, _ := procfs.NodeCPU(cols...)
	return t
}

// CPUByCommand returns the user+system CPU time of every live process,
// summed by command: the comm, with the first argument appended for
// commands that are roles of one binary ("rootline run", "rootline server").
func CPUByCommand() map[string]time.Duration {
	out := map[string]time.Duration{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := stat(pid)
		if f == nil {
			continue
		}
		out[commandName(pid, f)] += ticks(f) * (time.Second / userHZ)
	}
	return out
}

// commandName names a process for CPUByCommand: the base name of its
// command, with the first argument appended for roles of one binary;
// its comm (from f, its stat fields) when it has no command line.
func commandName(pid int, f []string) string {
	name := f[1]
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && len(b) > 0 {
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		name = filepath.Base(args[0])
		if len(args) > 1 && !strings.HasPrefix(args[1], "-") && !strings.Contains(args[1], "/") {
			name += " " + args[1]
		}
	}
	return name
}

// ticks is the utime+stime of the fields of a /proc/<pid>/stat, 0 if there
// are not that many.
func ticks(f []string) time.Duration {
	if len(f) <= 14 {
		return 0
	}
	u, _ := strconv.ParseInt(f[13], 10, 64)
	s, _ := strconv.ParseInt(f[14], 10, 64)
	return time.Duration(u + s)
}

// stat returns the fields of /proc/<pid>/stat, f[i] being field i+1 of
// proc(5) (f[3] ppid, f[13] utime, f[14] stime) and f[1], the command name,
// which may hold spaces, replaced by "comm"; nil if the process is gone.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return append([]string{s[:strings.IndexByte(s, ' ')], "comm"}, strings.Fields(s[i+1:])...)
}
