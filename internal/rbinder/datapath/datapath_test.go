//go:build linux

package datapath

import (
	"debug/elf"
	"encoding/binary"
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

// TestGoFunctions finds functions in a Go executable (this test binary) by
// name, and IsGo tells it is Go.
func TestGoFunctions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
