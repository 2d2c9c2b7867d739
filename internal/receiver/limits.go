package receiver

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/rootline/rootline/internal/model"
)

// Attributes the receivers add where they had to drop data to stay within
// Limits, after the dropped counts of OTLP (which they include: what the
// client's SDK dropped plus what the receiver dropped).
const (
	// AttrDroppedAttributes is set on a span, an event, a link or a resource
	// (in that element's own attribute list) that lost attributes.
	AttrDroppedAttributes = "rootline.dropped_attributes"
	// AttrDroppedEvents and AttrDroppedLinks are set on a span that lost
	// events or links.
	AttrDroppedEvents = "rootline.dropped_events"
	AttrDroppedLinks  = "rootline.dropped_links"
)

// Limits bound what one span may carry, the way the OpenTelemetry SDK's span
// limits do: whatever is over a count limit is dropped and counted, whatever
// is over a length limit is truncated. The one limit that refuses the request
// (400 / INVALID_ARGUMENT naming it) is MaxAttributeDepth, because a value
// nested that deep is a payload built to hurt a decoder, not telemetry.
//
// Zero fields take the defaults of DefaultLimits.
type Limits struct {
	// MaxAttributeDepth bounds how deeply array and map attribute values
	// nest (an array of scalars is depth 1). Deeper requests are refused
	// before they are decoded.
	MaxAttributeDepth int `yaml:"max_attribute_depth"`
	// MaxAttributes bounds the attributes of one span, event, link,
	// resource or instrumentation scope (and the labels of one metric point);
	// the first ones are kept.
	MaxAttributes int `yaml:"max_attributes"`
	// MaxEvents and MaxLinks bound the events and links of one span; the
	// first ones are kept.
	MaxEvents int `yaml:"max_events"`
	MaxLinks  int `yaml:"max_links"`
	// MaxValueBytes truncates string and bytes attribute values, the JSON
	// text of array and map values, and status messages.
	MaxValueBytes int `yaml:"max_value_bytes"`
	// MaxNameBytes truncates service, span, event, scope and metric names;
	// an attribute whose key is longer is dropped (a truncated key could
	// collide with another).
	MaxNameBytes int `yaml:"max_name_bytes"`
}

// DefaultLimits returns the defaults: the OpenTelemetry SDK's 128 attributes,
// events and links per span, values up to 16 KiB, names up to 1 KiB and
// attribute values nested at most 16 deep.
func DefaultLimits() Limits {
	return Limits{MaxAttributeDepth: 16, MaxAttributes: 128, MaxEvents: 128, MaxLinks: 128,
		MaxValueBytes: 16 << 10, MaxNameBytes: 1 << 10}
}

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{
		{&l.MaxAttributeDepth, &d.MaxAttributeDepth}, {&l.MaxAttributes, &d.MaxAttributes},
		{&l.MaxEvents, &d.MaxEvents}, {&l.MaxLinks, &d.MaxLinks},
		{&l.MaxValueBytes, &d.MaxValueBytes}, {&l.MaxNameBytes, &d.MaxNameBytes},
	} {
		orDefault(f.v, *f.def)
	}
	return l
}

// maxAttributeDepth is the largest MaxAttributeDepth accepted: the decoders
// below the receivers recurse once per level.
const maxAttributeDepth = 64

// Validate reports every field out of range.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxAttributeDepth < 0 || l.MaxAttributeDepth > maxAttributeDepth {
		errs = append(errs, fmt.Errorf("limits.max_attribute_depth must be between 1 and %d, got %d", maxAttributeDepth, l.MaxAttributeDepth))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max_attributes", l.MaxAttributes}, {"max_events", l.MaxEvents}, {"max_links", l.MaxLinks},
		{"max_value_bytes", l.MaxValueBytes}, {"max_name_bytes", l.MaxNameBytes},
	} {
		if f.v < 0 || f.v > 1<<24 {
			errs = append(errs, fmt.Errorf("limits.%s must be between 1 and %d, got %d", f.name, 1<<24, f.v))
		}
	}
	return errors.Join(errs...)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// truncateBytes cuts b to at most n bytes (bytes values have no encoding to
// respect).
func truncateBytes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return b[:n]
}

// droppedCount is the attribute that records n dropped items, or nothing.
func appendDropped(kvs []model.KeyValue, key string, n int64) []model.KeyValue {
	if n <= 0 {
		return kvs
	}
	return append(kvs, model.Int(key, n))
}

// depthError is the refusal of a value nested deeper than the limit.
func depthError(limit int) string {
	return "attribute value nested deeper than " + strconv.Itoa(limit) + " levels (limit receiver.limits.max_attribute_depth)"
}
