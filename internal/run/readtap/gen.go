package readtap

// The BPF object is generated from bpf/run_reads.c and committed.
// Regenerate after changing bpf/run_reads.{c,h} (needs clang and
// libbpf-dev, see scripts/deps.sh; the include path of the machine's
// multiarch headers, asm/types.h, comes from cc -print-multiarch):
//
//	go generate ./internal/run/readtap/
//
//go:generate sh -c "go tool bpf2go -tags linux -target bpfel -type rr_read -type rr_key -type rr_watch -cflags \"-O2 -g -Wall -I/usr/include/$DOLLAR(cc -print-multiarch)\" runReads ../../../bpf/run_reads.c"
