package receiver

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/rootline/rootline/internal/model"
)

// Attribute keys the Zipkin translation sets, after the OpenTelemetry semantic
// conventions that Zipkin's own OpenTelemetry mapping uses.
const (
	AttrHostIP       = "host.ip"
	AttrNetHostPort  = "net.host.port"
	AttrPeerService  = "peer.service"
	AttrNetPeerIP    = "net.peer.ip"
	AttrNetPeerPort  = "net.peer.port"
	AttrZipkinShared = "zipkin.shared"
)

// zipkinSpan is one span of Zipkin's v2 JSON model
// (zipkin2-api.yaml, definitions/Span).
type zipkinSpan struct {
	TraceID        string             `json:"traceId"`
	ID             string             `json:"id"`
	ParentID       string             `json:"parentId"`
	Name           string             `json:"name"`
	Kind           string             `json:"kind"`
	Timestamp      uint64             `json:"timestamp"` // µs since the epoch
	Duration       uint64             `json:"duration"`  // µs
	LocalEndpoint  *zipkinEndpoint    `json:"localEndpoint"`
	RemoteEndpoint *zipkinEndpoint    `json:"remoteEndpoint"`
	Annotations    []zipkinAnnotation `json:"annotations"`
	Tags           map[string]string  `json:"tags"`
	// Debug is a sampling override: it says nothing about the span itself, so
	// it is parsed (to accept it) and dropped.
	Debug  bool `json:"debug"`
	Shared bool `json:"shared"`
}

type zipkinEndpoint struct {
	ServiceName string `json:"serviceName"`
	IPv4        string `json:"ipv4"`
	IPv6        string `json:"ipv6"`
	Port        int64  `json:"port"`
}

type zipkinAnnotation struct {
	Timestamp uint64 `json:"timestamp"` // µs
	Value     string `json:"value"`
}

// maxMicros is the largest µs timestamp whose ns form fits an int64.
const maxMicros = math.MaxInt64 / 1000

// FromZipkin translates a Zipkin v2 JSON body (a list of spans, as Envoy's
// Zipkin tracer POSTs to /api/v2/spans) into model spans. Timestamps and
// durations go from µs to ns; tags stay string attributes; an "error" tag makes
// the span's status ERROR with the tag's value as message (unless the value is
// just "true"); localEndpoint gives the service, resource service.name and
// host.ip; remoteEndpoint gives peer.service, net.peer.ip and net.peer.port.
//
// Zipkin's B3 "shared" server spans reuse the id of the client span that called
// them (Envoy does this by default). Stored as they are, the two would collide,
// so a shared SERVER span gets a new span id derived from its trace and span
// ids and becomes a child of the client span, with zipkin.shared=true: the
// same shape Jaeger's query-time span id deduplication gives.
//
// Tags and annotations are held to lim as OTLP attributes and events are
// (tags are kept in key order up to MaxAttributes; see Limits).
//
// It refuses the whole batch, with an *InvalidError naming the first bad span
// as "spans[i]", when the body is not a JSON list of spans or a span has a
// missing, malformed or all-zero trace or span id, a malformed parent id, an
// unknown kind or no timestamp.
func FromZipkin(body []byte, lim Limits) ([]*model.Span, error) {
	lim = lim.withDefaults()
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, &InvalidError{Reason: "body is not JSON: " + err.Error()}
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, &InvalidError{Reason: "body is not a JSON list of Zipkin v2 spans"}
	}
	var out []*model.Span
	for i := 0; dec.More(); i++ {
		path := fmt.Sprintf("spans[%d]", i)
		var zs zipkinSpan
		if err := dec.Decode(&zs); err != nil {
			return nil, &InvalidError{Path: path, Reason: err.Error()}
		}
		s, err := fromZipkinSpan(&zs, lim)
		if err != nil {
			return nil, &InvalidError{Path: path, Reason: err.Error()}
		}
		out = append(out, s)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, &InvalidError{Reason: "body is not a JSON list of Zipkin v2 spans: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &InvalidError{Reason: "unexpected data after the list of spans"}
	}
	return out, nil
}

func fromZipkinSpan(zs *zipkinSpan, lim Limits) (*model.Span, error) {
	if zs.TraceID == "" {
		return nil, errors.New("traceId is missing")
	}
	traceID, err := model.ParseTraceID(zs.TraceID)
	if err != nil {
		return nil, fmt.Errorf("traceId: %w", err)
	}
	if traceID.IsZero() {
		return nil, errors.New("traceId is all zeros")
	}
	if zs.ID == "" {
		return nil, errors.New("id is missing")
	}
	spanID, err := model.ParseSpanID(zs.ID)
	if err != nil {
		return nil, fmt.Errorf("id: %w", err)
	}
	if spanID.IsZero() {
		return nil, errors.New("id is all zeros")
	}
	var parentID model.SpanID
	if zs.ParentID != "" {
		if parentID, err = model.ParseSpanID(zs.ParentID); err != nil {
			return nil, fmt.Errorf("parentId: %w", err)
		}
	}
	kind, ok := zipkinKinds[strings.ToUpper(zs.Kind)]
	if !ok {
		return nil, fmt.Errorf("kind %q is not one of CLIENT, SERVER, PRODUCER, CONSUMER", zs.Kind)
	}
	switch {
	case zs.Timestamp == 0:
		return nil, errors.New("timestamp is missing")
	case zs.Timestamp > maxMicros || zs.Duration > maxMicros || zs.Timestamp+zs.Duration > maxMicros:
		return nil, errors.New("timestamp or duration is past the year 2262")
	}

	s := &model.Span{
		TraceID:      traceID,
		SpanID:       spanID,
		ParentSpanID: parentID,
		Service:      UnknownService,
		Name:         truncate(zs.Name, lim.MaxNameBytes),
		Kind:         kind,
		Start:        int64(zs.Timestamp) * 1000,
		Duration:     int64(zs.Duration) * 1000,
	}
	if zs.Shared && kind == model.KindServer {
		s.ParentSpanID = spanID
		s.SpanID = sharedServerSpanID(traceID, spanID)
	}

	keys := make([]string, 0, len(zs.Tags))
	dropped := int64(0)
	for k := range zs.Tags {
		if len(k) > lim.MaxNameBytes {
			dropped++
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys) // a stable order, as Zipkin's map has none
	if len(keys) > lim.MaxAttributes {
		dropped += int64(len(keys) - lim.MaxAttributes)
		keys = keys[:lim.MaxAttributes]
	}
	s.Attributes = make([]model.KeyValue, 0, len(keys)+5)
	for _, k := range keys {
		s.Attributes = append(s.Attributes, model.String(k, truncate(zs.Tags[k], lim.MaxValueBytes)))
	}
	s.StatusCode, s.StatusMessage = zipkinStatus(zs.Tags)
	s.StatusMessage = truncate(s.StatusMessage, lim.MaxValueBytes)

	if ep := zs.LocalEndpoint; ep != nil {
		if ep.ServiceName != "" {
			s.Service = truncate(ep.ServiceName, lim.MaxNameBytes)
			s.Resource = append(s.Resource, model.String(model.AttrServiceName, s.Service))
		}
		if ip := cmp.Or(ep.IPv4, ep.IPv6); ip != "" {
			s.Resource = append(s.Resource, model.String(AttrHostIP, ip))
		}
		if ep.Port > 0 {
			s.SetAttr(model.Int(AttrNetHostPort, ep.Port))
		}
	}
	if ep := zs.RemoteEndpoint; ep != nil {
		if ep.ServiceName != "" {
			s.SetAttr(model.String(AttrPeerService, truncate(ep.ServiceName, lim.MaxNameBytes)))
		}
		if ip := cmp.Or(ep.IPv4, ep.IPv6); ip != "" {
			s.SetAttr(model.String(AttrNetPeerIP, ip))
		}
		if ep.Port > 0 {
			s.SetAttr(model.Int(AttrNetPeerPort, ep.Port))
		}
	}
	if zs.Shared {
		s.SetAttr(model.Bool(AttrZipkinShared, true))
	}
	s.Attributes = appendDropped(s.Attributes, AttrDroppedAttributes, dropped)
	if n := len(zs.Annotations) - lim.MaxEvents; n > 0 {
		s.Attributes = appendDropped(s.Attributes, AttrDroppedEvents, int64(n))
	}
	if len(s.Attributes) == 0 {
		s.Attributes = nil
	}

	if n := min(len(zs.Annotations), lim.MaxEvents); n > 0 {
		s.Events = make([]model.Event, 0, n)
		for i, a := range zs.Annotations[:n] {
			if a.Timestamp > maxMicros {
				return nil, fmt.Errorf("annotations[%d].timestamp is past the year 2262", i)
			}
			// An annotation's value is its name: an event name, held to
			// MaxNameBytes.
			s.Events = append(s.Events, model.Event{Time: int64(a.Timestamp) * 1000, Name: truncate(a.Value, lim.MaxNameBytes)})
		}
	}
	return s, nil
}

var zipkinKinds = map[string]model.SpanKind{
	"":         model.KindUnspecified,
	"CLIENT":   model.KindClient,
	"SERVER":   model.KindServer,
	"PRODUCER": model.KindProducer,
	"CONSUMER": model.KindConsumer,
}

// zipkinStatus derives the span status from Zipkin tags: Zipkin marks a failed
// span with an "error" tag whose value is the message (Envoy writes "true");
// OpenTelemetry's Zipkin exporter writes otel.status_code/description.
func zipkinStatus(tags map[string]string) (model.StatusCode, string) {
	if msg, ok := tags[model.AttrError]; ok {
		if msg == "true" {
			msg = ""
		}
		return model.StatusError, msg
	}
	switch tags["otel.status_code"] {
	case "ERROR":
		return model.StatusError, tags["otel.status_description"]
	case "OK":
		return model.StatusOK, ""
	}
	return model.StatusUnset, ""
}

// sharedServerSpanID derives the id a shared Zipkin SERVER span is stored
// under. It is a function of the ids alone, so every copy of the span (a retry,
// the other Zipkin receiver of a pair) gets the same one.
func sharedServerSpanID(t model.TraceID, s model.SpanID) model.SpanID {
	h := fnv.New64a()
	h.Write(t[:])
	h.Write(s[:])
	h.Write([]byte("zipkin-shared-server"))
	var id model.SpanID
	binary.BigEndian.PutUint64(id[:], h.Sum64())
	if id.IsZero() || id == s {
		id[7] ^= 1
	}
	return id
}
