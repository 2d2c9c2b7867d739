package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStat is what the agent reads from /proc/<pid>/stat.
type procStat struct {
	// start is the process's start time in clock ticks since boot; a pid
	// whose start time changed was reused by another process.
	start uint64
	state byte
}

// errNoProcess means the pid does not exist or is a zombie.
var errNoProcess = errors.New("no such process")

// readStat reads /proc/<pid>/stat. Zombies count as gone: their recording
// cannot continue and their pid is about to be freed.
func readStat(root string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procStat{}, errNoProcess
		}
		return procStat{}, err
	}
	// comm may contain spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %v", pid, err)
	}
	st := procStat{start: start, state: f[0][0]}
	if st.state == 'Z' || st.state == 'X' {
		return st, errNoProcess
	}
	return st, nil
}

// listPIDs returns the numeric entries of the proc root.
func listPIDs(root string) ([]int, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// procInfo is what discovery learns about one process. It is cached per
// pid and start time: exe, command line and environment are read once.
type procInfo struct {
	exe     string
	argv    []string
	service string // from OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
	inst    string // service.instance.id from OTEL_RESOURCE_ATTRIBUTES
	jvm     bool
}

func (p procInfo) command() string { return strings.Join(p.argv, " ") }

// readInfo reads a process's exe, command line, OpenTelemetry environment and
// whether it is a JVM. Unreadable parts (permissions, kernel threads) stay empty.
func readInfo(root string, pid int) procInfo {
	dir := filepath.Join(root, strconv.Itoa(pid))
	var p procInfo
	p.exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		p.argv = splitNUL(b)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		p.service, p.inst = otelService(splitNUL(b))
	}
	p.jvm = filepath.Base(strings.TrimSuffix(p.exe, " (deleted)")) == "java" || mapsLibJVM(filepath.Join(dir, "maps"))
	return p
}

func splitNUL(b []byte) []string {
	var out []string
	for f := range bytes.SplitSeq(bytes.TrimRight(b, "\x00"), []byte{0}) {
		if len(f) > 0 {
			out = append(out, string(f))
		}
	}
	return out
}

// otelService returns service.name and service.instance.id from an
// environment: OTEL_SERVICE_NAME wins over OTEL_RESOURCE_ATTRIBUTES, as in
// the OpenTelemetry SDKs.
func otelService(env []string) (service, instance string) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "OTEL_RESOURCE_ATTRIBUTES" {
			for pair := range strings.SplitSeq(v, ",") {
				ak, av, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok {
					continue
				}
				if dec, err := url.PathUnescape(av); err == nil {
					av = dec
				}
				switch strings.TrimSpace(ak) {
				case "service.name":
					service = av
				case "service.instance.id":
					instance = av
				}
			}
		}
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OTEL_SERVICE_NAME="); ok && v != "" {
			service = v
		}
	}
	return service, instance
}

// mapsLibJVM reports whether libjvm.so is mapped (a JVM launched by another
// executable, e.g. an embedded launcher).
func mapsLibJVM(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if bytes.HasSuffix(sc.Bytes(), []byte("/libjvm.so")) {
			return true
		}
	}
	return false
}

// javaMain names a JVM by its main jar (without .jar) or main class, from its
// command line; "" when neither is found.
func javaMain(argv []string) string {
	// Options of the java launcher that take a separate value.
	withValue := map[string]bool{"-cp": true, "-classpath": true, "--class-path": true, "-p": true,
		"--module-path": true, "--add-modules": true, "--add-opens": true, "--add-exports": true,
		"--add-reads": true, "--upgrade-module-path": true, "--limit-modules": true, "--patch-module": true}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-jar" && i+1 < len(argv):
			return strings.TrimSuffix(filepath.Base(argv[i+1]), ".jar")
		case (a == "-m" || a == "--module") && i+1 < len(argv):
			m := argv[i+1]
			if _, cls, ok := strings.Cut(m, "/"); ok {
				return cls
			}
			return m
		case withValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return ""
}
