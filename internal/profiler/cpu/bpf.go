package cpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	var cpus []int
	for part := range strings.SplitSeq(strings.TrimSpace(string(data)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse online cpus %q: %w", data, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse online cpus %q: %w", data, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// perfEvent is one per-CPU cpu-clock event with the program attached.
type perfEvent struct {
	fd   int
	link link.Link // nil when attached with the ioctl fallback
}

func (p *perfEvent) close() error {
	var err error
	if p.link != nil {
		err = p.link.Close()
	}
	return errors.Join(err, unix.Close(p.fd))
}

// openPerfEvent opens a software cpu-clock event on cpu, sampling every
// thread at hz, and attaches prog to it: with a BPF perf-event link (5.15+),
// else with PERF_EVENT_IOC_SET_BPF.
func openPerfEvent(cpu, hz int, prog *ebpf.Program) (*perfEvent, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open cpu %d: %w", cpu, err)
	}
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err == nil {
		return &perfEvent{fd: fd, link: l}, nil
	}
	if err2 := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err2 != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach to cpu %d: %w (ioctl fallback: %w)", cpu, err, err2)
	}
	if err2 := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err2 != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("enable cpu %d: %w", cpu, err2)
	}
	return &perfEvent{fd: fd}, nil
}

// lostTotal sums the per-CPU lost-sample counters.
func lostTotal(m *ebpf.Map) uint64 {
	var per []uint64
	if err := m.Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}

// Available reports whether this process can run the sampler: it loads the
// BPF objects once and unloads them. The error wraps ErrUnavailable.
func Available() error {
	if os.Geteuid() != 0 {
		if caps, err := effectiveCaps(); err != nil || caps&(1<<unix.CAP_BPF) == 0 || caps&(1<<unix.CAP_PERFMON) == 0 {
			return fmt.Errorf("%w: needs root or CAP_BPF+CAP_PERFMON (euid %d)", ErrUnavailable, os.Geteuid())
		}
	}
	spec, err := loadCpuSample()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	spec.Maps[cpuSampleMapCpuEvents].MaxEntries = 4096
	var objs cpuSampleObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	return objs.Close()
}

// effectiveCaps reads CapEff from /proc/self/status.
func effectiveCaps() (uint64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}
