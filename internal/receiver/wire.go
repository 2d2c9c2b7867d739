package receiver

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Pre-scans of request bodies, before any decoder sees them.
//
// The protobuf and JSON decoders under the receivers recurse once per level
// of nesting and allocate many times the bytes of a body made of small
// elements: an array value nested 880,000 deep in an 8 MiB body overflows the
// stack, and 8 MiB of empty array elements decode into hundreds of MB. So each
// body is first walked with an explicit stack: the walk refuses what nests too
// deep and estimates the memory decoding and translating it will take, which
// the request must then reserve from the receivers' memory budget
// (admission.go). The walks allocate nothing per element.

// msgKind is an OTLP message type the protobuf scan knows the fields of.
type msgKind uint8

const (
	kindNone msgKind = iota // a field that is not a message
	kindTraceRequest
	kindResourceSpans
	kindResource
	kindScopeSpans
	kindScope
	kindSpan
	kindEvent
	kindLink
	kindKeyValue
	kindAnyValue
	kindArrayValue
	kindKVList
	kindOpaque // a message of scalars and strings only (Status, EntityRef, quantiles)
	kindMetricsRequest
	kindResourceMetrics
	kindScopeMetrics
	kindMetric
	kindNumberSeries // Gauge, Sum
	kindHistogram
	kindExpHistogram
	kindSummary
	kindNumberPoint
	kindHistogramPoint
	kindExpHistogramPoint
	kindExpBuckets
	kindSummaryPoint
	kindExemplar
	numKinds
)

// otlpFields maps each message kind's message-typed fields (by number) to
// their kinds, after the OTLP protos (opentelemetry/proto/*/v1/*.proto).
// Other fields are skipped as scalars or strings.
var otlpFields = [numKinds]map[protowire.Number]msgKind{
	kindTraceRequest:  {1: kindResourceSpans},
	kindResourceSpans: {1: kindResource, 2: kindScopeSpans, 1000: kindScopeSpans},
	kindResource:      {1: kindKeyValue, 3: kindOpaque},
	kindScopeSpans:    {1: kindScope, 2: kindSpan},
	kindScope:         {3: kindKeyValue},
	kindSpan:          {9: kindKeyValue, 11: kindEvent, 13: kindLink, 15: kindOpaque},
	kindEvent:         {3: kindKeyValue},
	kindLink:          {5: kindKeyValue},
	kindKeyValue:      {2: kindAnyValue},
	kindAnyValue:      {5: kindArrayValue, 6: kindKVList},
	kindArrayValue:    {1: kindAnyValue},
	kindKVList:        {1: kindKeyValue},

	kindMetricsRequest:    {1: kindResourceMetrics},
	kindResourceMetrics:   {1: kindResource, 2: kindScopeMetrics, 1000: kindScopeMetrics},
	kindScopeMetrics:      {1: kindScope, 2: kindMetric},
	kindMetric:            {5: kindNumberSeries, 7: kindNumberSeries, 9: kindHistogram, 10: kindExpHistogram, 11: kindSummary, 12: kindKeyValue},
	kindNumberSeries:      {1: kindNumberPoint},
	kindHistogram:         {1: kindHistogramPoint},
	kindExpHistogram:      {1: kindExpHistogramPoint},
	kindSummary:           {1: kindSummaryPoint},
	kindNumberPoint:       {7: kindKeyValue, 5: kindExemplar},
	kindHistogramPoint:    {9: kindKeyValue, 8: kindExemplar},
	kindExpHistogramPoint: {1: kindKeyValue, 8: kindExpBuckets, 9: kindExpBuckets, 11: kindExemplar},
	kindSummaryPoint:      {7: kindKeyValue, 6: kindOpaque},
	kindExemplar:          {7: kindKeyValue},
}

// elementCost is, per message kind, an upper bound of the bytes decoding one
// element allocates (pdata's struct, its slot in the parent's slice with
// append's growth, the interface boxes of oneofs) plus what translating it
// into model spans or metric points allocates. TestEstimateBoundsAllocations
// holds these to measured allocations.
var elementCost = [numKinds]int64{
	kindTraceRequest: 256, kindResourceSpans: 512, kindResource: 256, kindScopeSpans: 256, kindScope: 256,
	kindSpan: 1024, kindEvent: 384, kindLink: 384, kindKeyValue: 448, kindAnyValue: 160,
	kindArrayValue: 96, kindKVList: 96, kindOpaque: 128,
	kindMetricsRequest: 256, kindResourceMetrics: 512, kindScopeMetrics: 256, kindMetric: 512,
	kindNumberSeries: 128, kindHistogram: 128, kindExpHistogram: 128, kindSummary: 128,
	kindNumberPoint: 1536, kindHistogramPoint: 1536, kindExpHistogramPoint: 1280, kindExpBuckets: 128,
	kindSummaryPoint: 1024, kindExemplar: 384,
}

// Costs of fields that are not messages: a string or bytes field costs its
// length plus its header; a packed repeated varint (bucket counts) may hold
// one element per byte, each decoded into a growing slice (measured: 42 B
// allocated per element); a scalar field may be one element of a repeated
// field decoded the same way.
const (
	stringFieldCost = 32
	scalarFieldCost = 48
	varintExpansion = 48
)

// scanResult is what a pre-scan learns of a body.
type scanResult struct {
	// estimate bounds the bytes decoding and translating the body allocates.
	estimate int64
	// elements counts the spans (traces) or data points (metrics).
	elements int
}

// scanError is a body refused by a pre-scan; reason is for the client.
type scanError struct{ reason string }

func (e *scanError) Error() string { return e.reason }

type scanFrame struct {
	kind msgKind
	end  int
}

// scanProto walks an OTLP protobuf request whose top-level message is root
// (kindTraceRequest or kindMetricsRequest) without decoding it: it refuses an
// attribute value whose arrays and maps nest deeper than maxDepth, and
// estimates the bytes decoding it takes. Well-formedness is left to the
// decoder, except where the walk cannot go on.
func scanProto(b []byte, root msgKind, maxDepth int) (scanResult, error) {
	var res scanResult
	res.estimate = int64(len(b)) + elementCost[root]
	stack := make([]scanFrame, 1, 32)
	stack[0] = scanFrame{kind: root, end: len(b)}
	depth := 0 // arrays and maps open on the stack
	pos := 0
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if pos == top.end {
			if top.kind == kindArrayValue || top.kind == kindKVList {
				depth--
			}
			stack = stack[:len(stack)-1]
			continue
		}
		num, typ, n := protowire.ConsumeTag(b[pos:top.end])
		if n < 0 {
			return res, &scanError{"cannot decode: " + protowire.ParseError(n).Error()}
		}
		pos += n
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeVarint(b[pos:top.end])
			if n < 0 || v > uint64(top.end-pos-n) {
				return res, &scanError{"cannot decode: a length runs past its message"}
			}
			pos += n
			child := otlpFields[top.kind][num]
			if child == kindNone {
				res.estimate += stringFieldCost
				if top.kind == kindExpBuckets {
					res.estimate += int64(v) * varintExpansion
				}
				pos += int(v)
				continue
			}
			res.estimate += elementCost[child]
			switch child {
			case kindSpan, kindNumberPoint, kindHistogramPoint, kindExpHistogramPoint, kindSummaryPoint:
				res.elements++
			case kindArrayValue, kindKVList:
				if depth++; depth > maxDepth {
					return res, &scanError{depthError(maxDepth)}
				}
			}
			stack = append(stack, scanFrame{kind: child, end: pos + int(v)})
		case protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type:
			n := protowire.ConsumeFieldValue(num, typ, b[pos:top.end])
			if n < 0 {
				return res, &scanError{"cannot decode: " + protowire.ParseError(n).Error()}
			}
			pos += n
			res.estimate += scalarFieldCost
		default:
			// OTLP has no groups; a decoder would have to skip them
			// recursively.
			return res, &scanError{fmt.Sprintf("cannot decode: field %d has wire type %d, which OTLP does not use", num, typ)}
		}
	}
	return res, nil
}

// jsonCosts are the bytes one JSON body's parts may take decoded: every
// object and array may become a decoded element and its translation; every
// comma may separate two elements (of an array of scalars, as small as "0,",
// or of a map); the decoder keeps a copy of each string.
type jsonCosts struct {
	container, element, perByte int64
}

var (
	// OTLP/JSON through pdata: an element of a packed array is 42 B.
	otlpJSONCosts = jsonCosts{container: 512, element: 48, perByte: 2}
	// Zipkin through encoding/json: a tag is a map entry, then a sorted key
	// and an attribute (measured: 190 B a tag).
	zipkinJSONCosts = jsonCosts{container: 1024, element: 256, perByte: 2}
)

// scanJSON walks a JSON body, strings and escapes included, and refuses it
// when objects and arrays nest deeper than maxNesting (saying why with
// limit); it estimates the bytes decoding it takes. It checks nothing else:
// the decoder does.
func scanJSON(b []byte, maxNesting int, costs jsonCosts, limit string) (scanResult, error) {
	res := scanResult{estimate: int64(len(b)) * costs.perByte}
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxNesting {
				return res, &scanError{fmt.Sprintf("JSON nested deeper than %d levels%s", maxNesting, limit)}
			}
			res.estimate += costs.container
		case '}', ']':
			depth--
		case ',':
			res.estimate += costs.element
		}
	}
	return res, nil
}

// otlpJSONLimit says why OTLP/JSON nesting is bounded.
func otlpJSONLimit(maxDepth int) string {
	return fmt.Sprintf(", more than attribute values nested %d deep take (limit receiver.limits.max_attribute_depth)", maxDepth)
}

// otlpJSONNesting is how deeply an OTLP/JSON request nests around attribute
// values nested maxDepth deep: the deepest attribute (an exemplar's, in
// metrics) sits in 15 levels of objects and arrays, and each level of a value
// adds at most 4 ({"kvlistValue":{"values":[{"value":…).
func otlpJSONNesting(maxDepth int) int { return 15 + 4*maxDepth }

// zipkinJSONNesting bounds a Zipkin v2 body: a list of spans holding objects
// (endpoints, tags) and a list of annotations; unknown fields may nest a
// little.
const zipkinJSONNesting = 16
