package anomaly

import (
	"math"
	"strconv"
	"strings"
)

// Weighted is a Detector that takes a sampled duration's adjusted count:
// a duration kept with probability p stands for 1/p durations, and enters
// the key's window that many times, so that a baseline learnt from a
// sample that keeps every slow span but only some of the normal ones is
// not biased toward the slow. The verdict is made once, as ObserveAt's.
type Weighted interface {
	Detector
	// ObserveWeightedAt is ObserveAt for a duration standing for weight
	// durations (at least 1; at most MaxWeight enter the window).
	ObserveWeightedAt(key string, d, at int64, weight int) Verdict
}

// MaxWeight bounds the copies of one duration a window takes, so that a
// tiny sampling probability cannot flush a key's window with one span.
const MaxWeight = 100

// ObserveWeighted observes d with its weight: det's ObserveWeightedAt when
// it has one and the weight is above 1, else ObserveAt.
func ObserveWeighted(det Detector, key string, d, at int64, weight int) Verdict {
	if w, ok := det.(Weighted); ok && weight > 1 {
		return w.ObserveWeightedAt(key, d, at, weight)
	}
	return det.ObserveAt(key, d, at)
}

// clampWeight bounds a weight to [1, MaxWeight] and the window size.
func clampWeight(weight, window int) int {
	return max(1, min(weight, MaxWeight, window))
}

// ObserveWeightedAt implements Weighted.
func (m *Median) ObserveWeightedAt(key string, d, at int64, weight int) Verdict {
	v := m.ObserveAt(key, d, at)
	extra := clampWeight(weight, m.cfg.Window) - 1
	if extra <= 0 {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.keys[key]; w != nil {
		for range extra {
			w.add(d, m.cfg.Window)
		}
	}
	return v
}

// ObserveWeightedAt implements Weighted.
func (n *Naive) ObserveWeightedAt(key string, d, at int64, weight int) Verdict {
	v := n.ObserveAt(key, d, at)
	extra := clampWeight(weight, n.cfg.Window) - 1
	n.mu.Lock()
	defer n.mu.Unlock()
	if k := n.keys[key]; k != nil {
		for range extra {
			if len(k.ring) == n.cfg.Window {
				k.ring = append(k.ring[:0], k.ring[1:]...)
			}
			k.ring = append(k.ring, d)
		}
	}
	return v
}

// Sampling thresholds as OpenTelemetry's consistent probability sampling
// writes them (tracestate "ot=th:<hex>"; "TraceState: Probability
// Sampling" in the OpenTelemetry specification): a 56-bit rejection
// threshold T, in 1 to 14 hex digits with trailing zeros dropped; a trace
// whose randomness R (the trace id's last 56 bits) is ≥ T is kept, with
// probability 1 − T/2^56, and each kept span stands for 2^56 / (2^56 − T).
const maxThreshold = uint64(1) << 56

// ThresholdFor returns the rejection threshold that keeps a share p of the
// traces (p ≥ 1: 0, every trace; p ≤ 0: 2^56, none).
func ThresholdFor(p float64) uint64 {
	switch {
	case p >= 1 || math.IsNaN(p):
		return 0
	case p <= 0:
		return maxThreshold
	}
	return maxThreshold - uint64(math.Round(p*float64(maxThreshold)))
}

// FormatThreshold writes t as the th value of tracestate's ot member.
func FormatThreshold(t uint64) string {
	if t == 0 {
		return "0"
	}
	s := strconv.FormatUint(t, 16)
	s = strings.Repeat("0", 14-len(s)) + s
	return strings.TrimRight(s, "0")
}

// ParseThreshold reads a th value (1 to 14 hex digits, padded with
// trailing zeros); ok is false for anything else.
func ParseThreshold(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 14 {
		return 0, false
	}
	t, err := strconv.ParseUint(s+strings.Repeat("0", 14-len(s)), 16, 64)
	if err != nil || strings.ContainsAny(s, "+-") {
		return 0, false
	}
	return t, true
}

// AdjustedCount is the number of spans one span kept under threshold t
// stands for (2^56 / (2^56 − t)), rounded to the nearest integer and at
// least 1.
func AdjustedCount(t uint64) int {
	if t >= maxThreshold {
		return 1
	}
	return max(1, int(math.Round(float64(maxThreshold)/float64(maxThreshold-t))))
}

// KeepTrace reports whether a trace whose id ends in the 7 bytes r56 (the
// randomness, big endian) is kept under threshold t.
func KeepTrace(r56 []byte, t uint64) bool {
	var r uint64
	for _, b := range r56 {
		r = r<<8 | uint64(b)
	}
	return r >= t
}

// AttrSamplingThreshold is the span attribute in which `rootline run`'s
// node-side sampling records the threshold a kept span of a normal trace
// was sampled under (the th of OpenTelemetry's tracestate ot member, as
// FormatThreshold writes it). A span without it was kept whatever the
// sample (sampling off, or a trace its process found anomalous) and stands
// for itself.
const AttrSamplingThreshold = "rootline.sampling.th"
