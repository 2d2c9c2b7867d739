//go:build linux

package datapath

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
	"time"
	"unsafe"
)

// TestDecode reads a struct rd_event laid out as bpf/run_datapath.h says,
// written field by field at the offsets of the generated Go type.
func TestDecode(t *testing.T) {
	var r runDatapathRdEvent
	head := "GET /x HTTP/1.1\r\n\r\n"
	b := make([]byte, headOff+len(head))
	le := binary.LittleEndian
	put32 := func(off uintptr, v uint32) { le.PutUint32(b[off:], v) }
	put64 := func(off uintptr, v uint64) { le.PutUint64(b[off:], v) }
	put32(unsafe.Offsetof(r.Type), EvRequestEnd)
	put32(unsafe.Offsetof(r.Tgid), 10)
	put32(unsafe.Offsetof(r.Tid), 11)
	put32(unsafe.Offsetof(r.Flags), FlagSampled)
	put64(unsafe.Offsetof(r.Ts), 5000)
	put64(unsafe.Offsetof(r.Span), 0xabcd)
	put64(unsafe.Offsetof(r.Parent), 0x1234)
	put64(unsafe.Offsetof(r.Start), 1000)
	put64(unsafe.Offsetof(r.LocalNs), 7000)
	put32(unsafe.Offsetof(r.Status), 204)
	put32(unsafe.Offsetof(r.Ntids), 2)
	put32(unsafe.Offsetof(r.Tids), 11)
	put32(unsafe.Offsetof(r.Tids)+4, 12)
	copy(b[unsafe.Offsetof(r.Raddr):], []byte{127, 0, 0, 1})
	binary.LittleEndian.PutUint16(b[unsafe.Offsetof(r.Rport):], 8080)
	put32(unsafe.Offsetof(r.HeadLen), uint32(len(head)))
	copy(b[headOff:], head)
	b[unsafe.Offsetof(r.Trace)] = 0xaa

	var ev Event
	if !decode(b, &ev, nil, new(runDatapathRdEvent)) {
		t.Fatal("not decoded")
	}
	if ev.Type != EvRequestEnd || ev.Tgid != 10 || ev.Tid != 11 || ev.Mono != 5000 || ev.SpanID != 0xabcd ||
		ev.ParentID != 0x1234 || ev.StartMono != 1000 || ev.Local != 7*time.Microsecond || ev.Status != 204 ||
		ev.TraceID[0] != 0xaa {
		t.Errorf("decoded %+v", ev)
	}
	if len(ev.Tids) != 2 || ev.Tids[0] != 11 || ev.Tids[1] != 12 {
		t.Errorf("tids %v", ev.Tids)
	}
	if ev.Peer != netip.MustParseAddrPort("127.0.0.1:8080") {
		t.Errorf("peer %v", ev.Peer)
	}
	if string(ev.Head) != head {
		t.Errorf("head %q", ev.Head)
	}
	if decode(b[:headOff-1], &ev, nil, new(runDatapathRdEvent)) {
		t.Error("a short record decoded")
	}
}

// openSelf opens the test binary (a Go executable) as an ELF file.
func openSelf(t *testing.T) (string, *elf.File) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return exe, f
}

// TestGoFunctions finds functions in a Go executable (this test binary) by
// name, and IsGo tells it is Go.
func TestGoFunctions(t *testing.T) {
	exe, f := openSelf(t)
	got := GoFunctions(f, []string{"runtime.main", "no.such/function"})
	if got["runtime.main"] == 0 {
		t.Error("runtime.main not found")
	}
	if _, ok := got["no.such/function"]; ok {
		t.Error("a missing function found")
	}
	if !IsGo(exe) {
		t.Error("the test binary is not reported as Go")
	}
}

// TestProbeOffset: the Go probes go on the frame push of net/http's
// functions in a real Go binary (this test's), after a prologue that leaves
// the argument registers alone; code that starts otherwise keeps its entry.
func TestProbeOffset(t *testing.T) {
	// A request, so that the test binary links net/http's client.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if resp, err := http.Get(srv.URL); err == nil {
		resp.Body.Close()
	}
	_, f := openSelf(t)
	addrs := GoFunctions(f, []string{goRoundTrip, goReqWrite})
	if len(addrs) != 2 {
		t.Skipf("net/http's client is not linked into the test binary: %v", addrs)
	}
	for name, va := range addrs {
		for _, p := range f.Progs {
			if p.Type != elf.PT_LOAD || va < p.Vaddr || va >= p.Vaddr+p.Memsz {
				continue
			}
			rel := va - p.Vaddr
			at := probeOffset(p.ReaderAt, rel)
			if at == 0 {
				t.Errorf("%s: probe on the entry, not after the prologue", name)
				continue
			}
			b := make([]byte, 1)
			if _, err := p.ReadAt(b, int64(rel+at)); err != nil || b[0] != 0x55 {
				t.Errorf("%s: +%d is %#x, not PUSHQ BP", name, at, b[0])
			}
		}
	}
	for _, code := range [][]byte{
		{0x48, 0x89, 0xc3, 0x55},             // MOVQ AX, BX first: it writes BX
		{0x48, 0x8d, 0x44, 0x24, 0xf8, 0x55}, // LEAQ -8(SP), AX: it writes AX
		{0x53},                               // PUSHQ BX: not the frame push
		{0x0f, 0x0b},                         // UD2
	} {
		if at := probeOffset(bytes.NewReader(code), 0); at != 0 {
			t.Errorf("% x: probe at +%d, want the entry", code, at)
		}
	}
	if at := probeOffset(bytes.NewReader([]byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x10, 0x55}), 0); at != 6 {
		t.Errorf("CMPQ SP, 16(R14); JBE; PUSHQ BP: probe at +%d, want +6", at)
	}
}
