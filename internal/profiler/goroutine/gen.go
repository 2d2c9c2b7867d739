package goroutine

// The BPF object is generated from bpf/go_sched.c and committed. Regenerate
// after changing bpf/go_sched.{c,h} (needs clang and libbpf-dev, see
// scripts/deps.sh):
//
//	go generate ./internal/profiler/goroutine/
//
//go:generate sh -c "go tool bpf2go -tags linux -target amd64 -type go_sched_event -type go_sched_layout -type go_sched_config -cflags \"-O2 -g -Wall -I/usr/include/$DOLLAR(cc -print-multiarch)\" goSched ../../../bpf/go_sched.c"
