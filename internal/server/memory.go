package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/rootline/rootline/internal/store/factory"
)

// ByteSize is a number of bytes written as a plain number or with a binary
// or decimal unit: "1GiB", "512MiB", "2GB", "65536". It is a flag.Value and
// reads from YAML in both forms.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize parses s as a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size in bytes (e.g. 1GiB, 512MiB, 1000000)", s)
	}
	return ByteSize(v * float64(mult)), nil
}

// String writes b in the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range byteUnits[:4] {
		if unit := u.mult; b >= ByteSize(unit) && int64(b)%unit == 0 && (u.suffix == "TiB" || int64(b)%(unit<<10) != 0) {
			return strconv.FormatInt(int64(b)/unit, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// UnmarshalYAML takes a number or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return b.Set(n.Value)
}

// GoMemoryLimit is the soft limit the server gives Go's runtime under
// --memory-limit (none without one). The runtime's limit counts only the
// memory it maps itself: SQLite's page caches are allocated outside it, the
// process's resident memory also holds the mapped binary (34 MiB), and under
// a flood of allocations the runtime lets the heap pass its limit for a
// moment rather than spend more than half the CPU on collection. So the
// runtime gets the limit less the page caches' bound and a sixteenth. (With
// the whole limit, a 640 MiB server reached a peak RSS of 661–738 MiB under
// TestServerMemoryBoundUnderFlood; with ⅞ of it and 64 MiB of writer cache,
// 588–702 MiB, the page cache filling with the flood's accepted spans.)
func (c Config) GoMemoryLimit() int64 {
	if c.MemoryLimit <= 0 {
		return math.MaxInt64
	}
	limit := int64(c.MemoryLimit)
	return limit - c.sqliteCacheBytes() - limit/16
}

// sqliteCacheMiB is the writer's page cache the server gives the SQLite
// store unless set: 1/32 of the memory limit, 8 to 64 MiB.
func (c Config) sqliteCacheMiB() int {
	if c.MemoryLimit <= 0 {
		return 64
	}
	return int(min(max(int64(c.MemoryLimit)/32>>20, 8), 64))
}

// sqliteCacheBytes bounds the SQLite store's page caches (0 when spans go
// elsewhere).
func (c Config) sqliteCacheBytes() int64 {
	st, err := c.StorageConfig()
	if err != nil || st.Spans.Type != factory.TypeSQLite || st.Spans.SQLite == nil {
		return 0
	}
	return st.Spans.SQLite.StoreConfig(nil).CacheBytes()
}

// Memory of the parts of the server no bound covers, measured on an idle
// server (Go runtime, SQLite's page cache, the embedded UI, captures,
// exports): what --memory-limit must leave beside the bounded parts.
const baselineBytes = 96 << 20

// Memory one open receiver connection holds while it sends nothing but
// its headers: measured 14 KiB for HTTP/1.1 and 21 KiB for gRPC
// (docs/security.md), with a margin. What a stream receives is counted
// with the requests in flight.
const connectionBytes = 32 << 10

// Bytes a detector key holds once its window is full (anomaly.Config).
const detectorBytesPerDuration = 20

// memoryPart is one bounded part of the server's memory.
type memoryPart struct {
	name  string
	key   string // the settings that bound it
	bytes int64
}

// memoryParts lists what each bounded part of the server may hold with c's
// settings (defaults resolved): the parts sum to the bound of the server's
// memory that docs/security.md documents.
func (c Config) memoryParts() []memoryPart {
	r := c.Receiver
	receivers := 0
	for _, a := range []string{c.OTLPGRPCAddr, c.OTLPHTTPAddr, c.ZipkinAddr} {
		if a != "" {
			receivers++
		}
	}
	parts := []memoryPart{
		{"requests in flight", "receiver.max_inflight_bytes", r.MaxInflightBytes},
		{"connections", "receiver.max_connections", int64(receivers*r.MaxConnections) * connectionBytes},
		{"intake queue", "pipeline.queue_bytes", c.Pipeline.QueueBytes},
		{"anomaly detector", "detector.max_keys × detector.window", int64(c.Detector.MaxKeys) * int64(c.Detector.Window) * detectorBytesPerDuration},
		{"runtime, store and the rest", "", baselineBytes},
	}
	if b := c.sqliteCacheBytes(); b > 0 {
		parts = append(parts, memoryPart{"SQLite page caches", "storage.spans.sqlite.cache_mib", b})
	}
	if c.OTLPGRPCAddr != "" {
		// gRPC reads a message before the handler can reserve it.
		parts = append(parts, memoryPart{"gRPC messages being received", "receiver.max_concurrent_requests × max_request_bytes",
			int64(r.MaxConcurrentRequests) * c.MaxRequestBytes})
	}
	return parts
}

// memoryBound sums memoryParts.
func (c Config) memoryBound() int64 {
	var n int64
	for _, p := range c.memoryParts() {
		n += p.bytes
	}
	return n
}
