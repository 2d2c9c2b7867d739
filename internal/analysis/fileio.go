package analysis

import (
	"path"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/rootline/rootline/internal/flame"
)

// fileSystemPrefixes name the kernel's file-system code: the file systems'
// own functions, the page cache's write, read and writeback paths, fsync
// and the block layer. A thread on CPU under one of them is doing file I/O
// (copying into the page cache, allocating its blocks, writing it back,
// dropping it on unlink), whatever its program called.
var fileSystemPrefixes = []string{
	"ext2_", "ext4_", "xfs_", "btrfs_", "f2fs_", "jbd2_", "iomap_", "nfs_", "fuse_",
	"filemap_", "__filemap_", "generic_perform_write", "generic_file_", "__generic_file_",
	"file_write_and_wait", "vfs_fsync", "do_fsync", "generic_buffers_fsync",
	"do_writepages", "mpage_", "block_write_", "__block_write_", "truncate_inode_pages",
	"submit_bio", "blk_",
}

// FileSystemFrame reports whether a kernel function (a frame of an eBPF CPU
// profile's kernel stack, as /proc/kallsyms names it) is file-system code.
func FileSystemFrame(name string) bool { return hasAnyPrefix(name, fileSystemPrefixes) }

// hasAnyPrefix reports whether name starts with one of prefixes.
func hasAnyPrefix(name string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// anonFaultFrames name the kernel's fault-in of fresh anonymous memory: a
// page a process touches for the first time, or again after giving it back,
// is allocated and zeroed on the fault (clear_page_*) by the thread that
// touched it, on its own CPU time.
var anonFaultFrames = []string{"do_anonymous_page", "do_huge_pmd_anonymous_page", "__do_huge_pmd_anonymous_page", "alloc_anon_folio"}

// reclaimPrefixes name the kernel's memory reclaim, compaction and swap:
// an allocation that finds no free page (the machine's or its cgroup's
// limit reached, or memory too fragmented) frees or moves others first,
// which is memory pressure, not the allocation itself.
var reclaimPrefixes = []string{
	"try_to_free_", "shrink_", "__alloc_pages_direct_reclaim", "__perform_reclaim", "reclaim_", "mem_cgroup_handle_over_high",
	"__alloc_pages_direct_compact", "try_to_compact_pages", "compact_zone",
	"do_swap_page", "swap_", "swapin_",
}

// AnonFaultFrame reports whether a kernel function is the fault-in of a
// fresh anonymous page.
func AnonFaultFrame(name string) bool { return slices.Contains(anonFaultFrames, name) }

// reclaimFrame reports whether a kernel function is memory reclaim or swap.
func reclaimFrame(name string) bool { return hasAnyPrefix(name, reclaimPrefixes) }

// kernelParts are the samples of a flame graph (a CPU profile's, kernel
// frames under the user ones) in three kinds of kernel work, each sample
// counted once: memory reclaim or swap (reclaimFrame), wherever it runs —
// under a write or a page fault it is still the memory's shortage; then
// file-system code (FileSystemFrame); then the fault-in of fresh anonymous
// pages (AnonFaultFrame).
type kernelParts struct{ fileIO, anonFault, reclaim int64 }

// kernelPartsOf walks n; fs and anon say an outer frame was file-system
// code or an anonymous fault.
func kernelPartsOf(n *flame.Node, fs, anon bool) kernelParts {
	if reclaimFrame(n.Name) {
		return kernelParts{reclaim: n.Value}
	}
	fs = fs || FileSystemFrame(n.Name)
	anon = anon || AnonFaultFrame(n.Name)
	var out kernelParts
	self := n.Value
	for _, c := range n.Children {
		self -= c.Value
		p := kernelPartsOf(c, fs, anon)
		out.fileIO += p.fileIO
		out.anonFault += p.anonFault
		out.reclaim += p.reclaim
	}
	switch {
	case fs:
		out.fileIO += self
	case anon:
		out.anonFault += self
	}
	return out
}

// jvmMapped reports whether a profile's process had HotSpot's libjvm.so
// mapped: a JVM, whose heap its garbage collector sizes and commits.
func jvmMapped(p *profile.Profile) bool {
	for _, m := range p.Mapping {
		if path.Base(m.File) == "libjvm.so" {
			return true
		}
	}
	return false
}
