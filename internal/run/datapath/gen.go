package datapath

// The BPF object is generated from bpf/run_datapath.c (with bpf/run/*.h)
// and committed. Regenerate after changing bpf/run_datapath.{c,h} or
// bpf/run/ (needs clang and libbpf-dev, see scripts/deps.sh; the include
// path of the machine's multiarch headers, asm/types.h, comes from
// cc -print-multiarch; RD_CFLAGS adds build switches: -DRD_DEBUG, -DRD_PROF,
// -DRD_FLOOR):
//
//	go generate ./internal/run/datapath/
//
//go:generate sh -c "go tool bpf2go -tags linux -target bpfel -type rd_event -cflags \"-O2 -g -Wall -I/usr/include/$DOLLAR(cc -print-multiarch) -I../../../bpf $RD_CFLAGS\" runDatapath ../../../bpf/run_datapath.c"
