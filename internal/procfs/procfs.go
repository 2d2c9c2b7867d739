// Package procfs reads what Rootline needs of /proc.
package procfs

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StartTime is when process pid started, in clock ticks since boot (field 22
// of /proc/<pid>/stat). With the pid it names one process: a pid reused by
// another process has another start time.
func StartTime(pid int) (uint64, error) {
	st, _, err := stat(pid)
	return st, err
}

// stat reads the start time and the state (field 3: R, S, D, Z…) of pid.
func stat(pid int) (start uint64, state string, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// The fields after the command name, which may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, "", fmt.Errorf("bad /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state); starttime is field 22.
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0], err
}

// clockTicks is USER_HZ, the unit of /proc's times: 100 on every Linux
// architecture Rootline runs on.
const clockTicks = 100

// Age is how long ago process pid started (its start time against the
// system's uptime, at the clock tick's grain).
func Age(pid int) (time.Duration, error) {
	st, err := StartTime(pid)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("bad /proc/uptime")
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("bad /proc/uptime: %w", err)
	}
	age := time.Duration(up*float64(time.Second)) - time.Duration(st)*time.Second/clockTicks
	return max(age, 0), nil
}

// Alive reports whether the process pid that started at start still runs.
// A zombie (exited, not yet reaped by its parent) does not: its memory and
// file descriptors are gone, only its pid and start time are left.
func Alive(pid int, start uint64) bool {
	st, state, err := stat(pid)
	return err == nil && st == start && notExited(state)
}

// Running reports whether process pid exists and has not exited (a zombie
// has).
func Running(pid int) bool {
	_, state, err := stat(pid)
	return err == nil && notExited(state)
}

// notExited: any state but zombie (Z) and dead (X).
func notExited(state string) bool { return state != "Z" && state != "X" }

// Schedstat is a thread's scheduler statistics, from
// /proc/<pid>/task/<tid>/schedstat (kernels with CONFIG_SCHED_INFO).
type Schedstat struct {
	// Run is the time the thread ran on a CPU, Wait the time it waited on a
	// run queue while runnable (run delay).
	Run, Wait time.Duration
	// Slices counts the times it was given a CPU.
	Slices uint64
}

// ParseSchedstat parses the content of a schedstat file: three decimal
// fields, nanoseconds, nanoseconds and a count.
func ParseSchedstat(b []byte) (Schedstat, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return Schedstat{}, fmt.Errorf("schedstat %q: want 3 fields", b)
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 63)
		if err != nil {
			return Schedstat{}, fmt.Errorf("schedstat %q: %w", b, err)
		}
		v[i] = n
	}
	return Schedstat{Run: time.Duration(v[0]), Wait: time.Duration(v[1]), Slices: v[2]}, nil
}

// ThreadSchedstat reads the scheduler statistics of thread tid of this
// process.
func ThreadSchedstat(tid int) (Schedstat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
	if err != nil {
		return Schedstat{}, err
	}
	return ParseSchedstat(b)
}

// TaskSchedstats reads the scheduler statistics of every thread of process
// pid, by thread id; a thread that exits meanwhile is left out.
func TaskSchedstats(pid int) (map[int]Schedstat, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]Schedstat, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			continue // exited since the listing
		}
		st, err := ParseSchedstat(b)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", dir, e.Name(), err)
		}
		out[tid] = st
	}
	return out, nil
}

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, Limit, Offset uint64
	Perms                string // "r-xp"
	Inode                uint64
	Path                 string // "" for an anonymous mapping
}

// ParseMaps parses /proc/<pid>/maps, in address order; lines it cannot read
// are left out.
func ParseMaps(data []byte) []Mapping {
	var out []Mapping
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		m := Mapping{Perms: f[1]}
		var err1, err2 error
		m.Start, err1 = strconv.ParseUint(lo, 16, 64)
		m.Limit, err2 = strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m.Offset, _ = strconv.ParseUint(f[2], 16, 64)
		m.Inode, _ = strconv.ParseUint(f[4], 10, 64)
		if len(f) >= 6 {
			m.Path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// Columns of the "cpu" line of /proc/stat, for NodeCPU.
const (
	StatUser    = 1
	StatNice    = 2
	StatSystem  = 3
	StatIdle    = 4
	StatIOWait  = 5
	StatIRQ     = 6
	StatSoftIRQ = 7
	StatSteal   = 8
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture Rootline runs on).
const userHZ = 100

// NodeCPU returns the sum of the given columns of the "cpu" line of
// /proc/stat: the time all CPUs of the node spent so since boot.
func NodeCPU(cols ...int) (time.Duration, error) {
	t, err := NodeCPUSums(cols)
	if err != nil {
		return 0, err
	}
	return t[0], nil
}

// NodeCPUSums is NodeCPU of each group of columns, from one read of
// /proc/stat.
func NodeCPUSums(groups ...[]int) ([]time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(groups))
	for i, cols := range groups {
		if out[i], err = parseNodeCPU(b, cols); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseNodeCPU(b []byte, cols []int) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) <= StatSteal || f[0] != "cpu" {
		return 0, fmt.Errorf("procfs: /proc/stat: no cpu line with %d columns: %q", StatSteal, line)
	}
	var t int64
	for _, i := range cols {
		if i <= 0 || i >= len(f) {
			return 0, fmt.Errorf("procfs: /proc/stat: no column %d", i)
		}
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procfs: /proc/stat: column %d: %w", i, err)
		}
		t += v
	}
	return time.Duration(t) * (time.Second / userHZ), nil
}
