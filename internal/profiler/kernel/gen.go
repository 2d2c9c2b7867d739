package kernel

// The BPF object is generated from bpf/sched_recorder.c and committed.
// Regenerate after changing bpf/sched_recorder.{c,h} (needs clang and
// libbpf-dev, see scripts/deps.sh):
//
//	go generate ./internal/profiler/kernel/
//
//go:generate go tool bpf2go -tags linux -target bpfel -type sr_event -type sr_config -cflags "-O2 -g -Wall -mcpu=v3 -I/usr/include/x86_64-linux-gnu" schedRecorder ../../../bpf/sched_recorder.c
