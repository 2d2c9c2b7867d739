//go:build linux && amd64

package supervisor

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TracedSyscalls are the x86-64 system calls the seccomp filter hands to
// the supervisor; every other call runs at native speed (RET_ALLOW).
var TracedSyscalls = []uint32{
	unix.SYS_ACCEPT, unix.SYS_ACCEPT4,
	unix.SYS_READ, unix.SYS_READV, unix.SYS_RECVFROM, unix.SYS_RECVMSG,
	unix.SYS_WRITE, unix.SYS_WRITEV, unix.SYS_SENDTO, unix.SYS_SENDMSG,
	unix.SYS_CONNECT, unix.SYS_CLOSE,
	unix.SYS_CLONE, unix.SYS_CLONE3, unix.SYS_FORK, unix.SYS_VFORK,
	unix.SYS_EXIT, unix.SYS_EXIT_GROUP,
}

// Offsets in struct seccomp_data (include/uapi/linux/seccomp.h).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
)

func bpfStmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// buildFilter returns a classic BPF program that returns action for the
// given syscalls of the x86-64 ABI and SECCOMP_RET_ALLOW for everything
// else, including calls made through another ABI (32-bit int 0x80), which
// are therefore not traced.
func buildFilter(nrs []uint32, action uint32) []unix.SockFilter {
	if len(nrs) > 250 {
		panic("supervisor: too many syscalls for 8-bit BPF jumps")
	}
	prog := []unix.SockFilter{
		bpfStmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataArch),
		bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.AUDIT_ARCH_X86_64, 1, 0),
		bpfStmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
		bpfStmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataNr),
	}
	// x32 calls carry __X32_SYSCALL_BIT and so never equal an x86-64 number:
	// they are allowed untraced, like other foreign ABIs.
	for i, nr := range nrs {
		// Jump over the remaining comparisons and the ALLOW to the action.
		jt := uint8(len(nrs) - i)
		prog = append(prog, bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, jt, 0))
	}
	prog = append(prog,
		bpfStmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
		bpfStmt(unix.BPF_RET|unix.BPF_K, action),
	)
	return prog
}

// installFilter sets no_new_privs and installs prog on the calling thread,
// returning what seccomp(2) returned (a listener fd with
// SECCOMP_FILTER_FLAG_NEW_LISTENER). The caller must have locked its OS
// thread: the filter, like no_new_privs, belongs to the thread.
func installFilter(prog []unix.SockFilter, flags uintptr) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	return int(r), nil
}
