package kmetrics

// The BPF object is generated from bpf/kmetrics.c and committed. Regenerate
// after changing bpf/kmetrics.{c,h} (needs clang and libbpf-dev, see
// scripts/deps.sh; the include path of the machine's multiarch headers,
// asm/types.h, comes from cc -print-multiarch):
//
//	go generate ./internal/kmetrics/
//
//go:generate sh -c "go tool bpf2go -tags linux -target bpfel -type kmetrics_config -type kmetrics_key -type kmetrics_hist -type kmetrics_drop_key -type kmetrics_globals -cflags \"-O2 -g -Wall -I/usr/include/$DOLLAR(cc -print-multiarch)\" kmetrics ../../bpf/kmetrics.c"
