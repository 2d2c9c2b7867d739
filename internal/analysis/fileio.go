package analysis

import (
	"strings"

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
