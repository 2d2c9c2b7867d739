// Package supervisor is the tracing layer of `rootline run -- CMD`
// (docs/run.md): it starts an unmodified command under ptrace
// with a seccomp filter, follows every thread and child process, and calls
// Hooks at the system calls that matter for request causality, keeping per
// thread the request-cycle state (Idle → WaitingRequest → Servicing) and per
// process the classification of sockets (inbound from accept, outbound from
// connect). Parsing and rewriting the bytes is internal/run/httpstream's job; a
// later layer wires it into Hooks.
//
// # Wiring
//
// Go cannot run code in a child between fork and exec, so Run re-executes
// the running binary as a launcher (environment ROOTLINE_SUPERVISOR_EXEC=1)
// under PTRACE_TRACEME. The launcher sets no_new_privs, installs the filter
// on its locked thread and execs CMD. main MUST therefore begin with
//
//	func main() {
//		supervisor.MaybeLauncher() // never returns in launcher mode
//		...
//	}
//
// and `rootline run -- CMD ARGS` calls
//
//	code, err := supervisor.Run(ctx, supervisor.Config{Logger: log}, argv, hooks)
//	os.Exit(code)
//
// The filter is a classic BPF program built in Go: non-x86-64 calls are
// allowed; accept, accept4, read, readv, recvfrom, recvmsg, write, writev,
// sendto, sendmsg, connect, close, clone, clone3, fork, vfork, exit and
// exit_group return SECCOMP_RET_TRACE; everything else SECCOMP_RET_ALLOW.
//
// # Tracing model
//
// All ptrace requests come from one goroutine locked to its OS thread (the
// tracer). Options: TRACESYSGOOD, TRACESECCOMP, TRACECLONE, TRACEFORK,
// TRACEVFORK, TRACEEXEC. A seccomp stop reads the registers and calls
// OnSyscallEnter; the exit stop (PTRACE_SYSCALL) is taken only when a hook
// asks for it or the supervisor needs the result (accept, and reads and
// writes on inbound sockets), because it doubles the cost. New tasks are
// attached by the kernel; a new task whose first stop arrives before its
// parent's clone/fork event is parked until the event says who it is.
// Threads share the descriptor table when created with CLONE_FILES (flags
// read at the clone/clone3 entry), forked children get a copy, and a new
// task inherits its parent's state and Context. Signals are re-injected at
// signal-delivery-stops. Exit status: the first process's, or 128+signal.
// SIGINT and SIGTERM sent to the supervisor are forwarded to the command.
//
// # Failure and cancellation
//
// PTRACE_O_EXITKILL is not used: the command must survive the supervisor.
// But a detached or tracer-less task does not simply run untraced: the
// kernel fails every SECCOMP_RET_TRACE syscall with ENOSYS when no tracer
// wants seccomp events (kernel/seccomp.c), so it can neither do I/O nor exit
// (TestDetachedTraceeGetsENOSYS: glibc's _exit ends in SIGSEGV). Run
// therefore never detaches. It fails open instead: a panicking hook is
// logged once and all hooks are disabled while tracing continues. Cancelling
// ctx sends SIGTERM to the command and SIGKILL after Config.CancelGrace, and
// Run returns when every task has exited. If the supervisor process itself
// dies, the command is left in that ENOSYS state; user notification behaves
// the same when its listener closes, so the remedy is a small, robust
// supervisor, not detaching.
//
// # Choice of mechanism: ptrace + SECCOMP_RET_TRACE
//
// BenchmarkSyscallOverhead (overhead_test.go) runs a Go program doing 200k
// write(2) to /dev/null (traced) and 200k getpid(2) (untraced) natively,
// under Run, under Run with an exit stop on every call, and under a
// SECCOMP_RET_USER_NOTIF prototype (listener fd passed over a unix socket
// with SCM_RIGHTS, every notification answered with
// SECCOMP_USER_NOTIF_FLAG_CONTINUE). On the shared 2-core development VM
// (Xeon 2.5 GHz, Linux 6.18, load 1.6-2.7, so numbers vary by 2x between
// runs), per call:
//
//	                              write (traced)   getpid (untraced)
//	native                        0.14-0.22 µs     0.10-0.15 µs
//	ptrace, entry stop only       9.4-27 µs        0.12-0.17 µs
//	ptrace, entry + exit stops    55-78 µs         0.15-0.23 µs
//	user notification, CONTINUE   6.0-12.4 µs      0.12-0.18 µs
//
// Untraced calls cost nothing extra with either mechanism: the filter is
// the whole price, so the traced set is kept to the calls above. User
// notification is about 1.5x cheaper per traced call, but ptrace is kept:
//
//   - Rewriting outbound writes: with ptrace the tracer changes the
//     registers at the entry stop (point write's buffer and length at a
//     scratch area holding the bytes with injected headers, then fix the
//     return value at the exit stop, see httpstream.Rewriter). A notified
//     call can only be continued unchanged or answered with a value: to send
//     different bytes the supervisor must perform the write itself (get the
//     socket with pidfd_getfd, read the buffer with process_vm_readv, write,
//     return the count), reimplementing blocking, partial writes, signals
//     and socket options on behalf of the application, with
//     time-of-check/time-of-use races on the tracee's memory.
//   - Extracting inbound headers needs the data after read returns; a
//     notification arrives only before the call, so the supervisor would
//     have to perform every inbound read, while a blocked read would tie up
//     a supervisor thread.
//   - ptrace follows clone/fork/exec with exact parent/child events, which
//     the per-thread request-cycle state needs; notifications carry only a pid.
//
// The cost is concentrated on inbound/outbound sockets in practice: the
// exit stop, which doubles it, is only taken on inbound sockets and accept.
// Measured overhead of the tracer's Go loop (wait4 through the scheduler)
// is part of these numbers and is the first thing to optimise.
//
// # Limitations of this first layer
//
//   - x86-64 only; 32-bit (int 0x80) and x32 syscalls are not traced.
//   - dup, dup2, dup3, fcntl(F_DUPFD), SCM_RIGHTS and close-on-exec are not
//     tracked, nor sendmmsg/recvmmsg, io_uring, sendfile and splice.
//   - The servicing state ends at the first successful write on the
//     inbound fd; httpstream's message boundaries will make it exact.
//   - Job control: group-stops are resumed at once (no PTRACE_SEIZE and
//     PTRACE_LISTEN), so Ctrl-Z does not stop a traced command.
//   - Run reaps with wait4(-1): the supervisor process must not start other
//     children while Run is active, or their exit statuses are taken.
//   - no_new_privs is set, so setuid programs do not gain privileges.
//   - A terminal's SIGINT reaches both the command and the supervisor,
//     which forwards it, so the command sees it twice.
package supervisor
