package readtap

// The BPF object is generated from bpf/run_reads.c and committed.
// Regenerate after changing bpf/run_reads.{c,h} (needs clang and
// libbpf-dev, see scripts/deps.sh):
//
//	go generate ./internal/rbinder/readtap/
//
//go:generate go tool bpf2go -tags linux -target bpfel -type rr_read -type rr_key -type rr_watch -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu" runReads ../../../bpf/run_reads.c
