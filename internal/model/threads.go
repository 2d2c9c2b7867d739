package model

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// ThreadActivity is an interval a request was active on a thread.
type ThreadActivity struct {
	TID        uint32
	Start, End int64 // Unix ns, [Start, End)
}

// FormatThreadIntervals formats activities as the AttrThreadIntervals span
// attribute: "tid:from-to" items, comma-separated, from and to in
// microseconds after the span's start. Written by `rootline run`, read by
// the critical path (internal/critpath).
func FormatThreadIntervals(start int64, acts []ThreadActivity) string {
	b := make([]byte, 0, 24*len(acts))
	for i, a := range acts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(a.TID), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, max(0, a.Start-start)/1000, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, max(0, a.End-start+999)/1000, 10)
	}
	return string(b)
}

// MaxThreadActivities bounds the thread intervals read from one span
// attribute.
const MaxThreadActivities = 4096

// ParseThreadIntervals reads an AttrThreadIntervals value of a span from
// start to end (Unix ns). Items that do not parse are skipped; the result is
// clipped to the span and sorted by start.
func ParseThreadIntervals(v string, start, end int64) []ThreadActivity {
	var out []ThreadActivity
	for item := range strings.SplitSeq(v, ",") {
		if len(out) == MaxThreadActivities {
			break
		}
		tidS, rng, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok {
			continue
		}
		fromS, toS, ok := strings.Cut(rng, "-")
		tid, err1 := strconv.ParseUint(tidS, 10, 32)
		from, err2 := strconv.ParseInt(fromS, 10, 64)
		to, err3 := strconv.ParseInt(toS, 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || tid == 0 || from < 0 || to < from || to > 1<<40 {
			continue
		}
		out = append(out, ThreadActivity{TID: uint32(tid), Start: min(end, start+from*1000), End: min(end, start+to*1000)})
	}
	slices.SortStableFunc(out, func(a, b ThreadActivity) int { return cmp.Compare(a.Start, b.Start) })
	return out
}
