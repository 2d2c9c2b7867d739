package datapath

// The BPF object is generated from bpf/run_datapath.c and committed.
// Regenerate after changing bpf/run_datapath.{c,h} (needs clang and
// libbpf-dev, see scripts/deps.sh):
//
//	go generate ./internal/rbinder/datapath/
//
//go:generate go tool bpf2go -tags linux -target bpfel -type rd_event -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu -I../../../bpf $RD_CFLAGS" runDatapath ../../../bpf/run_datapath.c
