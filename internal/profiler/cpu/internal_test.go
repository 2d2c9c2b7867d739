package cpu

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/profiler"
)

func TestStoreBounds(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name      string
		maxBytes  int64
		retention time.Duration
		n         int           // samples added, one per step
		step      time.Duration // between samples
		wantKept  int
	}{
		{"all kept", 1 << 20, time.Minute, 100, time.Millisecond, 100},
		{"retention", 1 << 20, time.Second, 100, 100 * time.Millisecond, 11},
		{"bytes", 10 * (64 + 8*3), time.Hour, 100, time.Millisecond, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(tc.maxBytes, tc.retention)
			st.targets[7] = &targetBuf{target: profiler.Target{PID: 7}, comms: map[uint32]string{}, alive: true}
			for i := range tc.n {
				st.add(7, sample{unixNs: base.Add(time.Duration(i) * tc.step).UnixNano(), tid: 7,
					user: []uint64{1, 2}, kern: []uint64{3}}, []byte("x"))
			}
			st.add(8, sample{unixNs: base.UnixNano()}, nil) // not a target: ignored
			got, maxUser, ok := st.window(7, 0, base.Add(time.Hour).UnixNano())
			if !ok || len(got) != tc.wantKept || maxUser != 2 {
				t.Fatalf("kept %d (max user %d, ok %v), want %d", len(got), maxUser, ok, tc.wantKept)
			}
			if want := int64(tc.wantKept) * got[0].size(); st.bytes != want {
				t.Errorf("bytes %d, want %d", st.bytes, want)
			}
			if got[len(got)-1].comm != "x" {
				t.Errorf("comm %q", got[len(got)-1].comm)
			}
			st.expire(base.Add(time.Duration(tc.n)*tc.step + 2*tc.retention))
			if st.bytes != 0 {
				t.Errorf("after expiry: %d bytes", st.bytes)
			}
			if !st.remove(7) || st.remove(7) {
				t.Error("remove")
			}
		})
	}
}

func TestParseMapsAndLookup(t *testing.T) {
	maps := []byte(`55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234 /usr/bin/hot
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234 /usr/bin/hot
7f0000000000-7f0000001000 rwxp 00000000 00:00 0
7fff00000000-7fff00021000 r-xp 00000000 00:00 0 [vdso]
`)
	ms := parseMaps(maps)
	if len(ms) != 3 {
		t.Fatalf("got %d executable mappings: %+v", len(ms), ms)
	}
	m := findMapping(ms, 0x55d0c0a01234)
	if m == nil || m.path != "/usr/bin/hot" || m.offset != 0x1000 || m.inode != 1234 {
		t.Fatalf("findMapping = %+v", m)
	}
	if findMapping(ms, 0x55d0c0a00010) != nil || findMapping(ms, 0x1) != nil {
		t.Error("non-executable or unmapped address matched")
	}

	st := newSymtab([]symbol{{0x2000, 0x10, "b"}, {0x1000, 0x100, "a"}, {0x3000, 0, "c"}})
	for _, tc := range []struct {
		addr uint64
		want string
	}{{0x1000, "a"}, {0x10ff, "a"}, {0x1100, ""}, {0x200f, "b"}, {0x3fff, "c"}, {0xfff, ""}} {
		if got, _ := st.lookup(tc.addr); got != tc.want {
			t.Errorf("lookup(%#x) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestStrippedGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go binary")
	}
	out := filepath.Join(t.TempDir(), "hotgo")
	if b, err := exec.Command("go", "build", "-ldflags=-s -w", "-o", out, "./testdata/hotgo").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ss, _ := f.Symbols(); len(ss) != 0 {
		t.Fatalf("binary not stripped: %d symbols", len(ss))
	}
	st, err := loadELF(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.syms {
		if s.name == "main.hotLoop" {
			if got, _ := st.lookup(s.addr + 1); got != "main.hotLoop" {
				t.Errorf("lookup inside main.hotLoop = %q", got)
			}
			return
		}
	}
	t.Errorf("main.hotLoop not found among %d pclntab functions", len(st.syms))
}

func TestFilterLabels(t *testing.T) {
	fn := &profile.Function{ID: 1, Name: "f"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}},
		Function:   []*profile.Function{fn},
		Location:   []*profile.Location{loc},
	}
	for i := range 10 {
		p.Sample = append(p.Sample, &profile.Sample{
			Location: []*profile.Location{loc},
			Value:    []int64{1},
			NumLabel: map[string][]int64{LabelTID: {int64(100 + i%2)}, LabelTimeNs: {int64(1000 + i)}},
		})
	}
	for _, tc := range []struct {
		name       string
		tids       []int
		start, end int64 // 0: unbounded
		want       int
	}{
		{"all", nil, 0, 0, 10},
		{"one thread", []int{100}, 0, 0, 5},
		{"both threads", []int{100, 101}, 0, 0, 10},
		{"unknown thread", []int{7}, 0, 0, 0},
		{"from", nil, 1005, 0, 5},
		{"until", nil, 0, 1002, 3},
		{"thread and window", []int{101}, 1002, 1007, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var start, end time.Time
			if tc.start != 0 {
				start = time.Unix(0, tc.start)
			}
			if tc.end != 0 {
				end = time.Unix(0, tc.end)
			}
			got := Filter(p, tc.tids, start, end)
			if len(got.Sample) != tc.want {
				t.Errorf("%d samples, want %d", len(got.Sample), tc.want)
			}
			if len(p.Sample) != 10 {
				t.Error("Filter modified its input")
			}
		})
	}
}
