package cpu

import (
	"bufio"
	"debug/elf"
	"debug/gosym"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/rootline/rootline/internal/procfs"
)

// mapping is one line of /proc/<pid>/maps that is executable.
type mapping struct {
	start, limit, offset uint64
	inode                uint64
	path                 string
}

// readMaps parses the executable mappings of /proc/<pid>/maps.
func readMaps(pid int) ([]mapping, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	return parseMaps(data), nil
}

func parseMaps(data []byte) []mapping {
	var out []mapping
	for _, m := range procfs.ParseMaps(data) {
		if strings.Contains(m.Perms, "x") {
			out = append(out, mapping{start: m.Start, limit: m.Limit, offset: m.Offset, inode: m.Inode, path: m.Path})
		}
	}
	return out
}

func findMapping(ms []mapping, addr uint64) *mapping {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].limit > addr })
	if i < len(ms) && ms[i].start <= addr {
		return &ms[i]
	}
	return nil
}

// symbol is a named address range.
type symbol struct {
	addr, size uint64
	name       string
}

// symtab is a sorted symbol table with a binary search.
type symtab struct {
	syms []symbol
	// loads are the PT_LOAD segments of an ELF file, to turn a file offset
	// into a link-time virtual address.
	loads []elf.ProgHeader
}

func (t *symtab) lookup(addr uint64) (string, bool) {
	if t == nil {
		return "", false
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > addr }) - 1
	if i < 0 {
		return "", false
	}
	s := t.syms[i]
	if s.size != 0 && addr >= s.addr+s.size {
		return "", false
	}
	return s.name, true
}

// vaddr converts a file offset into the ELF's virtual address space.
func (t *symtab) vaddr(fileOff uint64) (uint64, bool) {
	for _, p := range t.loads {
		if fileOff >= p.Off && fileOff < p.Off+p.Filesz {
			return fileOff - p.Off + p.Vaddr, true
		}
	}
	return 0, false
}

func newSymtab(syms []symbol) *symtab {
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	// Keep one name per address (the first, after the sort: stable enough).
	out := syms[:0]
	for i, s := range syms {
		if i > 0 && s.addr == out[len(out)-1].addr {
			continue
		}
		out = append(out, s)
	}
	return &symtab{syms: out}
}

// loadELF reads the function symbols of an ELF file (.symtab, else .dynsym).
func loadELF(path string) (*symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var syms []symbol
	add := func(ss []elf.Symbol) {
		for _, s := range ss {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Name == "" {
				continue
			}
			syms = append(syms, symbol{addr: s.Value, size: s.Size, name: s.Name})
		}
	}
	if ss, err := f.Symbols(); err == nil {
		add(ss)
	}
	if len(syms) == 0 {
		// Stripped Go binaries keep their runtime pclntab.
		syms = goFuncs(f)
	}
	if ss, err := f.DynamicSymbols(); err == nil {
		add(ss)
	}
	t := newSymtab(syms)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			t.loads = append(t.loads, p.ProgHeader)
		}
	}
	return t, nil
}

// goFuncs reads the function table of a Go binary from .gopclntab, which
// stripping (-ldflags=-s, strip) leaves in place because the runtime needs it.
func goFuncs(f *elf.File) []symbol {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	data, err := pcln.Data()
	if err != nil {
		return nil
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	out := make([]symbol, 0, len(tab.Funcs))
	for _, fn := range tab.Funcs {
		out = append(out, symbol{addr: fn.Entry, size: fn.End - fn.Entry, name: fn.Name})
	}
	return out
}

// loadPerfMap reads /tmp/perf-<pid>.map ("START SIZE name", hex), written by
// JITs (perf-map-agent, JDK Compiler.perfmap, node --perf-basic-prof).
func loadPerfMap(pid int) *symtab {
	f, err := os.Open(fmt.Sprintf("/tmp/perf-%d.map", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	var syms []symbol
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) != 3 {
			continue
		}
		a, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		n, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		syms = append(syms, symbol{addr: a, size: n, name: f[2]})
	}
	return newSymtab(syms)
}

// loadKallsyms reads the kernel's text symbols.
func loadKallsyms() *symtab {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil
	}
	defer f.Close()
	var syms []symbol
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || (f[1] != "t" && f[1] != "T" && f[1] != "w" && f[1] != "W") {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		syms = append(syms, symbol{addr: a, name: f[2]})
	}
	return newSymtab(syms)
}

// maxCachedFiles bounds the ELF symbol tables kept in memory.
const maxCachedFiles = 256

// symbolizer caches ELF symbol tables per file and the last maps of each pid.
type symbolizer struct {
	mu       sync.Mutex
	elfs     map[string]*symtab // key: path + inode; nil value: unreadable
	maps     map[int][]mapping
	kernOnce sync.Once
	kern     *symtab
}

func newSymbolizer() *symbolizer {
	return &symbolizer{elfs: map[string]*symtab{}, maps: map[int][]mapping{}}
}

// refresh re-reads /proc/<pid>/maps; on failure the cached maps stay.
func (s *symbolizer) refresh(pid int) error {
	ms, err := readMaps(pid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.maps[pid] = ms
	s.mu.Unlock()
	return nil
}

func (s *symbolizer) cachedMaps(pid int) ([]mapping, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, ok := s.maps[pid]
	return ms, ok
}

func (s *symbolizer) forget(pid int) {
	s.mu.Lock()
	delete(s.maps, pid)
	s.mu.Unlock()
}

// elf returns the symbol table of m's file, read through the target's root
// (so containers resolve) while it lives, else through the host path.
func (s *symbolizer) elf(pid int, m *mapping) *symtab {
	if m.path == "" || m.path[0] != '/' {
		return nil
	}
	key := m.path + "\x00" + strconv.FormatUint(m.inode, 10)
	s.mu.Lock()
	t, ok := s.elfs[key]
	s.mu.Unlock()
	if ok {
		return t
	}
	t, err := loadELF(fmt.Sprintf("/proc/%d/root%s", pid, m.path))
	if err != nil {
		t, _ = loadELF(m.path)
	}
	s.mu.Lock()
	if len(s.elfs) >= maxCachedFiles {
		clear(s.elfs) // crude bound; files are re-read on demand
	}
	s.elfs[key] = t
	s.mu.Unlock()
	return t
}

func (s *symbolizer) kallsyms() *symtab {
	s.kernOnce.Do(func() { s.kern = loadKallsyms() })
	return s.kern
}
