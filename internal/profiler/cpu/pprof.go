package cpu

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/pprof/profile"
)

// Label keys of every sample in a dumped profile.
const (
	LabelTID    = "tid"     // numeric: thread id
	LabelTimeNs = "time_ns" // numeric: Unix nanoseconds of the sample
	LabelThread = "thread"  // string: thread name (comm)
)

// builder turns samples into a pprof profile, deduplicating mappings,
// locations and functions.
type builder struct {
	p       *profile.Profile
	maps    map[string]*profile.Mapping
	locs    map[locKey]*profile.Location
	funcs   map[string]*profile.Function
	kernMap *profile.Mapping
	// resolved / unresolved frame counts, for the artifact attributes.
	resolved, unresolved int
}

type locKey struct {
	kernel bool
	addr   uint64
}

func newBuilder(periodNs int64, start, end time.Time) *builder {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: "cpu", Unit: "nanoseconds"},
		},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        periodNs,
		TimeNanos:     start.UnixNano(),
		DurationNanos: end.Sub(start).Nanoseconds(),
	}
	return &builder{
		p:     p,
		maps:  map[string]*profile.Mapping{},
		locs:  map[locKey]*profile.Location{},
		funcs: map[string]*profile.Function{},
	}
}

func (b *builder) function(name, file string) *profile.Function {
	key := name + "\x00" + file
	if f := b.funcs[key]; f != nil {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file}
	b.p.Function = append(b.p.Function, f)
	b.funcs[key] = f
	return f
}

func (b *builder) mapping(m *mapping) *profile.Mapping {
	key := fmt.Sprintf("%x-%x %s", m.start, m.limit, m.path)
	if pm := b.maps[key]; pm != nil {
		return pm
	}
	pm := &profile.Mapping{
		ID: uint64(len(b.p.Mapping) + 1), Start: m.start, Limit: m.limit, Offset: m.offset, File: m.path,
	}
	b.p.Mapping = append(b.p.Mapping, pm)
	b.maps[key] = pm
	return pm
}

func (b *builder) kernelMapping() *profile.Mapping {
	if b.kernMap == nil {
		b.kernMap = &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), File: "[kernel.kallsyms]", HasFunctions: true}
		b.p.Mapping = append(b.p.Mapping, b.kernMap)
	}
	return b.kernMap
}

func (b *builder) newLocation(k locKey, m *profile.Mapping, fn *profile.Function) *profile.Location {
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: k.addr, Mapping: m}
	if fn != nil {
		l.Line = []profile.Line{{Function: fn}}
		b.resolved++
	} else {
		b.unresolved++
	}
	b.p.Location = append(b.p.Location, l)
	b.locs[k] = l
	return l
}

// userLocation resolves a user address. pc is the address used for the
// lookup: return addresses point after the call, so callers pass addr-1.
func (b *builder) userLocation(s *symbolizer, pid int, ms []mapping, perfMap *symtab, addr, pc uint64) *profile.Location {
	k := locKey{addr: addr}
	if l := b.locs[k]; l != nil {
		return l
	}
	m := findMapping(ms, addr)
	if m == nil {
		if name, ok := perfMap.lookup(pc); ok {
			return b.newLocation(k, nil, b.function(name, "[jit]"))
		}
		return b.newLocation(k, nil, nil)
	}
	pm := b.mapping(m)
	var fn *profile.Function
	if t := s.elf(pid, m); t != nil {
		if va, ok := t.vaddr(pc - m.start + m.offset); ok {
			if name, ok := t.lookup(va); ok {
				fn = b.function(name, m.path)
			}
		}
	} else if name, ok := perfMap.lookup(pc); ok {
		fn = b.function(name, "[jit]")
	}
	if fn != nil {
		pm.HasFunctions = true
	}
	return b.newLocation(k, pm, fn)
}

// kernelLocation resolves a kernel address; pc as in userLocation.
func (b *builder) kernelLocation(kern *symtab, addr, pc uint64) *profile.Location {
	k := locKey{kernel: true, addr: addr}
	if l := b.locs[k]; l != nil {
		return l
	}
	var fn *profile.Function
	if name, ok := kern.lookup(pc); ok {
		fn = b.function(name, "[kernel.kallsyms]")
	}
	return b.newLocation(k, b.kernelMapping(), fn)
}

// Filter returns a copy of p with only the samples of threads tids (all
// threads when tids is empty) taken in [start, end] (a zero time is
// unbounded), read from the LabelTID and LabelTimeNs labels of a Dump.
func Filter(p *profile.Profile, tids []int, start, end time.Time) *profile.Profile {
	out := p.Copy()
	kept := out.Sample[:0]
	for _, s := range out.Sample {
		if len(tids) > 0 {
			tid := s.NumLabel[LabelTID]
			if len(tid) != 1 || !slices.Contains(tids, int(tid[0])) {
				continue
			}
		}
		if !start.IsZero() || !end.IsZero() {
			ts := s.NumLabel[LabelTimeNs]
			if len(ts) != 1 {
				continue
			}
			if !start.IsZero() && ts[0] < start.UnixNano() {
				continue
			}
			if !end.IsZero() && ts[0] > end.UnixNano() {
				continue
			}
		}
		kept = append(kept, s)
	}
	clear(out.Sample[len(kept):])
	out.Sample = kept
	return out.Compact()
}
