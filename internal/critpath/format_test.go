package critpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"

	"github.com/rootline/rootline/internal/profiler/kernel"
)

// encodings are the ways a snapshot reaches Decode: the recorder's binary
// format (version 3) compressed and not, and the gzipped JSON of version 2
// that older recorders wrote.
var encodings = []struct {
	name string
	enc  func(*kernel.Snapshot, *bytes.Buffer) error
}{
	{"v3", func(s *kernel.Snapshot, b *bytes.Buffer) error { return s.Encode(b) }},
	{"v3-uncompressed", func(s *kernel.Snapshot, b *bytes.Buffer) error { return s.EncodeUncompressed(b) }},
	{"v2-json", func(s *kernel.Snapshot, b *bytes.Buffer) error { return s.EncodeJSON(b) }},
}

// decodeAll decodes s from each encoding.
func decodeAll(t testing.TB, s *kernel.Snapshot) map[string]*Timeline {
	t.Helper()
	out := map[string]*Timeline{}
	for _, e := range encodings {
		var buf bytes.Buffer
		if err := e.enc(s, &buf); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		tl, err := DecodeBytes(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		// The streaming entry point reads the same.
		tl2, err := Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("%s through Decode: %v", e.name, err)
		}
		if err := sameTimeline(tl, tl2); err != nil {
			t.Fatalf("%s: Decode and DecodeBytes differ: %v", e.name, err)
		}
		out[e.name] = tl
	}
	return out
}

// samePaths checks that the paths of the requests picked are the same over
// each timeline as over the JSON one, as computed and as served.
func samePaths(t testing.TB, tls map[string]*Timeline, reqs []Request, picked []int) {
	t.Helper()
	ref := New(Input{Timeline: tls["v2-json"], Requests: reqs}, Config{})
	for name, tl := range tls {
		a := New(Input{Timeline: tl, Requests: reqs}, Config{})
		for _, i := range picked {
			p, q := a.Path(i), ref.Path(i)
			if !equalPaths(p, q) || !reflect.DeepEqual(a.JSON(&p), ref.JSON(&q)) {
				t.Fatalf("%s: request %d: path\n%+v\nfrom JSON\n%+v", name, i, p, q)
			}
		}
	}
}

// TestFormatsGiveSameTimeline: the binary format and the JSON one decode to
// the same timeline, field by field, and the same paths, on generated
// snapshots (consistent and chaotic, with devices, details that need
// escaping in JSON, causal network wakeups and enqueue times) and on every
// synthetic case of testdata; and the recorder's own decoder reads the same
// Snapshot from both.
func TestFormatsGiveSameTimeline(t *testing.T) {
	for seed := range 6 {
		for _, chaos := range []bool{false, true} {
			t.Run(fmt.Sprintf("generated/seed=%d/chaos=%v", seed, chaos), func(t *testing.T) {
				c := genConfig{seed: uint64(seed), procs: 3, threads: 4, dur: 40_000_000, meanRun: 300_000, meanBlock: 600_000,
					meanReq: 3_000_000, meanReqGap: 1_000_000, start: 1_700_000_000_000_000_000, foreignWakers: 0.1, chaos: chaos}
				s, reqs := generate(c)
				s.Lost, s.Events = uint64(seed), 12345
				s.Wakeups[0].Detail = "irq \"7\" \\ é"
				for i := range s.Wakeups {
					if s.Wakeups[i].Context == "network" && i%2 == 0 {
						s.Wakeups[i].Causal = true
					}
					if i%3 == 0 {
						s.Wakeups[i].Enqueued = s.Wakeups[i].TS + int64(i)
					}
				}
				for i := range s.Intervals {
					if s.Intervals[i].Reason == "disk" && i%3 == 0 {
						s.Intervals[i].Device, s.Intervals[i].Syscall = "vda1", "fsync"
					}
				}
				s.DiskIOs = []kernel.DiskIO{{TID: s.Threads[0].TID, Issue: s.Start + 5, Complete: s.Start + 900, Bytes: 4096, Device: "vda"}}
				s.Follow = &kernel.Follow{MaxDepth: 2, MaxThreads: 64, Recording: true}
				s.Truncated = &kernel.Truncation{Count: 3}
				tls := decodeAll(t, s)
				for name, tl := range tls {
					if err := sameTimeline(tls["v2-json"], tl); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
				all := make([]int, len(reqs))
				for i := range all {
					all[i] = i
				}
				samePaths(t, tls, reqs, all)
				sameSnapshot(t, s)
			})
		}
	}
	for _, tc := range loadCases(t) {
		c := tc.c
		t.Run("golden/"+tc.name, func(t *testing.T) {
			s, _ := c.snapshot()
			in := c.input(t)
			tls := decodeAll(t, s)
			for name, tl := range tls {
				if err := sameTimeline(tls["v2-json"], tl); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			all := make([]int, len(in.Requests))
			for i := range all {
				all[i] = i
			}
			samePaths(t, tls, in.Requests, all)
			sameSnapshot(t, s)
		})
	}
}

// sameSnapshot: kernel.DecodeSnapshot reads the same Snapshot from the
// binary format as from JSON (but for the version).
func sameSnapshot(t testing.TB, s *kernel.Snapshot) {
	t.Helper()
	var bin, js bytes.Buffer
	if err := s.Encode(&bin); err != nil {
		t.Fatal(err)
	}
	if err := s.EncodeJSON(&js); err != nil {
		t.Fatal(err)
	}
	a, err := kernel.DecodeSnapshot(bin.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	b, err := kernel.DecodeSnapshot(js.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != 3 || b.Version != 2 {
		t.Fatalf("versions %d and %d", a.Version, b.Version)
	}
	a.Version = b.Version
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("binary\n%+v\nJSON\n%+v", a, b)
	}
}

// TestFormatsGiveSameTimelineLarge is the comparison on the benchmark's
// snapshot: ROOTLINE_EQUIV_SNAPSHOT_MB (default 10) MB of JSON; 500 is the
// benchmark's (3.3 M intervals; a few minutes and ~6 GB of memory).
func TestFormatsGiveSameTimelineLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("a large snapshot; without -short it runs at 10 MB by default")
	}
	mb := 10
	if v, err := strconv.Atoi(os.Getenv("ROOTLINE_EQUIV_SNAPSHOT_MB")); err == nil && v > 0 {
		mb = v
	}
	s, reqs := generate(benchConfig(mb))
	var bin, js bytes.Buffer
	if err := s.Encode(&bin); err != nil {
		t.Fatal(err)
	}
	if err := s.EncodeJSON(&js); err != nil {
		t.Fatal(err)
	}
	a, err := DecodeBytes(bin.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeBytes(js.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d intervals, %d wakeups: %.1f MB of zstd binary, %.1f MB of gzipped JSON", a.Intervals(), len(a.wakeups),
		float64(bin.Len())/1e6, float64(js.Len())/1e6)
	bin, js = bytes.Buffer{}, bytes.Buffer{}
	if err := sameTimeline(b, a); err != nil {
		t.Fatal(err)
	}
	if a.Intervals() != len(s.Intervals) || len(a.wakeups) != len(s.Wakeups) {
		t.Fatalf("%d intervals, %d wakeups decoded of %d, %d", a.Intervals(), len(a.wakeups), len(s.Intervals), len(s.Wakeups))
	}
	step := max(1, len(reqs)/1000)
	var picked []int
	for i := 0; i < len(reqs) && len(picked) < 1000; i += step {
		picked = append(picked, i)
	}
	samePaths(t, map[string]*Timeline{"v3": a, "v2-json": b}, reqs, picked)
}

// TestDecodeRejectsBadBinary: a malformed binary snapshot gets an error
// that says what is wrong, wrapping ErrBadSnapshot, never a panic or a
// timeline.
func TestDecodeRejectsBadBinary(t *testing.T) {
	s := &kernel.Snapshot{PID: 1, Start: 0, End: 10, Threads: []kernel.Thread{{TID: 1, PID: 1, Comm: "a", Target: true}},
		Intervals: []kernel.Interval{{TID: 1, State: "blocked", Reason: "lock", Start: 0, End: 5, CPU: -1, Wakeup: 0},
			{TID: 1, State: "running", Start: 5, End: 10, CPU: 0, Wakeup: -1}},
		Wakeups: []kernel.Wakeup{{TS: 5, Wakee: 1, Waker: 2, Context: "thread", CPU: 0}}}
	var raw, z bytes.Buffer
	if err := s.EncodeUncompressed(&raw); err != nil {
		t.Fatal(err)
	}
	if err := s.Encode(&z); err != nil {
		t.Fatal(err)
	}
	ok := raw.Bytes()
	if _, err := DecodeBytes(ok); err != nil {
		t.Fatalf("the valid base case: %v", err)
	}
	// sec finds the content of section tag in an uncompressed snapshot
	// (its offset), for the cases that corrupt one.
	sec := func(tag byte) int {
		i := len("RLKSNAP\x00") + 1
		for i < len(ok) {
			n := int(ok[i+1]) // every section of this snapshot is < 128 bytes
			if ok[i] == tag {
				return i + 2
			}
			i += 2 + n
		}
		t.Fatalf("no section %d", tag)
		return 0
	}
	with := func(off int, b ...byte) []byte {
		c := bytes.Clone(ok)
		copy(c[off:], b)
		return c
	}
	iv := sec(6) // count, then tid, kind×2+wake, start, duration, cpu, wakeup
	// The meta section declaring more intervals than any snapshot may hold.
	meta := binary.AppendUvarint([]byte{1, 0, 20, 0, 0}, kernel.MaxBinaryRecords+1)
	meta = append(meta, 1, 0)
	huge := append(append(bytes.Clone(ok[:sec(1)-2]), 1, byte(len(meta))), meta...)
	huge = append(huge, ok[sec(1)+int(ok[sec(1)-1]):]...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated", ok[:len(ok)-3], "left"},
		{"truncated zstd", z.Bytes()[:z.Len()/2], "zstd"},
		{"later version", with(8, 4), "unsupported kernel snapshot version 4"},
		{"section longer than the file", with(sec(1)-1, 0x7f), "left"},
		{"declared interval count beyond the records", with(sec(1)+5, 0x7f), "127 intervals in"},
		{"interval count beyond the section", with(iv, 100), "intervals in"},
		{"more intervals than any snapshot holds", huge, "more than 67108864"},
		{"interval kind out of range", with(iv+2, 0x7e), "kind 63 of"},
		{"wakeup index out of range", with(iv+6, 0x7e), "wakeup 63 of 1"},
		{"cpu out of range", with(iv+5, 0xff, 0xff, 0xff, 0xff, 0x7f), "cpu"},
		{"varint overflow", with(iv+3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), ""},
		{"no magic", []byte("RLKSNAP\x01xx"), ""},
		{"zstd frame of garbage", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, bytes.Repeat([]byte{0xff}, 40)...), "zstd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, dec := range []func([]byte) (*Timeline, error){DecodeBytes, func(b []byte) (*Timeline, error) { return Decode(bytes.NewReader(b)) }} {
				tl, err := dec(tc.data)
				wantRefusal(t, tl, err, tc.want)
			}
			if _, err := kernel.DecodeSnapshot(tc.data); err == nil {
				t.Fatal("kernel.DecodeSnapshot decoded it")
			}
		})
	}
}

// FuzzDecodeBinary: whatever the bytes, Decode returns a timeline or an
// error, never panics; what it accepts, the recorder's decoder reads to the
// same timeline, and a re-encoding decodes to it again.
func FuzzDecodeBinary(f *testing.F) {
	for seed := range 3 {
		c := genConfig{seed: uint64(seed), procs: 2, threads: 2, dur: 2_000_000, meanRun: 300_000, meanBlock: 400_000,
			meanReq: 1_000_000, meanReqGap: 500_000, start: 1_700_000_000_000_000_000, foreignWakers: 0.1}
		s, _ := generate(c)
		for _, e := range encodings[:2] {
			var b bytes.Buffer
			if err := e.enc(s, &b); err != nil {
				f.Fatal(err)
			}
			f.Add(b.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tl, err := DecodeBytes(data)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("%v does not wrap ErrBadSnapshot", err)
			}
			return
		}
		if !kernel.IsBinarySnapshot(data) {
			return // the JSON decoder has tests of its own
		}
		s, err := kernel.DecodeSnapshot(data)
		if err != nil {
			t.Fatalf("Decode accepted what kernel.DecodeSnapshot refuses: %v", err)
		}
		if err := sameTimeline(timelineOf(s), tl); err != nil {
			t.Fatalf("the recorder's decoder reads another timeline: %v", err)
		}
		var b bytes.Buffer
		if err := s.EncodeUncompressed(&b); err != nil {
			t.Fatal(err)
		}
		again, err := DecodeBytes(b.Bytes())
		if err != nil {
			t.Fatalf("re-encoded: %v", err)
		}
		if err := sameTimeline(tl, again); err != nil {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}
