//go:build linux && amd64

package run

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/run/supervisor"
)

// grpc-go serves every stream of a connection from one reader goroutine,
// runs each handler on a goroutine of its own that makes no system call
// (it reads and writes through the transport's buffers), and writes every
// frame of a connection from the connection's loopy writer goroutine. No
// thread or goroutine that makes a system call knows which inbound stream a
// call's HEADERS are written for, so three breakpoints (placed like the
// net/http ones of gohttp_linux.go) follow the hand-off:
//
//   - google.golang.org/grpc.(*Server).handleStream(s, t, stream) runs first
//     on the handler goroutine (R14): the stream's id (RDI, a
//     *transport.ServerStream, at the offset DWARF gives of its Stream.id)
//     names the inbound request, which is bound to that goroutine;
//   - the instruction after transport.(*http2Client).NewStream's call of
//     createHeaderFields runs on the goroutine making the call (the handler's)
//     with the call's header field list just built (RAX, the slice's array,
//     Go's internal ABI; RDI is the error's type word, zero): the list is
//     remembered for the goroutine's request. That instruction must be one
//     the tracer emulates (TESTQ of a register with itself, how the compiler
//     checks the error), else there are no gRPC breakpoints;
//   - transport.(*loopyWriter).writeHeader(l, streamID, endStream, hf, …)
//     runs on the loopy goroutine (R14) with the stream id (RBX) and that
//     field list (RDI): the HEADERS of that stream, written by that
//     goroutine, are the call of that request.
//
// A breakpoint inside a function rather than at its entry costs one stop per
// call instead of one per item the transport queues (a breakpoint on
// controlBuffer.executeAndPut would stop at every DATA frame, window
// update and ping; measured in bench/RESULTS.md).
//
// A program without symbols or DWARF (built with -ldflags=-s or -w) or of a
// grpc-go whose code or types differ gets no gRPC breakpoints, and
// h2Parent's guess applies (logged at exec, counted in Stats.Guessed).

const (
	bpGRPCHandleStream bpKind = iota + 10
	bpGRPCHeaderFields
	bpGRPCWriteHeader
)

const (
	grpcTransport        = "google.golang.org/grpc/internal/transport."
	grpcHandleStream     = "google.golang.org/grpc.(*Server).handleStream"
	grpcWriteHeader      = grpcTransport + "(*loopyWriter).writeHeader"
	grpcNewStream        = grpcTransport + "(*http2Client).NewStream"
	grpcCreateHeaderFlds = grpcTransport + "(*http2Client).createHeaderFields"
)

// grpcFunctions are the functions the gRPC breakpoints need.
var grpcFunctions = []string{grpcHandleStream, grpcWriteHeader, grpcNewStream, grpcCreateHeaderFlds}

// grpcLayout is what the gRPC breakpoints read of grpc-go's types.
type grpcLayout struct {
	streamID uint64 // ServerStream.Stream + Stream.id
}

// gStream is an outbound HTTP/2 stream written by a goroutine.
type gStream struct {
	g  uint64
	id uint32
}

// grpcPlan returns the gRPC breakpoints of a program (link-time addresses,
// by kind) and the layout they read, from its symbols, code and DWARF;
// addrs are the functions' addresses (grpcFunctions, all present).
func grpcPlan(f *elf.File, addrs map[string]uint64) (map[uint64]bpKind, *grpcLayout, error) {
	ret, err := returnSite(f, grpcNewStream, addrs[grpcCreateHeaderFlds])
	if err != nil {
		return nil, nil, err
	}
	d, err := f.DWARF()
	if err != nil {
		return nil, nil, fmt.Errorf("no DWARF: %w", err)
	}
	offs, err := memberOffsets(d, map[string]string{
		grpcTransport + "ServerStream": "Stream",
		grpcTransport + "Stream":       "id",
	})
	if err != nil {
		return nil, nil, err
	}
	l := &grpcLayout{streamID: offs[grpcTransport+"ServerStream"] + offs[grpcTransport+"Stream"]}
	return map[uint64]bpKind{
		addrs[grpcHandleStream]: bpGRPCHandleStream,
		addrs[grpcWriteHeader]:  bpGRPCWriteHeader,
		ret:                     bpGRPCHeaderFields,
	}, l, nil
}

// returnSite returns the address after the one direct call of callee in
// the function fn (link-time addresses, from the symbol table and .text).
func returnSite(f *elf.File, fn string, callee uint64) (uint64, error) {
	syms, err := f.Symbols()
	if err != nil {
		return 0, err
	}
	var sym *elf.Symbol
	for i := range syms {
		if syms[i].Name == fn {
			sym = &syms[i]
			break
		}
	}
	text := f.Section(".text")
	if sym == nil || sym.Size == 0 || text == nil || sym.Value < text.Addr || sym.Value+sym.Size > text.Addr+text.Size {
		return 0, fmt.Errorf("no symbol of %s in .text", fn)
	}
	code := make([]byte, sym.Size)
	if _, err := text.ReadAt(code, int64(sym.Value-text.Addr)); err != nil {
		return 0, err
	}
	var sites []uint64
	for i := 0; i+5 <= len(code); i++ {
		next := sym.Value + uint64(i) + 5
		if code[i] == 0xe8 && next+uint64(int64(int32(binary.LittleEndian.Uint32(code[i+1:i+5])))) == callee {
			sites = append(sites, next)
		}
	}
	if len(sites) != 1 {
		return 0, fmt.Errorf("%d calls of the header builder in %s", len(sites), fn)
	}
	off := sites[0] - sym.Value
	if !emulable(code[off:min(uint64(len(code)), off+8)]) {
		return 0, fmt.Errorf("the instruction after the header builder's call in %s (% x) is not emulated", fn, code[off:min(uint64(len(code)), off+4)])
	}
	return sites[0], nil
}

// memberOffsets returns, for each struct type named in want, the offset of
// its member want[type].
func memberOffsets(d *dwarf.Data, want map[string]string) (map[string]uint64, error) {
	out := map[string]uint64{}
	r := d.Reader()
	for len(out) < len(want) {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		member, ok := want[name]
		if e.Tag != dwarf.TagStructType || !ok {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		for e.Children {
			m, err := r.Next()
			if err != nil {
				return nil, err
			}
			if m == nil || m.Tag == 0 {
				break
			}
			if n, _ := m.Val(dwarf.AttrName).(string); m.Tag == dwarf.TagMember && n == member {
				if off, ok := m.Val(dwarf.AttrDataMemberLoc).(int64); ok {
					out[name] = uint64(off)
				}
			}
			if m.Children {
				r.SkipChildren()
			}
		}
	}
	for typ, m := range want {
		if _, ok := out[typ]; !ok {
			return nil, fmt.Errorf("no member %s in %s", m, typ)
		}
	}
	return out, nil
}

// grpcBreakpoint handles a stop at one of the gRPC breakpoints.
func (tr *Tracer) grpcBreakpoint(t *supervisor.Task, p *proc, kind bpKind, regs *unix.PtraceRegs) {
	l := p.grpc
	switch kind {
	case bpGRPCHandleStream:
		var b [4]byte
		if _, err := t.ReadMem(uintptr(regs.Rdi+l.streamID), b[:]); err != nil {
			return
		}
		if r := tr.grpcServed(p, binary.LittleEndian.Uint32(b[:])); r != nil {
			p.gctx[regs.R14] = r
			tr.touch(r, p.pid, t.Tid)
		}
	case bpGRPCHeaderFields:
		// createHeaderFields returned ([]hpack.HeaderField, error): the
		// slice's array in RAX, the error's type word in RDI.
		if r := p.gctx[regs.R14]; r != nil && !r.done && regs.Rdi == 0 && regs.Rax != 0 {
			p.grpcHF[regs.Rax] = r
		}
	case bpGRPCWriteHeader:
		if r := p.grpcHF[regs.Rdi]; r != nil {
			delete(p.grpcHF, regs.Rdi)
			if !r.done {
				p.grpcStream[gStream{g: regs.R14, id: uint32(regs.Rbx)}] = r
			}
		}
	}
}

// grpcServed is the open HTTP/2 request of stream id that no handler
// goroutine serves yet. Streams of different connections can share an id:
// then the oldest is taken (the reader goroutines start handlers in the
// order they read their HEADERS), counted in Stats.Guessed.
func (tr *Tracer) grpcServed(p *proc, id uint32) *request {
	var found *request
	n := 0
	for _, r := range p.h2open {
		if r.stream == id && !r.done && !r.served {
			if found == nil {
				found = r
			}
			n++
		}
	}
	if found != nil {
		found.served = true
		if n > 1 {
			tr.Stats.Guessed.Add(1)
		}
	}
	return found
}

// grpcCallOf is the request whose handler queued the HEADERS of stream id
// that goroutine g writes, if the gRPC breakpoints saw it.
func grpcCallOf(p *proc, g uint64, id uint32) *request {
	k := gStream{g: g, id: id}
	r := p.grpcStream[k]
	if r == nil {
		return nil
	}
	delete(p.grpcStream, k)
	if r.done {
		return nil
	}
	return r
}
