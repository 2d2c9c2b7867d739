package cpu

// The BPF object is generated from bpf/cpu_sample.c and committed. Regenerate
// after changing bpf/cpu_sample.{c,h} (needs clang and libbpf-dev, see
// scripts/deps.sh):
//
//	go generate ./internal/profiler/cpu/
//
//go:generate go tool bpf2go -tags linux -target bpfel -type cpu_sample_event -type cpu_sample_config -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu" cpuSample ../../../bpf/cpu_sample.c
