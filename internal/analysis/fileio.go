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
func FileSystemFrame(name string) bool {
	for _, p := range fileSystemPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// fileSystemNs sums the samples of a flame graph whose stack passes through
// file-system code (each sample once, at its outermost such frame).
func fileSystemNs(n *flame.Node) int64 {
	if FileSystemFrame(n.Name) {
		return n.Value
	}
	var ns int64
	for _, c := range n.Children {
		ns += fileSystemNs(c)
	}
	return ns
}

// anonFaultFrames name the kernel's fault-in of fresh anonymous memory: a
// page a process touches for the first time, or again after giving it back,
// is allocated and zeroed on the fault (clear_page_*) by the thread that
// touched it, on its own CPU time.
var anonFaultFrames = []string{"do_anonymous_page", "do_huge_pmd_anonymous_page", "__do_huge_pmd_anonymous_page", "alloc_anon_folio"}

// reclaimPrefixes name the kernel's memory reclaim and swap: an allocation
// that finds no free page (the machine's or its cgroup's limit reached)
// frees others first, which is memory pressure, not the fault-in itself.
var reclaimPrefixes = []string{
	"try_to_free_", "shrink_", "__alloc_pages_direct_reclaim", "__perform_reclaim", "mem_cgroup_handle_over_high",
	"reclaim_", "do_swap_page", "swap_",
}

// AnonFaultFrame reports whether a kernel function is the fault-in of a
// fresh anonymous page.
func AnonFaultFrame(name string) bool { return slices.Contains(anonFaultFrames, name) }

// reclaimFrame reports whether a kernel function is memory reclaim or swap.
func reclaimFrame(name string) bool {
	for _, p := range reclaimPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// anonFaultNs sums the samples of a flame graph whose stack passes through
// the fault-in of a fresh anonymous page (each sample once), leaving out
// those in reclaim or swap under it. in says an outer frame was such a
// fault.
func anonFaultNs(n *flame.Node, in bool) int64 {
	if in && reclaimFrame(n.Name) {
		return 0
	}
	in = in || AnonFaultFrame(n.Name)
	var ns int64
	if in {
		ns = n.Value
		for _, c := range n.Children {
			ns -= c.Value - anonFaultNs(c, true)
		}
		return ns
	}
	for _, c := range n.Children {
		ns += anonFaultNs(c, false)
	}
	return ns
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
