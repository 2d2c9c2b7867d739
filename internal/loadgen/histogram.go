package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the precision: each power of two is split into 2^subBits
// linear sub-buckets, so a bucket is at most 1/128 (0.8 %) of its value wide —
// the layout of an HdrHistogram with two significant digits.
const (
	subBits    = 7
	subCount   = 1 << subBits
	numBuckets = (64 - subBits) * subCount // bucketOf(math.MaxInt64) == numBuckets-1
)

// Histogram is a log-bucketed latency histogram with ~1 % relative precision
// over the whole int64 nanosecond range. The zero value is empty and ready.
// It is not safe for concurrent use; Run guards its own.
type Histogram struct {
	counts [numBuckets]int64
	total  int64
	min    int64
	max    int64
	sum    float64
}

// bucketOf maps v ≥ 0 to its bucket: values below 2^subBits exactly, then
// 2^subBits sub-buckets per power of two.
func bucketOf(v int64) int {
	if v < subCount {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - subBits - 1 // keeps the top subBits+1 bits
	return (shift+1)*subCount + int(uint64(v)>>uint(shift)) - subCount
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := i/subCount - 1
	m := int64(i%subCount + subCount)
	return (m+1)<<uint(shift) - 1
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)]++
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
}

// Count is the number of observations.
func (h *Histogram) Count() int64 { return h.total }

// Max is the largest observation (exact).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest observation (exact).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the average observation.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value below or at which a fraction q of the
// observations fall (the upper edge of that bucket, never above Max); 0 when
// empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(bucketHigh(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
