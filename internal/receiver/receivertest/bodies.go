// Package receivertest builds hostile request bodies for tests of the
// receivers: attribute values nested far deeper than any decoder should
// recurse, or made of millions of empty elements, built without recursion
// and without pdata (which could not hold them).
package receivertest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// NestedProto returns an OTLP ExportTraceServiceRequest in protobuf holding
// one valid span whose one attribute is an array nested depth deep (each
// array holding the next; the innermost is empty).
func NestedProto(depth int) []byte {
	// Sizes from the inside out: level k is AnyValue{array_value:
	// ArrayValue{values: level k-1}}.
	anyLen := make([]uint64, depth+1)
	arrLen := make([]uint64, depth+1)
	for k := 1; k <= depth; k++ {
		arrLen[k] = 1 + varintLen(anyLen[k-1]) + anyLen[k-1]
		anyLen[k] = 1 + varintLen(arrLen[k]) + arrLen[k]
	}
	value := make([]byte, 0, anyLen[depth])
	for k := depth; k >= 1; k-- {
		value = append(value, 5<<3|2) // AnyValue.array_value
		value = binary.AppendUvarint(value, arrLen[k])
		value = append(value, 1<<3|2) // ArrayValue.values
		value = binary.AppendUvarint(value, anyLen[k-1])
	}
	return oneAttribute("nested", value)
}

// EmptyElements returns an OTLP ExportTraceServiceRequest in protobuf
// holding one valid span whose one attribute is an array of n empty values:
// 2 bytes each on the wire, the shape that costs a decoder the most memory
// per byte.
func EmptyElements(n int) []byte {
	return oneAttribute("empties", field(5, bytes.Repeat([]byte{1<<3 | 2, 0}, n)))
}

// oneAttribute is a request of one span with one attribute whose AnyValue
// is value (wire bytes).
func oneAttribute(key string, value []byte) []byte {
	kv := append(field(1, []byte(key)), field(2, value)...) // KeyValue
	now := uint64(time.Now().UnixNano())
	span := field(1, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) // trace_id
	span = append(span, field(2, []byte{1, 2, 3, 4, 5, 6, 7, 8})...)                // span_id
	span = append(span, field(5, []byte("deep"))...)                                // name
	span = binary.LittleEndian.AppendUint64(append(span, 7<<3|1), now)              // start_time_unix_nano
	span = binary.LittleEndian.AppendUint64(append(span, 8<<3|1), now+1000)         // end_time_unix_nano
	span = append(span, field(9, kv)...)                                            // attributes
	return field(1, field(2, field(2, span)))                                       // request{resource_spans{scope_spans{spans}}}
}

// NestedJSON is NestedProto in OTLP/JSON.
func NestedJSON(depth int) []byte {
	now := time.Now().UnixNano()
	var b strings.Builder
	fmt.Fprintf(&b, `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",`+
		`"name":"deep","startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[{"key":"nested","value":`, now, now+1000)
	b.WriteString(strings.Repeat(`{"arrayValue":{"values":[`, depth))
	b.WriteString(`{}`)
	b.WriteString(strings.Repeat(`]}}`, depth))
	b.WriteString(`}]}]}]}]}`)
	return []byte(b.String())
}

// NestedZipkin is a Zipkin v2 body of one span with an unknown field nested
// depth deep.
func NestedZipkin(depth int) []byte {
	return []byte(`[{"traceId":"1","id":"2","timestamp":1700000000000000,"x":` +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}]`)
}

// DepthForSize returns the largest nesting depth whose NestedProto body is
// at most size bytes.
func DepthForSize(size int) int {
	overhead := len(NestedProto(0))
	anyLen := uint64(0)
	for k := 1; ; k++ {
		arr := 1 + varintLen(anyLen) + anyLen
		next := 1 + varintLen(arr) + arr
		// The value's length is written in the enclosing fields too; their
		// varints grow by at most 4 bytes each on the way to 8 MiB.
		if int(next)+overhead+5*4 > size {
			return k - 1
		}
		anyLen = next
	}
}

func field(num int, b []byte) []byte {
	out := binary.AppendUvarint(nil, uint64(num)<<3|2)
	out = binary.AppendUvarint(out, uint64(len(b)))
	return append(out, b...)
}

func varintLen(v uint64) uint64 { return uint64(len(binary.AppendUvarint(nil, v))) }
