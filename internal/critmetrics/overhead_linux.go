package critmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// kmetricsPrefix names the agent's kernel-metric programs (bpf/kmetrics.c).
const kmetricsPrefix = "km_"

// bpfMeter reads the run time of the kernel-metric programs loaded on this
// host, with the kernel's BPF statistics on while it is open.
type bpfMeter struct{ stats io.Closer }

func startBPFMeter() (*bpfMeter, error) {
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("turn on BPF statistics (needs root): %w", err)
	}
	return &bpfMeter{stats: st}, nil
}

func (m *bpfMeter) Close() error { return m.stats.Close() }

// progTotals is the (run count, run time ns) of each km_* program by id.
type progTotals struct {
	byID map[ebpf.ProgramID][2]uint64
}

// read sums the statistics of every km_* program.
func (m *bpfMeter) read() (progTotals, error) {
	t := progTotals{byID: map[ebpf.ProgramID][2]uint64{}}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist) {
			return t, nil
		}
		if err != nil {
			return t, fmt.Errorf("list BPF programs: %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := p.Info()
		if err != nil || !strings.HasPrefix(info.Name, kmetricsPrefix) {
			p.Close()
			continue
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			continue
		}
		t.byID[id] = [2]uint64{st.RunCount, uint64(st.Runtime)}
	}
}

// measure is the programs' cost over window: the difference of two reads,
// over the programs present in both.
func (m *bpfMeter) measure(ctx context.Context, window time.Duration) (*BPFCost, error) {
	a, err := m.read()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(window):
	}
	b, err := m.read()
	if err != nil {
		return nil, err
	}
	sec := time.Since(start).Seconds()
	c := &BPFCost{Window: window.String()}
	var runs, ns uint64
	for id, x := range b.byID {
		y, ok := a.byID[id]
		if !ok {
			continue
		}
		c.Programs++
		runs += x[0] - y[0]
		ns += x[1] - y[1]
	}
	if c.Programs == 0 {
		return nil, fmt.Errorf("critmetrics: no kernel-metric (km_*) BPF programs loaded on this host: is the agent here running with --kmetrics?")
	}
	c.RunsPerSecond, c.NsPerSecond = float64(runs)/sec, float64(ns)/sec
	if runs > 0 {
		c.NsPerRun = float64(ns) / float64(runs)
	}
	return c, nil
}
