//go:build linux && amd64

package run

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/rootline/rootline/internal/run/datapath"
	"github.com/rootline/rootline/internal/run/supervisor"
)

// Go's net/http client writes a request from the connection's writeLoop
// goroutine, so the goroutine that services an inbound request never makes
// the write. Two breakpoints close the gap soundly:
//
//   - net/http.(*persistConn).roundTrip(pc, req *transportRequest) runs on
//     the calling goroutine (R14): the request it services is known there,
//     and transportRequest's first field is the *Request.
//   - net/http.(*Request).write(r *Request, …) runs on writeLoop: the
//     *Request (RAX, Go's internal ABI) names the caller's request.
//
// The breakpoints are int3 bytes over the functions' first instruction,
// which the tracer emulates instead of single-stepping (no window in which
// another thread could run past a removed breakpoint). Only the stack-check
// prologues Go's compiler emits are emulated; a function starting otherwise
// gets no breakpoint and the heuristic in handedOver applies.

type bpKind uint8

const (
	bpRoundTrip bpKind = iota + 1
	bpRequestWrite
)

var goBreakpoints = map[string]bpKind{
	"net/http.(*persistConn).roundTrip": bpRoundTrip,
	"net/http.(*Request).write":         bpRequestWrite,
}

type breakpoint struct {
	kind bpKind
	insn []byte // the original first instruction
}

// emulate applies the effect of the prologue instruction insn at addr to
// regs, as if the CPU had executed it, and reports whether it could; read
// reads the tracee's memory.
func emulate(read func(addr uintptr, b []byte) (int, error), insn []byte, addr uint64, regs *unix.PtraceRegs) bool {
	switch {
	case len(insn) >= 8 && insn[0] == 0x4c && insn[1] == 0x8d && insn[2] == 0xa4 && insn[3] == 0x24:
		// LEAQ disp32(SP), R12
		regs.R12 = regs.Rsp + uint64(int64(int32(binary.LittleEndian.Uint32(insn[4:8]))))
		regs.Rip = addr + 8
	case len(insn) >= 5 && insn[0] == 0x4c && insn[1] == 0x8d && insn[2] == 0x64 && insn[3] == 0x24:
		// LEAQ disp8(SP), R12
		regs.R12 = regs.Rsp + uint64(int64(int8(insn[4])))
		regs.Rip = addr + 5
	case len(insn) >= 4 && insn[0] == 0x49 && insn[1] == 0x3b && insn[2] == 0x66 && insn[3] == 0x10:
		// CMPQ SP, 16(R14): the stack guard check; only CF and ZF are read
		// by the JBE that follows, but set the arithmetic flags fully.
		var b [8]byte
		if _, err := read(uintptr(regs.R14+16), b[:]); err != nil {
			return false
		}
		a, v := regs.Rsp, binary.LittleEndian.Uint64(b[:])
		r := a - v
		const cf, pf, zf, sf, of = 1 << 0, 1 << 2, 1 << 6, 1 << 7, 1 << 11
		fl := regs.Eflags &^ (cf | pf | zf | sf | of | 1<<4)
		if a < v {
			fl |= cf
		}
		if r == 0 {
			fl |= zf
		}
		if int64(r) < 0 {
			fl |= sf
		}
		if ((a^v)&(a^r))>>63 != 0 {
			fl |= of
		}
		if bitsEven(byte(r)) {
			fl |= pf
		}
		regs.Eflags = fl
		regs.Rip = addr + 4
	case len(insn) >= 3 && insn[0] == 0x48 && insn[1] == 0x85 && insn[2]>>6 == 3 && insn[2]>>3&7 == insn[2]&7:
		// TESTQ r, r (RAX..RDI): how Go checks a returned error.
		v := gpr(regs, insn[2]&7)
		const cf, pf, zf, sf, of = 1 << 0, 1 << 2, 1 << 6, 1 << 7, 1 << 11
		fl := regs.Eflags &^ (cf | pf | zf | sf | of | 1<<4)
		if v == 0 {
			fl |= zf
		}
		if int64(v) < 0 {
			fl |= sf
		}
		if bitsEven(byte(v)) {
			fl |= pf
		}
		regs.Eflags = fl
		regs.Rip = addr + 3
	default:
		return false
	}
	return true
}

// gpr is the general-purpose register numbered n (0–7: RAX, RCX, RDX, RBX,
// RSP, RBP, RSI, RDI) in an instruction's ModRM byte.
func gpr(regs *unix.PtraceRegs, n byte) uint64 {
	return [8]uint64{regs.Rax, regs.Rcx, regs.Rdx, regs.Rbx, regs.Rsp, regs.Rbp, regs.Rsi, regs.Rdi}[n&7]
}

func bitsEven(b byte) bool {
	n := 0
	for ; b != 0; b &= b - 1 {
		n++
	}
	return n%2 == 0
}

func emulable(insn []byte) bool {
	return len(insn) >= 4 && (insn[0] == 0x4c && insn[1] == 0x8d && (insn[2] == 0xa4 || insn[2] == 0x64) && insn[3] == 0x24 ||
		insn[0] == 0x49 && insn[1] == 0x3b && insn[2] == 0x66 && insn[3] == 0x10) ||
		len(insn) >= 3 && insn[0] == 0x48 && insn[1] == 0x85 && insn[2]>>6 == 3 && insn[2]>>3&7 == insn[2]&7
}

// placeGoBreakpoints puts the net/http breakpoints into a Go process that
// has just executed (only its calling thread exists).
func (tr *Tracer) placeGoBreakpoints(t *supervisor.Task, p *proc) error {
	exe := fmt.Sprintf("%s/%d/exe", tr.cfg.ProcRoot, p.pid)
	f, err := elf.Open(exe)
	if err != nil {
		return err
	}
	defer f.Close()
	var base uint64
	if f.Type == elf.ET_DYN {
		if base, err = loadBase(tr.cfg.ProcRoot, p.pid, exe); err != nil {
			return err
		}
	}
	addrs := datapath.GoFunctions(f, append(slices.Collect(maps.Keys(goBreakpoints)), grpcFunctions...))
	var errs []error
	// Link-time address → what a breakpoint there is.
	kinds := map[uint64]bpKind{}
	names := map[uint64]string{}
	for name, k := range goBreakpoints {
		if a, ok := addrs[name]; ok {
			kinds[a], names[a] = k, name
		}
	}
	if grpcFound(addrs) {
		plan, l, err := grpcPlan(f, addrs)
		if err != nil {
			errs = append(errs, fmt.Errorf("grpc-go hand-off: %w", err))
		} else {
			p.grpc = l
			for a, k := range plan {
				kinds[a], names[a] = k, "grpc-go"
			}
		}
	}
	if len(kinds) == 0 {
		return errors.Join(errs...) // no net/http client or grpc-go in this program
	}
	p.bps = map[uint64]*breakpoint{}
	for a, kind := range kinds {
		name := names[a]
		addr := base + a
		insn := make([]byte, 8)
		if _, err := t.ReadMem(uintptr(addr), insn); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if !emulable(insn) {
			errs = append(errs, fmt.Errorf("%s starts with % x, which is not emulated", name, insn[:4]))
			continue
		}
		if _, err := t.WriteMem(uintptr(addr), []byte{0xcc}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		p.bps[addr] = &breakpoint{kind: kind, insn: insn}
	}
	return errors.Join(errs...)
}

// grpcFound reports whether every function the gRPC breakpoints need is in
// addrs.
func grpcFound(addrs map[string]uint64) bool {
	for _, name := range grpcFunctions {
		if _, ok := addrs[name]; !ok {
			return false
		}
	}
	return true
}

// loadBase is the address the executable's first mapping starts at.
func loadBase(procRoot string, pid int, exe string) (uint64, error) {
	target, err := os.Readlink(exe)
	if err != nil {
		return 0, err
	}
	maps, err := os.ReadFile(fmt.Sprintf("%s/%d/maps", procRoot, pid))
	if err != nil {
		return 0, err
	}
	for _, line := range splitLines(maps) {
		var lo, hi, off uint64
		var perm, dev, path string
		var inode int
		n, _ := fmt.Sscanf(line, "%x-%x %s %x %s %d %s", &lo, &hi, &perm, &off, &dev, &inode, &path)
		if n == 7 && path == target && off == 0 {
			return lo, nil
		}
	}
	return 0, fmt.Errorf("no mapping of %s", target)
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

// breakpoint handles a SIGTRAP stop at one of the tracer's int3s.
func (tr *Tracer) breakpoint(t *supervisor.Task, regs *unix.PtraceRegs) bool {
	tr.drain()
	p := tr.procs[t.Tgid]
	if p == nil || p.bps == nil {
		return false
	}
	addr := regs.Rip - 1
	bp := p.bps[addr]
	if bp == nil {
		return false
	}
	switch bp.kind {
	case bpRoundTrip:
		// roundTrip(pc *persistConn, req *transportRequest): RBX; the
		// transportRequest starts with its *Request.
		if r := p.gctx[regs.R14]; r != nil && !r.done {
			var b [8]byte
			if _, err := t.ReadMem(uintptr(regs.Rbx), b[:]); err == nil {
				p.handoff[binary.LittleEndian.Uint64(b[:])] = r
			}
		}
	case bpRequestWrite:
		// (*Request).write(r *Request, …): RAX.
		if r := p.handoff[regs.Rax]; r != nil {
			delete(p.handoff, regs.Rax)
			if !r.done {
				p.delegate[regs.R14] = r
			}
		}
	case bpGRPCHandleStream, bpGRPCHeaderFields, bpGRPCWriteHeader:
		if p.grpc != nil {
			tr.grpcBreakpoint(t, p, bp.kind, regs)
		}
	}
	if !emulate(t.ReadMem, bp.insn, addr, regs) {
		tr.fail(fmt.Errorf("run: cannot emulate the instruction at %#x", addr))
		return false
	}
	if err := t.SetRegs(regs); err != nil {
		tr.fail(err)
		return false
	}
	return true
}
