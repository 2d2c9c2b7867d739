// Package cpu is Rootline's eBPF CPU sampler, the "cpu" flight recorder.
//
// A perf_event BPF program (bpf/cpu_sample.c) is attached to one software
// cpu-clock event per online CPU, ticking at Config.FrequencyHz (99 Hz by
// default). On each tick whose current process is a target, it records the
// thread's user stack (bpf_get_stack with BPF_F_USER_STACK, up to 127 frames)
// and kernel stack into a BPF ring buffer. A reader goroutine drains the ring
// buffer into a per-target in-memory ring holding the last Config.Retention of
// samples, bounded by Config.MaxBytes. Dump symbolizes the samples of a window
// in user space and returns a gzipped pprof profile.
//
// # Which stacks unwind
//
// The kernel unwinds user stacks by following frame pointers. Code compiled
// without them loses the frames above the first function that does not keep
// one: the stack stops early (often at one or two frames) but the sample is
// still counted with its leaf. In practice:
//
//   - Go binaries on amd64 and arm64 keep frame pointers by default: full stacks.
//   - C/C++ built with -fno-omit-frame-pointer: full stacks. Most distribution
//     C libraries (glibc, libstdc++, OpenSSL…) are built with
//     -fomit-frame-pointer, so stacks that pass through them stop there; build
//     your own code with -fno-omit-frame-pointer (and
//     -mno-omit-leaf-frame-pointer) and prefer distributions that keep frame
//     pointers (Fedora ≥ 38, Ubuntu ≥ 24.04) for better ones.
//   - JVM: run HotSpot with -XX:+PreserveFramePointer and write a
//     /tmp/perf-<pid>.map (perf-map-agent, or JDK 17+
//     `jcmd <pid> Compiler.perfmap`); interpreted frames stay opaque.
//   - Node.js: run with --perf-basic-prof (writes /tmp/perf-<pid>.map).
//   - Stripped binaries unwind but their frames stay unsymbolized (module and
//     address in the profile), except Go binaries: their .gopclntab survives
//     stripping and is used instead of .symtab.
//
// DWARF (.eh_frame) unwinding is not done.
//
// # Symbolization
//
// User frames are resolved with /proc/<pid>/maps (read when a target starts,
// every few seconds while it runs, and at each dump; kept after the target
// exits), then the ELF .symtab/.dynsym of the mapped file (cached per file and
// inode; .gopclntab for stripped Go binaries), then /tmp/perf-<pid>.map for
// anonymous (JIT) memory. Kernel frames use /proc/kallsyms. A target that
// exited is symbolized from its last maps, and its dump is Partial with an
// error wrapping profiler.ErrTargetGone.
//
// # Profiles
//
// Dump returns a gzipped pprof profile with sample types samples/count and
// cpu/nanoseconds (count × sampling period). Each sample carries the numeric
// labels "tid" and "time_ns" (Unix ns) and the string label "thread" (comm);
// Filter selects threads and sub-windows of a dumped profile.
//
// # Regenerating the BPF object
//
//	go generate ./internal/profiler/cpu/
//
// runs bpf2go (pinned in go.mod's tool block) on bpf/cpu_sample.c; it needs
// clang, llvm and libbpf-dev (scripts/deps.sh). The generated
// cpusample_bpfel.go and cpusample_bpfel.o are committed.
//
// # Requirements
//
// Root (or CAP_BPF + CAP_PERFMON), a kernel with BPF ring buffers (5.8+) and
// perf-event BPF links (5.15+). New returns an error wrapping ErrUnavailable
// otherwise.
package cpu
