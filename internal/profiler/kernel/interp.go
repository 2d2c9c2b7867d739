package kernel

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/rootline/rootline/internal/procfs"
)

// A language runtime's global interpreter lock serialises a process's
// threads as a one-CPU scheduler does: a thread blocked on it waits for the
// process's own code to run on another thread, not for a lock of the
// program's. The recorder tells such waits from the program's futex waits
// by the futex word's address (the switch record's Detail and Dev for
// futex and futex_wait) and gives them ReasonGIL.
//
// CPython 3.8–3.13 keeps its main interpreter's GIL (its mutex and
// condition variables) inside the exported object _PyRuntime (3.8–3.11:
// _PyRuntime.ceval.gil; 3.12+: the main interpreter, embedded in
// _PyRuntime, holds it), in the executable or in a mapped libpython. A
// sub-interpreter with a GIL of its own (3.12+) allocates it elsewhere:
// its waits stay lock waits. The free-threaded build has no GIL.

// addrRange is [lo, hi) in a process's address space.
type addrRange struct{ lo, hi uint64 }

// gilSymbol is the object that holds CPython's GIL.
const gilSymbol = "_PyRuntime"

// interpLocks caches the ranges of processes by pid and start time (a
// reused pid is another process), and the symbol of ELF files by path,
// device and inode.
type interpLocks struct {
	mu    sync.Mutex
	procs map[uint32]procLocks
	files map[fileKey]fileSym
}

type procLocks struct {
	start  uint64
	ranges []addrRange
}

type fileKey struct {
	path  string
	inode uint64
}

// fileSym is gilSymbol in an ELF file: its link-time address and size, and
// the PT_LOAD segments that place the file's offsets at link-time
// addresses; ok false when the file has none.
type fileSym struct {
	value, size uint64
	loads       []elf.ProgHeader
	ok          bool
}

// maxInterpProcs bounds the cache: past it, it starts over.
const maxInterpProcs = 4096

func newInterpLocks() *interpLocks {
	return &interpLocks{procs: map[uint32]procLocks{}, files: map[fileKey]fileSym{}}
}

// of returns where process pid keeps its interpreter lock (nil: nowhere
// known), reading its mappings the first time the process is seen. A
// process that is gone keeps what was read while it lived.
func (l *interpLocks) of(pid uint32) []addrRange {
	start, err := procfs.StartTime(int(pid))
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.procs[pid]; ok && (err != nil || p.start == start) {
		return p.ranges
	}
	if err != nil {
		return nil
	}
	ranges, _ := l.read(pid)
	if len(l.procs) >= maxInterpProcs {
		clear(l.procs)
	}
	l.procs[pid] = procLocks{start: start, ranges: ranges}
	return ranges
}

// read finds gilSymbol in the ELF files process pid maps whose name says
// Python (the interpreter, libpython).
func (l *interpLocks) read(pid uint32) ([]addrRange, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	maps := procfs.ParseMaps(data)
	var out []addrRange
	seen := map[fileKey]bool{}
	for _, m := range maps {
		if m.Path == "" || m.Inode == 0 || !strings.Contains(filepath.Base(m.Path), "python") {
			continue
		}
		k := fileKey{m.Path, m.Inode}
		if seen[k] {
			continue
		}
		fs, ok := l.files[k]
		if !ok {
			fs = readGILSymbol(fmt.Sprintf("/proc/%d/root%s", pid, m.Path))
			l.files[k] = fs
		}
		if !fs.ok {
			continue
		}
		// The runtime address of a link-time address v is v plus the
		// bias of a mapping of the file: its start less the link-time
		// address of its file offset.
		for _, mm := range maps {
			if mm.Path != m.Path || mm.Inode != m.Inode {
				continue
			}
			if v, ok := vaddrOf(fs.loads, mm.Offset); ok {
				seen[k] = true
				bias := mm.Start - v
				out = append(out, addrRange{fs.value + bias, fs.value + bias + fs.size})
				break
			}
		}
	}
	return out, nil
}

// vaddrOf is the link-time address of file offset off (segments loads).
func vaddrOf(loads []elf.ProgHeader, off uint64) (uint64, bool) {
	for _, p := range loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

// readGILSymbol reads gilSymbol from an ELF file's dynamic symbols, else
// its symbol table.
func readGILSymbol(path string) fileSym {
	f, err := elf.Open(path)
	if err != nil {
		return fileSym{}
	}
	defer f.Close()
	var out fileSym
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			out.loads = append(out.loads, p.ProgHeader)
		}
	}
	for _, read := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			continue
		}
		for _, s := range syms {
			if s.Name == gilSymbol && elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Size > 0 {
				out.value, out.size, out.ok = s.Value, s.Size, true
				return out
			}
		}
	}
	return fileSym{}
}

// in reports whether addr is in one of ranges.
func inRanges(ranges []addrRange, addr uint64) bool {
	for _, r := range ranges {
		if addr >= r.lo && addr < r.hi {
			return true
		}
	}
	return false
}
