package kmetrics

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// bpfKernel is the Kernel backed by bpf/kmetrics.c.
type bpfKernel struct {
	objs  kmetricsObjects
	progs [numPrograms]*ebpf.Program
	links [numPrograms]link.Link
}

// LoadKernel loads the BPF programs and maps (nothing is attached until a
// metric is enabled). The error wraps ErrUnavailable.
func LoadKernel() (Kernel, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root (euid %d)", ErrUnavailable, os.Geteuid())
	}
	spec, err := loadKmetrics()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	k := &bpfKernel{}
	if err := spec.LoadAndAssign(&k.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("%w: load BPF: %+v", ErrUnavailable, verr)
		}
		return nil, fmt.Errorf("%w: load BPF: %w", ErrUnavailable, err)
	}
	p := &k.objs.kmetricsPrograms
	k.progs = [numPrograms]*ebpf.Program{
		progSchedSwitch: p.KmSchedSwitch, progSchedWakeup: p.KmSchedWakeup, progSchedWakeupNew: p.KmSchedWakeupNew,
		progPageFaultUser: p.KmPageFaultUser, progPageFaultKernel: p.KmPageFaultKernel,
		progBlockIssue: p.KmBlockRqIssue, progBlockComplete: p.KmBlockRqComplete, progBlockInsert: p.KmBlockRqInsert, progBlockMerge: p.KmBlockRqMerge,
		progSockSend: p.KmSockSend, progSockRecv: p.KmSockRecv,
		progTCPRetransmit: p.KmTcpRetransmitSkb, progTCPSynAck: p.KmTcpRetransmitSynack,
		progKfreeSkb: p.KmKfreeSkb, progTLBFlush: p.KmTlbFlush,
	}
	if err := k.SetGlobals(Entry{}, 1, nil); err != nil {
		k.objs.Close()
		return nil, err
	}
	return k, nil
}

func toBPF(e Entry) kmetricsKmetricsConfig {
	return kmetricsKmetricsConfig{Rate: e.Rate, Enabled: e.Enabled}
}

func (k *bpfKernel) SetGlobals(dflt Entry, gen uint64, keys []uint64) error {
	g := kmetricsKmetricsGlobals{Dflt: toBPF(dflt), Gen: gen, Nkeys: uint32(len(keys))}
	copy(g.Keys[:], keys) // only read while Nkeys fits
	for _, key := range keys {
		if key&V1Bit != 0 {
			g.V1 = 1
		}
	}
	if err := k.objs.KmGlobals.Update(uint32(0), &g, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("kmetrics: write globals: %w", err)
	}
	return nil
}

func (k *bpfKernel) SetEntry(key uint64, e Entry) error {
	c := toBPF(e)
	if err := k.objs.KmConfig.Update(key, &c, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("kmetrics: write config of %#x: %w", key, err)
	}
	return nil
}

func (k *bpfKernel) DeleteEntry(key uint64) error {
	if err := k.objs.KmConfig.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("kmetrics: delete config of %#x: %w", key, err)
	}
	return nil
}

func (k *bpfKernel) SetAttached(set programSet) error {
	var errs []error
	for p := range numPrograms {
		switch {
		case set.has(p) && k.links[p] == nil:
			l, err := link.AttachTracing(link.TracingOptions{Program: k.progs[p]})
			if err != nil {
				errs = append(errs, fmt.Errorf("attach %s: %w", p, err))
				continue
			}
			k.links[p] = l
		case !set.has(p) && k.links[p] != nil:
			if err := k.links[p].Close(); err != nil {
				errs = append(errs, fmt.Errorf("detach %s: %w", p, err))
			}
			k.links[p] = nil
		}
	}
	return errors.Join(errs...)
}

func (k *bpfKernel) Read() (Snapshot, error) {
	var s Snapshot
	var key kmetricsKmetricsKey
	var per []kmetricsKmetricsHist
	it := k.objs.KmHist.Iterate()
	for it.Next(&key, &per) {
		smp := Sample{Key: key.Cgroup, Metric: Metric(key.Metric)}
		for _, h := range per {
			smp.Count += h.Count
			smp.Sum += h.Sum
			for i, b := range h.Buckets {
				smp.Buckets[i] += b
			}
		}
		s.Samples = append(s.Samples, smp)
	}
	if err := it.Err(); err != nil {
		return s, fmt.Errorf("kmetrics: read histograms: %w", err)
	}
	var dkey kmetricsKmetricsDropKey
	var dper []uint64
	dit := k.objs.KmDrops.Iterate()
	for dit.Next(&dkey, &dper) {
		d := DropSample{Key: dkey.Cgroup, Reason: dkey.Reason}
		for _, v := range dper {
			d.Count += v
		}
		s.Drops = append(s.Drops, d)
	}
	if err := dit.Err(); err != nil {
		return s, fmt.Errorf("kmetrics: read drops: %w", err)
	}
	return s, nil
}

func (k *bpfKernel) Forget(keys map[uint64]bool) error {
	var hk []kmetricsKmetricsKey
	var key kmetricsKmetricsKey
	var per []kmetricsKmetricsHist
	it := k.objs.KmHist.Iterate()
	for it.Next(&key, &per) {
		if keys[key.Cgroup] {
			hk = append(hk, key)
		}
	}
	var dk []kmetricsKmetricsDropKey
	var dkey kmetricsKmetricsDropKey
	var dper []uint64
	dit := k.objs.KmDrops.Iterate()
	for dit.Next(&dkey, &dper) {
		if keys[dkey.Cgroup] {
			dk = append(dk, dkey)
		}
	}
	errs := []error{it.Err(), dit.Err()}
	for _, key := range hk {
		if err := k.objs.KmHist.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	for _, key := range dk {
		if err := k.objs.KmDrops.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kmetrics: forget removed cgroups: %w", err)
	}
	return nil
}

func (k *bpfKernel) Close() error {
	var errs []error
	for p, l := range k.links {
		if l != nil {
			errs = append(errs, l.Close())
			k.links[p] = nil
		}
	}
	return errors.Join(append(errs, k.objs.Close())...)
}

// programIDs returns the kernel ids of the loaded programs by name (for the
// benchmark's bpf_stats).
func (k *bpfKernel) programIDs() map[string]ebpf.ProgramID {
	out := map[string]ebpf.ProgramID{}
	for p, prog := range k.progs {
		if info, err := prog.Info(); err == nil {
			if id, ok := info.ID(); ok {
				out[program(p).String()] = id
			}
		}
	}
	return out
}
