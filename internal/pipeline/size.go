package pipeline

import (
	"unsafe"

	"github.com/rootline/rootline/internal/model"
)

// Sizes of the model's fixed parts, for SpanBytes.
const (
	spanSize     = int64(unsafe.Sizeof(model.Span{})) + 8 // and its pointer
	keyValueSize = int64(unsafe.Sizeof(model.KeyValue{}))
	eventSize    = int64(unsafe.Sizeof(model.Event{}))
	linkSize     = int64(unsafe.Sizeof(model.Link{}))
)

// SpanBytes estimates the memory spans hold: their structs, strings and
// attribute lists. A resource attribute list shared by consecutive spans (as
// receivers hand them out) is counted once.
func SpanBytes(spans []*model.Span) int64 {
	var n int64
	var lastResource *model.KeyValue
	for _, s := range spans {
		n += spanSize + int64(len(s.Service)+len(s.Name)+len(s.StatusMessage)+len(s.Scope))
		n += attrsBytes(s.Attributes)
		if len(s.Resource) > 0 && &s.Resource[0] != lastResource {
			n += attrsBytes(s.Resource)
			lastResource = &s.Resource[0]
		}
		for _, e := range s.Events {
			n += eventSize + int64(len(e.Name)) + attrsBytes(e.Attributes)
		}
		for _, l := range s.Links {
			n += linkSize + attrsBytes(l.Attributes)
		}
	}
	return n
}

func attrsBytes(kvs []model.KeyValue) int64 {
	n := int64(cap(kvs)) * keyValueSize
	for _, kv := range kvs {
		n += int64(len(kv.Key) + len(kv.Value.Str))
	}
	return n
}
