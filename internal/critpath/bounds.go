package critpath

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Bounds of one stored analysis. A capture's window holds as many requests
// as the service served in it, and a path through a lock convoy or a
// runtime that parks on every call hops threads thousands of times: a
// capture of a Java gRPC service under a lock fault, unbounded, made a
// 582 MB document (552 paths of up to 9,209 segments, 132,016 shared
// pieces naming 1.9 million spans) that the server held several times over
// while encoding, storing and decoding it. Past each bound the longest
// pieces are kept (they carry the time) and the path says what was left
// out; its States and Waits are always over the whole path.
const (
	// DefaultMaxLinkedPaths is Analyzer.MaxLinkedPaths' default.
	DefaultMaxLinkedPaths = 64
	// MaxPathSegments bounds a stored path's segments, and its arrows.
	MaxPathSegments = 2000
	// MaxPathBlockedBy bounds a stored path's blocking requests.
	MaxPathBlockedBy = 100
	// MaxShared bounds the shared pieces of a stored analysis, and
	// MaxSharedSpans the spans each names.
	MaxShared      = 2000
	MaxSharedSpans = 32
	// maxNotes bounds a stored analysis' notes; notes of one kind about
	// many spans are counted in one.
	maxNotes = 32
)

// Trimmed says what a stored path leaves out beyond the bounds.
type Trimmed struct {
	Segments   int     `json:"segments,omitempty"`
	SegmentsMs float64 `json:"segmentsMs,omitempty"`
	Arrows     int     `json:"arrows,omitempty"`
	BlockedBy  int     `json:"blockedBy,omitempty"`
}

// bound trims p to the bounds: the longest segments (in time order), the
// arrows between the threads of the kept segments up to the bound, the
// longest blocking requests (already longest first).
func (p *SpanPath) bound() {
	var tr Trimmed
	if n := len(p.Segments); n > MaxPathSegments {
		byLen := slices.Clone(p.Segments)
		slices.SortStableFunc(byLen, func(a, b SegmentJSON) int { return cmp.Compare(b.End-b.Start, a.End-a.Start) })
		for _, s := range byLen[MaxPathSegments:] {
			tr.SegmentsMs += s.Ms
		}
		tr.SegmentsMs = ms(int64(tr.SegmentsMs * 1e6))
		kept := byLen[:MaxPathSegments]
		slices.SortStableFunc(kept, func(a, b SegmentJSON) int {
			return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.TID, b.TID))
		})
		p.Segments, tr.Segments = kept, n-MaxPathSegments
	}
	if n := len(p.Arrows); n > MaxPathSegments {
		p.Arrows, tr.Arrows = slices.Clip(p.Arrows[:MaxPathSegments]), n-MaxPathSegments
	}
	if n := len(p.BlockedBy); n > MaxPathBlockedBy {
		p.BlockedBy, tr.BlockedBy = slices.Clip(p.BlockedBy[:MaxPathBlockedBy]), n-MaxPathBlockedBy
	}
	if tr != (Trimmed{}) {
		p.Trimmed = &tr
	}
}

// boundShared keeps the MaxShared longest shared pieces (in their order)
// and at most MaxSharedSpans spans of each.
func boundShared(sh []SharedJSON) []SharedJSON {
	if len(sh) > MaxShared {
		idx := make([]int, len(sh))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(sh[b].End-sh[b].Start, sh[a].End-sh[a].Start) })
		idx = idx[:MaxShared]
		slices.Sort(idx)
		kept := make([]SharedJSON, 0, MaxShared)
		for _, i := range idx {
			kept = append(kept, sh[i])
		}
		sh = kept
	}
	for i := range sh {
		if n := len(sh[i].Spans); n > MaxSharedSpans {
			sh[i].Spans, sh[i].MoreSpans = slices.Clip(sh[i].Spans[:MaxSharedSpans]), n-MaxSharedSpans
		}
	}
	return sh
}

// noteCounter gathers notes of one kind about many spans into one, with a
// few examples.
type noteCounter struct {
	n        int
	examples []string
}

func (c *noteCounter) add(example string) {
	c.n++
	if len(c.examples) < 3 {
		c.examples = append(c.examples, example)
	}
}

// note is the counted note: the one example itself when there is one.
func (c *noteCounter) note(many string) string {
	switch c.n {
	case 0:
		return ""
	case 1:
		return c.examples[0]
	}
	return fmt.Sprintf("%d %s, e.g. %s", c.n, many, strings.Join(c.examples, "; "))
}

// boundNotes keeps the first maxNotes notes and counts the rest.
func boundNotes(notes []string) []string {
	if len(notes) <= maxNotes {
		return notes
	}
	return append(slices.Clip(notes[:maxNotes-1]), fmt.Sprintf("… and %d more notes", len(notes)-maxNotes+1))
}
