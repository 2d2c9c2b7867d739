package datapath

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// arrivalHarness builds testdata/arrival.c, which runs the datapath's
// arrival bookkeeping (bpf/run/arrival.h) in user space, and returns its path.
func arrivalHarness(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build bpf/run/arrival.h for user space")
	}
	bin := filepath.Join(t.TempDir(), "arrival")
	out, err := exec.Command(cc, "-O2", "-Wall", "-Werror", "-I../../../bpf", "-o", bin, "testdata/arrival.c").CombinedOutput()
	if err != nil {
		t.Fatalf("build the arrival harness: %v\n%s", err, out)
	}
	return bin
}

// seg is a segment TCP takes: bytes [seq, end) at ts, when it expected nxt.
type seg struct {
	seq, end, nxt uint32
	ts            uint64
}

// TestArrival checks when the datapath says a request head's first byte
// arrived (the SERVER span's start): the segment that carried it, for a
// request on a kept-alive connection, pipelined requests, bytes past the
// remembered segments, retransmissions, out-of-order segments and the wrap
// of sequence numbers; 0 (the read's own time) when nothing is known, as
// for a connection whose state went with its close.
func TestArrival(t *testing.T) {
	bin := arrivalHarness(t)
	wrap := uint32(1<<32 - 100) // sums past it wrap, as TCP sequence numbers do
	cases := []struct {
		name string
		segs []seg
		at   uint32 // the head's first byte
		want uint64
	}{
		{"one segment", []seg{{1000, 1200, 1000, 50}}, 1000, 50},
		{"keep-alive: the second request's own segment",
			[]seg{{1000, 1200, 1000, 50}, {1200, 1300, 1200, 90}}, 1200, 90},
		{"keep-alive: the first request is not dated by the second",
			[]seg{{1000, 1200, 1000, 50}, {1200, 1300, 1200, 90}}, 1000, 50},
		{"pipelined in one segment: arrived together",
			[]seg{{1000, 1300, 1000, 50}}, 1150, 50},
		{"pipelined while the first was unread: the later segment's time",
			[]seg{{1000, 1100, 1000, 50}, {1100, 1250, 1100, 70}, {1250, 1400, 1250, 95}}, 1250, 95},
		{"a head split over two segments: its first byte",
			[]seg{{1000, 1010, 1000, 50}, {1010, 1400, 1010, 60}}, 1000, 50},
		{"retransmission adds nothing",
			[]seg{{1000, 1200, 1000, 50}, {1000, 1200, 1200, 80}}, 1100, 50},
		{"partial retransmission: only its new bytes",
			[]seg{{1000, 1200, 1000, 50}, {1100, 1300, 1200, 80}}, 1250, 80},
		{"out of order: not readable before the hole fills; bounded by the filler",
			[]seg{{1000, 1100, 1000, 50}, {1200, 1300, 1100, 60}, {1100, 1200, 1100, 75}}, 1250, 0},
		{"forgotten segment: the next one recorded bounds it",
			[]seg{{1000, 1100, 1000, 10}, {1100, 1200, 1100, 20}, {1200, 1300, 1200, 30}, {1300, 1400, 1300, 40},
				{1400, 1500, 1400, 50}, {1500, 1600, 1500, 60}, {1600, 1700, 1600, 70}, {1700, 1800, 1700, 80},
				{1800, 1900, 1800, 90}}, 1050, 20},
		{"nothing recorded (a closed connection's state is gone)", nil, 1000, 0},
		{"byte not arrived yet", []seg{{1000, 1100, 1000, 50}}, 1100, 0},
		{"sequence wrap inside a segment",
			[]seg{{wrap, wrap + 300, wrap, 50}}, wrap + 200, 50},
		{"sequence wrap between segments",
			[]seg{{wrap, wrap + 100, wrap, 50}, {wrap + 100, wrap + 400, wrap + 100, 70}}, wrap + 150, 70},
		{"before the wrap, dated by the segment before it",
			[]seg{{wrap, wrap + 100, wrap, 50}, {wrap + 100, wrap + 400, wrap + 100, 70}}, wrap + 99, 50},
	}
	var script bytes.Buffer
	for _, c := range cases {
		script.WriteString("r\n")
		for _, s := range c.segs {
			fmt.Fprintf(&script, "n %d %d %d %d\n", s.seq, s.end, s.nxt, s.ts)
		}
		fmt.Fprintf(&script, "a %d\n", c.at)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = &script
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	got := strings.Fields(string(out))
	if len(got) != len(cases) {
		t.Fatalf("harness answered %d of %d: %q", len(got), len(cases), out)
	}
	for i, c := range cases {
		v, err := strconv.ParseUint(got[i], 10, 64)
		if err != nil || v != c.want {
			t.Errorf("%s: arrival of %d = %s, want %d", c.name, c.at, got[i], c.want)
		}
	}
}
