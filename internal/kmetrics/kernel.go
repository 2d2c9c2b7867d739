package kmetrics

import "errors"

// ErrUnavailable wraps the reason the BPF programs cannot run here (not
// root, no BTF, verifier rejection…).
var ErrUnavailable = errors.New("kmetrics: eBPF kernel metrics unavailable")

// NumBuckets is the number of log2 buckets of a BPF histogram: bucket i
// counts values v with floor(log2(v)) == i (0 and 1 in bucket 0).
const NumBuckets = 64

// V1Bit marks a container key as a cgroup v1 id of the cpu controller's
// hierarchy (must match KM_V1_BIT in bpf/kmetrics.h).
const V1Bit = uint64(1) << 63

// Entry is the BPF config of one container (or the default): a bit per
// enabled metric and a 1-in-N sampling rate per metric (0 and 1 sample every
// event).
type Entry struct {
	Enabled uint32
	Rate    [MaxMetrics]uint32
}

// Has reports whether m is enabled.
func (e Entry) Has(m Metric) bool { return e.Enabled&(1<<m) != 0 }

// Sample is one (container, metric) histogram or counter, summed over CPUs.
type Sample struct {
	Key     uint64
	Metric  Metric
	Count   uint64
	Sum     uint64
	Buckets [NumBuckets]uint64
}

// DropSample counts one container's drops with one reason.
type DropSample struct {
	Key    uint64
	Reason uint32
	Count  uint64
}

// Snapshot is what the BPF maps hold at one time. Values are cumulative since
// the programs were loaded.
type Snapshot struct {
	Samples []Sample
	Drops   []DropSample
}

// Kernel is the BPF side of the metrics, hidden behind an interface so the
// config logic, decoding and exposition above it are tested without root.
// Implementations need not be safe for concurrent use: the Manager
// serializes calls.
type Kernel interface {
	// SetGlobals writes the default config, the config generation (intervals
	// opened under an older generation are dropped) and the keys that have
	// an entry (sorted).
	SetGlobals(dflt Entry, gen uint64, keys []uint64) error
	// SetEntry writes the config of container key.
	SetEntry(key uint64, e Entry) error
	// DeleteEntry removes the config of container key (it falls back to the
	// default).
	DeleteEntry(key uint64) error
	// SetAttached attaches the programs in set and detaches the others.
	SetAttached(set programSet) error
	// Read returns the current values; the caller owns the result.
	Read() (Snapshot, error)
	// Forget deletes the values of the given container keys (removed cgroups).
	Forget(keys map[uint64]bool) error
	// Close detaches and unloads everything.
	Close() error
}
