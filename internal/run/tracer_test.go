//go:build linux && amd64

package run

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/critpath"
	"github.com/rootline/rootline/internal/model"
	"github.com/rootline/rootline/internal/run/httpstream"
)

func TestEmulatePrologues(t *testing.T) {
	const cf, zf = 1, 1 << 6
	for _, tc := range []struct {
		name      string
		insn      []byte
		rsp, gard uint64
		wantRIP   uint64
		wantR12   uint64
		wantFlags uint64 // CF|ZF only
	}{
		{"lea disp32", []byte{0x4c, 0x8d, 0xa4, 0x24, 0x58, 0xfe, 0xff, 0xff}, 0x1000, 0, 0x508, 0x1000 - 0x1a8, 0},
		{"lea disp8", []byte{0x4c, 0x8d, 0x64, 0x24, 0xf0}, 0x1000, 0, 0x505, 0x1000 - 0x10, 0},
		{"cmp above", []byte{0x49, 0x3b, 0x66, 0x10}, 0x2000, 0x1000, 0x504, 0, 0},
		{"cmp equal", []byte{0x49, 0x3b, 0x66, 0x10}, 0x1000, 0x1000, 0x504, 0, zf},
		{"cmp below", []byte{0x49, 0x3b, 0x66, 0x10}, 0x0800, 0x1000, 0x504, 0, cf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			regs := unix.PtraceRegs{Rsp: tc.rsp, R14: 0x7000, Eflags: cf | zf | 0x202}
			read := func(addr uintptr, b []byte) (int, error) {
				if addr != 0x7010 {
					t.Fatalf("read at %#x, want the stack guard at g+16", addr)
				}
				binary.LittleEndian.PutUint64(b, tc.gard)
				return 8, nil
			}
			if !emulable(tc.insn) || !emulate(read, tc.insn, 0x500, &regs) {
				t.Fatal("not emulated")
			}
			if regs.Rip != tc.wantRIP {
				t.Errorf("rip %#x, want %#x", regs.Rip, tc.wantRIP)
			}
			if tc.wantR12 != 0 && regs.R12 != tc.wantR12 {
				t.Errorf("r12 %#x, want %#x", regs.R12, tc.wantR12)
			}
			if tc.insn[0] == 0x49 && regs.Eflags&(cf|zf) != tc.wantFlags {
				t.Errorf("flags %#x, want CF|ZF = %#x", regs.Eflags, tc.wantFlags)
			}
			if regs.Eflags&0x200 == 0 {
				t.Error("IF cleared")
			}
		})
	}
	if emulable([]byte{0x55, 0x48, 0x89, 0xe5}) {
		t.Error("push rbp reported emulable")
	}
}

func TestCallWaits(t *testing.T) {
	start := time.Unix(100, 0)
	c := &call{start: start, timed: true, timing: httpstream.Timing{
		ServerTime: 30 * time.Millisecond, HasServerTime: true,
		Waits: []httpstream.Wait{{Kind: httpstream.WaitLocal, Duration: 4 * time.Millisecond}, {Kind: httpstream.WaitRemote, Duration: 9 * time.Millisecond}},
	}}
	net, remote, ok := c.waits(start.Add(50 * time.Millisecond))
	if !ok || net != 20*time.Millisecond || remote != 9*time.Millisecond {
		t.Fatalf("net %v remote %v ok %v; want 20ms, 9ms, true", net, remote, ok)
	}
	// A downstream slower than the client saw (clock skew, rounding) gives 0, not negative.
	if net, _, _ := c.waits(start.Add(10 * time.Millisecond)); net != 0 {
		t.Fatalf("net %v, want 0", net)
	}
	if _, _, ok := (&call{start: start}).waits(start); ok {
		t.Fatal("a response without timing headers gave waits")
	}
}

func TestServerSpan(t *testing.T) {
	rs := resource{service: "svc", host: "h"}
	start := time.Unix(100, 0)
	ctx := httpstream.Context{TraceID: httpstream.TraceID{1}, SpanID: httpstream.SpanID{2}, RequestID: "rid"}
	r := &request{ctx: ctx, span: httpstream.SpanID{3}, start: start, end: start.Add(40 * time.Millisecond),
		method: "GET", target: "/a/b?x=1", host: "svc:8080", pid: 42, status: 503,
		threads: []threadDelay{{tid: 43}, {tid: 44}}, local: 2 * time.Millisecond, maxNet: 3 * time.Millisecond, maxRemote: 5 * time.Millisecond}
	s := rs.serverSpan(r)
	if s.Name != "GET /a/b" || s.Kind != model.KindServer || s.ParentSpanID != (model.SpanID{2}) || s.SpanID != (model.SpanID{3}) {
		t.Fatalf("span %+v", s)
	}
	if s.Duration != int64(40*time.Millisecond) || s.StatusCode != model.StatusError {
		t.Fatalf("duration %d status %v", s.Duration, s.StatusCode)
	}
	want := map[string]string{
		model.AttrWaitLocalMs: "2", model.AttrWaitNetMs: "3", model.AttrWaitRemoteMs: "5",
		model.AttrThreadIDs: "43,44", model.AttrThreadID: "43", "http.response.status_code": "503",
	}
	for k, v := range want {
		got, ok := s.Attr(k)
		if !ok || got.String() != v {
			t.Errorf("%s = %q (%v), want %q", k, got.String(), ok, v)
		}
	}
	if v, _ := s.ResourceAttr(model.AttrServiceInstanceID); v.String() != "h:42" {
		t.Errorf("instance %q", v.String())
	}
	w := r.waits()
	if len(w) != 3 || w[2].Duration != 5*time.Millisecond {
		t.Errorf("waits %+v", w)
	}
}

// TestServerSpanThreadIntervals: a request read on one thread and served on
// another (a pool) says when it was active on each, the server thread until
// the response ended; Go programs say so.
func TestServerSpanThreadIntervals(t *testing.T) {
	rs := resource{service: "svc"}
	start := time.Unix(100, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	r := &request{span: httpstream.SpanID{3}, start: start, end: at(30), method: "GET", target: "/", pid: 42, goProc: true,
		threads: []threadDelay{{tid: 43, first: at(0), last: at(1)}, {tid: 44, first: at(5), last: at(20)}}}
	s := rs.serverSpan(r)
	if v, _ := s.Attr(model.AttrThreadIntervals); v.String() != "43:0-1000,44:5000-30000" {
		t.Fatalf("intervals %q", v.String())
	}
	if v, _ := s.Attr("process.runtime.name"); v.String() != "go" {
		t.Fatalf("runtime %q", v.String())
	}
	req, ok := critpath.RequestFromSpan(s)
	if !ok || len(req.Threads) != 2 || req.Threads[1] != (critpath.Activity{TID: 44, Start: at(5).UnixNano(), End: at(30).UnixNano()}) || !req.UserScheduled {
		t.Fatalf("read back %+v", req)
	}
	// Without times (the datapath's threads) the attribute is left out.
	r.threads = []threadDelay{{tid: 43}}
	if _, ok := rs.serverSpan(r).Attr(model.AttrThreadIntervals); ok {
		t.Fatal("intervals without times")
	}
}

func TestParseRunDelay(t *testing.T) {
	if d, ok := parseRunDelay([]byte("123 4567 89\n")); !ok || d != 4567 {
		t.Fatalf("got %v %v", d, ok)
	}
	if _, ok := parseRunDelay([]byte("123")); ok {
		t.Fatal("one field parsed")
	}
}

func TestEmulateTestq(t *testing.T) {
	const zf, sf, cf = 1 << 6, 1 << 7, 1
	for _, tc := range []struct {
		name      string
		insn      []byte
		rdi, rax  uint64
		wantFlags uint64 // ZF|SF|CF
	}{
		{"testq rdi zero", []byte{0x48, 0x85, 0xff}, 0, 5, zf},
		{"testq rdi set", []byte{0x48, 0x85, 0xff}, 0x1234, 0, 0},
		{"testq rax negative", []byte{0x48, 0x85, 0xc0}, 0, 1 << 63, sf},
	} {
		regs := unix.PtraceRegs{Rdi: tc.rdi, Rax: tc.rax, Eflags: cf | zf | sf | 0x202}
		if !emulable(tc.insn) || !emulate(nil, tc.insn, 0x500, &regs) {
			t.Fatalf("%s: not emulated", tc.name)
		}
		if regs.Rip != 0x503 || regs.Eflags&(zf|sf|cf) != tc.wantFlags || regs.Eflags&0x200 == 0 {
			t.Errorf("%s: rip %#x flags %#x, want 0x503 and %#x", tc.name, regs.Rip, regs.Eflags, tc.wantFlags)
		}
	}
	if emulable([]byte{0x48, 0x85, 0xc7}) {
		t.Error("testq rdi, rax (different registers) reported emulable")
	}
}
