package cpu

// The BPF object is generated from bpf/cpu_sample.c and committed. Regenerate
// after changing bpf/cpu_sample.{c,h} (needs clang and libbpf-dev, see
// scripts/deps.sh; the include path of the machine's multiarch headers,
// asm/types.h, comes from cc -print-multiarch):
//
//	go generate ./internal/profiler/cpu/
//
//go:generate sh -c "go tool bpf2go -tags linux -target bpfel -type cpu_sample_event -type cpu_sample_config -cflags \"-O2 -g -Wall -I/usr/include/$DOLLAR(cc -print-multiarch)\" cpuSample ../../../bpf/cpu_sample.c"
