//go:build linux && amd64

package supervisor

import (
	"golang.org/x/sys/unix"
)

// ThreadState is a thread's position in the Rbinder request cycle
// ("Transparent Tracing of Microservice-based Applications", §3.2).
type ThreadState int

const (
	// Idle: the thread has no inbound socket.
	Idle ThreadState = iota
	// WaitingRequest: the thread accepted a connection or is (blocked)
	// reading an inbound socket and has not received a request yet.
	WaitingRequest
	// Servicing: the thread read bytes of a request from an inbound socket
	// and has not yet written the response on it; outbound requests it
	// makes in this state are caused by that request.
	Servicing
)

func (s ThreadState) String() string {
	switch s {
	case Idle:
		return "idle"
	case WaitingRequest:
		return "waiting-request"
	case Servicing:
		return "servicing"
	}
	return "unknown"
}

// FDKind classifies a file descriptor of a traced process.
type FDKind int

const (
	// FDUnknown is any descriptor the supervisor did not see created.
	FDUnknown FDKind = iota
	// FDInbound is a connection returned by accept or accept4.
	FDInbound
	// FDOutbound is a socket passed to connect.
	FDOutbound
)

func (k FDKind) String() string {
	switch k {
	case FDInbound:
		return "inbound"
	case FDOutbound:
		return "outbound"
	}
	return "unknown"
}

// fdTable is a process's descriptor classification, shared by the threads
// that share the kernel's table (CLONE_FILES) and copied on fork.
type fdTable struct {
	fds map[int]FDKind
}

func newFDTable() *fdTable { return &fdTable{fds: map[int]FDKind{}} }

func (t *fdTable) clone() *fdTable {
	c := newFDTable()
	for fd, k := range t.fds {
		c.fds[fd] = k
	}
	return c
}

// Task is one traced thread. Its fields and methods MUST be used only from
// inside a Hooks callback: they belong to the supervisor's tracing thread,
// and memory and register access need the tracee to be stopped, which it is
// only during a callback.
type Task struct {
	// Tid is the kernel thread id, Tgid the process id.
	Tid, Tgid int
	// ParentTid is the thread that created this one (0 for the command).
	ParentTid int
	// State is the request-cycle state of the thread.
	State ThreadState
	// ServicingFD is the inbound fd whose request is being serviced when
	// State is Servicing.
	ServicingFD int
	// Context is free for the hooks (e.g. the trace context of the request
	// being serviced); a new thread or child starts with its parent's.
	Context any

	files   *fdTable
	inbound map[int]bool // inbound fds this thread accepted or read

	fresh      bool             // waiting for the initial SIGSTOP of a new task
	restart    bool             // the current call was turned into an injected one and re-executes
	gone       *unix.WaitStatus // exit status reaped inside a hook (InjectSyscall)
	pending    *Syscall         // syscall whose exit stop was requested
	cloneFlags uint64           // flags of the clone/fork in progress
}

// FD returns how fd of the task's process is classified.
func (t *Task) FD(fd int) FDKind { return t.files.fds[fd] }

// EachFD calls fn with every classified descriptor of the task's process.
func (t *Task) EachFD(fn func(fd int, kind FDKind)) {
	for fd, k := range t.files.fds {
		fn(fd, k)
	}
}

// Regs reads the task's registers.
func (t *Task) Regs() (*unix.PtraceRegs, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.Tid, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetRegs writes the task's registers; at a syscall entry this can change
// the call's number or arguments, at its exit the return value (Rax).
func (t *Task) SetRegs(r *unix.PtraceRegs) error { return unix.PtraceSetRegs(t.Tid, r) }

// ReadMem copies tracee memory at addr into buf with process_vm_readv,
// falling back to PTRACE_PEEKDATA (e.g. when the kernel lacks it).
func (t *Task) ReadMem(addr uintptr, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(t.Tid, local, remote, 0)
	if err == nil && n == len(buf) {
		return n, nil
	}
	return unix.PtracePeekData(t.Tid, addr, buf)
}

// WriteMem copies data into tracee memory at addr with process_vm_writev,
// falling back to PTRACE_POKEDATA, which can also write read-only mappings.
func (t *Task) WriteMem(addr uintptr, data []byte) (int, error) {
	if len(data) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &data[0]}}
	local[0].SetLen(len(data))
	remote := []unix.RemoteIovec{{Base: addr, Len: len(data)}}
	n, err := unix.ProcessVMWritev(t.Tid, local, remote, 0)
	if err == nil && n == len(data) {
		return n, nil
	}
	return unix.PtracePokeData(t.Tid, addr, data)
}

// InjectSyscall runs system call nr with args in the task and returns its
// result (a negated errno on failure). It MUST be called only from
// OnSyscallEnter: the intercepted call is replaced by the injected one and
// then executed again from its start once the hook returns, so the hook is
// called a second time for it (the classic way to allocate memory inside a
// tracee: rr, gVisor's ptrace platform). Calls traced by the filter must not
// be injected.
func (t *Task) InjectSyscall(nr int, args ...uint64) (int64, error) {
	saved, err := t.Regs()
	if err != nil {
		return 0, err
	}
	r := *saved
	r.Orig_rax = uint64(nr)
	dst := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.R10, &r.R8, &r.R9}
	for i, a := range args {
		*dst[i] = a
	}
	if err := t.SetRegs(&r); err != nil {
		return 0, err
	}
	if err := unix.PtraceSyscall(t.Tid, 0); err != nil {
		return 0, err
	}
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(t.Tid, &ws, unix.WALL, nil); err != nil {
			if err == unix.EINTR {
				continue
			}
			return 0, err
		}
		if ws.Exited() || ws.Signaled() {
			t.gone = &ws
			return 0, unix.ESRCH
		}
		if ws.Stopped() && ws.StopSignal() == unix.SIGTRAP|0x80 {
			break
		}
		// Nothing else stops a task inside a plain call; resume whatever it
		// was without a signal it would lose (signals stay pending).
		if err := unix.PtraceSyscall(t.Tid, 0); err != nil {
			return 0, err
		}
	}
	got, err := t.Regs()
	if err != nil {
		return 0, err
	}
	ret := int64(got.Rax)
	// Back to the state before the interrupted call: the syscall instruction
	// (2 bytes) runs again with the original number and arguments.
	back := *saved
	back.Rip -= 2
	back.Rax = saved.Orig_rax
	if err := t.SetRegs(&back); err != nil {
		return ret, err
	}
	t.restart = true
	return ret, nil
}

// SkipSyscall makes the intercepted call not run; its result is then set
// at the exit stop (which the hook must request) with SetRegs. It MUST be
// called only from OnSyscallEnter.
func (t *Task) SkipSyscall(r *unix.PtraceRegs) error {
	r.Orig_rax = ^uint64(0)
	return t.SetRegs(r)
}

// Syscall is one intercepted system call.
type Syscall struct {
	// Nr is the x86-64 syscall number (unix.SYS_*), Args its arguments.
	Nr   int
	Args [6]uint64
	// Ret is the return value (a negated errno on failure), valid in
	// OnSyscallExit only.
	Ret int64
	// Regs are the task's registers at this stop (entry or exit), valid
	// during the callback; a Go program keeps its current goroutine (g) in
	// R14 at syscall entry on amd64.
	Regs *unix.PtraceRegs
}

// FD returns the first argument as a file descriptor, which is what it is
// for every traced I/O call.
func (sc *Syscall) FD() int { return int(int32(sc.Args[0])) }

// IsRead reports whether nr is one of the read calls the filter traces
// (read, readv, recvfrom, recvmsg).
func IsRead(nr int) bool {
	switch nr {
	case unix.SYS_READ, unix.SYS_READV, unix.SYS_RECVFROM, unix.SYS_RECVMSG:
		return true
	}
	return false
}

// IsWrite reports whether nr is one of the write calls the filter traces
// (write, writev, sendto, sendmsg).
func IsWrite(nr int) bool {
	switch nr {
	case unix.SYS_WRITE, unix.SYS_WRITEV, unix.SYS_SENDTO, unix.SYS_SENDMSG:
		return true
	}
	return false
}

// trackEnter updates the task at a syscall entry and reports whether the
// supervisor needs the exit stop of this call.
func (t *Task) trackEnter(sc *Syscall) bool {
	switch nr := sc.Nr; {
	case nr == unix.SYS_ACCEPT || nr == unix.SYS_ACCEPT4:
		return true
	case nr == unix.SYS_CONNECT:
		t.files.fds[sc.FD()] = FDOutbound
	case nr == unix.SYS_CLOSE:
		fd := sc.FD()
		delete(t.files.fds, fd)
		if t.inbound[fd] {
			delete(t.inbound, fd)
			if t.State == Servicing && t.ServicingFD == fd {
				t.State = WaitingRequest
			}
			if len(t.inbound) == 0 {
				t.State = Idle
			}
		}
	case IsRead(nr):
		if t.FD(sc.FD()) != FDInbound {
			return false
		}
		if t.State != Servicing || t.ServicingFD != sc.FD() {
			t.State = WaitingRequest
		}
		t.inbound[sc.FD()] = true
		return true
	case IsWrite(nr):
		return t.FD(sc.FD()) == FDInbound && t.State == Servicing
	case nr == unix.SYS_CLONE:
		t.cloneFlags = sc.Args[0]
	case nr == unix.SYS_CLONE3:
		var b [8]byte // struct clone_args starts with u64 flags
		if _, err := t.ReadMem(uintptr(sc.Args[0]), b[:]); err == nil {
			t.cloneFlags = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
				uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		}
	case nr == unix.SYS_FORK:
		t.cloneFlags = 0
	case nr == unix.SYS_VFORK:
		t.cloneFlags = unix.CLONE_VM | unix.CLONE_VFORK
	}
	return false
}

// trackExit updates the task at the exit of a call trackEnter asked for.
func (t *Task) trackExit(sc *Syscall) {
	switch nr := sc.Nr; {
	case nr == unix.SYS_ACCEPT || nr == unix.SYS_ACCEPT4:
		if sc.Ret >= 0 {
			fd := int(sc.Ret)
			t.files.fds[fd] = FDInbound
			t.inbound[fd] = true
			if t.State == Idle {
				t.State = WaitingRequest
			}
		}
	case IsRead(nr):
		if sc.Ret > 0 && t.FD(sc.FD()) == FDInbound {
			t.State = Servicing
			t.ServicingFD = sc.FD()
		}
	case IsWrite(nr):
		// First layer: the first successful write of the response ends the
		// servicing; httpstream's message boundaries will refine this.
		if sc.Ret > 0 && t.State == Servicing && t.ServicingFD == sc.FD() {
			t.State = WaitingRequest
		}
	}
}

// child returns the task created by t with the given clone flags; per
// the request cycle it inherits the parent's state, inbound sockets and context.
func (t *Task) child(tid int, flags uint64) *Task {
	c := &Task{
		Tid: tid, Tgid: tid, ParentTid: t.Tid,
		State: t.State, ServicingFD: t.ServicingFD, Context: t.Context,
		inbound: map[int]bool{},
		fresh:   true,
	}
	if flags&unix.CLONE_THREAD != 0 {
		c.Tgid = t.Tgid
	}
	if flags&unix.CLONE_FILES != 0 {
		c.files = t.files
	} else {
		c.files = t.files.clone()
	}
	for fd := range t.inbound {
		c.inbound[fd] = true
	}
	return c
}
