package critpath

import (
	"slices"
	"strings"
	"testing"
)

func TestPathBound(t *testing.T) {
	p := SpanPath{}
	var total float64
	n := MaxPathSegments + 500
	for i := range n {
		// Every fourth segment long, the rest short, on two threads.
		d := int64(10_000)
		if i%4 == 0 {
			d = 1_000_000
		}
		start := int64(i) * 2_000_000
		p.Segments = append(p.Segments, SegmentJSON{TID: uint32(1 + i%2), Start: start, End: start + d, Ms: ms(d)})
		p.Arrows = append(p.Arrows, ArrowJSON{From: 1, To: 2, TS: start})
		total += ms(d)
	}
	for range MaxPathBlockedBy + 3 {
		p.BlockedBy = append(p.BlockedBy, BlockedBy{Ms: 1})
	}
	p.bound()
	if len(p.Segments) != MaxPathSegments || len(p.Arrows) != MaxPathSegments || len(p.BlockedBy) != MaxPathBlockedBy {
		t.Fatalf("kept %d segments, %d arrows, %d blocking; want %d, %d, %d", len(p.Segments), len(p.Arrows), len(p.BlockedBy), MaxPathSegments, MaxPathSegments, MaxPathBlockedBy)
	}
	if p.Trimmed == nil || p.Trimmed.Segments != 500 || p.Trimmed.Arrows != 500 || p.Trimmed.BlockedBy != 3 {
		t.Fatalf("trimmed %+v", p.Trimmed)
	}
	var kept, long float64
	for i, s := range p.Segments {
		kept += s.Ms
		if s.Ms == 1 {
			long++
		}
		if i > 0 && s.Start < p.Segments[i-1].Start {
			t.Fatalf("segment %d starts before the one before it", i)
		}
	}
	// Every long segment (625 of them) is kept; the shortest went.
	if long != float64((n+3)/4) {
		t.Errorf("kept %v long segments, want %d", long, (n+3)/4)
	}
	if d := kept + p.Trimmed.SegmentsMs - total; d > 1e-6 || d < -1e-6 {
		t.Errorf("kept %.3f + trimmed %.3f ms ≠ %.3f ms", kept, p.Trimmed.SegmentsMs, total)
	}

	small := SpanPath{Segments: []SegmentJSON{{Start: 1, End: 2}}}
	small.bound()
	if small.Trimmed != nil {
		t.Errorf("a path within the bounds was trimmed: %+v", small.Trimmed)
	}
}

func TestSharedBound(t *testing.T) {
	var sh []SharedJSON
	for i := range MaxShared + 10 {
		d := int64(1)
		if i >= 10 {
			d = 100 // the first ten are the shortest
		}
		s := SharedJSON{Start: int64(i) * 1000, End: int64(i)*1000 + d}
		for range MaxSharedSpans + i%3 {
			s.Spans = append(s.Spans, RequestRef{})
		}
		sh = append(sh, s)
	}
	got := boundShared(sh)
	if len(got) != MaxShared || got[0].Start != 10_000 {
		t.Fatalf("kept %d shared pieces from %d; want %d from 10000", len(got), got[0].Start, MaxShared)
	}
	for _, s := range got {
		if len(s.Spans) > MaxSharedSpans || len(s.Spans)+s.MoreSpans != MaxSharedSpans+int(s.Start/1000)%3 {
			t.Fatalf("piece at %d: %d spans + %d more", s.Start, len(s.Spans), s.MoreSpans)
		}
	}
}

func TestNotesBound(t *testing.T) {
	var c noteCounter
	if c.note("spans") != "" {
		t.Error("a note about no span")
	}
	c.add("span 1")
	if got := c.note("spans say so"); got != "span 1" {
		t.Errorf("one: %q", got)
	}
	for i := range 5 {
		c.add("span " + string(rune('2'+i)))
	}
	if got := c.note("spans say so"); got != "6 spans say so, e.g. span 1; span 2; span 3" {
		t.Errorf("six: %q", got)
	}
	var notes []string
	for range maxNotes + 5 {
		notes = append(notes, "n")
	}
	b := boundNotes(notes)
	if len(b) != maxNotes || !strings.Contains(b[len(b)-1], "6 more notes") {
		t.Errorf("bounded notes: %d, last %q", len(b), b[len(b)-1])
	}
}

func TestPickLinked(t *testing.T) {
	// The snapshot is of pid 7; its callers' spans (pid 3) are longer,
	// since they hold its time.
	reqs := []Request{
		{PID: 3, Start: 0, End: 900}, // 0
		{PID: 7, Start: 0, End: 100}, // 1
		{PID: 3, Start: 0, End: 800}, // 2
		{PID: 7, Start: 0, End: 300}, // 3
		{PID: 7, Start: 0, End: 200}, // 4
		{PID: 3, Start: 0, End: 50},  // 5
	}
	all := []int{0, 1, 2, 3, 4, 5}
	targets := map[uint32]bool{7: true}
	for _, tc := range []struct {
		limit int
		want  []int
	}{
		{2, []int{3, 4}},       // the target's two slowest
		{4, []int{0, 1, 3, 4}}, // all three of the target's, then the slowest other
		{6, []int{0, 1, 2, 3, 4, 5}},
	} {
		got := pickLinked(reqs, all, targets, tc.limit)
		if !slices.Equal(got, tc.want) {
			t.Errorf("limit %d: %v, want %v", tc.limit, got, tc.want)
		}
	}
}
