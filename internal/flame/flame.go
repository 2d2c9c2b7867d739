// Package flame turns pprof profiles into flame-graph trees in the JSON shape
// d3-flame-graph reads: {"name","value","children"}, where a node's value is
// the sum of the chosen sample type over every stack passing through it.
package flame

import (
	"errors"
	"fmt"
	"sort"

	"github.com/google/pprof/profile"
)

// Label keys the filters read. Profilers that want their samples filterable
// by thread or time MUST attach these numeric labels to each sample.
const (
	LabelTID  = "tid"     // OS thread id
	LabelTime = "time_ns" // sample time, Unix nanoseconds
)

// ErrUnknownSampleType is returned when Filter.Type names no sample type of
// the profile.
var ErrUnknownSampleType = errors.New("unknown sample type")

// Filter selects the samples and the value a tree sums.
type Filter struct {
	// TIDs keeps only samples whose numeric label "tid" is in the set; empty
	// keeps every sample (with or without the label).
	TIDs []int64
	// Start and End (Unix ns, inclusive) keep only samples whose numeric label
	// "time_ns" lies within them; 0 leaves that side open. With either set,
	// samples without the label are dropped.
	Start, End int64
	// Type names the sample type to sum (e.g. "cpu", "samples"). Empty picks
	// the profile's default sample type when it names one, else the last.
	Type string
}

// Node is one frame of the tree. Children are sorted by name; frames with the
// same name under the same parent are merged.
type Node struct {
	Name     string  `json:"name"`
	Value    int64   `json:"value"`
	Children []*Node `json:"children,omitempty"`
}

// Stats tells how much of the profile the tree covers.
type Stats struct {
	// Type is the sample type summed, Unit its unit.
	Type string `json:"type"`
	Unit string `json:"unit"`
	// SamplesTotal counts the profile's samples, SamplesKept those the filter kept.
	SamplesTotal int `json:"samplesTotal"`
	SamplesKept  int `json:"samplesKept"`
	// ValueTotal sums the chosen type over all samples; the root's value is
	// the kept part of it.
	ValueTotal int64 `json:"valueTotal"`
}

// FromPprof parses a pprof profile (gzipped or not) and builds the flame
// graph of the samples f keeps. The root is named "root".
func FromPprof(data []byte, f Filter) (*Node, Stats, error) {
	p, err := Parse(data)
	if err != nil {
		return nil, Stats{}, err
	}
	return FromProfile(p, f)
}

// Parse parses a pprof profile, gzipped or not. A caller that builds several
// trees of one profile (one per request's threads and window) parses it once.
func Parse(data []byte) (*profile.Profile, error) {
	if len(data) == 0 {
		return nil, errors.New("flame: empty profile")
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("flame: parse pprof: %w", err)
	}
	return p, nil
}

// FromProfile builds the flame graph of the samples of p that f keeps. It
// does not modify p, so trees of one parsed profile may be built
// concurrently.
func FromProfile(p *profile.Profile, f Filter) (*Node, Stats, error) {
	idx, err := sampleIndex(p, f.Type)
	if err != nil {
		return nil, Stats{}, err
	}
	st := Stats{Type: p.SampleType[idx].Type, Unit: p.SampleType[idx].Unit, SamplesTotal: len(p.Sample)}
	tids := make(map[int64]bool, len(f.TIDs))
	for _, t := range f.TIDs {
		tids[t] = true
	}
	b := builder{root: &Node{Name: "root"}, index: map[*Node]map[string]*Node{}}
	var frames []string
	for _, s := range p.Sample {
		if idx >= len(s.Value) {
			continue
		}
		v := s.Value[idx]
		st.ValueTotal += v
		if !keep(s, tids, f.Start, f.End) {
			continue
		}
		st.SamplesKept++
		frames = stack(frames[:0], s)
		b.add(frames, v)
	}
	b.sort(b.root)
	return b.root, st, nil
}

func sampleIndex(p *profile.Profile, name string) (int, error) {
	if len(p.SampleType) == 0 {
		return 0, errors.New("flame: profile has no sample types")
	}
	if name == "" {
		name = p.DefaultSampleType
		if name == "" {
			return len(p.SampleType) - 1, nil
		}
	}
	var names []string
	for i, st := range p.SampleType {
		if st.Type == name {
			return i, nil
		}
		names = append(names, st.Type)
	}
	return 0, fmt.Errorf("flame: %w %q (profile has %v)", ErrUnknownSampleType, name, names)
}

func keep(s *profile.Sample, tids map[int64]bool, start, end int64) bool {
	if len(tids) > 0 {
		ok := false
		for _, t := range s.NumLabel[LabelTID] {
			if tids[t] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if start != 0 || end != 0 {
		ts := s.NumLabel[LabelTime]
		if len(ts) == 0 {
			return false
		}
		if (start != 0 && ts[0] < start) || (end != 0 && ts[0] > end) {
			return false
		}
	}
	return true
}

// stack appends the sample's frames root first. pprof lists locations leaf
// first, and a location's inlined lines innermost first.
func stack(dst []string, s *profile.Sample) []string {
	for i := len(s.Location) - 1; i >= 0; i-- {
		loc := s.Location[i]
		if len(loc.Line) == 0 {
			dst = append(dst, fmt.Sprintf("0x%x", loc.Address))
			continue
		}
		for j := len(loc.Line) - 1; j >= 0; j-- {
			name := "?"
			if fn := loc.Line[j].Function; fn != nil && fn.Name != "" {
				name = fn.Name
			}
			dst = append(dst, name)
		}
	}
	return dst
}

type builder struct {
	root  *Node
	index map[*Node]map[string]*Node
}

func (b *builder) add(frames []string, v int64) {
	n := b.root
	n.Value += v
	for _, name := range frames {
		kids := b.index[n]
		if kids == nil {
			kids = map[string]*Node{}
			b.index[n] = kids
		}
		c := kids[name]
		if c == nil {
			c = &Node{Name: name}
			kids[name] = c
			n.Children = append(n.Children, c)
		}
		c.Value += v
		n = c
	}
}

func (b *builder) sort(n *Node) {
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
	for _, c := range n.Children {
		b.sort(c)
	}
}
