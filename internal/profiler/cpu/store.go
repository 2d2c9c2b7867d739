package cpu

import (
	"sync"
	"time"

	"github.com/rootline/rootline/internal/profiler"
)

// sample is one decoded ring-buffer event.
type sample struct {
	unixNs int64
	tid    uint32
	comm   string
	user   []uint64 // leaf first
	kern   []uint64 // leaf first
}

// size approximates the memory a sample holds, for Config.MaxBytes.
func (s *sample) size() int64 {
	return int64(64 + 8*(len(s.user)+len(s.kern)))
}

// targetBuf is the recording of one target: samples in arrival order.
type targetBuf struct {
	target  profiler.Target
	samples []sample
	head    int // index of the oldest sample kept; samples[:head] are dropped
	bytes   int64
	comms   map[uint32]string // interned comm per tid
	maxUser int               // deepest user stack seen
	alive   bool
	// procStart is the process start time (/proc/<pid>/stat field 22), to
	// tell the target from a later process reusing its pid.
	procStart uint64
}

// store is the in-memory ring of every target, bounded by age and bytes.
type store struct {
	mu        sync.Mutex
	targets   map[int]*targetBuf
	bytes     int64
	maxBytes  int64
	retention time.Duration
	dropped   uint64 // samples evicted for MaxBytes
}

func newStore(maxBytes int64, retention time.Duration) *store {
	return &store{targets: map[int]*targetBuf{}, maxBytes: maxBytes, retention: retention}
}

// add appends s to pid's buffer; samples of pids not recorded are ignored
// (they raced with Stop, or Config.All is set without a Start).
func (st *store) add(pid int, s sample, comm []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	tb := st.targets[pid]
	if tb == nil {
		return
	}
	c, ok := tb.comms[s.tid]
	if !ok || c != string(comm) {
		c = string(comm)
		tb.comms[s.tid] = c
	}
	s.comm = c
	if len(s.user) > tb.maxUser {
		tb.maxUser = len(s.user)
	}
	tb.samples = append(tb.samples, s)
	sz := s.size()
	tb.bytes += sz
	st.bytes += sz
	st.trim(tb, s.unixNs)
}

// trim drops tb's samples older than the retention, then, while over the
// byte budget, the oldest samples of tb (the target that is growing).
func (st *store) trim(tb *targetBuf, nowNs int64) {
	cutoff := nowNs - st.retention.Nanoseconds()
	for tb.head < len(tb.samples) && (tb.samples[tb.head].unixNs < cutoff || st.bytes > st.maxBytes) {
		if tb.samples[tb.head].unixNs >= cutoff {
			st.dropped++
		}
		sz := tb.samples[tb.head].size()
		tb.bytes -= sz
		st.bytes -= sz
		tb.samples[tb.head] = sample{}
		tb.head++
	}
	// Compact once half of the slice is dead so memory is returned.
	if tb.head > 1024 && tb.head*2 > len(tb.samples) {
		n := copy(tb.samples, tb.samples[tb.head:])
		clear(tb.samples[n:])
		tb.samples = tb.samples[:n]
		tb.head = 0
	}
}

// expire drops samples older than the retention from every target, for
// targets that no longer produce samples (exited, idle).
func (st *store) expire(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, tb := range st.targets {
		st.trim(tb, now.UnixNano())
	}
}

// window copies the samples of pid in [start, end] (Unix ns).
func (st *store) window(pid int, start, end int64) (out []sample, maxUser int, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	tb := st.targets[pid]
	if tb == nil {
		return nil, 0, false
	}
	for _, s := range tb.samples[tb.head:] {
		if s.unixNs >= start && s.unixNs <= end {
			out = append(out, s)
		}
	}
	return out, tb.maxUser, true
}

// remove frees pid's buffer; false if pid was not recorded.
func (st *store) remove(pid int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	tb := st.targets[pid]
	if tb == nil {
		return false
	}
	st.bytes -= tb.bytes
	delete(st.targets, pid)
	return true
}
