// Package miragetest reads and writes the span fixtures of internal/mirage's
// tests: the ids, times, kinds and the attributes the wait model reads, as
// JSON, so that spans `rootline run` made in an end-to-end test
// (test/mirage_test.go) can be replayed in a unit test.
package miragetest

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/rootline/rootline/internal/model"
)

// span is one span of a fixture file.
type span struct {
	Trace   string         `json:"trace"`
	Span    string         `json:"span"`
	Parent  string         `json:"parent,omitempty"`
	Service string         `json:"service"`
	Kind    string         `json:"kind"`
	Start   int64          `json:"start"` // Unix ns
	Dur     int64          `json:"dur"`   // ns
	Attrs   map[string]any `json:"attrs,omitempty"`
}

// kept are the attributes a fixture keeps.
var kept = map[string]bool{
	model.AttrWaitLocalMs: true, model.AttrWaitNetMs: true, model.AttrWaitRemoteMs: true, model.AttrServerAddress: true,
}

var kinds = map[string]model.SpanKind{
	"server": model.KindServer, "client": model.KindClient, "internal": model.KindInternal,
	"producer": model.KindProducer, "consumer": model.KindConsumer,
}

// Write writes spans to path, sorted by start.
func Write(path string, spans []*model.Span) error {
	out := make([]span, 0, len(spans))
	for _, s := range spans {
		f := span{Trace: s.TraceID.String(), Span: s.SpanID.String(), Service: s.Service, Kind: s.Kind.String(),
			Start: s.Start, Dur: s.Duration, Attrs: map[string]any{}}
		if !s.ParentSpanID.IsZero() {
			f.Parent = s.ParentSpanID.String()
		}
		for _, kv := range s.Attributes {
			if !kept[kv.Key] {
				continue
			}
			if n, ok := kv.Value.Number(); ok && kv.Value.Type != model.TypeString {
				f.Attrs[kv.Key] = n
			} else {
				f.Attrs[kv.Key] = kv.Value.String()
			}
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Read reads the spans of a fixture file.
func Read(path string) ([]*model.Span, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fs []span
	if err := json.Unmarshal(b, &fs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make([]*model.Span, 0, len(fs))
	for i, f := range fs {
		s := model.Span{Service: f.Service, Kind: kinds[f.Kind], Start: f.Start, Duration: f.Dur}
		if s.TraceID, err = model.ParseTraceID(f.Trace); err == nil {
			s.SpanID, err = model.ParseSpanID(f.Span)
		}
		if err == nil && f.Parent != "" {
			s.ParentSpanID, err = model.ParseSpanID(f.Parent)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: span %d: %w", path, i, err)
		}
		keys := make([]string, 0, len(f.Attrs))
		for k := range f.Attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch v := f.Attrs[k].(type) {
			case float64:
				s.Attributes = append(s.Attributes, model.Float(k, v))
			case string:
				s.Attributes = append(s.Attributes, model.String(k, v))
			}
		}
		out = append(out, &s)
	}
	return out, nil
}
