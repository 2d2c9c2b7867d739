package jfr

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// procInfo is what the profiler needs to know about a target process before
// it attaches jcmd to it.
type procInfo struct {
	// startTicks is field 22 of /proc/<pid>/stat: with the pid it identifies
	// the process, so a recycled pid is seen as the target gone.
	startTicks uint64
	uid, gid   uint32 // effective ids: the attach listener checks these
	// nsPID is the pid as the process sees it in its own pid namespace
	// (the last NSpid of /proc/<pid>/status): its attach files carry it.
	nsPID int
	// otherMountNS is true when the target sees another filesystem (a
	// container), so paths handed to it differ from the agent's.
	otherMountNS bool
	// otherPidNS is true when the target runs in another pid namespace;
	// jcmd (JDK 17) looks for the attach socket under /proc/<pid>/root/tmp
	// only then.
	otherPidNS bool
}

// errNoProcess is returned by readProc when /proc/<pid> does not exist.
var errNoProcess = errors.New("no such process")

func readProc(pid int) (procInfo, error) {
	var pi procInfo
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if errors.Is(err, fs.ErrNotExist) {
		return pi, errNoProcess
	}
	if err != nil {
		return pi, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// after it are counted from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return pi, fmt.Errorf("malformed %s/stat", dir)
	}
	fields := strings.Fields(string(stat[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return pi, fmt.Errorf("malformed %s/stat", dir)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return pi, errNoProcess
	}
	if pi.startTicks, err = strconv.ParseUint(fields[19], 10, 64); err != nil {
		return pi, fmt.Errorf("malformed %s/stat: %w", dir, err)
	}
	status, err := os.ReadFile(dir + "/status")
	if errors.Is(err, fs.ErrNotExist) {
		return pi, errNoProcess
	}
	if err != nil {
		return pi, err
	}
	pi.nsPID = pid
	for line := range strings.Lines(string(status)) {
		key, val, ok := strings.Cut(line, ":")
		if key == "NSpid" {
			if ids := strings.Fields(val); len(ids) > 0 {
				if n, err := strconv.Atoi(ids[len(ids)-1]); err == nil {
					pi.nsPID = n
				}
			}
			continue
		}
		if !ok || (key != "Uid" && key != "Gid") {
			continue
		}
		// Real, effective, saved, filesystem: the effective id is second.
		ids := strings.Fields(val)
		if len(ids) < 2 {
			return pi, fmt.Errorf("malformed %s line in %s/status", key, dir)
		}
		id, err := strconv.ParseUint(ids[1], 10, 32)
		if err != nil {
			return pi, fmt.Errorf("malformed %s line in %s/status: %w", key, dir, err)
		}
		if key == "Uid" {
			pi.uid = uint32(id)
		} else {
			pi.gid = uint32(id)
		}
	}
	pi.otherMountNS = otherNS(dir, "mnt")
	pi.otherPidNS = otherNS(dir, "pid")
	return pi, nil
}

func otherNS(dir, ns string) bool {
	self, err1 := os.Readlink("/proc/self/ns/" + ns)
	other, err2 := os.Readlink(dir + "/ns/" + ns)
	return err1 == nil && err2 == nil && self != other
}

// jvmArgs returns the JVM's options as the launcher applies them: those of
// JAVA_TOOL_OPTIONS and JDK_JAVA_OPTIONS, the command line, then
// _JAVA_OPTIONS (later settings win). Options in @argfiles or -XX:Flags
// files are not seen.
func jvmArgs(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid)
	var args, last []string
	if env, err := os.ReadFile(dir + "/environ"); err == nil {
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			k, v, _ := strings.Cut(string(kv), "=")
			switch k {
			case "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS":
				args = append(args, strings.Fields(v)...)
			case "_JAVA_OPTIONS":
				last = append(last, strings.Fields(v)...)
			}
		}
	}
	if cmdline, err := os.ReadFile(dir + "/cmdline"); err == nil {
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			args = append(args, string(arg))
		}
	}
	return append(args, last...)
}

// attachDisabled reports whether args set -XX:+DisableAttachMechanism (the
// last setting wins). jcmd detects the flag only through the JVM's perfdata;
// with -XX:-UsePerfData it would send SIGQUIT and wait 10 s for nothing.
func attachDisabled(args []string) bool {
	disabled := false
	for _, a := range args {
		switch a {
		case "-XX:+DisableAttachMechanism":
			disabled = true
		case "-XX:-DisableAttachMechanism":
			disabled = false
		}
	}
	return disabled
}

// reducedSignals reports whether args hold -Xrs: the JVM then leaves
// SIGQUIT to its default action, and the signal that opens the attach
// listener would kill it.
func reducedSignals(args []string) bool {
	return slices.Contains(args, "-Xrs")
}

// alive reports whether the process identified at Start still runs.
func alive(pid int, startTicks uint64) bool {
	pi, err := readProc(pid)
	return err == nil && pi.startTicks == startTicks
}

// isJVM reports whether pid runs a HotSpot JVM: its executable is named
// java, or libjvm.so is mapped (launchers embedding the JVM, e.g. Tomcat's
// jsvc or a jpackage'd app).
func isJVM(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "java" {
			return true
		}
	}
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return false
	}
	return bytes.Contains(maps, []byte("/libjvm.so"))
}
