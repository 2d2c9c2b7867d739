//go:build linux && amd64

package run

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
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
//   - transport.(*controlBuffer).executeAndPut(c, f, it) with it a
//     *clientHeaders (RCX is its itab, found by symbol) is the handler
//     goroutine queueing a call's HEADERS: the field list it carries (RDI,
//     at clientHeaders.hf) is remembered for the goroutine's request;
//   - transport.(*loopyWriter).writeHeader(l, streamID, endStream, hf, …)
//     runs on the loopy goroutine (R14) with the stream id (RBX) and that
//     field list (RDI): the HEADERS of that stream, written by that
//     goroutine, are the call of that request.
//
// A program without DWARF (built with -ldflags=-w) or of a grpc-go whose
// types differ gets no gRPC breakpoints, and h2Parent's guess applies
// (logged at exec, counted in Stats.Guessed).

const (
	bpGRPCHandleStream bpKind = iota + 10
	bpGRPCPut
	bpGRPCWriteHeader
)

var grpcBreakpoints = map[string]bpKind{
	"google.golang.org/grpc.(*Server).handleStream":                            bpGRPCHandleStream,
	"google.golang.org/grpc/internal/transport.(*controlBuffer).executeAndPut": bpGRPCPut,
	"google.golang.org/grpc/internal/transport.(*loopyWriter).writeHeader":     bpGRPCWriteHeader,
}

const (
	grpcTransport     = "google.golang.org/grpc/internal/transport."
	grpcClientHdrItab = "go:itab.*" + grpcTransport + "clientHeaders," + grpcTransport + "cbItem"
)

// grpcLayout is what the gRPC breakpoints read of grpc-go's types.
type grpcLayout struct {
	hdrItab  uint64 // the itab of *clientHeaders as a cbItem (load address)
	hfOff    uint64 // clientHeaders.hf
	streamID uint64 // ServerStream.Stream + Stream.id
}

// gStream is an outbound HTTP/2 stream written by a goroutine.
type gStream struct {
	g  uint64
	id uint32
}

// grpcLayoutOf reads the layout from the executable's symbols and DWARF.
func grpcLayoutOf(f *elf.File, base uint64) (*grpcLayout, error) {
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	l := &grpcLayout{}
	for _, s := range syms {
		if s.Name == grpcClientHdrItab {
			l.hdrItab = base + s.Value
			break
		}
	}
	if l.hdrItab == 0 {
		return nil, errors.New("no clientHeaders itab symbol")
	}
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("no DWARF: %w", err)
	}
	offs, err := memberOffsets(d, map[string]string{
		grpcTransport + "clientHeaders": "hf",
		grpcTransport + "ServerStream":  "Stream",
		grpcTransport + "Stream":        "id",
	})
	if err != nil {
		return nil, err
	}
	l.hfOff = offs[grpcTransport+"clientHeaders"]
	l.streamID = offs[grpcTransport+"ServerStream"] + offs[grpcTransport+"Stream"]
	return l, nil
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
	case bpGRPCPut:
		if regs.Rcx != l.hdrItab {
			return
		}
		r := p.gctx[regs.R14]
		if r == nil || r.done {
			return
		}
		var b [8]byte
		if _, err := t.ReadMem(uintptr(regs.Rdi+l.hfOff), b[:]); err == nil {
			p.grpcHF[binary.LittleEndian.Uint64(b[:])] = r
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
