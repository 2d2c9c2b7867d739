package query

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/store"
)

// The types below are the JSON shapes of Jaeger's query service (package
// uimodel in Jaeger v2, model/json in v1). Field names and the null/empty
// conventions matter: the Jaeger UI and Grafana's Jaeger data source read them.

// envelope is Jaeger's structuredResponse. Errors is null on success.
type envelope struct {
	Data   any             `json:"data"`
	Total  int             `json:"total"`
	Limit  int             `json:"limit"`
	Offset int             `json:"offset"`
	Errors []envelopeError `json:"errors"`
}

// envelopeError is Jaeger's structuredError. A search by trace ids reports
// missing traces with TraceID set and no code.
type envelopeError struct {
	Code    int    `json:"code,omitempty"`
	Msg     string `json:"msg"`
	TraceID string `json:"traceID,omitempty"`
}

type jTrace struct {
	TraceID   string              `json:"traceID"`
	Spans     []jSpan             `json:"spans"`
	Processes map[string]jProcess `json:"processes"`
	Warnings  []string            `json:"warnings"`
}

type jSpan struct {
	TraceID       string       `json:"traceID"`
	SpanID        string       `json:"spanID"`
	Flags         uint32       `json:"flags"`
	OperationName string       `json:"operationName"`
	References    []jReference `json:"references"`
	StartTime     int64        `json:"startTime"` // µs since the Unix epoch
	Duration      int64        `json:"duration"`  // µs
	Tags          []jKeyValue  `json:"tags"`
	Logs          []jLog       `json:"logs"`
	ProcessID     string       `json:"processID"`
	Warnings      []string     `json:"warnings"`
}

type jReference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

type jProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []jKeyValue `json:"tags"`
}

type jLog struct {
	Timestamp int64       `json:"timestamp"` // µs since the Unix epoch
	Fields    []jKeyValue `json:"fields"`
}

type jKeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type jOperation struct {
	Name     string `json:"name"`
	SpanKind string `json:"spanKind"`
}

// jDependencyLink is Jaeger's DependencyLink plus Rootline's anomaly count.
type jDependencyLink struct {
	Parent    string `json:"parent"`
	Child     string `json:"child"`
	CallCount int64  `json:"callCount"`
	Anomalies int64  `json:"anomalies"`
}

// Tag keys of the OTLP→Jaeger translation (OpenTelemetry's "non-OTLP
// exporters" rules, as the collector's Jaeger translator applies them).
const (
	tagSpanKind          = "span.kind"
	tagStatusCode        = "otel.status_code"
	tagStatusDescription = "otel.status_description"
	tagScopeName         = "otel.scope.name"
	tagEvent             = "event"
	// linkRefType on a link asks for a CHILD_OF rather than FOLLOWS_FROM reference.
	linkRefType = "opentracing.ref_type"

	refChildOf     = "CHILD_OF"
	refFollowsFrom = "FOLLOWS_FROM"

	// flagSampled is Jaeger's sampled flag: every span Rootline stores was recorded.
	flagSampled = 1

	// JavaScript numbers lose precision beyond ±(2^53-1); Jaeger sends such
	// int64 tag values as strings and so do we.
	jsMaxSafeInteger = int64(1)<<53 - 1
)

// toJaegerTrace converts the spans of one trace to Jaeger's JSON. arts are the
// trace's artifacts: each span an artifact names gets a rootline.artifact.ids
// tag. Spans are ordered by start time so the output is stable.
func toJaegerTrace(id model.TraceID, spans []*model.Span, arts []store.Artifact, warnings []string) jTrace {
	spans = slices.DeleteFunc(slices.Clone(spans), func(s *model.Span) bool { return s == nil })
	slices.SortStableFunc(spans, func(x, y *model.Span) int {
		if x.Start != y.Start {
			return cmp.Compare(x.Start, y.Start)
		}
		return strings.Compare(x.SpanID.String(), y.SpanID.String())
	})
	if id.IsZero() && len(spans) > 0 {
		id = spans[0].TraceID
	}

	byspan := artifactIDsBySpan(arts)
	procs := processTable{ids: map[string]string{}, procs: map[string]jProcess{}}
	out := jTrace{
		TraceID:  id.String(),
		Spans:    make([]jSpan, 0, len(spans)),
		Warnings: warnings,
	}
	for _, s := range spans {
		js := toJaegerSpan(s, byspan[store.SpanRef{TraceID: s.TraceID, SpanID: s.SpanID}])
		js.ProcessID = procs.id(s)
		out.Spans = append(out.Spans, js)
	}
	out.Processes = procs.procs
	return out
}

// artifactIDsBySpan inverts the artifacts' span lists.
func artifactIDsBySpan(arts []store.Artifact) map[store.SpanRef][]string {
	m := make(map[store.SpanRef][]string)
	for _, a := range arts {
		for _, ref := range a.Spans {
			if !slices.Contains(m[ref], a.ID) {
				m[ref] = append(m[ref], a.ID)
			}
		}
	}
	return m
}

func toJaegerSpan(s *model.Span, artifactIDs []string) jSpan {
	tid := s.TraceID.String()
	js := jSpan{
		TraceID:       tid,
		SpanID:        s.SpanID.String(),
		Flags:         flagSampled,
		OperationName: s.Name,
		References:    references(s),
		StartTime:     s.Start / 1000,
		Duration:      max(0, s.Duration) / 1000,
		Logs:          make([]jLog, 0, len(s.Events)),
	}

	// Tag order follows the collector's translator: scope, attributes, kind,
	// status code, error, status description; Rootline's artifact ids last.
	tags := make([]jKeyValue, 0, len(s.Attributes)+6)
	if s.Scope != "" {
		tags = append(tags, jKeyValue{Key: tagScopeName, Type: "string", Value: s.Scope})
	}
	has := make(map[string]bool, len(s.Attributes))
	var existingIDs string
	for _, kv := range s.Attributes {
		if kv.Key == model.AttrArtifactIDs {
			// Merged with the store's links below, so the tag appears once.
			existingIDs = kv.Value.String()
			continue
		}
		has[kv.Key] = true
		tags = append(tags, jaegerKV(kv))
	}
	add := func(kv jKeyValue) {
		if !has[kv.Key] {
			has[kv.Key] = true
			tags = append(tags, kv)
		}
	}
	if k := s.Kind.String(); k != "" {
		add(jKeyValue{Key: tagSpanKind, Type: "string", Value: k})
	}
	switch s.StatusCode {
	case model.StatusOK:
		add(jKeyValue{Key: tagStatusCode, Type: "string", Value: "OK"})
	case model.StatusError:
		add(jKeyValue{Key: tagStatusCode, Type: "string", Value: "ERROR"})
		add(jKeyValue{Key: model.AttrError, Type: "bool", Value: true})
	}
	if s.StatusMessage != "" {
		add(jKeyValue{Key: tagStatusDescription, Type: "string", Value: s.StatusMessage})
	}
	if ids := mergeIDs(existingIDs, artifactIDs); ids != "" {
		tags = append(tags, jKeyValue{Key: model.AttrArtifactIDs, Type: "string", Value: ids})
	}
	js.Tags = tags

	for _, e := range s.Events {
		fields := make([]jKeyValue, 0, len(e.Attributes)+1)
		if e.Name != "" && !hasKey(e.Attributes, tagEvent) {
			fields = append(fields, jKeyValue{Key: tagEvent, Type: "string", Value: e.Name})
		}
		for _, kv := range e.Attributes {
			fields = append(fields, jaegerKV(kv))
		}
		js.Logs = append(js.Logs, jLog{Timestamp: e.Time / 1000, Fields: fields})
	}
	return js
}

// references puts the parent first (backends look for the first CHILD_OF),
// then the links; a link to the parent only changes the parent's type.
func references(s *model.Span) []jReference {
	refs := make([]jReference, 0, len(s.Links)+1)
	if !s.ParentSpanID.IsZero() {
		refs = append(refs, jReference{RefType: refChildOf, TraceID: s.TraceID.String(), SpanID: s.ParentSpanID.String()})
	}
	for _, l := range s.Links {
		typ := refFollowsFrom
		if v, ok := attr(l.Attributes, linkRefType); ok && v.Str == "child_of" {
			typ = refChildOf
		}
		if !s.ParentSpanID.IsZero() && l.TraceID == s.TraceID && l.SpanID == s.ParentSpanID {
			refs[0].RefType = typ
			continue
		}
		refs = append(refs, jReference{RefType: typ, TraceID: l.TraceID.String(), SpanID: l.SpanID.String()})
	}
	return refs
}

// jaegerKV converts a typed attribute the way Jaeger's JSON does.
func jaegerKV(kv model.KeyValue) jKeyValue {
	v := kv.Value
	switch v.Type {
	case model.TypeBool:
		return jKeyValue{Key: kv.Key, Type: "bool", Value: v.Int != 0}
	case model.TypeInt:
		if v.Int > jsMaxSafeInteger || v.Int < -jsMaxSafeInteger {
			return jKeyValue{Key: kv.Key, Type: "int64", Value: strconv.FormatInt(v.Int, 10)}
		}
		return jKeyValue{Key: kv.Key, Type: "int64", Value: v.Int}
	case model.TypeFloat:
		if math.IsNaN(v.Float) || math.IsInf(v.Float, 0) {
			// JSON has no NaN or Inf; send the text rather than fail the trace.
			return jKeyValue{Key: kv.Key, Type: "float64", Value: v.String()}
		}
		return jKeyValue{Key: kv.Key, Type: "float64", Value: v.Float}
	case model.TypeBytes:
		// []byte encodes as base64, as Jaeger's binary values do.
		return jKeyValue{Key: kv.Key, Type: "binary", Value: []byte(v.Str)}
	}
	return jKeyValue{Key: kv.Key, Type: "string", Value: v.Str}
}

// processTable numbers the distinct processes (service + resource) of a trace
// p1, p2, … in order of first appearance.
type processTable struct {
	ids   map[string]string // canonical resource → process id
	procs map[string]jProcess
}

func (t *processTable) id(s *model.Span) string {
	service := s.Service
	if service == "" {
		if v, ok := s.ResourceAttr(model.AttrServiceName); ok {
			service = v.String()
		}
	}
	if service == "" {
		service = "unknown_service"
	}
	tags := make([]jKeyValue, 0, len(s.Resource))
	res := make([]model.KeyValue, 0, len(s.Resource))
	for _, kv := range s.Resource {
		if kv.Key == model.AttrServiceName {
			continue
		}
		tags = append(tags, jaegerKV(kv))
		res = append(res, kv)
	}
	// The key ignores attribute order: the same resource sent twice in a
	// different order is one process.
	slices.SortStableFunc(res, func(x, y model.KeyValue) int { return strings.Compare(x.Key, y.Key) })
	var b strings.Builder
	b.WriteString(strconv.Quote(service))
	for _, kv := range res {
		b.WriteByte('|')
		b.WriteString(strconv.Quote(kv.Key))
		b.WriteByte(byte('0' + kv.Value.Type))
		b.WriteString(strconv.Quote(kv.Value.String()))
	}
	key := b.String()
	if id, ok := t.ids[key]; ok {
		return id
	}
	id := "p" + strconv.Itoa(len(t.ids)+1)
	t.ids[key] = id
	t.procs[id] = jProcess{ServiceName: service, Tags: tags}
	return id
}

// mergeIDs joins comma-separated ids with more ids, dropping duplicates and
// keeping first-seen order.
func mergeIDs(existing string, more []string) string {
	var ids []string
	for _, id := range strings.Split(existing, ",") {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, id := range more {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return strings.Join(ids, ",")
}

func attr(kvs []model.KeyValue, key string) (model.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return model.Value{}, false
}

func hasKey(kvs []model.KeyValue, key string) bool {
	_, ok := attr(kvs, key)
	return ok
}
