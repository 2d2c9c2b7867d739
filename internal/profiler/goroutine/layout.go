// Package goroutine tracks the goroutines of Go processes: which goroutine
// each thread runs, and why a goroutine waits, from a uprobe on the Go
// runtime's runtime.casgstatus (bpf/go_sched.c). The kernel sees threads; a
// Go request is a goroutine that the runtime moves between threads and
// parks in user space (a sync.Mutex, a channel), where the kernel sees an
// idle thread. This is what lets a critical path follow it.
package goroutine

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Layout is what the tracker needs to know of one Go binary.
type Layout struct {
	// GoidOff and WaitReasonOff are the offsets of runtime.g's goid and
	// waitreason fields.
	GoidOff, WaitReasonOff uint32
	// WaitReasons names the runtime's waitReason values (the binary's own
	// runtime.waitReasonStrings: the enum's order changes between Go
	// versions).
	WaitReasons []string
	// Casgstatus is runtime.casgstatus's address (where the uprobe goes).
	Casgstatus uint64
}

// ErrNotGo: the binary has no Go runtime symbols.
var ErrNotGo = errors.New("not a Go binary (no runtime.casgstatus symbol)")

// ErrNoDWARF: the binary was built without DWARF (-ldflags=-w): the
// runtime.g offsets are unknown.
var ErrNoDWARF = errors.New("Go binary without DWARF: runtime.g's layout is unknown")

// ReadLayout reads the layout of the Go binary at path.
func ReadLayout(path string) (*Layout, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w (%v)", path, ErrNotGo, err)
	}
	var l Layout
	var reasons *elf.Symbol
	for i := range syms {
		switch syms[i].Name {
		case "runtime.casgstatus":
			l.Casgstatus = syms[i].Value
		case "runtime.waitReasonStrings":
			reasons = &syms[i]
		}
	}
	if l.Casgstatus == 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrNotGo)
	}
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w (%v)", path, ErrNoDWARF, err)
	}
	goid, wr, err := gOffsets(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l.GoidOff, l.WaitReasonOff = goid, wr
	if reasons != nil {
		l.WaitReasons, err = readStrings(f, reasons)
		if err != nil {
			return nil, fmt.Errorf("%s: runtime.waitReasonStrings: %w", path, err)
		}
	}
	return &l, nil
}

// gOffsets finds runtime.g's goid and waitreason members in the DWARF.
func gOffsets(d *dwarf.Data) (goid, waitreason uint32, err error) {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return 0, 0, err
		}
		if e == nil {
			return 0, 0, fmt.Errorf("%w: no runtime.g in the DWARF", ErrNoDWARF)
		}
		if e.Tag != dwarf.TagStructType || e.Val(dwarf.AttrName) != "runtime.g" {
			if e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
			}
			continue
		}
		found := 0
		for {
			m, err := r.Next()
			if err != nil {
				return 0, 0, err
			}
			if m == nil || m.Tag == 0 {
				break
			}
			off, ok := m.Val(dwarf.AttrDataMemberLoc).(int64)
			if !ok {
				continue
			}
			switch m.Val(dwarf.AttrName) {
			case "goid":
				goid = uint32(off)
				found |= 1
			case "waitreason":
				waitreason = uint32(off)
				found |= 2
			}
		}
		if found != 3 {
			return 0, 0, fmt.Errorf("%w: runtime.g has no goid or waitreason member", ErrNoDWARF)
		}
		return goid, waitreason, nil
	}
}

// readStrings reads a [N]string array symbol: N string headers (pointer,
// length) pointing into the binary's read-only data.
func readStrings(f *elf.File, sym *elf.Symbol) ([]string, error) {
	raw, err := readAt(f, sym.Value, sym.Size)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := 0; i+16 <= len(raw); i += 16 {
		p, n := binary.LittleEndian.Uint64(raw[i:]), binary.LittleEndian.Uint64(raw[i+8:])
		if n == 0 {
			out = append(out, "")
			continue
		}
		if n > 256 {
			return nil, fmt.Errorf("string %d: length %d", i/16, n)
		}
		b, err := readAt(f, p, n)
		if err != nil {
			return nil, fmt.Errorf("string %d: %w", i/16, err)
		}
		out = append(out, string(b))
	}
	return out, nil
}

// readAt reads n bytes at virtual address addr from the section holding it.
func readAt(f *elf.File, addr, n uint64) ([]byte, error) {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || addr < s.Addr || addr+n > s.Addr+s.Size {
			continue
		}
		b := make([]byte, n)
		if _, err := s.ReadAt(b, int64(addr-s.Addr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("address %#x not in a section with data", addr)
}
