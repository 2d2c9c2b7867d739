package store

import (
	"time"

	"github.com/rootline/rootline/internal/model"
)

// AttrClockSkewMs flags a span whose end was far from the server's clock when
// the span arrived: the span's end minus the receive time, in milliseconds
// (positive: stamped in the future). Only the server sets it; a value sent by
// a client is removed. A flagged span is aged from its receive time
// (RetentionTime), so a client clock can neither keep spans forever nor get
// them deleted as soon as they are acknowledged.
const AttrClockSkewMs = "rootline.clock_skew_ms"

// DefaultMaxClockSkew is how far a span's end may be from the receive time
// before the span is flagged. Spans may legitimately arrive late (an
// exporter's retries, a collector's queue after an outage), so the bound is
// generous; within it, retention trusts the span's own end.
const DefaultMaxClockSkew = time.Hour

// FlagClockSkew returns spans with every span whose end lies more than
// maxSkew from received flagged with AttrClockSkewMs, and the attribute
// removed from every other span. Spans that change are copied (with their own
// attribute slice): the caller's spans are not modified, and the returned
// slice is spans itself when nothing changed. maxSkew <= 0 disables the
// flagging but still removes attributes a client forged.
func FlagClockSkew(spans []*model.Span, received int64, maxSkew time.Duration) []*model.Span {
	out := spans
	for i, sp := range spans {
		skew := sp.End() - received
		flag := maxSkew > 0 && (skew > int64(maxSkew) || skew < -int64(maxSkew))
		at := attrIndex(sp.Attributes, AttrClockSkewMs)
		if !flag && at < 0 {
			continue
		}
		c := *sp
		c.Attributes = make([]model.KeyValue, 0, len(sp.Attributes)+1)
		for j, kv := range sp.Attributes {
			if j != at {
				c.Attributes = append(c.Attributes, kv)
			}
		}
		if flag {
			c.Attributes = append(c.Attributes, model.Int(AttrClockSkewMs, skew/int64(time.Millisecond)))
		}
		if &out[0] == &spans[0] {
			out = append([]*model.Span(nil), spans...)
		}
		out[i] = &c
	}
	return out
}

func attrIndex(kvs []model.KeyValue, key string) int {
	for i := range kvs {
		if kvs[i].Key == key {
			return i
		}
	}
	return -1
}

// RetentionTime is the time from which retention ages a span: its end, or for
// a span flagged by FlagClockSkew its receive time (to the millisecond).
func RetentionTime(sp *model.Span) int64 {
	if i := attrIndex(sp.Attributes, AttrClockSkewMs); i >= 0 && sp.Attributes[i].Value.Type == model.TypeInt {
		return sp.End() - sp.Attributes[i].Value.Int*int64(time.Millisecond)
	}
	return sp.End()
}
