package kernel

// The BPF object is generated from bpf/sched_recorder.c and committed.
// Regenerate after changing bpf/sched_recorder.{c,h} (needs clang and
// libbpf-dev, see scripts/deps.sh; the include path of the machine's
// multiarch headers, asm/types.h, comes from cc -print-multiarch):
//
//	go generate ./internal/profiler/kernel/
//
//go:generate sh -c "go tool bpf2go -tags linux -target bpfel -type sr_event -type sr_config -cflags \"-O2 -g -Wall -mcpu=v3 -I/usr/include/$DOLLAR(cc -print-multiarch)\" schedRecorder ../../../bpf/sched_recorder.c"
